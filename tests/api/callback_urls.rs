//! The callback-URL rule over HTTP: every vector of issue 2, accepted (200) or refused (422 at
//! `body.callback_url`, with the reason and the accepted forms).

use runtime_tools::limits::ACCEPTED_FORMS;
use serde_json::{Value, json};

use crate::helpers::spawn_app;

/// Loopback callbacks, as issue 2 lists them.
const ACCEPTED: [&str; 8] = [
    "http://127.0.0.1:9000/cb",
    "HTTP://127.0.0.1/cb",
    "http://localhost:9000/cb",
    "http://LOCALHOST/cb",
    "http://[::1]:9000/cb",
    "http://127.0.0.5/cb",
    "https://localhost/cb",
    "http://[::ffff:127.0.0.1]:9000/cb",
];

/// Refused callbacks, as issue 2 lists them, each with the reason the server gives.
const REJECTED: [(&str, &str); 17] = [
    (
        "http://8.8.8.8/cb",
        r#"callback_url host "8.8.8.8" is not loopback"#,
    ),
    (
        "http://192.168.1.5/cb",
        r#"callback_url host "192.168.1.5" is not loopback"#,
    ),
    (
        "http://10.0.0.1/cb",
        r#"callback_url host "10.0.0.1" is not loopback"#,
    ),
    (
        "http://example.com/cb",
        r#"callback_url host "example.com" is not loopback"#,
    ),
    (
        "ftp://127.0.0.1/cb",
        "callback_url must start with http:// or https://",
    ),
    ("http:///cb", "callback_url must name a host"),
    (
        "http://[2001:db8::1]/cb",
        r#"callback_url host "2001:db8::1" is not loopback"#,
    ),
    (
        "http://[::ffff:8.8.8.8]/cb",
        r#"callback_url host "::ffff:8.8.8.8" is not loopback"#,
    ),
    (
        "http://localhost./cb",
        r#"callback_url host "localhost." is not loopback"#,
    ),
    (
        "http://127.1/cb",
        r#"callback_url host "127.1" is not loopback"#,
    ),
    (
        "http://2130706433/cb",
        r#"callback_url host "2130706433" is not loopback"#,
    ),
    (
        "http://0x7f000001/cb",
        r#"callback_url host "0x7f000001" is not loopback"#,
    ),
    (
        "http://127.0.0.1@evil.example/cb",
        "callback_url must not carry user information (user@)",
    ),
    (
        "http://0.0.0.0/cb",
        r#"callback_url host "0.0.0.0" is not loopback"#,
    ),
    (
        "http://[::]/cb",
        r#"callback_url host "::" is not loopback"#,
    ),
    (
        "http://user:pw@127.0.0.1/cb",
        "callback_url must not carry user information (user@)",
    ),
    (
        "http://user@localhost/cb",
        "callback_url must not carry user information (user@)",
    ),
];

#[actix_web::test]
async fn loopback_callbacks_are_accepted_and_listed_as_written() {
    let app = spawn_app(&["Lanlan"]).await;
    for (i, url) in ACCEPTED.iter().enumerate() {
        let name = format!("tool_{i}");
        let (status, body) = app
            .register(&json!({"name": name, "callback_url": url}))
            .await;
        assert_eq!(
            (status, body),
            (
                200,
                json!({"ok": true, "registered": name, "affected_roles": ["Lanlan"], "failed_roles": []})
            ),
            "{url}"
        );
    }
    let listing = app.listing(None).await;
    let urls: Vec<Value> = listing["tools_by_role"]["Lanlan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["callback_url"].clone())
        .collect();
    assert_eq!(urls, ACCEPTED.map(|u| json!(u)));
}

#[actix_web::test]
async fn other_callbacks_are_refused_with_422_at_callback_url() {
    let app = spawn_app(&["Lanlan"]).await;
    for (url, reason) in REJECTED {
        let (status, body) = app
            .register(&json!({"name": "t", "callback_url": url}))
            .await;
        assert_eq!(
            (status, body),
            (
                422,
                json!({"ok": false, "detail": [{
                    "loc": ["body", "callback_url"],
                    "msg": format!("Value error, {reason}: callbacks must be on loopback; {ACCEPTED_FORMS}"),
                    "type": "value_error"
                }]})
            ),
            "{url}"
        );
    }
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": []}));
}

#[actix_web::test]
async fn a_refused_callback_does_not_replace_the_registered_one() {
    let app = spawn_app(&["Lanlan"]).await;
    let (status, _) = app
        .register(&json!({"name": "t", "callback_url": "http://127.0.0.1:9000/cb"}))
        .await;
    assert_eq!(status, 200);
    let (status, _) = app
        .register(&json!({"name": "t", "callback_url": "http://127.1:9000/cb"}))
        .await;
    assert_eq!(status, 422);
    let listing = app.listing(None).await;
    assert_eq!(
        listing["tools_by_role"]["Lanlan"][0]["callback_url"],
        "http://127.0.0.1:9000/cb"
    );
}
