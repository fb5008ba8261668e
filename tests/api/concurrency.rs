//! Calls run concurrently: slow callbacks delay neither each other nor registrations or lists.

use std::time::{Duration, Instant};

use futures_util::future::{join, join_all};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply, register};
use crate::helpers::{HTTP_DEADLINE, TestApp, spawn_app, tool_body};

/// Concurrent invokes in flight at once.
const CALLS: usize = 200;

/// How long each call's callback sleeps once let through.
const CALLBACK_SLEEP: Duration = Duration::from_secs(1);

/// All calls must be done within this: a small multiple of one sleep, not `CALLS` of them.
const ALL_CALLS_BOUND: Duration = Duration::from_secs(15);

/// A client that does not queue requests behind a connection limit of its own.
fn unlimited_client() -> awc::Client {
    awc::Client::builder()
        .connector(awc::Connector::new().limit(0))
        .timeout(HTTP_DEADLINE)
        .disable_redirects()
        .finish()
}

async fn post(client: &awc::Client, app: &TestApp, path: &str, body: &Value) -> (u16, Value) {
    let mut response = client
        .post(app.url(path))
        .send_json(body)
        .await
        .expect("request sent");
    let bytes = response.body().await.expect("body read");
    (
        response.status().as_u16(),
        serde_json::from_slice(&bytes).expect("JSON answer"),
    )
}

#[actix_web::test]
async fn two_hundred_slow_calls_run_at_once_while_list_and_register_keep_answering() {
    let app = spawn_app(&["Lanlan"]).await;
    // Each call waits for the gate, then sleeps: none can finish before the gate opens, so
    // whatever answers while it is shut answered while all the calls were in flight.
    let slow = CallbackServer::with(
        "/slow",
        Reply::after_gate(Reply::after(CALLBACK_SLEEP, Reply::output(json!("slept")))),
    );
    register(&app, tool_body("slow", &slow.url("/slow"), "plugin:slow")).await;
    let fast = CallbackServer::with("/fast", Reply::output(json!("quick")));

    let client = unlimited_client();
    let started = Instant::now();
    let calls = join_all((0..CALLS).map(|i| {
        let body = json!({"name": "slow", "arguments": {"i": i}, "call_id": format!("c{i}")});
        let client = &client;
        let app = &app;
        async move { post(client, app, "/api/tools/invoke", &body).await }
    }));
    let meanwhile = async {
        // Every call has reached the callback: they are all in flight at the same time.
        slow.wait_for_requests(CALLS).await;

        let (status, listing) = app.get("/api/tools").await;
        assert_eq!(status, 200, "{listing}");
        let (status, registered) = app
            .register(&tool_body("fast", &fast.url("/fast"), "plugin:fast"))
            .await;
        assert_eq!(status, 200, "{registered}");
        assert_eq!(registered["affected_roles"], json!(["Lanlan"]));
        let (status, quick) = post(
            &client,
            &app,
            "/api/tools/invoke",
            &json!({"name": "fast", "call_id": "f"}),
        )
        .await;
        assert_eq!(status, 200, "{quick}");
        assert_eq!(quick["output"], json!("quick"));
        assert_eq!(
            app.tool_names(None).await,
            json!({"Lanlan": ["slow", "fast"]})
        );

        slow.open_gate();
    };
    let (results, ()) = join(calls, meanwhile).await;
    let elapsed = started.elapsed();

    assert_eq!(results.len(), CALLS);
    for (i, (status, body)) in results.iter().enumerate() {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(
            *body,
            json!({"ok": true, "name": "slow", "call_id": format!("c{i}"), "output": "slept", "is_error": false})
        );
    }
    assert!(
        elapsed < ALL_CALLS_BOUND,
        "{CALLS} calls of a {CALLBACK_SLEEP:?} callback took {elapsed:?}"
    );
}
