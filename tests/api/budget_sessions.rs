//! A character's tool budget in its live sessions (`[character.tools]`): a realtime session of
//! the server's own, a relay with the official OpenAI SDK as the app, and a Gemini Live session
//! are offered the pinned tools and `find_tools` within the budget; the model's `find_tools`
//! is searched, announced (`tool.search`) and counted; on a realtime session the tools found
//! are appended by an update that is acknowledged before the model hears the answer, and the
//! model's call of a found tool reaches its plugin; on Gemini Live the found tool is called
//! through `call_tool`. `search = "off"` keeps within the budget and says `over_budget`;
//! `search = "always"` offers `find_tools` beside every tool.

use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::event_stream::open;
use crate::fake_gemini::{FakeGemini, SetupMode, declared};
use crate::fake_realtime::{AckMode, FakeRealtime, update_tool_names};
use crate::helpers::{TestApp, settings, spawn_app_with};
use crate::relay::base;
use crate::sdk_app::SdkApp;
use crate::sessions::{call_event, response_done};
use runtime_tools::{Budget, Dialect, SearchMode, SessionMode, SessionSettings};

/// Tools of a companion: three that mean something, and fillers up to `count`.
pub(crate) fn companion_tools(callback: &CallbackServer, count: usize) -> Vec<Value> {
    let url = callback.url("/cb");
    let tool = |name: &str, description: &str, properties: Value| {
        json!({"name": name, "description": description,
               "parameters": {"type": "object", "properties": properties},
               "callback_url": url, "role": null, "source": "plugin:home", "timeout_seconds": 30})
    };
    let mut tools = vec![
        tool(
            "lights_on",
            "Turns the lights on in a room",
            json!({"room": {"type": "string"}}),
        ),
        tool("clock", "Tells the current time", json!({})),
        tool(
            "get_weather",
            "Current weather and forecast for a city",
            json!({"city": {"type": "string"}}),
        ),
    ];
    for i in tools.len()..count {
        tools.push(tool(
            &format!("chore_{i:02}"),
            &format!("Household chore number {i}: tidies a shelf"),
            json!({"shelf": {"type": "integer"}}),
        ));
    }
    tools
}

pub(crate) fn budget(budget: usize, pinned: &[&str], search: SearchMode) -> Budget {
    Budget {
        budget,
        pinned: pinned.iter().map(|p| (*p).to_owned()).collect(),
        search,
    }
}

/// A server whose Mio talks to `url` with `session`'s settings and `tools` as its budget.
pub(crate) async fn app_with(session: SessionSettings, tools: Budget) -> TestApp {
    let mut settings = settings(&["Mio"]);
    settings.characters[0].session = Some(session);
    settings.characters[0].tools = tools;
    spawn_app_with(settings).await
}

pub(crate) async fn register_all(app: &TestApp, tools: &[Value]) {
    for tool in tools {
        let (status, answer) = app.register(tool).await;
        assert_eq!(status, 200, "{answer}");
    }
}

/// Mio's only connection in `GET /api/sessions`.
pub(crate) async fn mio_connection(app: &TestApp) -> Value {
    let (status, sessions) = app.get("/api/sessions").await;
    assert_eq!(status, 200, "{sessions}");
    sessions["sessions_by_role"]["Mio"]["connections"][0].clone()
}

fn output_of(events: &[Value], call_id: &str) -> Option<usize> {
    events.iter().position(|e| {
        e["type"] == "conversation.item.create"
            && e["item"]["type"] == "function_call_output"
            && e["item"]["call_id"] == call_id
    })
}

fn update_with(events: &[Value], names: &[&str]) -> Option<usize> {
    events
        .iter()
        .position(|e| e["type"] == "session.update" && update_tool_names(e) == names)
}

/// The counter `name{kind="KIND"}` in `GET /metrics`.
pub(crate) async fn counter(app: &TestApp, name: &str, kind: &str) -> f64 {
    let mut response = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("metrics");
    let text = String::from_utf8(response.body().await.unwrap().to_vec()).unwrap();
    let prefix = format!("{name}{{kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0.0, |v| v.parse().unwrap())
}

#[actix_web::test]
async fn a_realtime_session_hears_of_the_tools_found_only_once_its_update_is_acknowledged() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = CallbackServer::with("/cb", Reply::output(json!({"temp_c": 21})));
    let app = app_with(
        SessionSettings::new(&fake.url, Dialect::Openai),
        budget(8, &["clock", "lights_on", "nowhere"], SearchMode::Auto),
    )
    .await;
    register_all(&app, &companion_tools(&callback, 40)).await;

    // Over budget: the pinned tools (in registration order) and find_tools, nothing else.
    let start = ["lights_on", "clock", "find_tools"];
    let first = fake.update_with_tools(&start).await;
    let find_tools = first["session"]["tools"][2].clone();
    assert_eq!(find_tools["type"], "function");
    assert_eq!(
        find_tools["parameters"]["required"],
        json!(["query"]),
        "{find_tools}"
    );
    let connection = mio_connection(&app).await;
    assert_eq!(
        (&connection["offered_tools"], &connection["over_budget"]),
        (&json!(3), &json!(false)),
        "{connection}"
    );
    let revealed_before = counter(&app, "runtime_tools_tools_revealed_total", "client").await;

    // The model searches. The update that appends what it found goes at once; its answer
    // waits for that update's acknowledgement.
    let mut events = open(&app, "?role=Mio", None).await.expect("stream opens");
    fake.set_mode(AckMode::Held);
    let query = r#"{"query": "weather forecast for a city", "limit": 1}"#;
    fake.push(call_event("resp_1", "call_find", "find_tools", query))
        .await;
    fake.push(response_done(
        "resp_1",
        &[("call_find", "find_tools", query)],
    ))
    .await;
    let grown = ["lights_on", "clock", "find_tools", "get_weather"];
    fake.update_with_tools(&grown).await;
    // Everything the server wrote before a plugin's context has arrived once that context
    // has: the answer is not among it.
    let (status, answer) = app
        .post(
            "/api/sessions/context",
            &json!({"role": "Mio", "text": "barrier"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let before_ack = fake
        .wait_for("the context note", |events| {
            events
                .iter()
                .any(|e| e["item"]["content"][0]["text"] == "barrier")
                .then(|| events.to_vec())
        })
        .await;
    assert_eq!(
        output_of(&before_ack, "call_find"),
        None,
        "find_tools was answered before its update was acknowledged"
    );
    fake.release_acks(1);
    let after = fake
        .wait_for("find_tools' answer and a response.create", |events| {
            let output = output_of(events, "call_find")?;
            let create = events
                .iter()
                .skip(output)
                .position(|e| e["type"] == "response.create")?;
            Some((output, output + create, events.to_vec()))
        })
        .await;
    let (output, create, recorded) = after;
    assert!(update_with(&recorded, &grown).unwrap() < output);
    assert!(output < create);
    let answer: Value =
        serde_json::from_str(recorded[output]["item"]["output"].as_str().unwrap()).unwrap();
    assert_eq!(
        answer,
        json!({"tools": [{"name": "get_weather",
                          "description": "Current weather and forecast for a city"}],
               "note": "these tools can be called now"})
    );

    // Seen: announced with the session's kind, and counted.
    let searched = events.wait_for("tool.search", |_| true).await.data;
    assert_eq!(
        searched,
        json!({"role": "Mio", "query_length": 27, "found": ["get_weather"], "kind": "client"})
    );
    assert_eq!(
        counter(&app, "runtime_tools_tools_revealed_total", "client").await,
        revealed_before + 1.0
    );

    // The model calls the tool it found: it reaches the plugin.
    fake.set_mode(AckMode::Immediate);
    fake.push(call_event(
        "resp_2",
        "call_w",
        "get_weather",
        r#"{"city": "Kyoto"}"#,
    ))
    .await;
    let received = callback.wait_for_requests(1).await;
    assert_eq!(
        (
            &received[0].json()["name"],
            &received[0].json()["arguments"]
        ),
        (&json!("get_weather"), &json!({"city": "Kyoto"}))
    );
    let connection = mio_connection(&app).await;
    assert_eq!(connection["offered_tools"], json!(4), "{connection}");

    // A bad search is a tool error the model reads; nothing is searched.
    fake.push(call_event(
        "resp_3",
        "call_bad",
        "find_tools",
        r#"{"limit": 3}"#,
    ))
    .await;
    let bad = fake
        .wait_for("the bad search's answer", |events| {
            output_of(events, "call_bad").map(|i| events[i]["item"]["output"].clone())
        })
        .await;
    let bad: Value = serde_json::from_str(bad.as_str().unwrap()).unwrap();
    assert_eq!(bad["is_error"], json!(true), "{bad}");
    assert!(
        bad["error"].as_str().unwrap().contains("query"),
        "the error names the missing field: {bad}"
    );
}

#[actix_web::test]
async fn a_relay_offers_the_budget_beside_the_sdk_apps_own_tools() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = CallbackServer::with("/cb", Reply::output(json!({"temp_c": 21})));
    let mut session = SessionSettings::new(&fake.url, Dialect::Openai);
    session.mode = SessionMode::Relay;
    let app = app_with(session, budget(8, &["clock"], SearchMode::Auto)).await;
    register_all(&app, &companion_tools(&callback, 40)).await;

    let mut sdk = SdkApp::start().await;
    sdk.connect_ok(&base(&app), json!({"character": "Mio"}))
        .await;
    fake.update_with_tools(&["clock", "find_tools"]).await;
    // The app's own tool goes first and does not count toward the budget.
    sdk.send(
        json!({"type": "session.update", "session": {"type": "realtime",
        "tools": [{"type": "function", "name": "app_clock", "description": "The app's clock.",
                   "parameters": {"type": "object", "properties": {}}}]}}),
    )
    .await;
    fake.update_with_tools(&["app_clock", "clock", "find_tools"])
        .await;

    fake.set_mode(AckMode::Held);
    let query = r#"{"query": "turn the lights on"}"#;
    fake.push(call_event("resp_1", "call_find", "find_tools", query))
        .await;
    fake.push(response_done(
        "resp_1",
        &[("call_find", "find_tools", query)],
    ))
    .await;
    // The app sees the model's call as it came (it is the app's conversation).
    let mut seen = Vec::new();
    while !seen.iter().any(|e: &Value| e["type"] == "response.done") {
        seen.push(sdk.recv_event().await);
    }
    let grown = ["app_clock", "clock", "find_tools", "lights_on"];
    fake.update_with_tools(&grown).await;
    assert_eq!(output_of(&fake.events(), "call_find"), None);
    fake.release_acks(1);
    let recorded = fake
        .wait_for("find_tools' answer", |events| {
            output_of(events, "call_find").map(|_| events.to_vec())
        })
        .await;
    assert!(update_with(&recorded, &grown).unwrap() < output_of(&recorded, "call_find").unwrap());

    fake.set_mode(AckMode::Immediate);
    fake.push(call_event(
        "resp_2",
        "call_l",
        "lights_on",
        r#"{"room": "hall"}"#,
    ))
    .await;
    let received = callback.wait_for_requests(1).await;
    assert_eq!(
        (
            &received[0].json()["name"],
            &received[0].json()["arguments"]
        ),
        (&json!("lights_on"), &json!({"room": "hall"}))
    );
    let connection = mio_connection(&app).await;
    assert_eq!(
        (
            &connection["kind"],
            &connection["offered_tools"],
            &connection["over_budget"]
        ),
        (&json!("relay"), &json!(3), &json!(false)),
        "{connection}"
    );
}

#[actix_web::test]
async fn with_search_off_a_session_keeps_within_the_budget_and_says_it_is_over() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = CallbackServer::with("/cb", Reply::output(json!("ok")));
    let app = app_with(
        SessionSettings::new(&fake.url, Dialect::Openai),
        budget(4, &["clock"], SearchMode::Off),
    )
    .await;
    register_all(&app, &companion_tools(&callback, 12)).await;
    // The pinned, then the most recently registered, in registration order.
    fake.update_with_tools(&["clock", "chore_09", "chore_10", "chore_11"])
        .await;
    let connection = mio_connection(&app).await;
    assert_eq!(
        (&connection["offered_tools"], &connection["over_budget"]),
        (&json!(4), &json!(true)),
        "{connection}"
    );
    // find_tools is not the session's: a call of it is an unknown tool.
    fake.push(call_event(
        "resp_1",
        "call_f",
        "find_tools",
        r#"{"query": "x"}"#,
    ))
    .await;
    let output = fake
        .wait_for("the answer", |events| {
            output_of(events, "call_f").map(|i| events[i]["item"]["output"].clone())
        })
        .await;
    assert!(
        output
            .as_str()
            .unwrap()
            .contains("tool 'find_tools' is not registered"),
        "{output}"
    );
}

#[actix_web::test]
async fn with_search_always_find_tools_joins_every_tool_when_they_fit() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = CallbackServer::with("/cb", Reply::output(json!("ok")));
    let app = app_with(
        SessionSettings::new(&fake.url, Dialect::Openai),
        budget(8, &[], SearchMode::Always),
    )
    .await;
    register_all(&app, &companion_tools(&callback, 3)).await;
    fake.update_with_tools(&["lights_on", "clock", "get_weather", "find_tools"])
        .await;
    let connection = mio_connection(&app).await;
    assert_eq!(
        (&connection["offered_tools"], &connection["over_budget"]),
        (&json!(4), &json!(false)),
        "{connection}"
    );
    // Searching finds what is there already: answered at once, no update.
    let updates = fake.events_of("session.update").len();
    fake.push(call_event(
        "resp_1",
        "call_f",
        "find_tools",
        r#"{"query": "time"}"#,
    ))
    .await;
    let output = fake
        .wait_for("the answer", |events| {
            output_of(events, "call_f").map(|i| events[i]["item"]["output"].clone())
        })
        .await;
    let output: Value = serde_json::from_str(output.as_str().unwrap()).unwrap();
    assert_eq!(output["tools"][0]["name"], json!("clock"), "{output}");
    assert_eq!(fake.events_of("session.update").len(), updates);
}

#[actix_web::test]
async fn a_gemini_session_calls_the_tools_it_found_through_call_tool_on_the_same_connection() {
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let callback = CallbackServer::with("/cb", Reply::output(json!({"temp_c": 21})));
    let app = app_with(
        SessionSettings::gemini(Some(&fake.url), Some("gemini-test")),
        budget(3, &["clock"], SearchMode::Auto),
    )
    .await;
    fake.nth_setup(1).await;
    register_all(&app, &companion_tools(&callback, 10)).await;
    // Within the budget: the pinned tool, find_tools and call_tool.
    let setups = fake
        .wait_until("a setup over budget", |f| {
            let setups: Vec<Value> = f
                .received()
                .into_iter()
                .filter(|r| r.message.get("setup").is_some())
                .map(|r| r.message)
                .collect();
            setups
                .last()
                .filter(|s| declared(s) == ["clock", "find_tools", "call_tool"])
                .map(|_| setups.len())
        })
        .await;
    let connection = mio_connection(&app).await;
    assert_eq!(connection["offered_tools"], json!(3), "{connection}");
    let connections = fake.connections();

    let mut events = open(&app, "?role=Mio", None).await.expect("stream opens");
    fake.push_calls(&[(
        "c1",
        "find_tools",
        json!({"query": "weather in a city", "limit": 1}),
    )])
    .await;
    let answer = fake.nth_tool_response(1).await;
    assert_eq!(
        answer.message,
        json!({"toolResponse": {"functionResponses": [{"id": "c1", "name": "find_tools",
            "response": {"tools": [{"name": "get_weather",
                "description": "Current weather and forecast for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
              "note": "these tools can be called now"}}]}})
    );
    let searched = events.wait_for("tool.search", |_| true).await.data;
    assert_eq!(
        (&searched["kind"], &searched["found"]),
        (&json!("gemini"), &json!(["get_weather"]))
    );

    // Called through call_tool: checked against get_weather's schema, run, answered under
    // call_tool's name, on the same connection.
    fake.push_calls(&[(
        "c2",
        "call_tool",
        json!({"name": "get_weather", "arguments": {"city": 5}}),
    )])
    .await;
    let refused = fake.nth_tool_response(2).await;
    let refused = &refused.message["toolResponse"]["functionResponses"][0];
    assert_eq!(refused["name"], json!("call_tool"), "{refused}");
    assert_eq!(
        refused["response"]["error"],
        json!(
            "arguments for get_weather do not match its parameters: /city must be a string \
               (got 5). Call get_weather again with arguments that match. (Through call_tool: \
               the tool's arguments go in \"arguments\".)"
        )
    );
    fake.push_calls(&[(
        "c3",
        "call_tool",
        json!({"name": "get_weather", "arguments": {"city": "Kyoto"}}),
    )])
    .await;
    let received = callback.wait_for_requests(1).await;
    assert_eq!(
        (
            &received[0].json()["name"],
            &received[0].json()["arguments"]
        ),
        (&json!("get_weather"), &json!({"city": "Kyoto"}))
    );
    let answered = fake.nth_tool_response(3).await;
    assert_eq!(
        answered.message,
        json!({"toolResponse": {"functionResponses": [
            {"id": "c3", "name": "call_tool", "response": {"temp_c": 21}}]}})
    );
    // A name find_tools never returned is an error naming what to do.
    fake.push_calls(&[("c4", "call_tool", json!({"name": "nope", "arguments": {}}))])
        .await;
    let unknown = fake.nth_tool_response(4).await;
    assert_eq!(
        unknown.message["toolResponse"]["functionResponses"][0]["response"]["error"],
        json!(
            "no tool named 'nope': call find_tools to find a tool, then call_tool with a name it returned"
        )
    );
    // No move: the conversation stayed on its connection.
    assert_eq!(fake.connections(), connections);
    let total_setups = fake
        .received()
        .iter()
        .filter(|r| r.message.get("setup").is_some())
        .count();
    assert_eq!(total_setups, setups);
    let checked = crate::schema::validate_gemini_messages(fake.messages())
        .await
        .unwrap_or_else(|e| panic!("a message the server sent breaks the SDK's types: {e}"));
    assert!(checked.contains("client messages valid"), "{checked}");
}

#[actix_web::test]
async fn an_attached_call_keeps_the_apps_tool_and_gets_what_its_model_found() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    fake.set_created_tools(vec![json!({"type": "function", "name": "app_clock",
        "description": "The app's own.", "parameters": {"type": "object", "properties": {}}})]);
    let callback = CallbackServer::with("/cb", Reply::output(json!({"temp_c": 21})));
    let mut session = SessionSettings::new(&fake.url, Dialect::Openai);
    session.mode = SessionMode::Relay;
    let app = app_with(session, budget(4, &[], SearchMode::Auto)).await;
    register_all(&app, &companion_tools(&callback, 12)).await;

    let url = format!("{}&call_id=rtc_1", fake.url);
    let (status, body) = app
        .post("/api/sessions/attach", &json!({"role": "Mio", "url": url}))
        .await;
    assert_eq!(status, 200, "{body}");
    fake.update_with_tools(&["app_clock", "find_tools"]).await;

    fake.set_mode(AckMode::Held);
    let query = r#"{"query": "lights in a room"}"#;
    fake.push(call_event("r1", "call_find", "find_tools", query))
        .await;
    fake.push(response_done("r1", &[("call_find", "find_tools", query)]))
        .await;
    let grown = ["app_clock", "find_tools", "lights_on"];
    fake.update_with_tools(&grown).await;
    assert_eq!(output_of(&fake.events(), "call_find"), None);
    fake.release_acks(1);
    let recorded = fake
        .wait_for("find_tools' answer", |events| {
            output_of(events, "call_find").map(|_| events.to_vec())
        })
        .await;
    assert!(update_with(&recorded, &grown).unwrap() < output_of(&recorded, "call_find").unwrap());

    fake.set_mode(AckMode::Immediate);
    fake.push(call_event(
        "r2",
        "call_l",
        "lights_on",
        r#"{"room": "hall"}"#,
    ))
    .await;
    let received = callback.wait_for_requests(1).await;
    assert_eq!(received[0].json()["name"], json!("lights_on"));
    let connection = mio_connection(&app).await;
    assert_eq!(
        (&connection["kind"], &connection["offered_tools"]),
        (&json!("attach"), &json!(2)),
        "{connection}"
    );
}
