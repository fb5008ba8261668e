//! Automatic removal of dead plugins: three consecutive connection-level failures to one
//! callback origin of a `plugin:` source remove that origin's tools of that source everywhere,
//! and nothing else does.

use runtime_tools::{Dialect, RebuildCharacter, SessionSettings};
use serde_json::{Value, json};

use crate::callback_server::{
    CallbackServer, ClosedPort, Reply, error_text, invoke, invoke_ok, register, tool_with_timeout,
};
use crate::fake_realtime::{AckMode, FakeRealtime, update_tool_names};
use crate::helpers::{TestApp, settings, spawn_app, spawn_app_with, tool_body};

/// A register body for a tool in one role.
fn in_role(mut body: Value, role: &str) -> Value {
    body["role"] = json!(role);
    body
}

/// Calls `name`, asserting a connection-level failure.
async fn fails_to_connect(app: &TestApp, name: &str) {
    let result = invoke_ok(app, name, json!({})).await;
    let text = error_text(&result);
    assert!(text.contains("connect"), "{name}: {text}");
}

/// The names listed for each role, sorted.
async fn names(app: &TestApp) -> Value {
    let mut listing = app.tool_names(None).await;
    for names in listing.as_object_mut().unwrap().values_mut() {
        names
            .as_array_mut()
            .unwrap()
            .sort_by_key(|n| n.as_str().unwrap().to_owned());
    }
    listing
}

#[actix_web::test]
async fn three_failures_remove_that_origins_tools_of_that_source_from_every_character() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let dead = ClosedPort::new();
    let sibling = CallbackServer::with("/s", Reply::output(json!("alive")));
    register(&app, tool_body("a", &dead.url("/a"), "plugin:x")).await;
    register(
        &app,
        in_role(tool_body("b", &dead.url("/b"), "plugin:x"), "Mio"),
    )
    .await;
    // Another origin of the same plugin, and other sources on the dead origin.
    register(&app, tool_body("sibling", &sibling.url("/s"), "plugin:x")).await;
    register(&app, tool_body("other_plugin", &dead.url("/o"), "plugin:y")).await;
    register(&app, tool_body("external", &dead.url("/e"), "external")).await;

    fails_to_connect(&app, "a").await;
    fails_to_connect(&app, "a").await;
    assert_eq!(
        names(&app).await,
        json!({"Lanlan": ["a", "external", "other_plugin", "sibling"],
               "Mio": ["a", "b", "external", "other_plugin", "sibling"]})
    );
    fails_to_connect(&app, "a").await;
    // The removal was queued before the third result was returned: the listing is behind it.
    assert_eq!(
        names(&app).await,
        json!({"Lanlan": ["external", "other_plugin", "sibling"],
               "Mio": ["external", "other_plugin", "sibling"]})
    );
    let (status, body) = invoke(&app, json!({"name": "a"})).await;
    assert_eq!(status, 404, "{body}");
    let result = invoke_ok(&app, "sibling", json!({})).await;
    assert_eq!(result["output"], json!("alive"));

    // Registered again (the plugin restarted), it starts from zero.
    register(&app, tool_body("a", &dead.url("/a"), "plugin:x")).await;
    fails_to_connect(&app, "a").await;
    fails_to_connect(&app, "a").await;
    assert_eq!(
        app.tool_names(Some("Lanlan")).await["Lanlan"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
}

#[actix_web::test]
async fn paths_of_one_origin_count_together_and_are_removed_together() {
    let app = spawn_app(&["Lanlan"]).await;
    let dead = ClosedPort::new();
    register(&app, tool_body("a", &dead.url("/a"), "plugin:x")).await;
    register(&app, tool_body("b", &dead.url("/b"), "plugin:x")).await;
    // Both live at http://127.0.0.1:P: their failures count together.
    fails_to_connect(&app, "a").await;
    fails_to_connect(&app, "b").await;
    assert_eq!(names(&app).await, json!({"Lanlan": ["a", "b"]}));
    fails_to_connect(&app, "b").await;
    assert_eq!(names(&app).await, json!({"Lanlan": []}));
}

#[actix_web::test]
async fn a_source_that_is_not_a_plugin_is_never_removed() {
    let app = spawn_app(&["Lanlan"]).await;
    let dead = ClosedPort::new();
    register(&app, tool_body("ext", &dead.url("/e"), "external")).await;
    // Case-sensitive prefix.
    register(&app, tool_body("shouty", &dead.url("/s"), "Plugin:x")).await;
    for _ in 0..6 {
        fails_to_connect(&app, "ext").await;
        fails_to_connect(&app, "shouty").await;
    }
    assert_eq!(names(&app).await, json!({"Lanlan": ["ext", "shouty"]}));
}

/// Two failures, then five exchanges that end with `reply` from a live callback, then failures
/// again: the exchanges reset the count (and never count themselves), so the tool survives two
/// more failures and goes at the third.
async fn assert_exchange_resets_the_count(reply: Reply, timeout_seconds: f64) {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let port = ClosedPort::new();
    register(
        &app,
        tool_with_timeout("t", &port.url("/t"), "plugin:x", timeout_seconds),
    )
    .await;
    let all_there = json!({"Lanlan": ["t"], "Mio": ["t"]});

    fails_to_connect(&app, "t").await;
    fails_to_connect(&app, "t").await;

    let mut plugin = CallbackServer::start_on(port.port());
    plugin.route("/t", reply.clone());
    for _ in 0..5 {
        let result = invoke_ok(&app, "t", json!({})).await;
        if let Some(text) = result["error"].as_str() {
            assert!(!text.contains("connect to"), "{reply:?}: {text}");
        }
    }
    assert_eq!(plugin.received().len(), 5);
    assert_eq!(names(&app).await, all_there, "{reply:?}");
    // The plugin exits; connections kept alive to it are closed with it.
    plugin.stop().await;

    fails_to_connect(&app, "t").await;
    fails_to_connect(&app, "t").await;
    assert_eq!(names(&app).await, all_there, "{reply:?}");
    fails_to_connect(&app, "t").await;
    assert_eq!(
        names(&app).await,
        json!({"Lanlan": [], "Mio": []}),
        "{reply:?}"
    );
}

#[actix_web::test]
async fn fail_fail_success_fail_fail_keeps_the_tool() {
    assert_exchange_resets_the_count(Reply::output(json!("fine")), 30.0).await;
}

#[actix_web::test]
async fn http_500_answers_never_count() {
    assert_exchange_resets_the_count(Reply::text(500, "text/plain", "boom"), 30.0).await;
}

#[actix_web::test]
async fn is_error_answers_never_count() {
    assert_exchange_resets_the_count(
        Reply::json(json!({"is_error": true, "error": "bad input"})),
        30.0,
    )
    .await;
}

#[actix_web::test]
async fn read_timeouts_never_count() {
    assert_exchange_resets_the_count(Reply::Hang, 0.3).await;
}

#[actix_web::test]
async fn a_live_callback_closing_the_connection_without_answering_never_counts() {
    assert_exchange_resets_the_count(Reply::Close, 30.0).await;
}

#[actix_web::test]
async fn answers_that_are_not_http_never_count() {
    assert_exchange_resets_the_count(Reply::Raw(b"nonsense\r\n\r\n".to_vec()), 30.0).await;
}

#[actix_web::test]
async fn a_plugin_that_exits_under_a_kept_alive_connection_counts_from_its_first_failure() {
    // One HTTP worker, so every call uses the same keep-alive pool.
    let mut settings = settings(&["Lanlan"]);
    settings.workers = Some(1);
    let app = spawn_app_with(settings).await;
    let port = ClosedPort::new();
    let mut plugin = CallbackServer::start_on(port.port());
    plugin.route("/t", Reply::output(json!("fine")));
    register(&app, tool_body("t", &port.url("/t"), "plugin:x")).await;
    assert_eq!(
        invoke_ok(&app, "t", json!({})).await["output"],
        json!("fine")
    );

    // The plugin goes away while our idle connection to it is still open, and only notices
    // when the next call arrives on it: the call is lost and new connections are refused.
    plugin.route("/t", Reply::Close);
    plugin.close_listener().await;
    fails_to_connect(&app, "t").await;
    assert_eq!(plugin.received().len(), 2, "the call reused the connection");
    assert_eq!(plugin.connections(), 1);

    fails_to_connect(&app, "t").await;
    assert_eq!(names(&app).await, json!({"Lanlan": ["t"]}));
    fails_to_connect(&app, "t").await;
    assert_eq!(names(&app).await, json!({"Lanlan": []}));
}

#[actix_web::test]
async fn a_rebuilt_manager_does_not_get_removed_tools_back() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let dead = ClosedPort::new();
    let live = CallbackServer::with("/s", Reply::output(json!("alive")));
    register(&app, tool_body("dead", &dead.url("/d"), "plugin:x")).await;
    register(&app, tool_body("live", &live.url("/s"), "plugin:x")).await;
    for _ in 0..3 {
        fails_to_connect(&app, "dead").await;
    }
    assert_eq!(
        names(&app).await,
        json!({"Lanlan": ["live"], "Mio": ["live"]})
    );

    // Rebuilt with a live session, the manager pushes what it really holds: not the dead tool.
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    app.router
        .send(RebuildCharacter {
            name: "Lanlan".into(),
            session: Some(SessionSettings::new(&fake.url, Dialect::Openai)),
        })
        .await
        .expect("router answers")
        .expect("rebuilt");
    assert_eq!(update_tool_names(&fake.nth_update(1).await), ["live"]);
    assert_eq!(
        names(&app).await,
        json!({"Lanlan": ["live"], "Mio": ["live"]})
    );
    let (status, body) = invoke(&app, json!({"name": "dead", "role": "Lanlan"})).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = invoke(&app, json!({"name": "live", "role": "Lanlan"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"], json!("alive"));
}

#[actix_web::test]
async fn a_count_is_forgotten_once_its_tools_are_gone() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let dead = ClosedPort::new();
    for removal in [
        json!({"path": "/api/tools/unregister", "body": {"name": "t"}}),
        json!({"path": "/api/tools/clear", "body": {"source": "plugin:x"}}),
    ] {
        register(&app, tool_body("t", &dead.url("/t"), "plugin:x")).await;
        fails_to_connect(&app, "t").await;
        fails_to_connect(&app, "t").await;
        let (status, answer) = app
            .post(removal["path"].as_str().unwrap(), &removal["body"])
            .await;
        assert_eq!(
            (status, &answer["affected_roles"]),
            (200, &json!(["Lanlan", "Mio"])),
            "{answer}"
        );

        // Registered again at the same origin, it starts from zero: two failures keep it.
        register(&app, tool_body("t", &dead.url("/t"), "plugin:x")).await;
        fails_to_connect(&app, "t").await;
        fails_to_connect(&app, "t").await;
        assert_eq!(
            names(&app).await,
            json!({"Lanlan": ["t"], "Mio": ["t"]}),
            "after {removal}"
        );
        fails_to_connect(&app, "t").await;
        assert_eq!(names(&app).await, json!({"Lanlan": [], "Mio": []}));
    }
}

#[actix_web::test]
async fn a_count_is_kept_while_a_character_still_holds_a_tool_of_its_origin() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let dead = ClosedPort::new();
    register(&app, tool_body("t", &dead.url("/t"), "plugin:x")).await;
    fails_to_connect(&app, "t").await;
    fails_to_connect(&app, "t").await;
    // Gone from Lanlan only: Mio still holds the origin, so the count stands.
    let (status, _) = app
        .post(
            "/api/tools/unregister",
            &json!({"name": "t", "role": "Lanlan"}),
        )
        .await;
    assert_eq!(status, 200);
    fails_to_connect(&app, "t").await;
    assert_eq!(names(&app).await, json!({"Lanlan": [], "Mio": []}));
}
