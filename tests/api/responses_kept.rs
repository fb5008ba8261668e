//! The kept turns shared by a character's apps: a conversation never breaks because the store
//! forgot its turn (a continuation from it gets each server call's result as lost, with a WARN
//! in the log; a replay of it goes as the app sent it, a valid conversation), one app's burst
//! makes room with its own turns before another app's, and a response id one character returned
//! is not another's to go on from. The upstreams refuse what the real APIs refuse: a call left
//! without its output (`tests/responses_upstream.py`, `fake_chat.rs`), an id they never stored.

use runtime_tools::ChatSettings;
use runtime_tools::limits::{LOST_RESULT_TEXT, MAX_KEPT_TURNS};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::chat::{chat_server, register_weather};
use crate::cli::{Child, TempDir};
use crate::fake_chat::{Answer, FakeChat, calls_completion, completion};
use crate::fake_responses::{FakeResponses, answer, call, message};
use crate::helpers::{TestApp, parse_json, settings, spawn_app_with, test_client};

/// Requests of one burst: more than the store keeps, by a margin. Requests sent each on a
/// connection of its own are different clients only while the OS gives each connection a port
/// no earlier one had; a port used again makes two turns one client's, and that client's older
/// turn then makes room before the store's oldest (sparing it once). The margin covers far
/// more such reuses than 260-odd connections meet.
const BURST: usize = MAX_KEPT_TURNS + 64;

fn app_clock() -> Value {
    json!({"type": "function", "name": "app_clock", "description": "The app's clock",
           "parameters": {"type": "object", "properties": {}, "additionalProperties": false},
           "strict": true})
}

/// A response with the server's `get_weather` call `call_s` and the app's `call_a`.
fn mixed() -> Value {
    answer(vec![
        call("call_s", "get_weather", json!({"location": "Tokyo"})),
        call("call_a", "app_clock", json!({})),
    ])
}

/// POSTs `body` to `base` + `path` on a connection of its own (a new client); status and body.
async fn post_alone(base: &str, path: &str, body: &Value) -> (u16, Value) {
    let mut response = test_client()
        .post(format!("{base}{path}"))
        .send_json(body)
        .await
        .expect("request sent");
    let status = response.status().as_u16();
    let bytes = response.body().limit(64 << 20).await.expect("body read");
    (status, parse_json(&bytes))
}

/// The app's next request of a stored conversation: its answer to its own call.
fn go_on(previous: &Value) -> Value {
    json!({"model": "fake-model", "previous_response_id": previous, "tools": [app_clock()],
           "input": [{"type": "function_call_output", "call_id": "call_a", "output": "10:00"}]})
}

/// The first request of an app that keeps its own history (`store: false`).
fn unstored(said: &str) -> Value {
    json!({"model": "fake-model", "store": false, "tools": [app_clock()],
           "input": [{"role": "user", "content": said}]})
}

/// That app's next request: its history, the response's items and its answer.
fn replayed(said: &str, handed: &Value) -> Value {
    let mut input = vec![json!({"role": "user", "content": said})];
    input.extend(handed["output"].as_array().unwrap().iter().cloned());
    input.push(json!({"type": "function_call_output", "call_id": "call_a", "output": "10:00"}));
    json!({"model": "fake-model", "store": false, "tools": [app_clock()], "input": input})
}

#[actix_web::test]
async fn a_continuation_whose_turn_was_forgotten_gets_its_results_as_lost_and_a_warning() {
    let mut upstream = FakeResponses::start().await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny-result-7c1")));
    let dir = TempDir::new("lost-results");
    let config = dir.file(
        "runtime-tools.toml",
        &format!(
            "bind = \"127.0.0.1:0\"\n[[character]]\nname = \"Mio\"\n\
             [character.chat]\nurl = {:?}\n",
            upstream.base()
        ),
    );
    let config = config.to_string_lossy().into_owned();
    let mut child = Child::start(&["serve", "--config", &config]);
    let addr = actix_web::rt::task::spawn_blocking(move || {
        let addr = child.listening("127.0.0.1");
        (addr, child)
    })
    .await
    .expect("the child started");
    let (addr, mut child) = addr;
    let base = format!("http://{addr}");
    let (status, registered) = post_alone(
        &base,
        "/api/tools/register",
        &json!({"name": "get_weather", "description": "The weather",
                "parameters": {"type": "object", "properties": {"location": {"type": "string"}}},
                "callback_url": callback.url("/weather"), "source": "plugin:weather"}),
    )
    .await;
    assert_eq!(status, 200, "{registered}");

    // Two apps' turns: one goes on by id, the other sends its history back.
    upstream.script(vec![mixed(), mixed()]).await;
    let (status, stored) = post_alone(
        &base,
        "/v1/responses",
        &json!({"model": "fake-model", "input": "Time and weather?", "tools": [app_clock()]}),
    )
    .await;
    assert_eq!(status, 200, "{stored}");
    let (status, handed) = post_alone(&base, "/v1/responses", &unstored("And here?")).await;
    assert_eq!(status, 200, "{handed}");
    // A burst of other requests, each on a connection of its own, fills the store.
    upstream.script(vec![mixed(); BURST]).await;
    for n in 0..BURST {
        let body = json!({"model": "fake-model", "input": format!("burst {n}"),
                          "tools": [app_clock()]});
        let (status, burst) = post_alone(&base, "/v1/responses", &body).await;
        assert_eq!(status, 200, "{burst}");
    }

    upstream
        .script(vec![
            answer(vec![message("It is 10:00.")]),
            answer(vec![message("Here too.")]),
        ])
        .await;
    let (status, done) = post_alone(&base, "/v1/responses", &go_on(&stored["id"])).await;
    let (replay_status, replay) =
        post_alone(&base, "/v1/responses", &replayed("And here?", &handed)).await;

    assert_eq!(status, 200, "{done}");
    assert_eq!(done["output"][0]["content"][0]["text"], "It is 10:00.");
    assert_eq!(replay_status, 200, "{replay}");
    let bodies = upstream.bodies().await;
    let continued = &bodies[bodies.len() - 2];
    assert_eq!(continued["previous_response_id"], stored["id"]);
    assert_eq!(
        continued["input"],
        json!([{"type": "function_call_output", "call_id": "call_s", "output": LOST_RESULT_TEXT},
               {"type": "function_call_output", "call_id": "call_a", "output": "10:00"}])
    );
    let sent_back = &bodies[bodies.len() - 1];
    assert_eq!(
        sent_back["input"],
        replayed("And here?", &handed)["input"],
        "a replay whose turn is gone goes as the app sent it"
    );
    let stderr = actix_web::rt::task::spawn_blocking(move || {
        child.signal("TERM");
        child.wait();
        child.stderr_after_exit()
    })
    .await
    .expect("the child stopped");
    let warned = |words: &str, field: &str| {
        stderr
            .lines()
            .any(|line| line.contains(" WARN ") && line.contains(words) && line.contains(field))
    };
    assert!(
        warned(
            "went on from a response whose kept turn was forgotten",
            "lost=1"
        ),
        "{stderr}"
    );
    assert!(
        warned(
            "sent back turns whose server calls were forgotten",
            "turns=1"
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("sunny-result-7c1") && !stderr.contains("Tokyo"),
        "no result or argument in the log: {stderr}"
    );
}

#[actix_web::test]
async fn a_burst_from_one_app_makes_room_with_its_own_turns() {
    let mut upstream = FakeResponses::start().await;
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    upstream.script(vec![mixed()]).await;
    let (status, other) = post_alone(
        &app.base,
        "/v1/responses",
        &json!({"model": "fake-model", "input": "Time and weather?", "tools": [app_clock()]}),
    )
    .await;
    assert_eq!(status, 200, "{other}");

    // One app's burst, on its kept-alive connection.
    upstream.script(vec![mixed(); BURST]).await;
    for n in 0..BURST {
        let body = json!({"model": "fake-model", "input": format!("burst {n}"),
                          "tools": [app_clock()]});
        let (status, answer) = app.post("/v1/responses", &body).await;
        assert_eq!(status, 200, "{answer}");
    }
    let (_, sessions) = app.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["chat"]["handed_turns"],
        MAX_KEPT_TURNS
    );

    upstream
        .script(vec![answer(vec![message("It is 10:00.")])])
        .await;
    let (status, done) = post_alone(&app.base, "/v1/responses", &go_on(&other["id"])).await;

    assert_eq!(status, 200, "{done}");
    let bodies = upstream.bodies().await;
    assert_eq!(
        bodies.last().unwrap()["input"],
        json!([{"type": "function_call_output", "call_id": "call_s", "output": "\"sunny\""},
               {"type": "function_call_output", "call_id": "call_a", "output": "10:00"}]),
        "the other app's turn was kept"
    );
}

/// A chat app's first request and the turn it is handed.
fn ask_time(said: &str) -> Value {
    json!({"messages": [{"role": "user", "content": said}],
           "tools": [{"type": "function", "function": {"name": "app_clock",
                      "parameters": {"type": "object"}}}]})
}

/// Its next request: the turn it was handed, and its answer.
fn chat_next(said: &str, handed: &Value) -> Value {
    let mut next = ask_time(said);
    let turn = handed["choices"][0]["message"].clone();
    let id = turn["tool_calls"][0]["id"].clone();
    let messages = next["messages"].as_array_mut().unwrap();
    messages.push(turn);
    messages.push(json!({"role": "tool", "tool_call_id": id, "content": "10:00"}));
    next
}

fn chat_mixed() -> Answer {
    Answer::Json(
        200,
        calls_completion(
            "chatcmpl-m",
            None,
            &[
                ("call_s", "get_weather", json!({"location": "Tokyo"})),
                ("call_a", "app_clock", json!({})),
            ],
        ),
    )
}

#[actix_web::test]
async fn a_chat_burst_keeps_another_apps_turn_and_a_forgotten_turn_still_goes() {
    for one_connection in [true, false] {
        let upstream = FakeChat::start();
        let app = chat_server(&upstream.base(), |_| {}).await;
        let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
        register_weather(&app, &callback).await;
        upstream.script([chat_mixed()]);
        let (status, handed) =
            post_alone(&app.base, "/v1/chat/completions", &ask_time("Time?")).await;
        assert_eq!(status, 200, "{handed}");
        upstream.script((0..BURST).map(|_| chat_mixed()));
        for n in 0..BURST {
            let body = ask_time(&format!("burst {n}"));
            let (status, answer) = if one_connection {
                app.post("/v1/chat/completions", &body).await
            } else {
                post_alone(&app.base, "/v1/chat/completions", &body).await
            };
            assert_eq!(status, 200, "{answer}");
        }

        upstream.script([Answer::Json(
            200,
            completion("chatcmpl-d", "At 10:00.", (1, 1)),
        )]);
        let next = chat_next("Time?", &handed);
        let (status, done) = post_alone(&app.base, "/v1/chat/completions", &next).await;

        assert_eq!(status, 200, "{done}");
        let sent = upstream.bodies().last().unwrap()["messages"].clone();
        if one_connection {
            let calls = &sent[1]["tool_calls"];
            let ids: Vec<&Value> = calls.as_array().unwrap().iter().map(|c| &c["id"]).collect();
            assert_eq!(ids, ["call_s", "call_a"], "the other app's turn was kept");
        } else {
            // Every app on a connection of its own: the oldest turn went, and the request goes
            // as the app sent it, a valid conversation the upstream takes.
            assert_eq!(sent, next["messages"]);
        }
    }
}

#[actix_web::test]
async fn a_response_id_one_character_returned_is_not_found_on_another() {
    let upstream = FakeChat::start();
    let mut config = settings(&["Mio", "Kai"]);
    config.characters[0].chat = Some(ChatSettings::new(upstream.base()));
    config.characters[1].chat = Some(ChatSettings::new(upstream.base()));
    let app: TestApp = spawn_app_with(config).await;
    let whole = |id: &str| {
        Answer::Json(
            200,
            json!({"id": id, "object": "response", "status": "completed",
                   "output": [{"type": "message", "id": format!("msg_{id}"), "role": "assistant",
                               "status": "completed",
                               "content": [{"type": "output_text", "text": "hi",
                                            "annotations": []}]}]}),
        )
    };
    upstream.script([whole("resp_mio")]);
    let (status, mio) = app
        .post("/v1/responses?character=Mio", &json!({"input": "hi"}))
        .await;
    assert_eq!((status, &mio["id"]), (200, &json!("resp_mio")), "{mio}");

    let (status, answer) = app
        .post(
            "/v1/responses?character=Kai",
            &json!({"input": "and?", "previous_response_id": "resp_mio"}),
        )
        .await;

    assert_eq!(
        (status, answer),
        (
            400,
            json!({"error": {"message": "Previous response with id 'resp_mio' not found: it was \
                                         returned for another character's conversation",
                             "type": "invalid_request_error", "param": "previous_response_id",
                             "code": "previous_response_not_found"}})
        )
    );
    assert_eq!(
        upstream.received().len(),
        1,
        "it never reached the upstream"
    );
    // Its own character goes on from it; an id the server never returned passes as today.
    upstream.script([whole("resp_mio_2"), whole("resp_kai")]);
    let (status, _) = app
        .post(
            "/v1/responses?character=Mio",
            &json!({"input": "and?", "previous_response_id": "resp_mio"}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = app
        .post(
            "/v1/responses?character=Kai",
            &json!({"input": "and?", "previous_response_id": "resp_elsewhere"}),
        )
        .await;
    assert_eq!(status, 200);
    let previous: Vec<Value> = upstream
        .received()
        .iter()
        .map(|r| r.json()["previous_response_id"].clone())
        .collect();
    assert_eq!(
        previous,
        [Value::Null, json!("resp_mio"), json!("resp_elsewhere")]
    );
}
