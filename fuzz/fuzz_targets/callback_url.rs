//! The callback-URL rule on arbitrary text: it never panics, and whatever it accepts is written
//! plainly and parses to a loopback host.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runtime_tools::CallbackUrl;
use url::Host;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(accepted) = CallbackUrl::parse(text) else {
        return;
    };
    assert!(
        !text
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '\\'),
        "accepted a URL with a forbidden character: {text:?}"
    );
    let rest = text.split_once("://").map_or("", |(_, rest)| rest);
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    assert!(
        !authority.contains(['@', '%']),
        "accepted userinfo or an encoded host: {text:?}"
    );
    let loopback = match accepted.url().host() {
        Some(Host::Domain(d)) => d == "localhost",
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        None => false,
    };
    assert!(loopback, "accepted a non-loopback URL: {text:?}");
    assert!(matches!(accepted.url().scheme(), "http" | "https"));
});
