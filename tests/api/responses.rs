//! The Responses API: `POST /v1/responses` with the server running the tool loop, the app being
//! the official OpenAI Python SDK (`responses.create`, `responses.stream()`) or the OpenAI
//! Agents SDK with its default model class (`tests/responses_app.py`), and the upstream a
//! scripted fake of the Responses API that refuses what the real one would
//! (`tests/responses_upstream.py`). Each test names the rule it checks; the fake's recorded
//! requests show what the model was sent, and every one of them was taken (`bodies` asserts
//! that none was refused).

use std::time::Duration;

use runtime_tools::ChatSettings;
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, ClosedPort, Reply};
use crate::chat::{chat_server, png, register_tool, register_weather};
use crate::event_stream::open;
use crate::fake_chat::{Answer, FakeChat};
use crate::fake_responses::{FakeResponses, answer, call, message, reasoning};
use crate::helpers::{TestApp, test_client};
use crate::responses_app::{ResponsesApp, node_stream};

/// The app's own tool, in the Responses API's flat shape.
fn app_clock() -> Value {
    json!({"type": "function", "name": "app_clock", "description": "The app's clock",
           "parameters": {"type": "object", "properties": {}, "additionalProperties": false},
           "strict": true})
}

/// A response with the server's call `call_s` and the app's `call_a`, then the words.
fn mixed_turn() -> Vec<Value> {
    vec![
        answer(vec![
            weather_call("call_s"),
            call("call_a", "app_clock", json!({})),
        ]),
        answer(vec![message("At 10:00 it is sunny in Tokyo.")]),
    ]
}

fn weather_call(id: &str) -> Value {
    call(id, "get_weather", json!({"location": "Tokyo"}))
}

/// The fake upstream scripted with `answers`, a server whose Mio talks to it (its chat settings
/// `tweak`ed), and Mio's `get_weather` answered by `reply`.
async fn weather_server(
    tweak: impl FnOnce(&mut ChatSettings),
    reply: Reply,
    answers: Vec<Value>,
) -> (FakeResponses, TestApp, CallbackServer) {
    let mut upstream = FakeResponses::start().await;
    let app = chat_server(&upstream.base(), tweak).await;
    let callback = CallbackServer::with("/weather", reply);
    register_weather(&app, &callback).await;
    upstream.script(answers).await;
    (upstream, app, callback)
}

async fn sdk(app: &TestApp) -> ResponsesApp {
    ResponsesApp::start(&app.url("/v1")).await
}

fn types(items: &Value) -> Vec<&str> {
    items
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| i["type"].as_str().unwrap_or_default())
        .collect()
}

fn texts(items: &Value) -> Vec<&str> {
    items
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "message")
        .map(|i| i["content"][0]["text"].as_str().unwrap_or_default())
        .collect()
}

#[actix_web::test]
async fn a_server_round_then_words_with_responses_create() {
    let (mut upstream, app, callback) = weather_server(
        |_| {},
        Reply::output(json!({"temperature_c": 28})),
        vec![
            answer(vec![message("Let me check."), weather_call("call_1")]),
            answer(vec![message("It is sunny and 28 °C.")]),
        ],
    )
    .await;
    let mut events = open(&app, "?role=Mio", None).await.expect("events open");
    let mut sdk = sdk(&app).await;

    let response = sdk
        .create(json!({"model": "fake-model", "instructions": "Be brief.",
                       "input": "What is the weather in Tokyo?", "metadata": {"app": "x"}}))
        .await;

    let bodies = upstream.bodies().await;
    assert_eq!(bodies.len(), 2);
    assert_eq!(
        bodies[0]["input"],
        json!([{"role": "user", "content": "What is the weather in Tokyo?"}])
    );
    assert_eq!(
        bodies[0]["tools"],
        json!([{"type": "function", "name": "get_weather",
                "description": "get_weather for a location",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                               "required": ["location"]},
                "strict": false}])
    );
    // The next round chains on the first, with only the server's output; `tools` and
    // `instructions` go again (they do not carry over), and so does every other field.
    assert_eq!(bodies[1]["previous_response_id"], "resp_0003fake");
    assert_eq!(
        bodies[1]["input"],
        json!([{"type": "function_call_output", "call_id": "call_1",
                "output": "{\"temperature_c\":28}"}])
    );
    assert_eq!(bodies[1]["tools"], bodies[0]["tools"]);
    assert_eq!(
        (&bodies[1]["instructions"], &bodies[1]["metadata"]),
        (&json!("Be brief."), &json!({"app": "x"}))
    );
    // The app's answer: the last response's id, the words of both rounds, no server call.
    assert_eq!(response["id"], "resp_0005fake");
    assert_eq!(response["status"], "completed");
    assert_eq!(types(&response["output"]), ["message", "message"]);
    assert_eq!(
        texts(&response["output"]),
        ["Let me check.", "It is sunny and 28 °C."]
    );
    assert_eq!(
        (
            &response["usage"]["input_tokens"],
            &response["usage"]["output_tokens"],
            &response["usage"]["total_tokens"]
        ),
        (&json!(20), &json!(10), &json!(30))
    );
    assert_eq!(response["previous_response_id"], Value::Null);
    assert_eq!(
        callback.received()[0].json(),
        json!({"name": "get_weather", "arguments": {"location": "Tokyo"}, "call_id": "call_1",
               "raw_arguments": "{\"location\":\"Tokyo\"}"})
    );
    let call = events.wait_for("tool.call", |_| true).await;
    crate::events::assert_call(
        &call,
        json!({"role": "Mio", "tool": "get_weather", "source": "plugin:weather",
               "call_id": "call_1", "caller": "model", "kind": "responses", "is_error": false,
               "cancelled": false}),
    );
    let (_, sessions) = app.get("/api/sessions").await;
    let chat = &sessions["sessions_by_role"]["Mio"]["chat"];
    assert_eq!(
        (
            &chat["requests"],
            &chat["responses"],
            &chat["rounds"],
            &chat["calls"]
        ),
        (&json!(1), &json!(1), &json!(2), &json!(1))
    );
}

#[actix_web::test]
async fn a_stream_reads_as_one_response_and_its_id_goes_on_from_the_last() {
    let (mut upstream, app, callback) = weather_server(
        |_| {},
        Reply::output(json!("sunny")),
        vec![
            answer(vec![message("Let me check."), weather_call("call_1")]),
            answer(vec![message("It is sunny in Tokyo.")]),
            answer(vec![message("You are welcome.")]),
        ],
    )
    .await;
    let mut sdk = sdk(&app).await;

    let (events, last) = sdk
        .stream(json!({"model": "fake-model", "input": "Weather in Tokyo?"}))
        .await;

    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let count = |kind: &str| kinds.iter().filter(|k| **k == kind).count();
    assert_eq!(kinds[..2], ["response.created", "response.in_progress"]);
    assert_eq!(
        (count("response.created"), count("response.in_progress")),
        (1, 1)
    );
    assert_eq!(kinds.last(), Some(&"response.completed"));
    assert_eq!(count("response.completed"), 1);
    assert!(
        kinds.iter().all(|k| !k.contains("function_call")),
        "the server's call never reaches the app: {kinds:?}"
    );
    let numbers: Vec<u64> = events
        .iter()
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    // Each round's text arrived as deltas of its own item, at its index of the app's output.
    for (index, text) in ["Let me check.", "It is sunny in Tokyo."]
        .iter()
        .enumerate()
    {
        let deltas: String = events
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta" && e["output_index"] == index)
            .map(|e| e["delta"].as_str().unwrap())
            .collect();
        assert_eq!(deltas, *text);
        let item_id = &last["output"][index]["id"];
        assert!(
            events
                .iter()
                .filter(|e| e["output_index"] == index && e.get("item_id").is_some())
                .all(|e| &e["item_id"] == item_id)
        );
    }
    // One id throughout (the SDK's helper checks it): the first round's.
    assert_eq!(last["id"], "resp_0003fake");
    assert_eq!(events[0]["response"]["id"], "resp_0003fake");
    assert_eq!(
        texts(&last["output"]),
        ["Let me check.", "It is sunny in Tokyo."]
    );
    assert_eq!(last["usage"]["total_tokens"], 30);

    // The app goes on from the id it got: the upstream is asked to go on from the last.
    let next = sdk
        .create(
            json!({"model": "fake-model", "previous_response_id": last["id"],
                       "input": "Thanks!"}),
        )
        .await;
    let bodies = upstream.bodies().await;
    assert_eq!(bodies[2]["previous_response_id"], "resp_0005fake");
    assert_eq!(texts(&next["output"]), ["You are welcome."]);
    assert_eq!(next["previous_response_id"], "resp_0003fake");
    assert_eq!(callback.received().len(), 1);
}

#[actix_web::test]
async fn a_mixed_turn_hands_the_app_its_call_and_its_continuation_answers_the_servers() {
    let (mut upstream, app, callback) =
        weather_server(|_| {}, Reply::output(json!("sunny")), mixed_turn()).await;
    let mut sdk = sdk(&app).await;

    let response = sdk
        .create(json!({"model": "fake-model", "input": "Time and weather?",
                       "tools": [app_clock()]}))
        .await;

    assert_eq!(types(&response["output"]), ["function_call"]);
    assert_eq!(response["output"][0]["call_id"], "call_a");
    assert_eq!(response["id"], "resp_0003fake");
    let bodies = upstream.bodies().await;
    let names: Vec<&Value> = bodies[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["name"])
        .collect();
    assert_eq!(names, ["app_clock", "get_weather"], "the app's, then ours");
    let (_, sessions) = app.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["chat"]["handed_turns"],
        1
    );

    // The app answers its own call: the upstream gets every call of the turn answered.
    let done = sdk
        .create(
            json!({"model": "fake-model", "previous_response_id": response["id"],
                       "tools": [app_clock()],
                       "input": [{"type": "function_call_output", "call_id": "call_a",
                                  "output": "10:00"}]}),
        )
        .await;
    let bodies = upstream.bodies().await;
    assert_eq!(
        bodies[1]["input"],
        json!([{"type": "function_call_output", "call_id": "call_s", "output": "\"sunny\""},
               {"type": "function_call_output", "call_id": "call_a", "output": "10:00"}])
    );
    assert_eq!(bodies[1]["previous_response_id"], "resp_0003fake");
    assert_eq!(texts(&done["output"]), ["At 10:00 it is sunny in Tokyo."]);
    assert_eq!(
        callback.received().len(),
        1,
        "the server ran its own call only"
    );
}

#[actix_web::test]
async fn a_streamed_turn_that_ends_mixed_goes_on_from_the_last_response_with_every_call_answered() {
    let (mut upstream, app, callback) = weather_server(
        |_| {},
        Reply::output(json!("sunny")),
        vec![
            answer(vec![message("Let me check."), weather_call("call_s1")]),
            answer(vec![
                weather_call("call_s2"),
                call("call_a", "app_clock", json!({})),
            ]),
            answer(vec![message("At 10:00 it is sunny in Tokyo.")]),
        ],
    )
    .await;
    let mut sdk = sdk(&app).await;

    let (_, last) = sdk
        .stream(json!({"model": "fake-model", "input": "Time and weather?",
                       "tools": [app_clock()]}))
        .await;

    assert_eq!(types(&last["output"]), ["message", "function_call"]);
    assert_eq!(last["output"][1]["call_id"], "call_a");
    // The stream's id is its first round's, whose response ends in the server's first call.
    assert_eq!(last["id"], "resp_0003fake");
    let done = sdk
        .create(
            json!({"model": "fake-model", "previous_response_id": last["id"],
                       "tools": [app_clock()],
                       "input": [{"type": "function_call_output", "call_id": "call_a",
                                  "output": "10:00"}]}),
        )
        .await;

    // The upstream goes on from the second round's response, with its server call answered.
    let bodies = upstream.bodies().await;
    assert_eq!(bodies[2]["previous_response_id"], "resp_0006fake");
    assert_eq!(
        bodies[2]["input"],
        json!([{"type": "function_call_output", "call_id": "call_s2", "output": "\"sunny\""},
               {"type": "function_call_output", "call_id": "call_a", "output": "10:00"}])
    );
    assert_eq!(texts(&done["output"]), ["At 10:00 it is sunny in Tokyo."]);
    assert_eq!(callback.received().len(), 2);
}

#[actix_web::test]
async fn openai_nodes_stream_helper_takes_rounds_and_a_mixed_turn_as_one_response() {
    let (mut upstream, app, callback) = weather_server(
        |_| {},
        Reply::output(json!("sunny")),
        vec![
            answer(vec![message("Let me check."), weather_call("call_s1")]),
            answer(vec![
                message("And the clock."),
                weather_call("call_s2"),
                call("call_a", "app_clock", json!({})),
            ]),
        ],
    )
    .await;

    let answer = node_stream(
        &app.url("/v1"),
        json!({"model": "fake-model", "input": "Time and weather?", "tools": [app_clock()]}),
    )
    .await;

    assert_eq!(
        answer.get("error"),
        None,
        "the helper refused the stream: {answer}"
    );
    let last = &answer["final"];
    assert_eq!(
        types(&last["output"]),
        ["message", "message", "function_call"]
    );
    assert_eq!(texts(&last["output"]), ["Let me check.", "And the clock."]);
    assert_eq!(last["output"][2]["call_id"], "call_a");
    assert_eq!(
        (&last["id"], &last["status"]),
        (&json!("resp_0003fake"), &json!("completed"))
    );
    let events = answer["events"].as_array().unwrap();
    assert_eq!(
        (events.first(), events.last()),
        (
            Some(&json!("response.created")),
            Some(&json!("response.completed"))
        )
    );
    assert_eq!(upstream.bodies().await.len(), 2);
    assert_eq!(callback.received().len(), 2);
}

#[actix_web::test]
async fn a_registered_tool_named_like_the_apps_is_left_out_and_listed_as_a_clash() {
    let (mut upstream, app, callback) = weather_server(
        |_| {},
        Reply::output(json!("server time")),
        vec![answer(vec![call("call_c", "app_clock", json!({}))])],
    )
    .await;
    register_tool(&app, &callback, "app_clock", "/weather").await;
    let mut sdk = sdk(&app).await;

    let response = sdk
        .create(json!({"model": "fake-model", "input": "Time?", "tools": [app_clock()]}))
        .await;

    assert_eq!(
        response["output"][0]["call_id"], "call_c",
        "the app answers its own tool"
    );
    assert!(callback.received().is_empty());
    let tools = &upstream.bodies().await[0]["tools"];
    assert_eq!(tools[0], app_clock(), "the app's tool as it wrote it");
    assert_eq!(
        (
            tools.as_array().unwrap().len(),
            &tools[1]["name"],
            &tools[1]["strict"]
        ),
        (2, &json!("get_weather"), &json!(false))
    );
    let (_, sessions) = app.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["chat"]["clashes"],
        json!(["app_clock"])
    );
}

#[actix_web::test]
async fn without_storing_every_round_sends_the_whole_input_and_reasoning_goes_through() {
    let (mut upstream, app, callback) = weather_server(
        |_| {},
        Reply::output(json!("sunny")),
        vec![
            answer(vec![
                reasoning("The weather needs a tool."),
                weather_call("call_1"),
            ]),
            answer(vec![reasoning("It is sunny."), message("Sunny in Tokyo.")]),
            answer(vec![message("Bye.")]),
        ],
    )
    .await;
    let mut sdk = sdk(&app).await;
    let ask = json!({"role": "user", "content": "Weather in Tokyo?"});

    let response = sdk
        .create(json!({"model": "fake-model", "store": false,
                       "include": ["reasoning.encrypted_content"], "input": [ask]}))
        .await;

    let bodies = upstream.bodies().await;
    let second = &bodies[1];
    assert_eq!(second.get("previous_response_id"), None);
    assert_eq!(
        types(&second["input"]),
        ["", "reasoning", "function_call", "function_call_output"]
    );
    assert_eq!(second["input"][0], ask);
    assert_eq!(second["input"][1]["encrypted_content"], "enc:rs_0001fake");
    assert_eq!(second["input"][3]["call_id"], "call_1");
    // The app gets the reasoning that went with the words (with its encrypted content), not
    // the one that went with the server's call.
    assert_eq!(types(&response["output"]), ["reasoning", "message"]);
    assert_eq!(response["output"][0]["id"], "rs_0004fake");
    assert_eq!(
        response["output"][0]["encrypted_content"],
        "enc:rs_0004fake"
    );

    // Replayed as the app got it, the conversation is one the upstream takes.
    let mut replay = vec![ask];
    replay.extend(response["output"].as_array().unwrap().iter().cloned());
    replay.push(json!({"role": "user", "content": "Thanks."}));
    let bye = sdk
        .create(json!({"model": "fake-model", "store": false,
                       "include": ["reasoning.encrypted_content"], "input": replay}))
        .await;
    assert_eq!(texts(&bye["output"]), ["Bye."]);
    assert_eq!(
        upstream.bodies().await[2]["input"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    assert_eq!(callback.received().len(), 1);
}

#[actix_web::test]
async fn the_agents_sdks_default_model_runs_a_mixed_turn_plain_and_streamed() {
    for streamed in [false, true] {
        let (mut upstream, app, callback) =
            weather_server(|_| {}, Reply::output(json!("sunny")), mixed_turn()).await;
        let mut sdk = sdk(&app).await;

        let run = sdk
            .agent(json!({"input": "Time and weather in Tokyo?", "streamed": streamed}))
            .await;

        assert_eq!(run["model_class"], "OpenAIResponsesModel");
        assert_eq!(run["final_output"], "At 10:00 it is sunny in Tokyo.");
        assert_eq!(
            run["items"],
            json!([
                "tool_call_item",
                "tool_call_output_item",
                "message_output_item"
            ]),
            "the agent saw its own call only"
        );
        if streamed {
            let kinds = run["events"].as_array().unwrap();
            assert_eq!(
                kinds.iter().filter(|k| *k == "response.completed").count(),
                2,
                "one response per model call of the agent: {kinds:?}"
            );
        }
        let bodies = upstream.bodies().await;
        assert_eq!(bodies.len(), 2, "streamed: {streamed}");
        // The agent sent its history again; the upstream saw the whole turn, answered.
        let input = &bodies[1]["input"];
        assert_eq!(
            types(input)[1..],
            [
                "function_call",
                "function_call",
                "function_call_output",
                "function_call_output"
            ]
        );
        let ids: Vec<&Value> = input.as_array().unwrap()[1..]
            .iter()
            .map(|i| &i["call_id"])
            .collect();
        assert_eq!(ids, ["call_s", "call_a", "call_s", "call_a"]);
        assert_eq!(input[3]["output"], "\"sunny\"");
        assert_eq!(input[4]["output"], "10:00");
        assert_eq!(callback.received().len(), 1);
    }
}

#[actix_web::test]
async fn the_agents_sdk_without_storing_carries_reasoning_through_a_mixed_turn() {
    let (mut upstream, app, callback) = weather_server(
        |_| {},
        Reply::output(json!("sunny")),
        vec![
            answer(vec![
                reasoning("Both tools."),
                weather_call("call_s"),
                call("call_a", "app_clock", json!({})),
            ]),
            answer(vec![reasoning("Done."), message("At 10:00 it is sunny.")]),
            answer(vec![message("Bye.")]),
        ],
    )
    .await;
    let mut sdk = sdk(&app).await;
    let run = json!({"input": "Time and weather?", "store": false, "reasoning": true,
                     "streamed": true});

    let first = sdk.agent(run.clone()).await;

    assert_eq!(first["final_output"], "At 10:00 it is sunny.");
    let bodies = upstream.bodies().await;
    let input = &bodies[1]["input"];
    assert_eq!(
        types(input)[1..],
        [
            "reasoning",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output"
        ],
        "the server's reasoning and call are back in place: {input}"
    );
    assert_eq!(input[1]["encrypted_content"], "enc:rs_0001fake");
    // The next turn sends the whole history again, the last round's reasoning included.
    let mut next = run;
    next["input"] = json!("Thanks.");
    let second = sdk.agent(next).await;
    assert_eq!(second["final_output"], "Bye.");
    assert_eq!(
        callback.received().len(),
        1,
        "the server ran its own call only"
    );
}

#[actix_web::test]
async fn when_the_rounds_run_out_the_response_is_incomplete_and_can_be_continued() {
    let (mut upstream, app, callback) = weather_server(
        |chat| chat.max_tool_rounds = 1,
        Reply::output(json!("sunny")),
        vec![
            answer(vec![weather_call("call_1")]),
            answer(vec![message("One more look."), weather_call("call_2")]),
            answer(vec![message("It is sunny.")]),
        ],
    )
    .await;
    let mut sdk = sdk(&app).await;

    let response = sdk
        .create(json!({"model": "fake-model", "input": "Weather?", "tool_choice": "auto"}))
        .await;

    let bodies = upstream.bodies().await;
    assert_eq!(
        (bodies[1].get("tools"), bodies[1].get("tool_choice")),
        (None, None),
        "the last round goes without tools"
    );
    assert_eq!(response["status"], "incomplete");
    assert_eq!(
        response["incomplete_details"],
        json!({"reason": "max_tool_rounds"})
    );
    assert_eq!(texts(&response["output"]), ["One more look."]);
    assert_eq!(
        callback.received().len(),
        1,
        "the last round's call never ran"
    );

    let next = sdk
        .create(
            json!({"model": "fake-model", "previous_response_id": response["id"],
                       "input": "Go on."}),
        )
        .await;
    let bodies = upstream.bodies().await;
    assert_eq!(
        bodies[2]["input"][0],
        json!({"type": "function_call_output", "call_id": "call_2",
               "output": "the call was not run: this request's rounds that may run tools \
                          (max_tool_rounds = 1) were used up"})
    );
    assert_eq!(texts(&next["output"]), ["It is sunny."]);
}

#[actix_web::test]
async fn context_goes_in_as_system_input_and_images_as_input_images() {
    let result = json!({"output": {"seen": "a map"}, "is_error": false,
        "images": [{"data_b64": png(), "mime": "image/png", "vision_prompt": "the coast"}]});
    let (mut upstream, app, callback) = weather_server(
        |chat| chat.vision = true,
        Reply::json(result),
        vec![
            answer(vec![weather_call("call_1")]),
            answer(vec![message("A map of the coast.")]),
        ],
    )
    .await;
    let (status, _) = app
        .post(
            "/api/sessions/context",
            &json!({"role": "Mio", "text": "The player just won the match."}),
        )
        .await;
    assert_eq!(status, 200);
    let mut sdk = sdk(&app).await;

    sdk.create(json!({"model": "fake-model", "input": "Show me."}))
        .await;

    let bodies = upstream.bodies().await;
    assert_eq!(
        bodies[0]["input"][1],
        json!({"role": "system", "content": "The player just won the match."})
    );
    let second = bodies[1]["input"].as_array().unwrap();
    assert_eq!(second[0]["output"], "{\"seen\":\"a map\"}");
    assert_eq!(
        second[1],
        json!({"role": "user", "content": [
            {"type": "input_text", "text": "Image from tool get_weather (call_id call_1): the coast"},
            {"type": "input_image", "image_url": format!("data:image/png;base64,{}", png()),
             "detail": "auto"}]})
    );
    assert_eq!(callback.received().len(), 1);
}

#[actix_web::test]
async fn an_upstream_without_the_responses_api_answers_its_own_404() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    upstream.script([Answer::Text(
        404,
        "text/plain".into(),
        "404 page not found".into(),
    )]);
    let mut sdk = sdk(&app).await;

    let error = sdk
        .create_error(json!({"model": "fake-model", "input": "hi"}))
        .await;

    assert_eq!(
        (&error["status"], &error["class"]),
        (&json!(404), &json!("NotFoundError"))
    );
    assert_eq!(upstream.received()[0].path, "/v1/responses");
    let (_, sessions) = app.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["chat"]["last_error"]["message"],
        "the upstream answered HTTP 404 (the upstream does not speak the Responses API): 404 \
         page not found"
    );
}

#[actix_web::test]
async fn bad_requests_unknown_characters_and_unreachable_upstreams_are_openais_errors() {
    let closed = ClosedPort::new();
    let app = chat_server(&format!("{}/v1", closed.url("")), |_| {}).await;
    let client = test_client();
    let mut bad = client
        .post(app.url("/v1/responses"))
        .send_json(&json!({"input": {"role": "user"}}))
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap();
    assert_eq!(
        body["error"],
        json!({"message": "input must be a string or an array of input items",
               "type": "invalid_request_error", "param": "input", "code": null})
    );
    let mut unknown = client
        .post(app.url("/v1/responses?character=Lanlan"))
        .send_json(&json!({"input": "hi"}))
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(body["error"]["code"], "chat_not_configured");
    let mut sdk = sdk(&app).await;
    let error = sdk.create_error(json!({"model": "m", "input": "hi"})).await;
    assert_eq!(
        (&error["status"], &error["body"]["code"]),
        (&json!(502), &json!("upstream_unreachable"))
    );
}

#[actix_web::test]
async fn an_app_that_goes_away_cancels_the_running_callbacks() {
    let (_upstream, app, callback) = weather_server(
        |_| {},
        Reply::HoldOpen,
        vec![answer(vec![weather_call("call_1")])],
    )
    .await;
    let mut events = open(&app, "?role=Mio", None).await.expect("events open");
    events.expect("hello").await;

    let request = test_client()
        .post(app.url("/v1/responses"))
        .timeout(Duration::from_secs(60))
        .send_json(&json!({"model": "fake-model", "input": "Weather?"}));
    let request = actix_web::rt::spawn(request);
    callback.wait_for_requests(1).await;
    request.abort();

    callback.wait_for_closed(1).await;
    let call = events.wait_for("tool.call", |_| true).await;
    assert_eq!(
        (&call.data["kind"], &call.data["cancelled"]),
        (&json!("responses"), &json!(true)),
        "{call:?}"
    );
}

#[actix_web::test]
async fn a_streamed_mixed_turn_shows_the_app_only_its_own_call() {
    let (mut upstream, app, callback) = weather_server(
        |_| {},
        Reply::output(json!("sunny")),
        vec![answer(vec![
            message("Checking both."),
            weather_call("call_s"),
            call("call_a", "app_clock", json!({})),
        ])],
    )
    .await;
    let mut sdk = sdk(&app).await;

    let events = sdk
        .raw_stream(json!({"model": "fake-model", "input": "Time and weather?",
                           "tools": [app_clock()]}))
        .await;

    let mut calls: Vec<(&str, u64)> = events
        .iter()
        .filter(|e| {
            e["type"].as_str().unwrap().contains("function_call")
                || e["item"]["type"] == "function_call"
        })
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                e["output_index"].as_u64().unwrap(),
            )
        })
        .collect();
    calls.dedup();
    assert_eq!(
        calls,
        [
            ("response.output_item.added", 1),
            ("response.function_call_arguments.delta", 1),
            ("response.function_call_arguments.done", 1),
            ("response.output_item.done", 1)
        ]
    );
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(
        types(&last["response"]["output"]),
        ["message", "function_call"]
    );
    assert_eq!(last["response"]["output"][1]["call_id"], "call_a");
    assert_eq!(callback.received().len(), 1);
    assert_eq!(upstream.bodies().await.len(), 1, "the app answers the rest");
}

#[actix_web::test]
async fn a_whole_response_still_streams_and_a_failure_after_the_stream_began_ends_it() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    let response = |id: &str, output: Value| {
        json!({"id": id, "object": "response", "created_at": 1, "status": "completed",
               "model": "m", "output": output, "usage": null})
    };
    let words = json!([{"type": "message", "id": "msg_1", "role": "assistant",
        "status": "completed", "content": [{"type": "output_text", "text": "Hello.",
        "annotations": []}]}]);
    let server_call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1",
        "name": "get_weather", "arguments": "{\"location\":\"Tokyo\"}", "status": "completed"});
    let events = [
        json!({"type": "response.created", "sequence_number": 0,
               "response": response("resp_a", json!([]))}),
        json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
               "item": server_call}),
        json!({"type": "response.output_item.done", "sequence_number": 2, "output_index": 0,
               "item": server_call}),
        json!({"type": "response.completed", "sequence_number": 3,
               "response": response("resp_a", json!([server_call]))}),
    ];
    upstream.script([
        // A streamed request answered whole.
        Answer::Json(200, response("resp_w", words)),
        // A stream whose second round fails.
        Answer::Sse {
            events: events.iter().map(Value::to_string).collect(),
            gate_at: None,
            close_delimited: false,
        },
        Answer::Json(
            500,
            json!({"error": {"message": "The server had an error", "type": "server_error"}}),
        ),
    ]);
    let mut sdk = sdk(&app).await;

    let (streamed, last) = sdk.stream(json!({"model": "m", "input": "hi"})).await;
    assert_eq!(texts(&last["output"]), ["Hello."]);
    assert_eq!(last["id"], "resp_w");
    let kinds: Vec<&Value> = streamed.iter().map(|e| &e["type"]).collect();
    assert_eq!(kinds[0], "response.created");
    assert_eq!(kinds.last().unwrap(), &"response.completed");

    let events = sdk
        .raw_stream(json!({"model": "m", "input": "Weather?"}))
        .await;
    let end = events.last().unwrap();
    assert_eq!(end["type"], "response.failed", "{events:?}");
    assert_eq!(end["response"]["id"], "resp_a");
    assert_eq!(end["response"]["status"], "failed");
    assert_eq!(
        end["response"]["error"]["message"],
        "The server had an error"
    );
    let (_, sessions) = app.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["chat"]["last_error"]["message"],
        "the upstream answered HTTP 500: The server had an error"
    );
}

/// The `output` texts the server's `call_s` got in an upstream request's input.
fn server_outputs(body: &Value) -> Vec<&Value> {
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "function_call_output" && i["call_id"] == "call_s")
        .map(|i| &i["output"])
        .collect()
}

#[actix_web::test]
async fn a_kept_turn_goes_only_into_its_own_conversation() {
    // An upstream that numbers its calls alike in every response: both conversations' turns
    // have the server's `call_s` and the app's `call_a`.
    let (mut upstream, app, callback) = weather_server(
        |_| {},
        Reply::output(json!({"n": 1})),
        vec![answer(vec![
            weather_call("call_s"),
            call("call_a", "app_clock", json!({})),
        ])],
    )
    .await;
    let ask = |said: &str| json!({"role": "user", "content": said});
    let first = |said: &str| json!({"model": "fake-model", "store": false, "tools": [app_clock()], "input": [ask(said)]});
    let (status, tokyo) = app.post("/v1/responses", &first("time in Tokyo?")).await;
    assert_eq!(status, 200, "{tokyo}");
    assert_eq!(types(&tokyo["output"]), ["function_call"]);
    callback.route("/weather", Reply::output(json!({"n": 3})));
    upstream
        .script(vec![answer(vec![
            weather_call("call_s"),
            call("call_a", "app_clock", json!({})),
        ])])
        .await;
    let (status, paris) = app.post("/v1/responses", &first("time in Paris?")).await;
    assert_eq!(status, 200, "{paris}");

    // Each conversation replayed with the app's answer gets its own server output back,
    // whichever came last.
    let next = |said: &str, handed: &Value| {
        let mut input = vec![ask(said)];
        input.extend(handed["output"].as_array().unwrap().iter().cloned());
        input.push(json!({"type": "function_call_output", "call_id": "call_a", "output": "10:00"}));
        json!({"model": "fake-model", "store": false, "tools": [app_clock()], "input": input})
    };
    upstream
        .script(vec![
            answer(vec![message("Ten in Tokyo.")]),
            answer(vec![message("Ten in Paris.")]),
            answer(vec![message("Ten somewhere.")]),
        ])
        .await;
    let (status, _) = app
        .post("/v1/responses", &next("time in Tokyo?", &tokyo))
        .await;
    assert_eq!(status, 200);
    let (status, _) = app
        .post("/v1/responses", &next("time in Paris?", &paris))
        .await;
    assert_eq!(status, 200);
    let bodies = upstream.bodies().await;
    assert_eq!(server_outputs(&bodies[2]), [&json!("{\"n\":1}")]);
    assert_eq!(server_outputs(&bodies[3]), [&json!("{\"n\":3}")]);

    // A third conversation with the same ids gets nothing of theirs: it goes as sent.
    let rome = next("time in Rome?", &tokyo);
    let (status, _) = app.post("/v1/responses", &rome).await;
    assert_eq!(status, 200);
    assert_eq!(upstream.bodies().await[4]["input"], rome["input"]);
    let (_, sessions) = app.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["chat"]["handed_turns"],
        2
    );
}

#[actix_web::test]
async fn a_character_runs_a_bounded_number_of_responses_requests_at_once() {
    // Two places, shared by both routes: a chat request and a Responses request hold them.
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |chat| chat.max_concurrent_requests = 2).await;
    upstream.script([Answer::HoldOpen, Answer::HoldOpen]);
    let hold = |path: &str, body: Value| {
        let client = app.client.clone();
        let url = app.url(path);
        actix_web::rt::spawn(async move { client.post(url).send_json(&body).await })
    };
    let chat = json!({"messages": [{"role": "user", "content": "hi"}]});
    let held = [
        hold("/v1/chat/completions", chat),
        hold("/v1/responses", json!({"input": "hi"})),
    ];
    upstream.wait_for_requests(2).await;

    let (status, answer) = app
        .post("/v1/responses", &json!({"input": "one more"}))
        .await;
    assert_eq!(
        (status, answer),
        (
            429,
            json!({"error": {"message":
                "the character's chat is already running 2 requests \
                 (chat.max_concurrent_requests): try again when one has ended",
                "type": "requests", "param": null, "code": "rate_limit_exceeded"}})
        )
    );
    assert_eq!(
        upstream.received().len(),
        2,
        "the refused request never reached the upstream"
    );
    for request in held {
        request.abort();
    }
}
