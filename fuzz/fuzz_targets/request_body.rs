//! Request decoding on arbitrary bytes: the body parser and every route's field checks never
//! panic; a body either decodes or yields a non-empty list of field errors.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runtime_tools::fuzzing::{parse_object, ClearRequest, InvokeRequest, RegisterRequest, UnregisterRequest};

fuzz_target!(|data: &[u8]| {
    let Ok(body) = parse_object(data) else {
        return;
    };
    // The address a server of the default configuration listens on.
    let server = "127.0.0.1:48911".parse().expect("a socket address");
    if let Err(errors) = RegisterRequest::parse(body.clone(), server) {
        assert!(!errors.is_empty());
    }
    if let Err(errors) = UnregisterRequest::parse(&body) {
        assert!(!errors.is_empty());
    }
    if let Err(errors) = ClearRequest::parse(&body) {
        assert!(!errors.is_empty());
    }
    if let Err(errors) = InvokeRequest::parse(body, data) {
        assert!(!errors.is_empty());
    }
});
