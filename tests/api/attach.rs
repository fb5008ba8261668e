//! Attaching to a live call (`POST /api/sessions/attach` / `detach`), against the fake realtime
//! peer acting as the call's session (a URL with `call_id`, whose `session.created` lists the
//! app's own tools): the call keeps its tools and gets the registered ones, the server answers
//! only the calls of registered tools, follows the app's own tool changes, and the attachment
//! ends with the call or on detach. Its state and the calls it answers are announced on the
//! event stream. What a caller may not make it do: send a key the configuration does not name,
//! or send one anywhere the configuration does not point; reach a `ws://` host the callback rule
//! refuses or a `wss://` host not configured; hold more calls than the character may; and a
//! call that refuses with megabytes of text gets that text copied nowhere whole.

use serde_json::{Value, json};

use runtime_tools::limits::{
    DEFAULT_MAX_ATTACHMENTS, MAX_PEER_TEXT_BYTES, MAX_UPSTREAM_QUEUE_BYTES,
};
use runtime_tools::{Dialect, SessionMode};

use crate::callback_server::{CallbackServer, Reply};
use crate::deaf_model::DeafModel;
use crate::event_stream::{EventReader, open};
use crate::events::{assert_call, assert_state, state};
use crate::fake_realtime::{AckMode, EVENT_DEADLINE, FakeRealtime};
use crate::helpers::{TestApp, app_with_session, spawn_app, tool_body};
use crate::schema::validate_client_events;

fn app_tool(name: &str) -> Value {
    json!({"type": "function", "name": name, "description": "The app's own.",
           "parameters": {"type": "object", "properties": {}}})
}

/// Mio's connections in the sessions listing.
async fn connections(app: &TestApp) -> Value {
    let (status, body) = app.get("/api/sessions").await;
    assert_eq!(status, 200);
    body["sessions_by_role"]["Mio"]["connections"].clone()
}

#[actix_web::test]
async fn an_attachment_keeps_the_calls_tools_and_answers_only_registered_calls() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    fake.set_created_tools(vec![app_tool("app_clock")]);
    let weather = CallbackServer::with("/cb", Reply::output(json!({"temperature_c": 28})));
    // Mio's own session is this model (apps only, through the relay), with its key.
    let app = app_with_session(&fake.url, &["Lanlan"], Dialect::Openai, |s| {
        s.mode = SessionMode::Relay;
        s.api_key_env = Some("HOME".into());
    })
    .await;
    let (status, _) = app
        .register(&tool_body("get_weather", &weather.url("/cb"), "plugin:w"))
        .await;
    assert_eq!(status, 200);
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    stream.expect("hello").await;

    let url = format!("{}&call_id=rtc_1", fake.url);
    let attach = json!({"role": "Mio", "url": url, "api_key_env": "HOME"});
    let (status, body) = app.post("/api/sessions/attach", &attach).await;
    assert_eq!(
        (status, body),
        (200, json!({"ok": true, "role": "Mio", "url": url}))
    );
    assert_eq!(fake.targets(), ["/v1/realtime?model=fake&call_id=rtc_1"]);
    let key = std::env::var("HOME").unwrap();
    assert_eq!(fake.authorizations(), [Some(format!("Bearer {key}"))]);
    // The call's own tool is kept, first; the registered one joins it.
    let update = fake.nth_update(1).await;
    assert_eq!(
        update["session"],
        json!({"type": "realtime", "tool_choice": "auto", "tools": [app_tool("app_clock"), {
            "type": "function", "name": "get_weather", "description": "get_weather tool",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]})
    );

    // A registered tool's call is answered; the app's own is not, and its response is the
    // app's to continue.
    fake.push_call("r1", "c1", "get_weather").await;
    fake.push_call("r2", "c2", "app_clock").await;
    fake.push_call("r3", "c3", "get_weather").await;
    let events = fake
        .wait_for("the answer to c3", |events| {
            events
                .iter()
                .any(|e| e["item"]["call_id"] == "c3")
                .then(|| events.to_vec())
        })
        .await;
    let answered: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "conversation.item.create")
        .map(|e| &e["item"]["call_id"])
        .collect();
    assert_eq!(answered, [&json!("c1"), &json!("c3")]);
    announced_joining_and_calls(&mut stream, &url).await;
    let last = fake
        .wait_for("the second response.create", |events| {
            let creates = events
                .iter()
                .filter(|e| e["type"] == "response.create")
                .count();
            (creates == 2).then_some(())
        })
        .await;
    let () = last;
    assert_eq!(weather.received().len(), 2);

    // The app changes the call's tools over its own connection, leaving ours out: they are put
    // back, with the app's new tool kept.
    fake.push(
        json!({"type": "session.updated", "event_id": "srv_app", "session": {
        "type": "realtime", "tools": [app_tool("app_timer")]}}),
    )
    .await;
    fake.update_with_tools(&["app_timer", "get_weather"]).await;

    // A registration while attached goes into the call too, the app's tool kept.
    let (status, body) = app
        .register(&tool_body("lookup", &weather.url("/cb"), "plugin:w"))
        .await;
    assert_eq!(
        (status, &body["affected_roles"]),
        (200, &json!(["Mio", "Lanlan"])),
        "{body}"
    );
    fake.update_with_tools(&["app_timer", "get_weather", "lookup"])
        .await;
    // Its acknowledgement is announced before the change.
    let synced = stream
        .wait_for("session.state", |d| d["acknowledged_tools"] == 2)
        .await;
    assert_eq!(synced.data["last_sync"]["ok"], true, "{synced:?}");
    let change = stream.expect("tools.changed").await;
    assert_eq!(change.data["name"], "lookup");

    let listed = connections(&app).await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["kind"], "attach");
    assert_eq!(listed[0]["upstream"], json!(url));
    assert_eq!(listed[0]["state"], "connected");
    assert_eq!(listed[0]["calls_answered"], 2);
    assert_eq!(listed[0]["acknowledged_tools"], 2);
    assert_eq!(listed[0]["clashes"], json!([]));

    // Attaching again to the same call opens nothing new.
    let (status, _) = app.post("/api/sessions/attach", &attach).await;
    assert_eq!(status, 200);
    assert_eq!(fake.connections(), 1);

    let detach = json!({"role": "Mio", "url": url});
    let (status, body) = app.post("/api/sessions/detach", &detach).await;
    assert_eq!(
        (status, body),
        (
            200,
            json!({"ok": true, "role": "Mio", "url": url, "detached": true})
        )
    );
    fake.wait_until("the attachment's close", |f| {
        (!f.closes().is_empty()).then_some(())
    })
    .await;
    assert_eq!(fake.closes(), [(1000, String::new())]);
    let closed = stream
        .wait_for("session.state", |d| d["state"] == "closed")
        .await;
    assert_eq!(
        (&closed.data["kind"], &closed.data["calls_answered"]),
        (&json!("attach"), &json!(2))
    );
    let (status, body) = app.post("/api/sessions/detach", &detach).await;
    assert_eq!(
        (status, body),
        (
            200,
            json!({"ok": true, "role": "Mio", "url": url, "detached": false})
        )
    );

    let report = validate_client_events(fake.events()).await;
    assert!(report.is_ok(), "{report:?}");
}

/// The attachment's first events: connecting, connected, its first sync, then one `tool.call`
/// for each registered tool's call (`c1`, `c3`; none for the app's `c2`).
/// `state` of a session offered `tools` of the character's (one registered before it joined).
fn offering(mut state: Value, tools: usize) -> Value {
    state["offered_tools"] = json!(tools);
    state
}

async fn announced_joining_and_calls(events: &mut EventReader, url: &str) {
    assert_state(
        &events.expect("session.state").await,
        offering(state("Mio", "attach", url, "connecting"), 1),
    );
    assert_state(
        &events.expect("session.state").await,
        offering(state("Mio", "attach", url, "connected"), 1),
    );
    let synced = events.expect("session.state").await;
    assert_eq!(synced.data["last_sync"]["ok"], true, "{synced:?}");
    assert_eq!(synced.data["acknowledged_tools"], 1, "{synced:?}");
    let mut calls = [
        events.expect("tool.call").await,
        events.expect("tool.call").await,
    ];
    calls.sort_by_key(|c| c.data["call_id"].as_str().map(str::to_owned));
    for (call, id) in calls.iter().zip(["c1", "c3"]) {
        assert_call(
            call,
            json!({"role": "Mio", "tool": "get_weather", "source": "plugin:w", "call_id": id,
                   "caller": "model", "kind": "attach", "is_error": false, "cancelled": false}),
        );
    }
}

#[actix_web::test]
async fn an_attach_the_call_does_not_take_says_why_and_stays() {
    use runtime_tools::Dialect;
    use runtime_tools::SessionMode;
    // Mio's settings apply to its attachments: a short sync timeout; relay mode, so the server
    // keeps no connection of its own to the fake.
    let fake = FakeRealtime::start(AckMode::Error("tools are locked".into())).await;
    let app = crate::helpers::app_with_session(&fake.url, &[], Dialect::Openai, |s| {
        s.mode = SessionMode::Relay;
        s.sync_timeout = std::time::Duration::from_millis(500);
    })
    .await;
    let (status, _) = app
        .register(&tool_body(
            "get_weather",
            "http://127.0.0.1:9/cb",
            "plugin:w",
        ))
        .await;
    assert_eq!(status, 200);
    let url = format!("{}&call_id=rtc_4", fake.url);
    let (status, body) = app
        .post("/api/sessions/attach", &json!({"role": "Mio", "url": url}))
        .await;
    assert_eq!(
        (status, body),
        (
            200,
            json!({"ok": false, "role": "Mio", "url": url,
                   "error": "model session refused the tool update: tools are locked (invalid_value)"})
        )
    );
    assert_eq!(connections(&app).await[0]["kind"], "attach", "it stays");

    // A call whose session never says which tools it has gets nothing sent.
    fake.set_silent();
    let url = format!("{}&call_id=rtc_5", fake.url);
    let (status, body) = app
        .post("/api/sessions/attach", &json!({"role": "Mio", "url": url}))
        .await;
    assert_eq!(
        (status, body),
        (
            200,
            json!({"ok": false, "role": "Mio", "url": url,
                   "error": "the call's session did not say which tools it has (no session.created or session.updated within 0.5 s); the tools were not sent, so the app's are kept"})
        )
    );
    assert_eq!(
        fake.events_of("session.update").len(),
        1,
        "only the first call's"
    );
}

#[actix_web::test]
async fn an_attachment_ends_with_the_call_and_bad_attaches_are_refused() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = spawn_app(&["Mio"]).await;
    let url = format!("{}&call_id=rtc_2", fake.url);
    let (status, body) = app
        .post("/api/sessions/attach", &json!({"role": "Mio", "url": url}))
        .await;
    // Nothing registered: nothing to send, and the call's tools are left alone.
    assert_eq!(
        (status, body),
        (200, json!({"ok": true, "role": "Mio", "url": url}))
    );
    assert_eq!(connections(&app).await.as_array().unwrap().len(), 1);
    fake.close_with(1000, "call ended").await;
    let deadline = tokio::time::Instant::now() + EVENT_DEADLINE;
    while connections(&app).await != json!([]) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the attachment outlived its call"
        );
        actix_web::rt::task::yield_now().await;
    }
    assert!(fake.events_of("session.update").is_empty());

    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!(
        "ws://127.0.0.1:{}/v1/realtime?call_id=rtc_3",
        dead.local_addr().unwrap().port()
    );
    drop(dead);
    let (status, body) = app
        .post(
            "/api/sessions/attach",
            &json!({"role": "Mio", "url": dead_url}),
        )
        .await;
    assert_eq!(status, 502, "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!("could not join the call at {dead_url}: ")),
        "{detail}"
    );

    let (status, body) = app
        .post(
            "/api/sessions/attach",
            &json!({"role": "Nobody", "url": url}),
        )
        .await;
    assert_eq!(
        (status, body),
        (404, json!({"ok": false, "detail": "unknown role: Nobody"}))
    );
    let (status, body) = app
        .post(
            "/api/sessions/attach",
            &json!({"role": "", "url": "ws://10.0.0.1/v1/realtime", "api_key_env": "RUNTIME_TOOLS_TEST_NEVER_SET"}),
        )
        .await;
    assert_eq!(status, 422);
    let failing: Vec<&Value> = body["detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["loc"][1])
        .collect();
    assert_eq!(failing, ["role", "url"]);
    assert_eq!(
        body["detail"][1]["msg"],
        "Value error, \"ws://10.0.0.1/v1/realtime\" is ws:// to a host that is not loopback, or \
         not written plainly: the call's URL must be wss:// to a provider the configuration \
         names, or ws:// on loopback (localhost, 127.x.x.x or [::1]), e.g. \
         wss://api.openai.com/v1/realtime?call_id=rtc_123"
    );
    let (status, body) = app
        .post(
            "/api/sessions/detach",
            &json!({"role": "Nobody", "url": url}),
        )
        .await;
    assert_eq!(
        (status, body),
        (404, json!({"ok": false, "detail": "unknown role: Nobody"}))
    );
    let (status, body) = app
        .post("/api/sessions/detach", &json!({"role": "Mio"}))
        .await;
    assert_eq!(
        (status, body),
        (
            422,
            json!({"ok": false, "detail": [{"loc": ["body", "url"], "msg": "Field required", "type": "missing"}]})
        )
    );
}

#[actix_web::test]
async fn an_attachment_whose_model_stops_reading_ends() {
    let model = DeafModel::start();
    let callback = CallbackServer::start();
    // Each answer is a 3 MiB output: what waits for the model grows by that much per call, and
    // the 8 calls the runaway guard lets through in its window add up to 24 MiB.
    callback.route("/big", Reply::output(json!("x".repeat(3 << 20))));
    let app = spawn_app(&["Mio"]).await;
    let url = format!("{}?call_id=rtc_deaf", model.url);
    let (status, body) = app
        .post("/api/sessions/attach", &json!({"role": "Mio", "url": url}))
        .await;
    assert_eq!(status, 200, "{body}");
    model.wait_connections(1).await;
    model
        .push(json!({"type": "session.created", "event_id": "srv_0",
                     "session": {"type": "realtime", "id": "sess_deaf", "tools": []}}))
        .await;
    // The call's session never acknowledges: the registration stays, Mio is reported failed.
    let (status, _) = app
        .register(&tool_body("big", &callback.url("/big"), "plugin:w"))
        .await;
    assert_eq!(status, 200);

    // The call's model calls again and again and reads nothing. Bounded: socket buffers plus
    // the attachment's queue are far below what the answers add up to, so the attachment ends
    // before they are all answered.
    for n in 0..4 * (MAX_UPSTREAM_QUEUE_BYTES >> 20) {
        if !model.push_call(n, "big").await {
            break;
        }
    }
    let deadline = tokio::time::Instant::now() + EVENT_DEADLINE;
    while connections(&app).await != json!([]) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the attachment still answers a model that reads nothing ({} answers of 3 MiB)",
            callback.received().len()
        );
        actix_web::rt::task::yield_now().await;
    }
    // The attachment ended; it does not come back on its own (the call is the app's).
    assert_eq!(model.connections(), 1);
}

/// The 422 of an attach request, its one failing field and message.
fn refused(field: &str, msg: &str) -> (u16, Value) {
    (
        422,
        json!({"ok": false, "detail": [{"loc": ["body", field], "msg": format!("Value error, {msg}"),
                                       "type": "value_error"}]}),
    )
}

#[actix_web::test]
async fn a_key_comes_only_from_the_configuration_and_goes_only_where_it_points() {
    // Mio's own endpoint is `model`, with its key in HOME; `spy` is any other local listener.
    let model = FakeRealtime::start(AckMode::Immediate).await;
    let spy = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&model.url, &["Lanlan"], Dialect::Openai, |s| {
        s.mode = SessionMode::Relay;
        s.api_key_env = Some("HOME".into());
    })
    .await;
    let spy_call = format!("{}&call_id=rtc_spy", spy.url);

    // A name the configuration does not allow: the same 422 whether it is set or not.
    for (role, name) in [
        ("Lanlan", "PATH"),
        ("Lanlan", "HOME"),
        ("Lanlan", "RUNTIME_TOOLS_TEST_NEVER_SET"),
        ("Mio", "PATH"),
        ("Mio", "RUNTIME_TOOLS_TEST_NEVER_SET"),
    ] {
        let (status, body) = app
            .post(
                "/api/sessions/attach",
                &json!({"role": role, "url": spy_call, "api_key_env": name}),
            )
            .await;
        assert_eq!(
            (status, body),
            refused(
                "api_key_env",
                &format!(
                    "{name:?} is not a key this character may attach with: the configuration \
                     names them ([character.session] api_key_env and attach_api_key_envs)"
                )
            ),
            "{role} {name}"
        );
    }
    // Mio's own key, but to a place the configuration does not point at.
    let (status, body) = app
        .post(
            "/api/sessions/attach",
            &json!({"role": "Mio", "url": spy_call, "api_key_env": "HOME"}),
        )
        .await;
    assert_eq!(
        (status, body),
        refused(
            "api_key_env",
            &format!(
                "a key is sent only over wss:// to a provider host, or to the character's own \
                 session endpoint; {spy_call:?} is neither"
            )
        )
    );
    // Nothing reached the listener.
    assert_eq!((spy.connections(), spy.authorizations()), (0, vec![]));

    // Without a key, attaching there is fine, and nothing is sent with it.
    let (status, body) = app
        .post(
            "/api/sessions/attach",
            &json!({"role": "Mio", "url": spy_call}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(spy.authorizations(), [None]);
    // To its own endpoint, Mio's key goes.
    let own_call = format!("{}&call_id=rtc_own", model.url);
    let (status, body) = app
        .post(
            "/api/sessions/attach",
            &json!({"role": "Mio", "url": own_call, "api_key_env": "HOME"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let key = std::env::var("HOME").unwrap();
    assert_eq!(model.authorizations(), [Some(format!("Bearer {key}"))]);
}

#[actix_web::test]
async fn attach_urls_keep_the_callback_host_rule_and_the_configured_provider_hosts() {
    let spy = FakeRealtime::start(AckMode::Immediate).await;
    let port = spy
        .url
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap();
    let app = spawn_app(&["Lanlan"]).await;
    // Spellings of loopback the callback rule refuses (the URL parser would rewrite each into
    // 127.0.0.1, the spy's address).
    for written in [
        format!("ws://127.1:{port}/v1/realtime?call_id=c"),
        format!("ws://0x7f000001:{port}/v1/realtime?call_id=c"),
        format!("ws://2130706433:{port}/v1/realtime?call_id=c"),
        format!("ws://localhost.:{port}/v1/realtime?call_id=c"),
    ] {
        let (status, body) = app
            .post(
                "/api/sessions/attach",
                &json!({"role": "Lanlan", "url": written}),
            )
            .await;
        assert_eq!(
            (status, body),
            refused(
                "url",
                &format!(
                    "{written:?} is ws:// to a host that is not loopback, or not written \
                     plainly: the call's URL must be wss:// to a provider the configuration \
                     names, or ws:// on loopback (localhost, 127.x.x.x or [::1]), e.g. \
                     wss://api.openai.com/v1/realtime?call_id=rtc_123"
                )
            )
        );
    }
    assert_eq!(spy.connections(), 0);
    // wss:// only to a configured provider host (by default the OpenAI API's).
    let (status, body) = app
        .post(
            "/api/sessions/attach",
            &json!({"role": "Lanlan", "url": "wss://evil.example/v1/realtime?call_id=c"}),
        )
        .await;
    assert_eq!(
        (status, body),
        refused(
            "url",
            "\"wss://evil.example/v1/realtime?call_id=c\" is wss:// to evil.example, which is not \
             a provider host this character may attach to (the character's attach_hosts: \
             api.openai.com)"
        )
    );
}

#[actix_web::test]
async fn a_character_holds_at_most_its_number_of_attachments() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = spawn_app(&["Lanlan"]).await;
    let call = |n: usize| format!("{}&call_id=rtc_{n}", fake.url);
    for n in 0..DEFAULT_MAX_ATTACHMENTS {
        let (status, body) = app
            .post(
                "/api/sessions/attach",
                &json!({"role": "Lanlan", "url": call(n)}),
            )
            .await;
        assert_eq!(status, 200, "attachment {n}: {body}");
    }
    let one_more = json!({"role": "Lanlan", "url": call(DEFAULT_MAX_ATTACHMENTS)});
    let (status, body) = app.post("/api/sessions/attach", &one_more).await;
    assert_eq!(
        (status, body),
        (
            409,
            json!({"ok": false, "detail": "Lanlan is attached to 8 calls already, the most its \
                   configuration allows ([character.session] max_attachments); detach one first"})
        )
    );
    assert_eq!(fake.connections(), DEFAULT_MAX_ATTACHMENTS);
    // Attaching again to a call it holds is still fine; leaving one makes room.
    let (status, _) = app
        .post(
            "/api/sessions/attach",
            &json!({"role": "Lanlan", "url": call(0)}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = app
        .post(
            "/api/sessions/detach",
            &json!({"role": "Lanlan", "url": call(0)}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, body) = app.post("/api/sessions/attach", &one_more).await;
    assert_eq!(status, 200, "{body}");
}

#[actix_web::test]
async fn a_calls_refusal_of_megabytes_is_cut_wherever_it_is_copied() {
    let huge = "r".repeat(4 << 20);
    let fake = FakeRealtime::start(AckMode::Error(huge)).await;
    let app = spawn_app(&["Lanlan"]).await;
    let (status, _) = app
        .register(&tool_body("first", "http://127.0.0.1:9/cb", "s"))
        .await;
    assert_eq!(status, 200);
    let mut stream = open(&app, "", None).await.expect("stream opens");
    stream.expect("hello").await;
    let url = format!("{}&call_id=rtc_refuses", fake.url);
    let (status, body) = app
        .post(
            "/api/sessions/attach",
            &json!({"role": "Lanlan", "url": url}),
        )
        .await;
    assert_eq!((status, &body["ok"]), (200, &json!(false)), "{body}");
    let bounded = |text: &str| {
        // The provider's message, cut and marked, inside our own words.
        assert!(
            text.len() <= MAX_PEER_TEXT_BYTES + 200,
            "{} bytes",
            text.len()
        );
        assert!(
            text.ends_with("… (cut: 4194320 bytes in all)"),
            "{}",
            &text[text.len().saturating_sub(80)..]
        );
    };
    bounded(body["error"].as_str().unwrap());
    let state = stream
        .wait_for("session.state", |d| d["last_sync"]["ok"] == json!(false))
        .await;
    assert!(state.data.to_string().len() < 4 * MAX_PEER_TEXT_BYTES);

    // Every change the call refuses: its answer, the listing and the events stay small.
    for n in 0..3 {
        let (status, body) = app
            .register(&tool_body(&format!("t{n}"), "http://127.0.0.1:9/cb", "s"))
            .await;
        assert_eq!(status, 200);
        bounded(body["failed_roles"][0]["error"].as_str().unwrap());
        assert!(body.to_string().len() < 4 * MAX_PEER_TEXT_BYTES, "{n}");
    }
    let (status, listing) = app.get("/api/sessions").await;
    assert_eq!(status, 200);
    assert!(
        listing.to_string().len() < 4 * MAX_PEER_TEXT_BYTES,
        "{} bytes",
        listing.to_string().len()
    );
    for n in 0..3 {
        let changed = stream
            .wait_for("tools.changed", |d| d["name"] == json!(format!("t{n}")))
            .await;
        bounded(changed.data["failed_roles"][0]["error"].as_str().unwrap());
    }
}
