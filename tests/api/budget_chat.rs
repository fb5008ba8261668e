//! A character's tool budget (`[character.tools]`) in text chat, the Responses API and on
//! `/mcp`: a character with 40 tools and `budget = 8` offers each upstream round (and each MCP
//! session's `tools/list`) its pinned tools and `find_tools`; the model's (scripted upstream's)
//! `find_tools` call is answered by the server, the tool found is in the next round's `tools`,
//! and the model's call of it reaches the plugin; a handed-back chat turn and a
//! `previous_response_id` continuation are offered it too; a `find_tools` call that breaks its
//! schema is a tool error the model reads; on `/mcp` (the official MCP Python SDK's client) the
//! search sends `notifications/tools/list_changed` and the next `tools/list` has the tool found;
//! `search = "off"` gives the pinned and the most recently registered tools within the budget;
//! each search is a `tool.search` event with the kind `chat`, `responses` or `mcp`.

use std::process::Command;

use runtime_tools::{Budget, ChatSettings, SearchMode};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::chat_app::ChatApp;
use crate::child::LineChild;
use crate::event_stream::open;
use crate::fake_chat::{Answer, FakeChat, calls_completion, completion};
use crate::fake_responses::{FakeResponses, answer, call, message};
use crate::helpers::{TestApp, settings, spawn_app_with};
use crate::python::{repo_file, venv_python};
use crate::responses_app::ResponsesApp;

/// Tools the character holds: far more than its budget.
const TOOLS: usize = 40;

/// The budget of every test's character.
const BUDGET: usize = 8;

/// What `find_tools` answers when it finds `lights_on`.
fn found_lights() -> Value {
    json!({"tools": [{"name": "lights_on", "description": "Turns on the lights in a room"}],
           "note": "these tools can be called now"})
}

/// A server whose Mio has `budget = 8` (pinned `get_time`) with `search`, a chat through
/// `upstream` when given, and 40 tools answered by `callback`: `get_time`, `lights_on` (the
/// 20th registered) and 38 sensors.
async fn budget_server(
    upstream: Option<&str>,
    search: SearchMode,
    callback: &CallbackServer,
) -> TestApp {
    let mut config = settings(&["Mio"]);
    config.characters[0].chat = upstream.map(ChatSettings::new);
    config.characters[0].tools = Budget {
        budget: BUDGET,
        pinned: vec!["get_time".into()],
        search,
    };
    let app = spawn_app_with(config).await;
    for i in 0..TOOLS {
        let (name, description) = match i {
            0 => ("get_time".to_owned(), "Tells the time".to_owned()),
            19 => (
                "lights_on".to_owned(),
                "Turns on the lights in a room".to_owned(),
            ),
            _ => (
                format!("read_sensor_{i:02}"),
                format!("Reads the value of sensor number {i}"),
            ),
        };
        let (status, answer) = app
            .register(&json!({
                "name": name,
                "description": description,
                "parameters": {"type": "object", "properties": {"room": {"type": "string"}}},
                "callback_url": callback.url(&format!("/{name}")),
                "role": "Mio",
                "source": "plugin:home",
            }))
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    callback.route("/lights_on", Reply::output(json!({"on": true})));
    app
}

fn chat_tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            t["function"]["name"]
                .as_str()
                .or(t["name"].as_str())
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// The app's own tool, in the nested chat shape: the app's, never counted in the budget.
fn app_clock() -> Value {
    json!({"type": "function", "function": {"name": "app_clock", "description": "The app's clock",
           "parameters": {"type": "object", "properties": {}}}})
}

#[actix_web::test]
async fn a_chat_request_offers_the_budget_and_a_tool_found_joins_the_next_round_and_its_handed_back_turn()
 {
    let upstream = FakeChat::start();
    let callback = CallbackServer::start();
    let app = budget_server(Some(&upstream.base()), SearchMode::Auto, &callback).await;
    let mut events = open(&app, "?role=Mio", None).await.expect("events open");
    upstream.script([
        // A call that breaks find_tools' schema, and one that finds the lights.
        Answer::Json(
            200,
            calls_completion(
                "c1",
                None,
                &[
                    ("call_bad", "find_tools", json!({"limit": 20})),
                    (
                        "call_find",
                        "find_tools",
                        json!({"query": "turn on the lights", "limit": 1}),
                    ),
                ],
            ),
        ),
        // The tool found, and the app's own clock: the turn is handed to the app.
        Answer::Json(
            200,
            calls_completion(
                "c2",
                None,
                &[
                    ("call_lights", "lights_on", json!({"room": "kitchen"})),
                    ("call_clock", "app_clock", json!({})),
                ],
            ),
        ),
        Answer::Json(200, completion("c3", "The kitchen is lit at ten.", (9, 6))),
    ]);
    let mut sdk = ChatApp::start(&app.url("/v1")).await;
    let mut request = json!({"model": "fake-model", "tools": [app_clock()],
        "messages": [{"role": "user", "content": "Light the kitchen and tell me the time"}]});

    let answer = sdk.create(request.clone()).await;

    assert_eq!(
        answer["choices"][0]["message"]["tool_calls"][0]["id"],
        "call_clock"
    );
    let bodies = upstream.bodies();
    assert_eq!(bodies.len(), 2);
    // Within the budget: the app's own tool, then the pinned tool and find_tools.
    assert_eq!(
        chat_tool_names(&bodies[0]),
        ["app_clock", "get_time", "find_tools"]
    );
    let find = &bodies[0]["tools"][2]["function"];
    assert_eq!(find["parameters"]["required"], json!(["query"]));
    // The server answered both find_tools calls: the bad one with what to fix.
    let messages = bodies[1]["messages"].as_array().unwrap();
    let bad: Value = serde_json::from_str(messages[2]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        bad,
        json!({"error": "arguments for find_tools do not match its parameters: /limit must be \
                          at most 10 (got 20); /query is required. Call find_tools again with \
                          arguments that match.", "is_error": true})
    );
    assert_eq!(messages[3]["tool_call_id"], "call_find");
    let found: Value = serde_json::from_str(messages[3]["content"].as_str().unwrap()).unwrap();
    assert_eq!(found, found_lights());
    // The next round carries the tool found.
    assert_eq!(
        chat_tool_names(&bodies[1]),
        ["app_clock", "get_time", "find_tools", "lights_on"]
    );
    // The model's call of it reached the plugin.
    let received = callback.wait_for_requests(1).await;
    assert_eq!(
        received[0].json(),
        json!({"name": "lights_on", "arguments": {"room": "kitchen"}, "call_id": "call_lights",
               "raw_arguments": "{\"room\":\"kitchen\"}"})
    );
    let search = events.wait_for("tool.search", |_| true).await;
    assert_eq!(
        search.data,
        json!({"role": "Mio", "query_length": 18, "found": ["lights_on"], "kind": "chat"})
    );

    // The app answers its clock and sends the turn back: its continuation is offered the tool
    // found (the model saw it called), though that request searched nothing.
    let history = request["messages"].as_array_mut().unwrap();
    history.push(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_clock", "type": "function", "function": {"name": "app_clock", "arguments": "{}"}}]}));
    history.push(json!({"role": "tool", "tool_call_id": "call_clock", "content": "10:00"}));
    let done = sdk.create(request).await;
    assert_eq!(
        done["choices"][0]["message"]["content"],
        "The kitchen is lit at ten."
    );
    let bodies = upstream.bodies();
    assert_eq!(
        chat_tool_names(&bodies[2]),
        ["app_clock", "get_time", "find_tools", "lights_on"]
    );
    assert_eq!(
        bodies[2]["messages"][1]["tool_calls"][0]["id"], "call_lights",
        "the turn was put together again"
    );
    let (_, sessions) = app.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["chat"]["calls"], 1,
        "find_tools is not a plugin's call"
    );
}

#[actix_web::test]
async fn with_search_off_a_chat_request_gets_the_pinned_and_the_most_recently_registered() {
    let upstream = FakeChat::start();
    let callback = CallbackServer::start();
    let app = budget_server(Some(&upstream.base()), SearchMode::Off, &callback).await;
    upstream.script([Answer::Json(200, completion("c1", "Hello.", (1, 1)))]);
    let mut sdk = ChatApp::start(&app.url("/v1")).await;

    sdk.create(json!({"model": "fake-model",
                      "messages": [{"role": "user", "content": "hi"}]}))
        .await;

    let mut expected = vec!["get_time".to_owned()];
    expected.extend((33..TOOLS).map(|i| format!("read_sensor_{i:02}")));
    assert_eq!(chat_tool_names(&upstream.bodies()[0]), expected);
}

#[actix_web::test]
async fn a_responses_request_offers_the_budget_and_its_continuation_keeps_the_tool_found() {
    let mut upstream = FakeResponses::start().await;
    let callback = CallbackServer::start();
    let app = budget_server(Some(&upstream.base()), SearchMode::Auto, &callback).await;
    let mut events = open(&app, "?role=Mio", None).await.expect("events open");
    upstream
        .script(vec![
            answer(vec![call(
                "call_find",
                "find_tools",
                json!({"query": "turn on the lights", "limit": 1}),
            )]),
            answer(vec![call(
                "call_lights",
                "lights_on",
                json!({"room": "kitchen"}),
            )]),
            answer(vec![message("The kitchen is lit.")]),
            answer(vec![message("Still lit.")]),
        ])
        .await;
    let mut sdk = ResponsesApp::start(&app.url("/v1")).await;

    let response = sdk
        .create(json!({"model": "fake-model", "input": "Light the kitchen"}))
        .await;

    assert_eq!(response["status"], "completed");
    let bodies = upstream.bodies().await;
    assert_eq!(bodies.len(), 3);
    assert_eq!(chat_tool_names(&bodies[0]), ["get_time", "find_tools"]);
    let output = &bodies[1]["input"][0];
    assert_eq!(output["call_id"], "call_find");
    let found: Value = serde_json::from_str(output["output"].as_str().unwrap()).unwrap();
    assert_eq!(found, found_lights());
    assert_eq!(
        chat_tool_names(&bodies[1]),
        ["get_time", "find_tools", "lights_on"]
    );
    assert_eq!(
        callback.wait_for_requests(1).await[0].json()["arguments"],
        json!({"room": "kitchen"})
    );
    let search = events.wait_for("tool.search", |_| true).await;
    assert_eq!(
        search.data,
        json!({"role": "Mio", "query_length": 18, "found": ["lights_on"], "kind": "responses"})
    );

    // A request that goes on from the response is offered the tool found.
    sdk.create(
        json!({"model": "fake-model", "previous_response_id": response["id"],
                      "input": "Is it still on?"}),
    )
    .await;
    let bodies = upstream.bodies().await;
    assert_eq!(bodies[3]["previous_response_id"], response["id"]);
    assert_eq!(
        chat_tool_names(&bodies[3]),
        ["get_time", "find_tools", "lights_on"]
    );
}

/// One step the MCP client script printed, as JSON.
async fn step(client: &mut LineChild, name: &str) -> Value {
    let line = client.expect_line(&format!("{{\"step\": \"{name}\"")).await;
    serde_json::from_str(&line).expect("a JSON step")
}

#[actix_web::test]
async fn an_mcp_session_lists_the_budget_and_a_search_adds_the_tool_found() {
    let callback = CallbackServer::start();
    let app = budget_server(None, SearchMode::Auto, &callback).await;
    let mut events = open(&app, "?role=Mio", None).await.expect("events open");
    let mut client = LineChild::spawn(
        Command::new(venv_python().await)
            .arg(repo_file("tests/mcp_budget_client.py"))
            .arg(app.url("/mcp?role=Mio")),
    );

    let listed = step(&mut client, "list").await;
    assert_eq!(listed["tools"], json!(["get_time", "find_tools"]));
    assert_eq!(listed["find_tools_required"], json!(["query"]));
    let bad = step(&mut client, "bad_search").await;
    assert_eq!(bad["is_error"], json!(true));
    assert_eq!(
        bad["texts"],
        json!([
            json!({"error": "arguments for find_tools do not match its parameters: /query \
                                 must be a string (got 3). Call find_tools again with arguments \
                                 that match.", "is_error": true})
            .to_string()
        ])
    );
    let search = step(&mut client, "search").await;
    assert_eq!(search["is_error"], json!(false));
    let found: Value = serde_json::from_str(search["texts"][0].as_str().unwrap()).unwrap();
    assert_eq!(found, found_lights());
    // Told its tools changed, the client lists them again.
    assert_eq!(
        step(&mut client, "changed").await["tools"],
        json!(["get_time", "find_tools", "lights_on"])
    );
    let called = step(&mut client, "call").await;
    assert_eq!(
        (&called["is_error"], &called["texts"]),
        (&json!(false), &json!(["{\"on\":true}"]))
    );
    assert_eq!(client.wait_exit().await, Some(0));
    assert_eq!(
        callback.wait_for_requests(1).await[0].json()["arguments"],
        json!({"room": "kitchen"})
    );
    let searched = events.wait_for("tool.search", |_| true).await;
    assert_eq!(
        searched.data,
        json!({"role": "Mio", "query_length": 18, "found": ["lights_on"], "kind": "mcp"})
    );
}

#[actix_web::test]
async fn with_search_off_an_mcp_session_lists_the_pinned_and_the_most_recently_registered() {
    let callback = CallbackServer::start();
    let app = budget_server(None, SearchMode::Off, &callback).await;
    let mut client = LineChild::spawn(
        Command::new(venv_python().await)
            .arg(repo_file("tests/mcp_budget_client.py"))
            .arg(app.url("/mcp?role=Mio"))
            .arg("list-only"),
    );
    let mut expected = vec!["get_time".to_owned()];
    expected.extend((33..TOOLS).map(|i| format!("read_sensor_{i:02}")));
    assert_eq!(step(&mut client, "list").await["tools"], json!(expected));
    assert_eq!(client.wait_exit().await, Some(0));
}
