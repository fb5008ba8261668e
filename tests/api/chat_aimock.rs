//! Text chat against an upstream nobody here wrote: `@copilotkit/aimock` (npm), an
//! OpenAI-compatible mock scripted with fixtures, serves the chat model (chat completions and
//! the Responses API); the app is the official OpenAI Python SDK. aimock picks each answer by what the request carries (the last user
//! message, whether a tool result is present and what it says), and keeps a journal of the
//! requests it got.

use std::process::Command;

use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::chat::{chat_server, register_weather};
use crate::chat_app::{ChatApp, streamed_text};
use crate::child::LineChild;
use crate::helpers::test_client;
use crate::node::aimock;

/// A running aimock with these fixtures.
pub struct Aimock {
    /// Its chat-completions base URL (`.../v1`).
    base: String,
    /// Where it listens: `http://127.0.0.1:PORT`.
    pub root: String,
    _process: LineChild,
}

impl Aimock {
    pub async fn start(fixtures: Value) -> Self {
        let cli = actix_web::rt::task::spawn_blocking(aimock)
            .await
            .expect("the install task")
            .unwrap_or_else(|e| panic!("aimock (npm): {e}"));
        let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("aimock-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("fixtures.json");
        std::fs::write(&file, fixtures.to_string()).unwrap();
        let mut process = LineChild::spawn(
            Command::new("node")
                .arg(cli)
                .args(["--port", "0", "--host", "127.0.0.1", "--fixtures"])
                .arg(&file),
        );
        let line = process
            .expect_line("[aimock] aimock server listening on ")
            .await;
        let url = line
            .rsplit(' ')
            .next()
            .expect("the address ends the line")
            .to_owned();
        Self {
            base: format!("{url}/v1"),
            root: url,
            _process: process,
        }
    }

    /// The chat requests aimock received, in order.
    async fn journal(&self) -> Vec<Value> {
        self.journal_of("/v1/chat/completions").await
    }

    /// The requests aimock received at `path`, in order.
    async fn journal_of(&self, path: &str) -> Vec<Value> {
        let url = self.base.replace("/v1", "/__aimock/journal");
        let mut response = test_client().get(url).send().await.expect("journal");
        let entries: Value = response.json().limit(16 << 20).await.expect("journal JSON");
        let mut entries: Vec<Value> = entries
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e["path"] == path)
            .collect();
        entries.sort_by_key(|e| e["timestamp"].as_u64());
        entries.into_iter().map(|e| e["body"].clone()).collect()
    }
}

pub fn fixture(user: &str, tool_result: Option<&str>, response: Value) -> Value {
    let mut matching = json!({"userMessage": user, "hasToolResult": tool_result.is_some()});
    if let Some(text) = tool_result {
        matching["toolResultContains"] = json!(text);
    }
    json!({"match": matching, "response": response})
}

fn app_clock() -> Value {
    json!({"type": "function", "function": {"name": "app_clock", "description": "The app's clock",
           "parameters": {"type": "object", "properties": {}}}})
}

#[actix_web::test]
async fn a_plugins_tool_answers_a_model_served_by_aimock() {
    let aimock = Aimock::start(json!({"fixtures": [
        fixture("weather in Tokyo?", None,
                json!({"toolCalls": [{"name": "get_weather", "arguments": {"location": "Tokyo"}}]})),
        fixture("weather in Tokyo?", Some("sunny"), json!({"content": "It is sunny in Tokyo."})),
    ]}))
    .await;
    let app = chat_server(&aimock.base, |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    let mut sdk = ChatApp::start(&app.url("/v1")).await;
    let ask =
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "weather in Tokyo?"}]});

    let answer = sdk.create(ask.clone()).await;
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "It is sunny in Tokyo."
    );
    let mut streamed = ask;
    streamed["stream_options"] = json!({"include_usage": true});
    let chunks = sdk.chunks(streamed).await;
    assert_eq!(streamed_text(&chunks), "It is sunny in Tokyo.");
    assert!(
        chunks.last().unwrap()["usage"]["total_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );

    let calls = callback.received();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].json()["arguments"], json!({"location": "Tokyo"}));
    let journal = aimock.journal().await;
    assert_eq!(journal.len(), 4);
    let second = journal[1]["messages"].as_array().unwrap();
    assert_eq!(
        second[1]["tool_calls"][0]["function"]["name"],
        "get_weather"
    );
    assert_eq!(second[2]["role"], "tool");
    assert_eq!(second[2]["content"], "\"sunny\"");
}

#[actix_web::test]
async fn the_apps_own_tool_and_a_mixed_turn_with_aimock() {
    let aimock = Aimock::start(json!({"fixtures": [
        fixture("what time is it?", None, json!({"toolCalls": [{"name": "app_clock", "arguments": {}}]})),
        fixture("what time is it?", Some("10:00"), json!({"content": "It is ten o'clock."})),
        // The app's call first, the server's last: the request after it ends with the server's
        // result only when the server put its call and result back in.
        fixture("time and weather?", None, json!({"toolCalls": [
            {"name": "app_clock", "arguments": {}},
            {"name": "get_weather", "arguments": {"location": "Tokyo"}}]})),
        fixture("time and weather?", Some("sunny"), json!({"content": "Ten o'clock and sunny."})),
    ]}))
    .await;
    let app = chat_server(&aimock.base, |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    let mut sdk = ChatApp::start(&app.url("/v1")).await;

    for (question, answer) in [
        ("what time is it?", "It is ten o'clock."),
        ("time and weather?", "Ten o'clock and sunny."),
    ] {
        let ask = json!({"model": "gpt-4o", "tools": [app_clock()],
                         "messages": [{"role": "user", "content": question}]});
        let turn = sdk.create(ask.clone()).await;
        let message = &turn["choices"][0]["message"];
        let calls = message["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{question}: only the app's call");
        assert_eq!(calls[0]["function"]["name"], "app_clock");
        let mut next = ask;
        let history = next["messages"].as_array_mut().unwrap();
        history.push(message.clone());
        history.push(json!({"role": "tool", "tool_call_id": calls[0]["id"], "content": "10:00"}));

        let done = sdk.create(next).await;

        assert_eq!(
            done["choices"][0]["message"]["content"], answer,
            "{question}"
        );
    }
    assert_eq!(callback.received().len(), 1, "the server ran its call once");
    let journal = aimock.journal().await;
    let restored = journal[3]["messages"].as_array().unwrap();
    let names: Vec<&Value> = restored[1]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["function"]["name"])
        .collect();
    assert_eq!(names, [&json!("app_clock"), &json!("get_weather")]);
    assert_eq!(restored[2]["content"], "10:00");
    assert_eq!(restored[3]["content"], "\"sunny\"");
}

#[actix_web::test]
async fn the_responses_api_against_aimocks() {
    let aimock = Aimock::start(json!({"fixtures": [
        fixture("weather in Tokyo?", None,
                json!({"toolCalls": [{"name": "get_weather", "arguments": {"location": "Tokyo"}}]})),
        fixture("weather in Tokyo?", Some("sunny"), json!({"content": "It is sunny in Tokyo."})),
    ]}))
    .await;
    let app = chat_server(&aimock.base, |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    let mut sdk = crate::responses_app::ResponsesApp::start(&app.url("/v1")).await;
    // aimock keeps no responses: the whole input goes every round.
    let ask = json!({"model": "gpt-4o", "store": false, "input": "weather in Tokyo?"});

    let response = sdk.create(ask.clone()).await;
    let (_, streamed) = sdk.stream(ask).await;

    for answer in [&response, &streamed] {
        let texts: Vec<&Value> = answer["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| &item["content"][0]["text"])
            .collect();
        assert_eq!(texts, [&json!("It is sunny in Tokyo.")], "{answer}");
    }
    assert_eq!(callback.received().len(), 2);
    // aimock journals each request in chat completions' terms: the whole input went again,
    // the server's call and its output after the question.
    let journal = aimock.journal_of("/v1/responses").await;
    assert_eq!(journal.len(), 4);
    let second = journal[1]["messages"].as_array().unwrap();
    let roles: Vec<&Value> = second.iter().map(|m| &m["role"]).collect();
    assert_eq!(roles, ["user", "assistant", "tool"]);
    assert_eq!(
        second[1]["tool_calls"][0]["function"]["name"],
        "get_weather"
    );
    assert_eq!(second[2]["content"], "\"sunny\"");
    assert_eq!(journal[0]["tools"][0]["function"]["name"], "get_weather");
}
