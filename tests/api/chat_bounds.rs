//! Text chat under a hostile app and an odd upstream: a turn handed back belongs to the
//! conversation that made it (upstreams that number their calls `call_0` in every answer), the
//! configured key never comes back out of the server, a character runs a bounded number of
//! requests at once, and an upstream's over-long answer, redirect, or an app's body with a
//! repeated key each get their own clear error in OpenAI's shape.

use runtime_tools::limits::{DEFAULT_MAX_CONCURRENT_REQUESTS, MAX_UPSTREAM_ANSWER_BYTES};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::chat::chat_server;
use crate::event_stream::open;
use crate::fake_chat::{Answer, FakeChat, calls_completion, chunk, completion};
use crate::helpers::TestApp;

const CHAT: &str = "/v1/chat/completions?character=Mio";

/// `echo` for Mio: its callback answers whatever the test routes to `/echo`.
async fn register_echo(app: &TestApp, callback: &CallbackServer) {
    let (status, answer) = app
        .register(&json!({
            "name": "echo", "description": "Echoes a number.",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "callback_url": callback.url("/echo"), "role": "Mio", "source": "plugin:echo",
        }))
        .await;
    assert_eq!((status, &answer["ok"]), (200, &json!(true)), "{answer}");
}

fn app_clock() -> Value {
    json!({"type": "function", "function": {"name": "app_clock", "description": "The app's clock",
           "parameters": {"type": "object", "properties": {}}}})
}

/// A conversation's first request: the person asks `said`.
fn first(said: &str) -> Value {
    json!({"model": "fake-model", "tools": [app_clock()],
           "messages": [{"role": "user", "content": said}]})
}

/// Its next request: the app sends back the turn it got (`call_0`) and its own result.
fn next(said: &str) -> Value {
    let mut request = first(said);
    let messages = request["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "app_clock", "arguments": "{}"}}]}));
    messages.push(json!({"role": "tool", "tool_call_id": "call_0", "content": "10:00"}));
    request
}

/// A turn calling the server's `echo` and the app's `app_clock`, numbered as many servers do.
fn mixed_turn(id: &str, n: u32) -> Answer {
    Answer::Json(
        200,
        calls_completion(
            id,
            None,
            &[
                ("srv_0", "echo", json!({"n": n})),
                ("call_0", "app_clock", json!({})),
            ],
        ),
    )
}

/// What the server's `srv_0` answered, in the messages the upstream got.
fn echoed(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["tool_call_id"] == "srv_0")
        .map(|m| m["content"].clone())
        .collect()
}

#[actix_web::test]
async fn a_handed_back_turn_goes_only_into_its_own_conversation() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::start();
    register_echo(&app, &callback).await;

    // Two conversations whose turns have the same call ids, each with its own result.
    callback.route("/echo", Reply::output(json!({"n": 1})));
    upstream.script([mixed_turn("a1", 1)]);
    let (status, handed) = app.post(CHAT, &first("time in Tokyo?")).await;
    assert_eq!(status, 200, "{handed}");
    assert_eq!(
        handed["choices"][0]["message"]["tool_calls"][0]["id"],
        "call_0"
    );
    callback.route("/echo", Reply::output(json!({"n": 3})));
    upstream.script([mixed_turn("b1", 3)]);
    let (status, _) = app.post(CHAT, &first("time in Paris?")).await;
    assert_eq!(status, 200);

    // Each next request gets its own conversation's server call back, whichever came last.
    upstream.script([
        Answer::Json(200, completion("a2", "Ten in Tokyo.", (1, 1))),
        Answer::Json(200, completion("b2", "Ten in Paris.", (1, 1))),
        Answer::Json(200, completion("c2", "Ten somewhere.", (1, 1))),
    ]);
    let (status, _) = app.post(CHAT, &next("time in Tokyo?")).await;
    assert_eq!(status, 200);
    assert_eq!(echoed(&upstream.bodies()[2]), [json!("{\"n\":1}")]);
    let (status, _) = app.post(CHAT, &next("time in Paris?")).await;
    assert_eq!(status, 200);
    assert_eq!(echoed(&upstream.bodies()[3]), [json!("{\"n\":3}")]);

    // A third conversation with the same ids gets nothing of theirs: its turn goes as sent.
    let (status, _) = app.post(CHAT, &next("time in Rome?")).await;
    assert_eq!(status, 200);
    let sent = &upstream.bodies()[4];
    assert_eq!(sent["messages"], next("time in Rome?")["messages"]);
    let (_, sessions) = app.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["chat"]["handed_turns"],
        2
    );
}

#[actix_web::test]
async fn the_configured_key_never_comes_back_out_of_the_server() {
    const KEY: &str = "sk-issue44-configured-secret";
    let upstream = FakeChat::start();
    // SAFETY: each test names its own variable; nothing else reads it.
    unsafe { std::env::set_var("RT_TEST_CHAT_KEY_ECHOED", KEY) };
    let app = chat_server(&upstream.base(), |chat| {
        chat.api_key_env = Some("RT_TEST_CHAT_KEY_ECHOED".into())
    })
    .await;
    let mut events = open(&app, "?role=Mio", None).await.expect("stream opens");
    events.expect("hello").await;
    let quoted = format!("Authorization: Bearer {KEY}");
    let redacted = "Authorization: Bearer [redacted]";
    upstream.script([
        // An error that quotes the request's header...
        Answer::Json(
            401,
            json!({"error": {"message": format!("bad header {quoted}"), "type": "auth"}}),
        ),
        // ...an answer that is not a completion...
        Answer::Text(200, "text/plain".into(), format!("echo: {quoted}")),
        // ...and a stream that ends with an error quoting it, after text that does.
        Answer::stream(vec![
            chunk(
                "s",
                json!({"role": "assistant", "content": format!("I saw {quoted}")}),
                None,
            ),
            json!({"error": {"message": format!("then {quoted}"), "type": "server_error"}}),
        ]),
    ]);

    let (status, answer) = app.post(CHAT, &first("hi")).await;
    assert_eq!(
        (status, answer),
        (
            401,
            json!({"error": {"message": format!("bad header {redacted}"), "type": "auth"}})
        )
    );
    let state = events
        .wait_for("chat.state", |d| !d["last_error"].is_null())
        .await;
    assert_eq!(
        state.data["last_error"]["message"],
        format!("the upstream answered HTTP 401: bad header {redacted}")
    );

    let (status, answer) = app.post(CHAT, &first("hi")).await;
    assert_eq!(status, 502);
    assert_eq!(
        answer["error"]["message"],
        format!(
            "the upstream answered with success, but not with a chat completion: echo: {redacted}"
        )
    );

    let mut streamed = first("hi");
    streamed["stream"] = json!(true);
    let mut response = app
        .client
        .post(app.url(CHAT))
        .send_json(&streamed)
        .await
        .unwrap();
    let body = String::from_utf8(response.body().limit(1 << 20).await.unwrap().to_vec()).unwrap();
    assert!(body.contains(&format!("I saw {redacted}")), "{body}");
    assert!(body.contains(&format!("then {redacted}")), "{body}");

    let last = events
        .wait_for("chat.state", |d| {
            d["last_error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("stream ended"))
        })
        .await;
    let (_, sessions) = app.get("/api/sessions").await;
    let everything = format!("{answer}{body}{sessions}{}{}", state.data, last.data);
    assert!(!everything.contains(KEY), "{everything}");
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["chat"]["last_error"]["message"],
        format!("the upstream's stream ended with an error: then {redacted}")
    );
}

#[actix_web::test]
async fn a_character_runs_a_bounded_number_of_chat_requests_at_once() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    upstream.script((0..DEFAULT_MAX_CONCURRENT_REQUESTS).map(|_| Answer::HoldOpen));
    let held: Vec<_> = (0..DEFAULT_MAX_CONCURRENT_REQUESTS)
        .map(|_| {
            let client = app.client.clone();
            let url = app.url(CHAT);
            actix_web::rt::spawn(async move { client.post(url).send_json(&first("hi")).await })
        })
        .collect();
    upstream
        .wait_for_requests(DEFAULT_MAX_CONCURRENT_REQUESTS)
        .await;

    let (status, answer) = app.post(CHAT, &first("one more")).await;
    assert_eq!(
        (status, answer),
        (
            429,
            json!({"error": {"message": format!(
                "the character's chat is already running {DEFAULT_MAX_CONCURRENT_REQUESTS} \
                 requests (chat.max_concurrent_requests): try again when one has ended"),
                "type": "requests", "param": null, "code": "rate_limit_exceeded"}})
        )
    );
    assert_eq!(
        upstream.received().len(),
        DEFAULT_MAX_CONCURRENT_REQUESTS,
        "the refused request never reached the upstream"
    );

    // One app goes away: its place is free again.
    held[0].abort();
    upstream.wait_for_closed(1).await;
    upstream.script([Answer::Json(200, completion("c", "Hi.", (1, 1)))]);
    let deadline = tokio::time::Instant::now() + crate::helpers::HTTP_DEADLINE;
    loop {
        let (status, answer) = app.post(CHAT, &first("again")).await;
        if status == 200 {
            assert_eq!(answer["choices"][0]["message"]["content"], "Hi.");
            break;
        }
        // The handler of the aborted request may still be on its way out.
        assert_eq!(status, 429, "{answer}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the place never came back"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[actix_web::test]
async fn a_chat_body_with_a_repeated_key_is_a_400() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let body = r#"{"model": "a", "messages": [{"role": "user", "content": "hi"}], "model": "b"}"#;

    let (status, answer) = app
        .post_raw(CHAT, Some("application/json"), body.as_bytes().to_vec())
        .await;

    assert_eq!(
        (status, answer),
        (
            400,
            json!({"error": {"message":
                "the request body must not repeat a key: duplicate key \"model\" at line 1 column 71",
                "type": "invalid_request_error", "param": null, "code": null}})
        )
    );
    assert!(upstream.received().is_empty());
}

#[actix_web::test]
async fn an_upstream_answer_over_the_bound_is_upstream_too_large() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let huge = "x".repeat(MAX_UPSTREAM_ANSWER_BYTES + 1);
    upstream.script([
        Answer::Text(200, "application/json".into(), huge.clone()),
        Answer::stream(vec![json!({"huge": huge})]),
    ]);
    let expected = json!({"error": {"message": format!(
        "the upstream {} answered with more than {MAX_UPSTREAM_ANSWER_BYTES} bytes", upstream.base()),
        "type": "upstream_error", "param": null, "code": "upstream_too_large"}});

    let (status, answer) = app.post(CHAT, &first("hi")).await;
    assert_eq!((status, answer), (502, expected.clone()));
    // A stream that began ends with the same error as its last event.
    let mut streamed = first("hi");
    streamed["stream"] = json!(true);
    let (status, answer) = app.post(CHAT, &streamed).await;
    assert_eq!(
        (status, answer),
        (200, json!(format!("data: {expected}\n\n")))
    );
}

#[actix_web::test]
async fn an_upstream_redirect_is_a_502_and_never_followed() {
    let upstream = FakeChat::start();
    let elsewhere = CallbackServer::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let location = elsewhere.url("/v1/chat/completions");
    upstream.script([Answer::Redirect(307, location.clone())]);
    upstream.script_models([Answer::Redirect(308, location.clone())]);
    let expected = |status: u16| {
        json!({"error": {"message": format!(
            "the upstream {} answered HTTP {status}, a redirect to {location}: redirects are not \
             followed (the key goes only where the configuration says)", upstream.base()),
            "type": "upstream_error", "param": null, "code": "upstream_redirect"}})
    };

    let (status, answer) = app.post(CHAT, &first("hi")).await;
    assert_eq!((status, answer), (502, expected(307)));
    let (status, answer) = app.get("/v1/models?character=Mio").await;
    assert_eq!((status, answer), (502, expected(308)));
    assert_eq!(elsewhere.connections(), 0);
}
