//! Text chat: `POST /v1/chat/completions` with the server running the tool loop, the app being
//! the official OpenAI Python SDK (`tests/chat_app.py`) and the upstream a scripted fake chat
//! server (`fake_chat.rs`) or `@copilotkit/aimock` (`chat_aimock.rs`). Each test names the rule
//! it checks; the upstream's recorded requests show what the model was sent.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use runtime_tools::ChatSettings;
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, ClosedPort, Reply};
use crate::chat_app::{ChatApp, streamed_text};
use crate::event_stream::open;
use crate::fake_chat::{
    Answer, FakeChat, call_chunks, calls_completion, chunk, completion, text_chunks, usage_chunk,
};
use crate::helpers::{
    TestApp, cannot_run, chunked, raw_head, settings, spawn_app_with, test_client,
};

/// A server whose `Mio` chats through `upstream` (with `tweak` applied) and whose `Lanlan` has
/// no chat.
pub async fn chat_server(base: &str, tweak: impl FnOnce(&mut ChatSettings)) -> TestApp {
    let mut config = settings(&["Mio", "Lanlan"]);
    let mut chat = ChatSettings::new(base);
    tweak(&mut chat);
    config.characters[0].chat = Some(chat);
    spawn_app_with(config).await
}

/// `get_weather` for Mio, answered by `callback` at `/weather` (which the test scripts), with a
/// schema that requires `location`.
pub async fn register_weather(app: &TestApp, callback: &CallbackServer) {
    register_tool(app, callback, "get_weather", "/weather").await;
}

pub async fn register_tool(app: &TestApp, callback: &CallbackServer, name: &str, path: &str) {
    register_slow_tool(app, callback, name, path, 30).await;
}

/// A tool whose calls may take `timeout_seconds`.
async fn register_slow_tool(
    app: &TestApp,
    callback: &CallbackServer,
    name: &str,
    path: &str,
    timeout_seconds: u64,
) {
    let (status, answer) = app
        .register(&json!({
            "name": name,
            "description": format!("{name} for a location"),
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                           "required": ["location"]},
            "callback_url": callback.url(path),
            "role": "Mio",
            "source": "plugin:weather",
            "timeout_seconds": timeout_seconds,
        }))
        .await;
    assert_eq!((status, &answer["ok"]), (200, &json!(true)), "{answer}");
}

/// The SDK pointed at the server's `/v1`.
async fn sdk(app: &TestApp) -> ChatApp {
    ChatApp::start(&app.url("/v1")).await
}

fn ask_weather() -> Value {
    json!({"model": "fake-model",
           "messages": [{"role": "user", "content": "What is the weather in Tokyo?"}]})
}

/// The app's own tool, in the nested chat shape.
fn app_clock() -> Value {
    json!({"type": "function", "function": {"name": "app_clock", "description": "The app's clock",
           "parameters": {"type": "object", "properties": {}}}})
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    t["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default()
}

#[actix_web::test]
async fn a_server_round_then_words_without_streaming() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!({"temperature_c": 28})));
    register_weather(&app, &callback).await;
    let mut events = open(&app, "?role=Mio", None).await.expect("events open");
    upstream.script([
        Answer::Json(
            200,
            calls_completion(
                "chatcmpl-1",
                Some("Let me check."),
                &[("call_1", "get_weather", json!({"location": "Tokyo"}))],
            ),
        ),
        Answer::Json(
            200,
            completion("chatcmpl-2", "It is sunny and 28 °C.", (20, 7)),
        ),
    ]);

    let mut sdk = sdk(&app).await;
    let answer = sdk.create(ask_weather()).await;

    assert_eq!(answer["id"], "chatcmpl-1");
    let choice = &answer["choices"][0];
    assert_eq!(
        choice["message"]["content"],
        "Let me check.\n\nIt is sunny and 28 °C."
    );
    assert_eq!(choice["message"].get("tool_calls"), None);
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(
        answer["usage"],
        json!({"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42})
    );
    // The plugin got the model's call.
    let calls = callback.received();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].json(),
        json!({"name": "get_weather", "arguments": {"location": "Tokyo"}, "call_id": "call_1",
               "raw_arguments": "{\"location\":\"Tokyo\"}"})
    );
    // The model got the tools, then its own turn and the result.
    let bodies = upstream.bodies();
    assert_eq!(bodies.len(), 2);
    // Both rounds went over one kept-alive connection.
    assert_eq!(upstream.connections(), 1);
    assert_eq!(tool_names(&bodies[0]), ["get_weather"]);
    assert_eq!(
        bodies[0]["tools"][0],
        json!({"type": "function", "function": {"name": "get_weather",
               "description": "get_weather for a location",
               "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                              "required": ["location"]}}})
    );
    assert_eq!(bodies[0]["messages"], ask_weather()["messages"]);
    assert_eq!(bodies[0]["model"], "fake-model");
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"location\":\"Tokyo\"}"}}]})
    );
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
               "content": "{\"temperature_c\":28}"})
    );
    // The call is announced as the chat's.
    let call = events.wait_for("tool.call", |_| true).await;
    crate::events::assert_call(
        &call,
        json!({"role": "Mio", "tool": "get_weather", "source": "plugin:weather",
               "call_id": "call_1", "caller": "model", "kind": "chat", "is_error": false, "cancelled": false}),
    );
    // The sessions listing counts what the chat did.
    let (_, sessions) = app.get("/api/sessions").await;
    let chat = &sessions["sessions_by_role"]["Mio"]["chat"];
    assert_eq!(
        (&chat["requests"], &chat["rounds"], &chat["calls"]),
        (&json!(1), &json!(2), &json!(1))
    );
    assert_eq!(chat["upstream"], json!(upstream.base()));
    assert_eq!(sessions["sessions_by_role"]["Lanlan"].get("chat"), None);
}

#[actix_web::test]
async fn a_server_round_then_words_streamed_as_one_message() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    let round_one = || {
        call_chunks(
            "chatcmpl-a",
            Some("Let me check."),
            &[("call_1", "get_weather", json!({"location": "Tokyo"}))],
        )
    };
    let round_two = || text_chunks("chatcmpl-b", &["It is ", "sunny."], (20, 7));
    upstream.script([
        Answer::stream(round_one()),
        Answer::stream(round_two()),
        Answer::stream(round_one()),
        Answer::stream(round_two()),
    ]);
    let mut sdk = sdk(&app).await;
    let mut request = ask_weather();
    request["stream_options"] = json!({"include_usage": true});

    let chunks = sdk.chunks(request.clone()).await;

    // A stream read to its `[DONE]` leaves its connection for the next round.
    assert_eq!(
        upstream.connections(),
        1,
        "both streamed rounds went over one kept-alive connection"
    );
    assert_eq!(streamed_text(&chunks), "Let me check.\n\nIt is sunny.");
    assert!(chunks.iter().all(|c| c["id"] == "chatcmpl-a"), "one id");
    let roles = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"].get("role").is_some())
        .count();
    assert_eq!(roles, 1, "the role once");
    assert!(
        chunks
            .iter()
            .all(|c| c["choices"][0]["delta"].get("tool_calls").is_none()),
        "the server's calls never reach the app"
    );
    let finishes: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0].get("finish_reason"))
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finishes, [&json!("stop")]);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(
        last["usage"],
        json!({"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}),
        "usage summed over both rounds"
    );
    // The server asked the upstream for usage and streaming each round.
    let bodies = upstream.bodies();
    assert_eq!(bodies[0]["stream"], true);
    assert_eq!(bodies[1]["stream_options"], json!({"include_usage": true}));

    // The SDK's own stream helper reads the same message.
    let final_completion = sdk.stream_helper(request).await;
    let message = &final_completion["choices"][0]["message"];
    assert_eq!(message["content"], "Let me check.\n\nIt is sunny.");
    assert_eq!(final_completion["choices"][0]["finish_reason"], "stop");
    assert_eq!(final_completion["usage"]["total_tokens"], 42);
}

#[actix_web::test]
async fn without_registered_calls_the_stream_is_what_the_upstream_would_have_sent() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let chunks = || text_chunks("chatcmpl-d", &["Hello", " there", "!"], (5, 3));
    upstream.script([Answer::stream(chunks()), Answer::stream(chunks())]);
    let mut request = ask_weather();
    request["stream_options"] = json!({"include_usage": true});
    request["temperature"] = json!(0.25);

    let mut direct = ChatApp::start(&upstream.base()).await;
    let straight = direct.stream_helper(request.clone()).await;
    let mut through = sdk(&app).await;
    let relayed = through.stream_helper(request).await;

    assert_eq!(relayed, straight);
    let bodies = upstream.bodies();
    assert_eq!(bodies[1]["temperature"], 0.25, "every field passes");
    assert_eq!(bodies[1].get("tools"), None, "no tools to add");
}

#[actix_web::test]
async fn an_upstream_that_keeps_its_body_open_after_done_does_not_hold_the_answer() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    // `[DONE]`, then the body stays open: its end waits for a gate that never opens.
    let mut events: Vec<String> = text_chunks("c", &["Hello"], (1, 1))
        .iter()
        .map(Value::to_string)
        .collect();
    events.extend(["[DONE]".to_owned(), "{}".to_owned()]);
    let held = events.len() - 1;
    let lingering = || Answer::Sse {
        events: events.clone(),
        gate_at: Some(held),
        close_delimited: false,
    };
    upstream.script([lingering(), lingering()]);
    let mut sdk = sdk(&app).await;

    let first = sdk.chunks(ask_weather()).await;
    let second = sdk.chunks(ask_weather()).await;

    assert_eq!(streamed_text(&first), "Hello");
    assert_eq!(streamed_text(&second), "Hello");
    // Neither connection could be kept: each request opened its own.
    assert_eq!(upstream.connections(), 2);
}

#[actix_web::test]
async fn text_reaches_the_app_as_it_arrives() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    // The upstream sends its first words, then waits.
    upstream.script([Answer::stream(text_chunks("c", &["Hello", " world"], (1, 1))).gated(2)]);
    let mut sdk = sdk(&app).await;

    let first = sdk.open_stream(ask_weather()).await;

    assert_eq!(first["choices"][0]["delta"]["content"], "Hello");
    upstream.open_gate();
    let mut rest = String::new();
    while let Some(chunk) = sdk.next().await {
        rest.push_str(
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or_default(),
        );
    }
    assert_eq!(rest, " world");
}

#[actix_web::test]
async fn a_call_of_the_apps_own_tool_is_handed_to_the_app_untouched() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    let clock_call = [("call_c", "app_clock", json!({"zone": "Asia/Tokyo"}))];
    upstream.script([
        Answer::Json(200, calls_completion("c1", None, &clock_call)),
        Answer::stream(call_chunks("c2", Some("One moment."), &clock_call)),
    ]);
    let mut sdk = sdk(&app).await;
    let mut request = ask_weather();
    request["tools"] = json!([app_clock()]);
    request["tool_choice"] = json!("auto");

    let answer = sdk.create(request.clone()).await;

    let message = &answer["choices"][0]["message"];
    assert_eq!(
        message["tool_calls"],
        json!([{"id": "call_c", "type": "function",
                "function": {"name": "app_clock", "arguments": "{\"zone\":\"Asia/Tokyo\"}"}}])
    );
    assert_eq!(answer["choices"][0]["finish_reason"], "tool_calls");
    assert!(callback.received().is_empty());
    let sent = &upstream.bodies()[0];
    assert_eq!(tool_names(sent), ["app_clock", "get_weather"]);
    assert_eq!(
        sent["tools"][0],
        app_clock(),
        "the app's tool as it wrote it"
    );
    assert_eq!(sent["tool_choice"], "auto");

    // Streamed: proper deltas the SDK puts together.
    let streamed = sdk.stream_helper(request).await;
    let message = &streamed["choices"][0]["message"];
    assert_eq!(message["content"], "One moment.");
    assert_eq!(message["tool_calls"][0]["id"], "call_c");
    assert_eq!(message["tool_calls"][0]["function"]["name"], "app_clock");
    assert_eq!(
        message["tool_calls"][0]["function"]["arguments"],
        "{\"zone\":\"Asia/Tokyo\"}"
    );
    assert_eq!(streamed["choices"][0]["finish_reason"], "tool_calls");
}

#[actix_web::test]
async fn a_mixed_turn_runs_the_servers_calls_and_the_apps_next_request_is_completed_again() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    upstream.script([
        Answer::stream(call_chunks(
            "c1",
            None,
            &[
                ("call_w", "get_weather", json!({"location": "Tokyo"})),
                ("call_a", "app_clock", json!({})),
            ],
        )),
        Answer::Json(200, completion("c2", "Sunny, and it is ten.", (30, 6))),
    ]);
    let mut sdk = sdk(&app).await;
    let mut request = ask_weather();
    request["tools"] = json!([app_clock()]);

    let chunks = sdk.chunks(request.clone()).await;

    // The app gets its own call alone, at index 0.
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"].get("tool_calls"))
        .collect();
    assert_eq!(
        calls[0],
        &json!([{"index": 0, "id": "call_a", "type": "function",
                 "function": {"name": "app_clock", "arguments": ""}}])
    );
    assert_eq!(
        calls[1],
        &json!([{"index": 0, "function": {"arguments": "{}"}}])
    );
    assert_eq!(calls.len(), 2);
    assert_eq!(callback.received().len(), 1, "the server's call ran");

    // The app answers its call and asks again; the upstream sees the whole turn.
    let mut next = request;
    let history = next["messages"].as_array_mut().unwrap();
    history.push(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "app_clock", "arguments": "{}"}}]}));
    history.push(json!({"role": "tool", "tool_call_id": "call_a", "content": "10:00"}));
    let answer = sdk.create(next).await;

    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "Sunny, and it is ten."
    );
    let sent = &upstream.bodies()[1];
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "{sent}");
    let ids: Vec<&str> = messages[1]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_w", "call_a"]);
    assert_eq!(
        messages[1]["tool_calls"][0]["function"],
        json!({"name": "get_weather", "arguments": "{\"location\":\"Tokyo\"}"})
    );
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "call_w", "name": "get_weather",
               "content": "\"sunny\""})
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_a", "content": "10:00"})
    );
    let (_, sessions) = app.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["chat"]["handed_turns"],
        1
    );
}

#[actix_web::test]
async fn parallel_calls_run_at_once_and_their_results_keep_the_models_order() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    // Neither answers until both have been called: run one after the other, the second would
    // never be called.
    let callback = CallbackServer::start();
    callback.route("/weather", Reply::after_gate(Reply::output(json!("sunny"))));
    callback.route("/time", Reply::after_gate(Reply::output(json!("noon"))));
    register_weather(&app, &callback).await;
    register_tool(&app, &callback, "get_time", "/time").await;
    let calls = [
        ("call_1", "get_weather", json!({"location": "Tokyo"})),
        ("call_2", "get_time", json!({"location": "Tokyo"})),
    ];
    // The usual form, then Ollama's: each call whole, both at index 0, no type.
    let ollama = vec![
        chunk("o1", json!({"role": "assistant", "content": ""}), None),
        chunk(
            "o1",
            json!({"tool_calls": [{"index": 0, "id": "call_1",
                "function": {"name": "get_weather", "arguments": "{\"location\":\"Tokyo\"}"}}]}),
            None,
        ),
        chunk(
            "o1",
            json!({"tool_calls": [{"index": 0, "id": "call_2",
                "function": {"name": "get_time", "arguments": "{\"location\":\"Tokyo\"}"}}]}),
            None,
        ),
        chunk("o1", json!({}), Some("tool_calls")),
        usage_chunk("o1", (3, 3)),
    ];
    upstream.script([
        Answer::stream(call_chunks("p1", None, &calls)),
        Answer::stream(text_chunks("p2", &["Sunny at noon."], (1, 1))),
        Answer::stream(ollama),
        Answer::stream(text_chunks("o2", &["Sunny at noon."], (1, 1))),
    ]);
    let mut sdk = sdk(&app).await;

    for round in 0..2 {
        let asked = {
            let mut request = ask_weather();
            request["parallel_tool_calls"] = json!(true);
            let chunks = sdk.stream(request);
            let gate = async {
                callback.wait_for_requests(2 * (round + 1)).await;
                callback.open_gate();
            };
            futures_util::future::join(chunks, gate).await.0
        };
        assert_eq!(
            streamed_text(asked["chunks"].as_array().unwrap()),
            "Sunny at noon."
        );
        let sent = &upstream.bodies()[2 * round + 1];
        assert_eq!(sent["parallel_tool_calls"], true);
        let messages = sent["messages"].as_array().unwrap();
        let answered: Vec<(&Value, &Value)> = messages[2..]
            .iter()
            .map(|m| (&m["tool_call_id"], &m["content"]))
            .collect();
        assert_eq!(
            answered,
            [
                (&json!("call_1"), &json!("\"sunny\"")),
                (&json!("call_2"), &json!("\"noon\""))
            ],
            "round {round}"
        );
        assert_eq!(messages[1]["tool_calls"].as_array().unwrap().len(), 2);
    }
}

#[actix_web::test]
async fn after_the_last_tool_round_the_model_is_asked_once_more_without_tools() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |chat| chat.max_tool_rounds = 2).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    let again = |id: &str, call: &str| {
        Answer::Json(
            200,
            calls_completion(
                id,
                None,
                &[(call, "get_weather", json!({"location": "Tokyo"}))],
            ),
        )
    };
    // The last round is sent without tools; a call the model makes anyway is dropped.
    let mut last = calls_completion(
        "r3",
        Some("It is sunny."),
        &[("call_3", "get_weather", json!({"location": "Tokyo"}))],
    );
    last["choices"][0]["finish_reason"] = json!("tool_calls");
    upstream.script([
        again("r1", "call_1"),
        again("r2", "call_2"),
        Answer::Json(200, last),
    ]);
    let mut sdk = sdk(&app).await;
    let mut request = ask_weather();
    request["tool_choice"] = json!("required");
    request["parallel_tool_calls"] = json!(false);

    let answer = sdk.create(request).await;

    assert_eq!(answer["choices"][0]["message"]["content"], "It is sunny.");
    assert_eq!(answer["choices"][0]["message"].get("tool_calls"), None);
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    let bodies = upstream.bodies();
    assert_eq!(bodies.len(), 3, "two rounds of tools, then one for words");
    for body in &bodies[..2] {
        assert_eq!(tool_names(body), ["get_weather"]);
        assert_eq!(body["tool_choice"], "required");
    }
    let last = &bodies[2];
    assert_eq!(last.get("tools"), None);
    assert_eq!(last.get("tool_choice"), None);
    assert_eq!(last.get("parallel_tool_calls"), None);
    assert_eq!(last["messages"].as_array().unwrap().len(), 5);
    assert_eq!(callback.received().len(), 2);
}

#[actix_web::test]
async fn a_model_that_refuses_tools_is_asked_again_without_them_until_the_tools_change() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    let mut events = open(&app, "?role=Mio", None).await.expect("events open");
    let refusal = json!({"error": {"message": "registry.ollama.ai/library/tiny does not support tools",
                                   "type": "api_error", "param": null, "code": null}});
    upstream.script([
        Answer::Json(400, refusal.clone()),
        Answer::Json(200, completion("c1", "Hi!", (1, 1))),
        Answer::Json(200, completion("c2", "Hi again!", (1, 1))),
        Answer::Json(400, refusal),
        Answer::Json(200, completion("c3", "Hi at last!", (1, 1))),
    ]);
    let mut sdk = sdk(&app).await;

    let answer = sdk.create(ask_weather()).await;

    assert_eq!(answer["choices"][0]["message"]["content"], "Hi!");
    let bodies = upstream.bodies();
    assert_eq!(tool_names(&bodies[0]), ["get_weather"]);
    assert_eq!(bodies[1].get("tools"), None, "asked again without tools");
    assert_eq!(bodies[1]["messages"], bodies[0]["messages"]);
    let state = events
        .wait_for("chat.state", |d| {
            !d["tools_refused"].as_array().unwrap().is_empty()
        })
        .await;
    assert_eq!(state.data["role"], "Mio");
    assert_eq!(state.data["tools_refused"][0]["model"], "fake-model");
    assert_eq!(
        state.data["tools_refused"][0]["error"],
        "registry.ollama.ai/library/tiny does not support tools"
    );

    // Remembered: the next request goes without tools at once.
    sdk.create(ask_weather()).await;
    assert_eq!(upstream.bodies()[2].get("tools"), None);

    // A registration changes the tools: they are offered again.
    let callback_two = CallbackServer::with("/time", Reply::output(json!("noon")));
    register_tool(&app, &callback_two, "get_time", "/time").await;
    sdk.create(ask_weather()).await;
    let bodies = upstream.bodies();
    assert_eq!(tool_names(&bodies[3]), ["get_weather", "get_time"]);
    assert_eq!(bodies[4].get("tools"), None);
    assert_eq!(bodies.len(), 5);
}

#[actix_web::test]
async fn upstream_errors_reach_the_app_with_their_status_and_body() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let unauthorized = json!({"error": {"message": "Incorrect API key provided: sk-app.",
                                        "type": "invalid_request_error", "param": null,
                                        "code": "invalid_api_key"}});
    let broken = json!({"error": {"message": "The server had an error", "type": "server_error",
                                  "param": null, "code": null}});
    upstream.script([
        Answer::Json(401, unauthorized.clone()),
        Answer::Json(500, broken.clone()),
        Answer::Json(401, unauthorized.clone()),
    ]);
    let mut sdk = sdk(&app).await;

    let error = sdk.create_error(ask_weather()).await;
    assert_eq!(
        (&error["status"], &error["class"]),
        (&json!(401), &json!("AuthenticationError"))
    );
    assert_eq!(error["body"], unauthorized["error"]);
    let error = sdk.create_error(ask_weather()).await;
    assert_eq!(
        (&error["status"], &error["class"]),
        (&json!(500), &json!("InternalServerError"))
    );
    assert_eq!(error["body"], broken["error"]);
    // Streamed: nothing was sent yet, so the status is the upstream's too.
    let streamed = sdk.stream(ask_weather()).await;
    assert_eq!(streamed["error"]["status"], 401, "{streamed}");
    let (_, sessions) = app.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["chat"]["last_error"]["message"],
        "the upstream answered HTTP 401: Incorrect API key provided: sk-app."
    );
}

#[actix_web::test]
async fn an_upstream_that_cannot_be_reached_or_does_not_answer_is_a_502_or_a_504() {
    let closed = ClosedPort::new();
    let base = format!("{}/v1", closed.url(""));
    let app = chat_server(&base, |_| {}).await;
    let mut sdk = sdk(&app).await;

    let error = sdk.create_error(ask_weather()).await;

    assert_eq!(error["status"], 502);
    assert_eq!(error["body"]["code"], "upstream_unreachable");
    assert_eq!(error["body"]["type"], "upstream_error");
    let message = error["body"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("the upstream {base} could not be reached: ")),
        "{message}"
    );
    let models = sdk.models().await;
    assert_eq!(models["error"]["status"], 502, "{models}");

    let upstream = FakeChat::start();
    let slow = chat_server(&upstream.base(), |chat| {
        chat.timeout = Duration::from_millis(500)
    })
    .await;
    upstream.script([Answer::HoldOpen]);
    let mut sdk = ChatApp::start(&slow.url("/v1")).await;
    let error = sdk.create_error(ask_weather()).await;
    assert_eq!(error["status"], 504);
    assert_eq!(
        error["body"]["message"],
        format!(
            "the upstream {} did not answer within 0.5 s",
            upstream.base()
        )
    );
    upstream.wait_for_closed(1).await;
}

#[actix_web::test]
async fn an_app_that_goes_away_cancels_the_upstream_request_and_the_running_callbacks() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::HoldOpen);
    // The call may take longer than the test waits: only a cancel closes its connection in time.
    register_slow_tool(&app, &callback, "get_weather", "/weather", 300).await;
    upstream.script([Answer::stream(call_chunks(
        "c1",
        Some("Let me check."),
        &[("call_1", "get_weather", json!({"location": "Tokyo"}))],
    ))]);
    let mut sdk = sdk(&app).await;
    let mut events = open(&app, "?role=Mio", None).await.expect("stream opens");
    events.expect("hello").await;

    let first = sdk.open_stream(ask_weather()).await;
    assert_eq!(first["choices"][0]["delta"]["content"], "Let me check.");
    callback.wait_for_requests(1).await;
    sdk.close_stream().await;

    // The plugin sees its connection close, and the call is announced as cancelled.
    callback.wait_for_closed(1).await;
    let call = events.wait_for("tool.call", |_| true).await;
    assert_eq!(
        (
            &call.data["call_id"],
            &call.data["kind"],
            &call.data["is_error"],
            &call.data["cancelled"]
        ),
        (&json!("call_1"), &json!("chat"), &json!(true), &json!(true)),
        "{call:?}"
    );

    // Without streaming: the app's connection closes while the upstream thinks.
    upstream.script([Answer::HoldOpen]);
    let client = test_client();
    let request = client
        .post(app.url("/v1/chat/completions"))
        .timeout(Duration::from_millis(300))
        .send_json(&ask_weather());
    assert!(request.await.is_err(), "the client gave up");
    upstream.wait_for_closed(1).await;
}

/// A small PNG, base64.
pub fn png() -> String {
    let image =
        image::ImageBuffer::from_fn(8, 8, |x, y| image::Rgb([x as u8 * 30, y as u8 * 30, 9]));
    let mut bytes = Vec::new();
    image::DynamicImage::ImageRgb8(image)
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .unwrap();
    STANDARD.encode(bytes)
}

#[actix_web::test]
async fn result_images_go_to_a_vision_model_and_are_named_for_another() {
    for vision in [true, false] {
        let upstream = FakeChat::start();
        let app = chat_server(&upstream.base(), |chat| chat.vision = vision).await;
        let answer = json!({"output": {"seen": "a map"}, "is_error": false,
            "images": [{"data_b64": png(), "mime": "image/png", "vision_prompt": "the coast"}]});
        let callback = CallbackServer::with("/weather", Reply::json(answer));
        register_weather(&app, &callback).await;
        upstream.script([
            Answer::Json(
                200,
                calls_completion(
                    "c1",
                    None,
                    &[("call_1", "get_weather", json!({"location": "x"}))],
                ),
            ),
            Answer::Json(200, completion("c2", "A map of the coast.", (1, 1))),
        ]);
        let mut sdk = sdk(&app).await;

        sdk.create(ask_weather()).await;

        let sent = &upstream.bodies()[1];
        let messages = sent["messages"].as_array().unwrap();
        let output: Value = serde_json::from_str(messages[2]["content"].as_str().unwrap()).unwrap();
        if vision {
            assert_eq!(messages.len(), 4);
            assert_eq!(output, json!({"seen": "a map"}));
            let shown = &messages[3];
            assert_eq!(shown["role"], "user");
            assert_eq!(
                shown["content"][0],
                json!({"type": "text", "text": "Image from tool get_weather (call_id call_1): the coast"})
            );
            assert_eq!(
                shown["content"][1]["image_url"]["url"],
                format!("data:image/png;base64,{}", png())
            );
        } else {
            assert_eq!(messages.len(), 3);
            assert_eq!(
                output,
                json!({"seen": "a map", "_image_warnings": [
                    "1 image(s) not shown: this chat model takes no images ([character.chat] vision = false)"]})
            );
        }
    }
}

#[actix_web::test]
async fn a_registered_tool_named_like_the_apps_is_left_out_and_reported() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/clock", Reply::output(json!("server time")));
    register_tool(&app, &callback, "app_clock", "/clock").await;
    register_weather(&app, &callback).await;
    upstream.script([Answer::Json(
        200,
        calls_completion("c1", None, &[("call_c", "app_clock", json!({}))]),
    )]);
    let mut sdk = sdk(&app).await;
    let mut request = ask_weather();
    request["tools"] = json!([app_clock()]);

    let answer = sdk.create(request).await;

    assert_eq!(
        answer["choices"][0]["message"]["tool_calls"][0]["id"], "call_c",
        "the app answers its own tool"
    );
    assert!(callback.received().is_empty());
    assert_eq!(
        tool_names(&upstream.bodies()[0]),
        ["app_clock", "get_weather"]
    );
    let (_, sessions) = app.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["chat"]["clashes"],
        json!(["app_clock"])
    );
}

#[actix_web::test]
async fn arguments_that_do_not_match_the_schema_never_reach_the_plugin() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    upstream.script([
        Answer::Json(
            200,
            calls_completion(
                "c1",
                None,
                &[("call_1", "get_weather", json!({"city": "Tokyo"}))],
            ),
        ),
        Answer::Json(200, completion("c2", "Which location?", (1, 1))),
    ]);
    let mut sdk = sdk(&app).await;

    sdk.create(ask_weather()).await;

    assert!(callback.received().is_empty());
    let answered = &upstream.bodies()[1]["messages"][2];
    let output: Value = serde_json::from_str(answered["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        output,
        json!({"error": "arguments for get_weather do not match its parameters: /location is \
                         required. Call get_weather again with arguments that match.",
               "is_error": true})
    );
}

#[actix_web::test]
async fn the_character_is_named_by_query_or_header_and_unknown_ones_are_404s() {
    let upstream = FakeChat::start();
    let mut config = settings(&["Mio", "Lanlan", "Kai"]);
    config.characters[0].chat = Some(ChatSettings::new(upstream.base()));
    config.characters[2].chat = Some(ChatSettings::new(upstream.base()));
    let app = spawn_app_with(config).await;
    upstream.script((0..2).map(|_| Answer::Json(200, completion("c", "Hi", (1, 1)))));
    let mut sdk = sdk(&app).await;

    let error = sdk.create_error(ask_weather()).await;
    assert_eq!(error["status"], 404);
    assert_eq!(
        error["body"],
        json!({"message": "more than one character has a chat (Mio, Kai): name one with \
                           ?character=NAME or the X-Character header",
               "type": "invalid_request_error", "param": "character",
               "code": "chat_not_configured"})
    );
    sdk.query(json!({"character": "Kai"}));
    assert_eq!(
        sdk.create(ask_weather()).await["choices"][0]["message"]["content"],
        "Hi"
    );
    sdk.query(json!({})).headers(json!({"X-Character": "Mio"}));
    assert_eq!(
        sdk.create(ask_weather()).await["choices"][0]["message"]["content"],
        "Hi"
    );
    sdk.headers(json!({"X-Character": "Lanlan"}));
    let error = sdk.create_error(ask_weather()).await;
    assert_eq!(error["status"], 404);
    assert_eq!(
        error["body"]["message"],
        "character Lanlan has no [character.chat]: configure its chat model to chat with it"
    );
    sdk.headers(json!({"X-Character": "Nobody"}));
    let error = sdk.create_error(ask_weather()).await;
    assert_eq!(
        (
            &error["status"],
            &error["body"]["message"],
            &error["body"]["code"]
        ),
        (
            &json!(404),
            &json!("unknown role: Nobody"),
            &json!("character_not_found")
        )
    );
}

#[actix_web::test]
async fn models_are_listed_by_the_upstream_with_the_configured_key() {
    let upstream = FakeChat::start();
    // SAFETY: each test names its own variable; nothing else reads it.
    unsafe { std::env::set_var("RT_TEST_CHAT_KEY_MODELS", "sk-configured") };
    let app = chat_server(&upstream.base(), |chat| {
        chat.api_key_env = Some("RT_TEST_CHAT_KEY_MODELS".into())
    })
    .await;
    let mut sdk = sdk(&app).await;
    sdk.headers(json!({"OpenAI-Organization": "org-test"}));

    let models = sdk.models().await;

    assert_eq!(models, json!({"models": ["fake-model"]}));
    let received = upstream.received();
    assert_eq!(received[0].path, "/v1/models");
    assert_eq!(
        received[0].header("authorization"),
        Some("Bearer sk-configured")
    );
    assert_eq!(received[0].header("openai-organization"), Some("org-test"));
}

#[actix_web::test]
async fn without_a_configured_key_the_apps_own_goes_upstream() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    upstream.script([Answer::Json(200, completion("c", "Hi", (1, 1)))]);
    let mut sdk = sdk(&app).await;
    sdk.api_key("sk-the-apps-own");

    sdk.create(ask_weather()).await;

    let received = upstream.received();
    assert_eq!(
        received[0].header("authorization"),
        Some("Bearer sk-the-apps-own")
    );
}

#[actix_web::test]
async fn a_stream_delimited_by_closing_the_connection_is_read_whole() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    upstream.script([
        Answer::stream(text_chunks("c", &["All ", "of ", "it."], (1, 1))).close_delimited(),
    ]);
    let mut sdk = sdk(&app).await;

    let chunks = sdk.chunks(ask_weather()).await;

    assert_eq!(streamed_text(&chunks), "All of it.");
}

/// `chunks` written as an event stream the way the format allows but few servers write it: a
/// byte-order mark, comments, `id`, `retry`, unknown fields, a line without a colon, two `event`
/// lines, each JSON chunk cut over two `data` lines, every line ended by `end`.
fn unusual_event_stream(chunks: &[Value], end: &str) -> String {
    let mut stream = String::from("\u{feff}: the stream begins");
    stream.push_str(end);
    for chunk in chunks.iter().map(Value::to_string).chain(["[DONE]".into()]) {
        let (head, tail) = chunk.split_at(chunk.find(',').unwrap_or(chunk.len()));
        for line in [
            "retry: 3000".to_owned(),
            "id: 7".into(),
            "event: chunk".into(),
            "event: message".into(),
            "x-vendor: anything".into(),
            "nocolon".into(),
            format!("data:{head}"),
            format!("data: {tail}"),
            String::new(),
        ] {
            stream.push_str(&line);
            stream.push_str(end);
        }
    }
    stream
}

#[actix_web::test]
async fn an_upstream_stream_framed_any_way_the_format_allows_is_read_as_its_events() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    let round_one = call_chunks(
        "chatcmpl-a",
        Some("Let me check."),
        &[("call_1", "get_weather", json!({"location": "Tokyo"}))],
    );
    let round_two = text_chunks("chatcmpl-b", &["It is ", "sunny."], (20, 7));
    let sse = |chunks: &[Value], end: &str| {
        Answer::Text(
            200,
            "text/event-stream".into(),
            unusual_event_stream(chunks, end),
        )
    };
    upstream.script([sse(&round_one, "\r\n"), sse(&round_two, "\r")]);
    let mut sdk = sdk(&app).await;

    let chunks = sdk.chunks(ask_weather()).await;

    assert_eq!(streamed_text(&chunks), "Let me check.\n\nIt is sunny.");
    assert_eq!(callback.received().len(), 1, "the server's call ran once");
    assert_eq!(upstream.bodies().len(), 2, "two rounds");
}

#[actix_web::test]
async fn a_body_over_32_mib_is_a_413_in_openais_shape() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let too_large = json!({"error": {"message": "request body is larger than the 33554432-byte limit",
                                     "type": "invalid_request_error", "param": null,
                                     "code": "request_too_large"}});
    let host = app.host();

    // Refused on the declared length, before the body arrives.
    let length = (33 * 1024 * 1024).to_string();
    let request = raw_head(
        "POST",
        "/v1/chat/completions",
        &[
            ("Host", &host),
            ("Content-Type", "application/json"),
            ("Content-Length", &length),
        ],
    );
    let response = app.raw(request).await;
    assert_eq!((response.status, response.json()), (413, too_large.clone()));

    // And sent in chunks without a length: refused once it passes 32 MiB.
    let mut request = raw_head(
        "POST",
        "/v1/chat/completions",
        &[
            ("Host", &host),
            ("Content-Type", "application/json"),
            ("Transfer-Encoding", "chunked"),
        ],
    );
    request.extend_from_slice(&chunked(&vec![b' '; 33 * 1024 * 1024], 256 * 1024));
    let response = app.raw(request).await;
    assert_eq!((response.status, response.json()), (413, too_large));
    assert!(upstream.received().is_empty());

    // A history just under the limit goes through.
    upstream.script([Answer::Json(200, completion("c", "Long.", (1, 1)))]);
    let fits = json!({"model": "m", "messages": [{"role": "user", "content": "a".repeat(31 * 1024 * 1024)}]});
    let (status, _) = app
        .send(
            app.client.post(app.url("/v1/chat/completions")),
            Some(&fits),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        upstream.bodies()[0]["messages"][0]["content"]
            .as_str()
            .map(str::len),
        Some(31 * 1024 * 1024)
    );
}

#[actix_web::test]
async fn a_request_that_is_not_a_chat_request_is_a_400_naming_the_field() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;

    let (status, answer) = app
        .send(
            app.client.post(app.url("/v1/chat/completions")),
            Some(&json!({"model": "m"})),
        )
        .await;

    assert_eq!(status, 400);
    assert_eq!(
        answer,
        json!({"error": {"message": "messages is required", "type": "invalid_request_error",
                         "param": "messages", "code": null}})
    );
}

#[actix_web::test]
async fn a_non_loopback_caller_is_refused_in_openais_shape() {
    let Some(ip) = crate::guard::non_loopback_address() else {
        return cannot_run(
            "a_non_loopback_caller_is_refused_in_openais_shape",
            "this machine has no non-loopback IPv4 address",
        );
    };
    let upstream = FakeChat::start();
    let mut config = settings(&["Mio"]);
    config.bind = "0.0.0.0:0".parse().unwrap();
    config.characters[0].chat = Some(ChatSettings::new(upstream.base()));
    let app = spawn_app_with(config).await;
    let port = app.addr.port();

    let request = app
        .client
        .post(format!("http://{ip}:{port}/v1/chat/completions"))
        .insert_header(("host", format!("localhost:{port}")));
    let (status, answer) = app.send(request, Some(&ask_weather())).await;

    assert_eq!(status, 403);
    assert_eq!(
        answer,
        json!({"error": {"message": format!("only loopback clients may use this API (caller {ip})"),
                         "type": "permission_error", "param": null, "code": "forbidden"}})
    );
    assert!(upstream.received().is_empty());
}

#[actix_web::test]
async fn a_streamed_request_answered_with_a_whole_completion_still_streams() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    upstream.script([Answer::Json(200, completion("c1", "Whole.", (2, 1)))]);
    let mut sdk = sdk(&app).await;
    let mut request = ask_weather();
    request["stream_options"] = json!({"include_usage": true});

    let chunks = sdk.chunks(request).await;

    assert_eq!(streamed_text(&chunks), "Whole.");
    assert_eq!(chunks[0]["id"], "c1");
    assert_eq!(chunks.last().unwrap()["usage"]["total_tokens"], 3);
}

#[actix_web::test]
async fn a_failure_after_the_stream_began_ends_it_with_an_error_event() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    upstream.script([
        Answer::stream(call_chunks(
            "c1",
            Some("Let me check."),
            &[("call_1", "get_weather", json!({"location": "Tokyo"}))],
        )),
        Answer::Json(
            503,
            json!({"error": {"message": "overloaded", "type": "server_error", "param": null,
                             "code": "overloaded"}}),
        ),
    ]);
    let mut sdk = sdk(&app).await;

    let answer = sdk.stream(ask_weather()).await;

    assert_eq!(
        streamed_text(answer["chunks"].as_array().unwrap()),
        "Let me check."
    );
    assert_eq!(answer["error"]["class"], "APIError", "{answer}");
    assert_eq!(answer["error"]["message"], "overloaded");
    assert_eq!(
        answer["error"]["body"],
        json!({"message": "overloaded", "type": "server_error", "param": null, "code": "overloaded"})
    );
}

#[actix_web::test]
async fn a_call_of_a_tool_nobody_has_is_answered_and_a_turn_of_too_many_calls_is_bounded() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    let ids: Vec<String> = (0..33).map(|i| format!("call_{i}")).collect();
    let mut many: Vec<(&str, &str, Value)> = vec![("call_x", "get_horoscope", json!({}))];
    many.extend(
        ids.iter()
            .map(|id| (id.as_str(), "get_weather", json!({"location": "Tokyo"}))),
    );
    upstream.script([
        Answer::Json(200, calls_completion("c1", None, &many)),
        Answer::Json(200, completion("c2", "Done.", (1, 1))),
    ]);
    let mut sdk = sdk(&app).await;

    sdk.create(ask_weather()).await;

    // The unknown tool's call is the first of 32; the last two of the turn are not run.
    assert_eq!(
        callback.received().len(),
        31,
        "at most 32 calls of a turn run"
    );
    let messages = upstream.bodies()[1]["messages"]
        .as_array()
        .cloned()
        .unwrap();
    assert_eq!(messages.len(), 2 + 34, "every call is answered");
    let content =
        |m: &Value| -> Value { serde_json::from_str(m["content"].as_str().unwrap()).unwrap() };
    assert_eq!(
        content(&messages[2])["error"],
        "tool 'get_horoscope' is not registered; available tools: get_weather"
    );
    assert_eq!(content(&messages[3]), json!("sunny"));
    assert_eq!(content(&messages[2 + 31]), json!("sunny"));
    for last in [2 + 32, 2 + 33] {
        assert_eq!(
            content(&messages[last])["error"],
            "too many tool calls in one turn: at most 32 run; the call was not run"
        );
    }
}

#[actix_web::test]
async fn a_loopback_page_may_send_the_sdks_headers() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;

    let response = app
        .client
        .request(
            actix_web::http::Method::OPTIONS,
            app.url("/v1/chat/completions"),
        )
        .insert_header(("origin", "http://localhost:5173"))
        .insert_header(("access-control-request-method", "POST"))
        .insert_header((
            "access-control-request-headers",
            "authorization,content-type,x-character,x-stainless-os",
        ))
        .send()
        .await
        .expect("preflight sent");

    assert_eq!(response.status(), 200);
    let allowed = response
        .headers()
        .get("access-control-allow-headers")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    for header in ["authorization", "x-character", "x-stainless-os"] {
        assert!(allowed.contains(header), "{allowed}");
    }
}
