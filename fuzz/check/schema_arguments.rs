//! The check the `schema_arguments` fuzz target runs on every input, shared with the test that
//! replays the target's corpus in `cargo test` (`tests/api/hostile_schemas.rs`), so the corpus
//! is exercised on stable Rust too.
//!
//! An input is a tool's parameters schema (JSON text), a NUL byte, and a call's argument text
//! (without the NUL, the arguments are `{}`). Whatever they are: registering the schema either
//! succeeds or gives a reason; checking the arguments against a registered schema neither
//! overflows the stack nor runs away, and the text the model would get stays within
//! `MAX_FIX_IT_BYTES`.

use runtime_tools::Parameters;
use runtime_tools::limits::MAX_FIX_IT_BYTES;
use serde_json::Value;

/// Runs one input; panics when a bound does not hold.
pub fn check(data: &[u8]) {
    let (schema, arguments) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, &b"{}"[..]),
    };
    let Ok(Value::Object(schema)) = serde_json::from_slice::<Value>(schema) else {
        return;
    };
    let Ok(arguments) = std::str::from_utf8(arguments) else {
        return;
    };
    match Parameters::new(schema) {
        Ok(parameters) => {
            if let Err(refused) = parameters.check(arguments) {
                let message = refused.message("fuzzed");
                assert!(
                    message.len() <= MAX_FIX_IT_BYTES,
                    "the model's text is {} bytes",
                    message.len()
                );
            }
        }
        Err(refused) => assert!(!refused.to_string().is_empty(), "a refusal says why"),
    }
}
