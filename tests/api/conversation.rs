//! What plugins add to a live conversation besides their answers: a running call's progress
//! (`POST /api/tools/calls/{call_id}/progress`) and a plugin's context
//! (`POST /api/sessions/context`). Against the fake realtime peer as the model, a plugin that
//! holds its answer, and the scripted chat upstream for a chat character; every event the server
//! sent validates against the OpenAI SDK's schema.

use runtime_tools::{ChatSettings, Dialect, SessionSettings};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply, register, tool_with_timeout};
use crate::event_stream::open;
use crate::fake_chat::{Answer, FakeChat, completion};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::helpers::{TestApp, app_with_session, settings, spawn_app_with};
use crate::non_blocking::{conversation_is, sent, system_texts};
use crate::relay::server_events;
use crate::schema::validate_client_events;
use crate::sessions::{call_event, response_done};

/// Waits until `fake` has `n` system messages and `creates` response.create events of the
/// server's; returns every event.
async fn told(fake: &FakeRealtime, n: usize, creates: usize) -> Vec<Value> {
    fake.wait_for(
        &format!("{n} system message(s) and {creates} response.create"),
        |events| {
            (system_texts(events).len() == n && sent(events, "response.create") == creates)
                .then(|| events.to_vec())
        },
    )
    .await
}

/// Everything the server decided before now reached `fake`: a registration's update goes after
/// it on the same connection (`names`: the tools the update carries). Returns every event.
async fn settled(app: &TestApp, fake: &FakeRealtime, names: &[&str]) -> Vec<Value> {
    let quick = CallbackServer::with("/q", Reply::output(json!({})));
    let name = names.last().unwrap();
    register(
        app,
        crate::helpers::tool_body(name, &quick.url("/q"), "plugin:barrier"),
    )
    .await;
    fake.update_with_tools(names).await;
    fake.events()
}

#[actix_web::test]
async fn a_running_calls_progress_reaches_the_model_and_the_event_stream() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&fake.url, &[], Dialect::Openai, |_| {}).await;
    let held = CallbackServer::with("/held", Reply::HoldOpen);
    let gated = CallbackServer::with("/gated", Reply::after_gate(Reply::output(json!({}))));
    let mut search = tool_with_timeout("search", &held.url("/held"), "plugin:travel", 300.0);
    search["behavior"] = json!("non_blocking");
    register(&app, search).await;
    register(
        &app,
        tool_with_timeout("book", &gated.url("/gated"), "plugin:travel", 300.0),
    )
    .await;
    fake.update_with_tools(&["search", "book"]).await;
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    stream.expect("hello").await;

    fake.push(call_event("r1", "c1", "search", "{}")).await;
    fake.push(response_done("r1", &[("c1", "search", "{}")]))
        .await;
    held.wait_for_requests(1).await;
    told(&fake, 0, 1).await;

    // Told, not asked to speak.
    let (status, answer) = app
        .post(
            "/api/tools/calls/c1/progress",
            &json!({"message": "Found 3 flights, checking prices"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"ok": true, "role": "Mio", "tool": "search", "delivered": true})
    );
    let events = told(&fake, 1, 1).await;
    assert_eq!(
        system_texts(&events)[0],
        "Progress of the tool call search (call_id c1): Found 3 flights, checking prices"
    );
    let events = settled(&app, &fake, &["search", "book", "barrier_1"]).await;
    assert_eq!(sent(&events, "response.create"), 1, "{events:#?}");
    let progress = stream
        .wait_for("tool.progress", |d| d["call_id"] == "c1")
        .await;
    assert_eq!(
        progress.data,
        json!({"role": "Mio", "tool": "search", "call_id": "c1",
               "message": "Found 3 flights, checking prices", "speak": false, "delivered": true})
    );

    // Asked to speak: the session is idle, so at once.
    let (status, _) = app
        .post(
            "/api/tools/calls/c1/progress",
            &json!({"message": "Two left at this price", "speak": true}),
        )
        .await;
    assert_eq!(status, 200);
    told(&fake, 2, 2).await;

    // A blocking call's progress too.
    fake.push(call_event("r2", "c2", "book", "{}")).await;
    gated.wait_for_requests(1).await;
    let (status, answer) = app
        .post(
            "/api/tools/calls/c2/progress",
            &json!({"message": "Paying"}),
        )
        .await;
    assert_eq!((status, &answer["tool"]), (200, &json!("book")), "{answer}");
    told(&fake, 3, 2).await;

    // Once the call has finished, there is nothing to report on.
    gated.open_gate();
    fake.wait_for("c2's answer", |events| {
        events
            .iter()
            .any(|e| e["item"]["type"] == "function_call_output" && e["item"]["call_id"] == "c2")
            .then_some(())
    })
    .await;
    let (status, answer) = app
        .post("/api/tools/calls/c2/progress", &json!({"message": "late"}))
        .await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["detail"], "no call with call_id c2 is running");
    let (status, _) = app
        .post("/api/tools/calls/nobody/progress", &json!({"message": "x"}))
        .await;
    assert_eq!(status, 404);

    // Bad messages.
    for (body, kind) in [
        (json!({"message": ""}), "string_too_short"),
        (json!({"message": "x".repeat(2049)}), "string_too_long"),
        (json!({}), "missing"),
        (json!({"message": "ok", "speak": "yes"}), "bool_type"),
    ] {
        let (status, answer) = app.post("/api/tools/calls/c1/progress", &body).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["detail"][0]["type"], kind, "{answer}");
    }
    let (status, _) = app
        .post(
            "/api/tools/calls/c1/progress",
            &json!({"message": "é".repeat(2048)}),
        )
        .await;
    assert_eq!(status, 200, "2,048 characters, not bytes");

    let report = validate_client_events(server_events(&fake)).await;
    assert!(report.is_ok(), "{report:?}");
}

/// Mio and Lanlan each with a session on their own fake; Hana has a chat and no session; Rin
/// has neither.
async fn characters() -> (TestApp, FakeRealtime, FakeRealtime, FakeChat) {
    let mio = FakeRealtime::start(AckMode::Immediate).await;
    let lanlan = FakeRealtime::start(AckMode::Immediate).await;
    let chat = FakeChat::start();
    let mut config = settings(&["Mio", "Lanlan", "Hana", "Rin"]);
    config.characters[0].session = Some(SessionSettings::new(&mio.url, Dialect::Openai));
    config.characters[1].session = Some(SessionSettings::new(&lanlan.url, Dialect::Openai));
    config.characters[2].chat = Some(ChatSettings::new(chat.base()));
    let app = spawn_app_with(config).await;
    mio.wait_connections(1).await;
    lanlan.wait_connections(1).await;
    // Connected: each has had its first update.
    mio.nth_update(1).await;
    lanlan.nth_update(1).await;
    (app, mio, lanlan, chat)
}

#[actix_web::test]
async fn a_plugins_context_goes_into_the_live_conversations_and_a_chats_next_request() {
    let (app, mio, lanlan, chat) = characters().await;

    // Told, without a reply.
    let (status, answer) = app
        .post(
            "/api/sessions/context",
            &json!({"role": "Mio", "text": "The player just won the match."}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"ok": true, "affected_roles": ["Mio"], "failed_roles": []})
    );
    let events = told(&mio, 1, 0).await;
    assert_eq!(system_texts(&events), ["The player just won the match."]);

    // With a reply: the session is idle, so at once.
    app.post(
        "/api/sessions/context",
        &json!({"role": "Mio", "text": "The doorbell rang.", "respond": true}),
    )
    .await;
    told(&mio, 2, 1).await;

    // With a response in progress, `interrupt` cancels it and asks at once.
    mio.push(json!({"type": "response.created", "event_id": "srv_c",
                    "response": {"id": "r9", "status": "in_progress", "output": []}}))
        .await;
    conversation_is(&app, "responding").await;
    app.post(
        "/api/sessions/context",
        &json!({"role": "Mio", "text": "Fire alarm!", "respond": true, "scheduling": "interrupt"}),
    )
    .await;
    let events = told(&mio, 3, 2).await;
    assert_eq!(sent(&events, "response.cancel"), 1, "{events:#?}");

    // Every character with a live session; Hana's chat keeps it; Rin has neither and is no
    // failure of an every-character context.
    let (status, answer) = app
        .post(
            "/api/sessions/context",
            &json!({"role": null, "text": "It started raining."}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"ok": true, "affected_roles": ["Mio", "Lanlan", "Hana"], "failed_roles": []})
    );
    told(&mio, 4, 2).await;
    let events = told(&lanlan, 1, 0).await;
    assert_eq!(system_texts(&events), ["It started raining."]);

    // Named, a character without a live session (or chat) is a failure with the reason.
    let (status, answer) = app
        .post(
            "/api/sessions/context",
            &json!({"role": "Rin", "text": "Hi"}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        answer,
        json!({"ok": false, "affected_roles": [], "failed_roles": [
            {"role": "Rin", "error": "no live session: the character has no connected model session to tell"}]})
    );
    let (status, _) = app
        .post(
            "/api/sessions/context",
            &json!({"role": "Nobody", "text": "Hi"}),
        )
        .await;
    assert_eq!(status, 404);
    for (body, kind) in [
        (json!({"role": "Mio", "text": ""}), "string_too_short"),
        (
            json!({"role": "Mio", "text": "x".repeat(8193)}),
            "string_too_long",
        ),
        (json!({"role": "Mio"}), "missing"),
        (
            json!({"role": "Mio", "text": "x", "respond": 1}),
            "bool_type",
        ),
        (
            json!({"role": "Mio", "text": "x", "scheduling": "soon"}),
            "enum",
        ),
    ] {
        let (status, answer) = app.post("/api/sessions/context", &body).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["detail"][0]["type"], kind, "{answer}");
    }

    // Hana's next chat request carries what she was told, as a system message after the app's.
    chat.script([Answer::Json(200, completion("x1", "Oh, rain!", (5, 3)))]);
    let (status, answer) = app
        .post(
            "/v1/chat/completions?character=Hana",
            &json!({"model": "m", "messages": [{"role": "user", "content": "What's new?"}]}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let sent_up = chat.bodies();
    assert_eq!(
        sent_up[0]["messages"],
        json!([{"role": "user", "content": "What's new?"},
               {"role": "system", "content": "It started raining."}])
    );

    for fake in [&mio, &lanlan] {
        let report = validate_client_events(server_events(fake)).await;
        assert!(report.is_ok(), "{report:?}");
    }
}

#[actix_web::test]
async fn text_chat_runs_a_non_blocking_tool_as_a_blocking_one_and_shows_its_progress_only_in_events()
 {
    let chat = FakeChat::start();
    let mut config = settings(&["Hana"]);
    config.characters[0].chat = Some(ChatSettings::new(chat.base()));
    let app = spawn_app_with(config).await;
    let callback = CallbackServer::with(
        "/search",
        Reply::after_gate(Reply::output(json!({"flights": 3}))),
    );
    let mut search = tool_with_timeout("search", &callback.url("/search"), "plugin:travel", 30.0);
    search["behavior"] = json!("non_blocking");
    register(&app, search).await;
    let mut stream = open(&app, "?role=Hana", None).await.expect("stream opens");
    stream.expect("hello").await;
    chat.script([
        Answer::Json(
            200,
            crate::fake_chat::calls_completion("x1", None, &[("call_1", "search", json!({}))]),
        ),
        Answer::Json(200, completion("x2", "Three flights.", (5, 3))),
    ]);
    let url = app.url("/v1/chat/completions?character=Hana");
    let request = actix_web::rt::spawn(async move {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "Flights?"}]});
        let mut response = crate::helpers::test_client()
            .post(url)
            .send_json(&body)
            .await
            .expect("chat request sent");
        (
            response.status().as_u16(),
            response.json::<Value>().await.unwrap(),
        )
    });
    callback.wait_for_requests(1).await;
    // The call runs inside the request: its progress reaches only the event stream.
    let (status, answer) = app
        .post(
            "/api/tools/calls/call_1/progress",
            &json!({"message": "Halfway"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"ok": true, "role": "Hana", "tool": "search", "delivered": false})
    );
    let progress = stream
        .wait_for("tool.progress", |d| d["call_id"] == "call_1")
        .await;
    assert_eq!(progress.data["delivered"], false);
    callback.open_gate();
    let (status, answer) = request.await.unwrap();
    assert_eq!(status, 200, "{answer}");
    // The request waited for the tool: the model got its real output, not a running note.
    let second = &chat.bodies()[1];
    let tool_message = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    assert_eq!(tool_message["content"], r#"{"flights":3}"#, "{second}");
    let call = stream
        .wait_for("tool.call", |d| d["call_id"] == "call_1")
        .await;
    assert_eq!(
        (&call.data["kind"], &call.data["behavior"]),
        (&json!("chat"), &json!("blocking"))
    );
}
