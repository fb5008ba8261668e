//! Property tests of the two parsers that face untrusted input: the callback-URL rule (generated
//! address tricks are refused unless they are a plain loopback form; whatever is accepted parses
//! to a loopback host) and request decoding (any bytes, any JSON: never a panic, either a request
//! or a list of field errors). The fuzz targets in `fuzz/` check the same properties unguided.

use std::net::Ipv6Addr;

use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::{Map, Value};
use url::Host;

use crate::api::body::parse_object;
use crate::api::error::{ApiError, FieldError};
use crate::api::requests::{
    ClearRequest, InvokeRequest, MAX_NAME_CHARS, MAX_TIMEOUT_SECONDS, RegisterRequest,
    UnregisterRequest,
};
use crate::domain::callback_url::CallbackUrl;
use crate::domain::tool::ToolHandler;

/// Cases per property: enough to cover every trick many times over, quick in a release build.
const CASES: u32 = 2048;

fn config() -> Config {
    Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    }
}

/// A host spelling and whether it is a plain loopback form (the only kind to accept).
#[derive(Debug, Clone)]
struct HostForm {
    text: String,
    plain: bool,
}

fn form(text: String, plain: bool) -> HostForm {
    HostForm { text, plain }
}

/// 127.a.b.c written every way a WHATWG or libc parser would read as that address, and more.
fn ipv4_loopback_forms() -> impl Strategy<Value = HostForm> {
    (any::<u8>(), any::<u8>(), any::<u8>(), 0..12u8).prop_map(|(a, b, c, how)| {
        let n = (127u32 << 24) | (u32::from(a) << 16) | (u32::from(b) << 8) | u32::from(c);
        match how {
            0 => form(format!("127.{a}.{b}.{c}"), true),
            1 => form(n.to_string(), false),
            2 => form(format!("0x{n:x}"), false),
            3 => form(format!("0X{n:08X}"), false),
            4 => form(format!("0{n:o}"), false),
            5 => form(format!("0177.{a}.{b}.{c}"), false),
            6 => form(format!("0x7f.{a}.{b}.{c}"), false),
            7 => form(
                format!("127.{a}.{}", u32::from(b) * 256 + u32::from(c)),
                false,
            ),
            8 => form(format!("127.{}", n & 0x00ff_ffff), false),
            9 => form(format!("127.{a:03}.{b:03}.{c:04}"), false),
            10 => form(format!("127.{a}.{b}.{c}."), false),
            _ => form(format!("127.{a}.{b}.0{c}"), false),
        }
    })
}

/// `localhost` in mixed case, with and without tricks.
fn localhost_forms() -> impl Strategy<Value = HostForm> {
    (proptest::collection::vec(any::<bool>(), 9), 0..6u8).prop_map(|(upper, how)| {
        let mixed: String = "localhost"
            .chars()
            .zip(upper)
            .map(|(c, u)| if u { c.to_ascii_uppercase() } else { c })
            .collect();
        match how {
            0 | 1 => form(mixed, true),
            2 => form(format!("{mixed}."), false),
            3 => form(format!("{mixed}.evil.example"), false),
            4 => form(format!("{mixed}\u{3002}"), false),
            _ => form(format!("{mixed}\u{200b}"), false),
        }
    })
}

/// Bracketed IPv6 literals: loopback ones (any spelling std reads as `::1` or mapped 127/8) are
/// plain; zone ids, the unspecified address, IPv4-compatible and other addresses are not.
fn ipv6_forms() -> impl Strategy<Value = HostForm> {
    (any::<u8>(), any::<u8>(), any::<u128>(), 0..8u8).prop_map(|(b, c, other, how)| match how {
        0 => form("[::1]".into(), true),
        1 => form("[0:0:0:0:0:0:0:1]".into(), true),
        2 => form(format!("[::ffff:127.{b}.0.{c}]"), true),
        3 => form(format!("[::ffff:7f{b:02x}:{c:x}]"), true),
        4 => form("[::1%25eth0]".into(), false),
        5 => form(format!("[::127.{b}.0.{c}]"), false),
        6 => form("[::]".into(), false),
        _ => {
            let ip = Ipv6Addr::from(other);
            let plain = ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback());
            form(format!("[{ip}]"), plain)
        }
    })
}

/// Any host form, possibly spoilt afterwards by one more trick.
fn host_forms() -> impl Strategy<Value = HostForm> {
    let base = prop_oneof![ipv4_loopback_forms(), localhost_forms(), ipv6_forms()];
    (base, 0..10u8, any::<prop::sample::Index>(), 0..256u16).prop_map(|(host, spoil, at, byte)| {
        let HostForm { text, plain } = host;
        let position = at.index(text.len() + 1);
        let position = (0..=position)
            .rev()
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(0);
        let insert = |s: &str| format!("{}{s}{}", &text[..position], &text[position..]);
        match spoil {
            // Percent-encode the first character.
            0 => form(format!("%{:02x}{}", text.as_bytes()[0], &text[1..]), false),
            1 => form(format!("user@{text}"), false),
            2 => form(format!("{text}@evil.example"), false),
            3 => form(insert("\\"), false),
            4 => form(insert(&char::from(byte as u8 % 0x20).to_string()), false),
            5 => form(insert(" "), false),
            6 => form(insert("\u{a0}"), false),
            _ => form(text, plain),
        }
    })
}

fn ports() -> impl Strategy<Value = (String, bool)> {
    prop_oneof![
        Just((String::new(), true)),
        (1..=u16::MAX).prop_map(|p| (format!(":{p}"), true)),
        Just((":0".to_owned(), false)),
        Just((":".to_owned(), false)),
        (65536..1_000_000u32).prop_map(|p| (format!(":{p}"), false)),
        Just((":0x50".to_owned(), false)),
        Just((":+80".to_owned(), false)),
    ]
}

fn schemes() -> impl Strategy<Value = (String, bool)> {
    prop_oneof![
        4 => Just(("http".to_owned(), true)),
        2 => Just(("https".to_owned(), true)),
        1 => Just(("HtTp".to_owned(), true)),
        1 => Just(("ftp".to_owned(), false)),
        1 => Just(("ws".to_owned(), false)),
        1 => Just(("javascript".to_owned(), false)),
    ]
}

/// What the parser made of an accepted URL's host is loopback, and the written authority
/// carries no userinfo, encoding or forbidden character.
fn assert_loopback(written: &str, url: &CallbackUrl) {
    let loopback = match url.url().host() {
        Some(Host::Domain(d)) => d == "localhost",
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        None => false,
    };
    assert!(
        loopback,
        "accepted {written:?}, whose host is {:?}",
        url.url().host()
    );
    assert!(
        matches!(url.url().scheme(), "http" | "https"),
        "{written:?}"
    );
    assert!(
        !written
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '\\'),
        "accepted {written:?}"
    );
    let rest = written.split_once("://").map_or("", |(_, r)| r);
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    assert!(!authority.contains(['@', '%']), "accepted {written:?}");
}

proptest! {
    #![proptest_config(config())]

    /// Generated tricks: accepted exactly when scheme, host and port are all plain.
    #[test]
    fn the_url_rule_accepts_exactly_the_plain_loopback_forms(
        (scheme, scheme_ok) in schemes(),
        host in host_forms(),
        (port, port_ok) in ports(),
        path in "(/[a-zA-Z0-9._~-]{0,8}){0,3}",
    ) {
        let written = format!("{scheme}://{}{port}{path}", host.text);
        let expected = scheme_ok && host.plain && port_ok;
        let result = CallbackUrl::parse(&written);
        prop_assert_eq!(result.is_ok(), expected, "{:?}: {:?}", written, result);
        if let Ok(url) = result {
            assert_loopback(&written, &url);
        }
    }

    /// Arbitrary text after `http://`: whatever is accepted is loopback.
    #[test]
    fn anything_accepted_after_http_is_loopback(rest in "\\PC{0,40}|[\\x00-\\x7f]{0,40}") {
        let written = format!("http://{rest}");
        if let Ok(url) = CallbackUrl::parse(&written) {
            assert_loopback(&written, &url);
        }
    }

    /// A plain loopback URL with one arbitrary character inserted anywhere: still loopback if
    /// accepted.
    #[test]
    fn one_inserted_character_never_leads_elsewhere(
        at in 0usize..24,
        inserted in any::<char>(),
        base in prop::sample::select(vec![
            "http://127.0.0.1:9000/cb",
            "http://localhost:9000/cb",
            "http://[::1]:9000/cb",
            "http://[::ffff:127.0.0.1]/cb",
        ]),
    ) {
        let at = at.min(base.len());
        let written = format!("{}{inserted}{}", &base[..at], &base[at..]);
        if let Ok(url) = CallbackUrl::parse(&written) {
            assert_loopback(&written, &url);
        }
    }

    /// Any bytes: the body parser answers a JSON object or a 422, never panics.
    #[test]
    fn any_bytes_decode_to_an_object_or_a_422(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        match parse_object(&bytes) {
            Ok(map) => check_every_route(&map),
            Err(ApiError::Validation(errors)) => {
                prop_assert_eq!(errors.len(), 1);
                prop_assert!(matches!(errors[0].kind, "json_invalid" | "model_attributes_type"));
            }
            Err(other) => prop_assert!(false, "unexpected error {:?}", other),
        }
    }

    /// Any JSON document: objects reach the field checks, which accept or list failures.
    #[test]
    fn any_json_either_validates_or_lists_its_failures(value in json_values()) {
        let text = serde_json::to_vec(&value).unwrap();
        match (parse_object(&text), &value) {
            (Ok(map), Value::Object(_)) => check_every_route(&map),
            (Err(ApiError::Validation(errors)), v) if !v.is_object() => {
                prop_assert_eq!(errors[0].kind, "model_attributes_type");
            }
            (other, v) => prop_assert!(false, "{:?} for {}", other, v),
        }
    }

    /// Register bodies whose fields take arbitrary JSON values.
    #[test]
    fn register_bodies_with_arbitrary_fields(
        fields in proptest::collection::vec(
            (prop::sample::select(vec![
                "name", "description", "parameters", "callback_url", "role", "source",
                "timeout_seconds", "unknown",
            ]), field_values()),
            0..8,
        ),
    ) {
        let body: Map<String, Value> = fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        check_every_route(&body);
    }
}

/// Every route's decoding of `body`: a request that keeps the rules, or failures at `body.*`.
fn check_every_route(body: &Map<String, Value>) {
    match RegisterRequest::parse(body.clone(), "127.0.0.1:48911".parse().unwrap()) {
        Ok(request) => {
            let name = &request.tool.name;
            let chars = name.chars().count();
            assert!((1..=MAX_NAME_CHARS).contains(&chars), "{name:?}");
            assert!(!name.chars().any(char::is_control), "{name:?}");
            let ToolHandler::Remote(remote) = &request.tool.handler else {
                panic!("a registered tool is remote")
            };
            // (A positive timeout as small as 1e-300 s rounds to a zero `Duration`: it is
            // allowed, and such a tool simply always times out.)
            let seconds = remote.timeout.as_secs_f64();
            assert!((0.0..=MAX_TIMEOUT_SECONDS).contains(&seconds), "{seconds}");
        }
        Err(errors) => assert_field_errors(&errors, body),
    }
    if let Err(errors) = UnregisterRequest::parse(body) {
        assert_field_errors(&errors, body);
    }
    if let Err(errors) = ClearRequest::parse(body) {
        assert_field_errors(&errors, body);
    }
    let text = serde_json::to_vec(body).unwrap();
    if let Err(errors) = InvokeRequest::parse(body.clone(), &text) {
        assert_field_errors(&errors, body);
    }
}

fn assert_field_errors(errors: &[FieldError], body: &Map<String, Value>) {
    assert!(!errors.is_empty(), "an empty 422 list for {body:?}");
    for e in errors {
        assert_eq!(e.loc.first().map(String::as_str), Some("body"), "{e:?}");
        assert_eq!(e.loc.len(), 2, "{e:?}");
        assert!(!e.msg.is_empty() && !e.kind.is_empty(), "{e:?}");
    }
}

/// Values a field may be given: every JSON type, edge numbers, and tricky strings.
fn field_values() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop::sample::select(vec![0.0, -0.0, 1e-300, 300.0, 300.0000001, 1e308, -1.0])
            .prop_map(Value::from),
        "\\PC{0,80}".prop_map(Value::String),
        "[\\x00-\\x1f\\x7f a-z]{0,70}".prop_map(Value::String),
        prop::sample::select(vec![
            "http://127.0.0.1:9000/cb",
            "http://2130706433/cb",
            "http://localhost./cb",
            "http://[::1%25eth0]/cb",
        ])
        .prop_map(Value::from),
        json_values(),
    ]
}

/// Arbitrary JSON documents, a few levels deep.
fn json_values() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "\\PC{0,20}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec(("\\PC{0,10}", inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}
