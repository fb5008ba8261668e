//! What one chat request may cost the others: a long history is put together again without
//! holding up any other request (of any character, or any route), a request carries at most
//! `MAX_REQUEST_ITEMS` items, and a whole (non-streamed) upstream answer arrives in full within
//! the character's `timeout_seconds` or the request ends with a 504 and gives its place back.
//! Read from the process's side: other requests on fresh connections (so on either of the
//! server's two workers) answered within a second while the long request runs; an upstream on a
//! raw socket that trickles its answer.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use runtime_tools::ChatSettings;
use runtime_tools::limits::MAX_REQUEST_ITEMS;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::callback_server::{CallbackServer, Reply, listen, read_request, reason};
use crate::chat::{chat_server, register_weather};
use crate::fake_chat::{Answer, FakeChat, calls_completion, completion};
use crate::helpers::{HTTP_DEADLINE, TestApp, settings, spawn_app_with, test_client};

/// How long another request may take while a long one runs (the liveness bound; on
/// loopback such a request takes milliseconds).
const LIVENESS: Duration = Duration::from_secs(1);

/// A scripted upstream on a thread (and runtime) of its own, so that the test's thread, which
/// runs the probes, never waits for it, nor it for the test: each request takes the next
/// answer, and its body is kept.
struct ThreadUpstream {
    base: String,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
    answers: Arc<Mutex<VecDeque<(u16, Value)>>>,
}

impl ThreadUpstream {
    fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("the upstream listens");
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        listener.set_nonblocking(true).unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(VecDeque::new()));
        let (kept, scripted) = (received.clone(), answers.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(answer_each(stream, kept.clone(), scripted.clone()));
                }
            });
        });
        Self {
            base,
            received,
            answers,
        }
    }

    fn script(&self, answers: impl IntoIterator<Item = (u16, Value)>) {
        self.answers.lock().unwrap().extend(answers);
    }

    fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }

    /// The last request's body.
    fn last(&self) -> Value {
        serde_json::from_slice(self.received.lock().unwrap().last().unwrap()).unwrap()
    }
}

async fn answer_each(
    mut stream: tokio::net::TcpStream,
    received: Arc<Mutex<Vec<Vec<u8>>>>,
    answers: Arc<Mutex<VecDeque<(u16, Value)>>>,
) {
    let mut buf = Vec::new();
    while let Some(request) = read_request(&mut stream, &mut buf).await {
        let (status, body) = answers.lock().unwrap().pop_front().unwrap_or_else(|| {
            (
                500,
                json!({"error": {"message": "no scripted answer left"}}),
            )
        });
        received.lock().unwrap().push(request.body);
        let body = body.to_string();
        let head = format!(
            "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            reason(status),
            body.len()
        );
        if stream.write_all(head.as_bytes()).await.is_err()
            || stream.write_all(body.as_bytes()).await.is_err()
        {
            return;
        }
    }
}

/// A server whose Mio (with `get_weather`) and Kai chat through upstreams of their own.
async fn two_chats(
    mio: &ThreadUpstream,
    kai: &ThreadUpstream,
    callback: &CallbackServer,
) -> TestApp {
    let mut config = settings(&["Mio", "Kai"]);
    config.characters[0].chat = Some(ChatSettings::new(&mio.base));
    config.characters[1].chat = Some(ChatSettings::new(&kai.base));
    let app = spawn_app_with(config).await;
    register_weather(&app, callback).await;
    app
}

/// A whole Responses API response of these output items.
fn response(id: &str, output: Vec<Value>) -> Value {
    json!({"id": id, "object": "response", "created_at": 1700000000, "status": "completed",
           "model": "fake-model", "output": output})
}

fn function_call(call_id: &str, name: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id,
           "name": name, "arguments": "{\"location\":\"Tokyo\"}", "status": "completed"})
}

fn app_clock_flat() -> Value {
    json!({"type": "function", "name": "app_clock", "parameters": {"type": "object"}})
}

fn app_clock_nested() -> Value {
    json!({"type": "function", "function": {"name": "app_clock", "parameters": {"type": "object"}}})
}

/// POSTs `body` on a connection of its own; status and body.
async fn post_alone(app: &TestApp, path: &str, body: &Value) -> (u16, Value) {
    let mut response = test_client()
        .post(app.url(path))
        .send_json(body)
        .await
        .expect("request sent");
    let status = response.status().as_u16();
    let bytes = response.body().limit(64 << 20).await.expect("body read");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Kai's chat request and `GET /api/tools`, each on a fresh connection, both answered within
/// [`LIVENESS`].
async fn probe(app: &TestApp) {
    let hello = json!({"messages": [{"role": "user", "content": "hi"}]});
    let chat = post_alone(app, "/v1/chat/completions?character=Kai", &hello);
    let tools = async {
        let mut response = test_client()
            .get(app.url("/api/tools"))
            .send()
            .await
            .expect("request sent");
        let _ = response.body().await;
        response.status().as_u16()
    };
    let answered = tokio::time::timeout(LIVENESS, futures_util::future::join(chat, tools)).await;
    let Ok(((chat, answer), tools)) = answered else {
        panic!("another character's chat request or GET /api/tools took over {LIVENESS:?}");
    };
    assert_eq!((chat, tools), (200, 200), "{answer}");
    assert_eq!(answer["choices"][0]["message"]["content"], "hello");
}

/// Sends `body` to Mio's `path` on a connection of its own and, until Mio's upstream has
/// received it (the history was put together), probes the other requests again and again; then
/// once more. Returns the long request's status and body.
async fn probe_while(app: &TestApp, mio: &ThreadUpstream, path: &str, body: Value) -> (u16, Value) {
    let before = mio.count();
    let client = test_client();
    let url = app.url(path);
    // Written before the probes begin: the test's own thread serves the probes' upstream.
    let body = serde_json::to_vec(&body).unwrap();
    let long = actix_web::rt::spawn(async move {
        let mut response = client
            .post(url)
            .insert_header(("content-type", "application/json"))
            .send_body(body)
            .await
            .expect("sent");
        let status = response.status().as_u16();
        let bytes = response.body().limit(64 << 20).await.expect("body read");
        (
            status,
            serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
        )
    });
    let started = std::time::Instant::now();
    while mio.count() == before {
        probe(app).await;
        assert!(
            started.elapsed() < HTTP_DEADLINE,
            "the long request did not reach its upstream within {HTTP_DEADLINE:?}"
        );
    }
    probe(app).await;
    long.await.expect("the long request's task")
}

#[actix_web::test]
async fn a_long_responses_replay_holds_up_no_other_request() {
    let (mio, kai) = (ThreadUpstream::start(), ThreadUpstream::start());
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    let app = two_chats(&mio, &kai, &callback).await;
    kai.script((0..1000).map(|_| (200, completion("c", "hello", (1, 1)))));
    // A kept turn for Mio: the server's call and the app's `call_a`.
    mio.script([(
        200,
        response(
            "resp_1",
            vec![
                function_call("call_s", "get_weather"),
                function_call("call_a", "app_clock"),
            ],
        ),
    )]);
    let (status, handed) = app
        .post(
            "/v1/responses?character=Mio",
            &json!({"input": "hi", "tools": [app_clock_flat()]}),
        )
        .await;
    assert_eq!(status, 200, "{handed}");
    assert_eq!(handed["output"][0]["call_id"], "call_a");

    // 16,000 calls sent back without storing, every one with the kept turn's call id.
    let refusal = json!({"error": {"message": "No tool output found for function call call_a.",
                                   "type": "invalid_request_error", "param": "input",
                                   "code": null}});
    mio.script([(400, refusal.clone())]);
    let mut input = vec![json!({"role": "user", "content": "hi"})];
    input.extend((0..16_000).map(|n| {
        json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": "call_a",
               "name": "app_clock", "arguments": "{}"})
    }));
    let body = json!({"store": false, "tools": [app_clock_flat()], "input": input});

    let (status, answer) = probe_while(&app, &mio, "/v1/responses?character=Mio", body).await;

    assert_eq!(
        (status, answer),
        (400, refusal),
        "the upstream's own answer"
    );
    assert_eq!(
        mio.last()["input"].as_array().unwrap().len(),
        16_001,
        "as the app sent it"
    );
}

#[actix_web::test]
async fn a_long_chat_history_holds_up_no_other_request() {
    let (mio, kai) = (ThreadUpstream::start(), ThreadUpstream::start());
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    let app = two_chats(&mio, &kai, &callback).await;
    kai.script((0..1000).map(|_| (200, completion("c", "hello", (1, 1)))));
    // A handed-back turn kept for Mio.
    mio.script([(
        200,
        calls_completion(
            "chatcmpl-1",
            None,
            &[
                ("call_s", "get_weather", json!({"location": "Tokyo"})),
                ("call_a", "app_clock", json!({})),
            ],
        ),
    )]);
    let (status, handed) = app
        .post(
            "/v1/chat/completions?character=Mio",
            &json!({"messages": [{"role": "user", "content": "hi"}],
                    "tools": [app_clock_nested()]}),
        )
        .await;
    assert_eq!(status, 200, "{handed}");
    assert_eq!(
        handed["choices"][0]["message"]["tool_calls"][0]["id"],
        "call_a"
    );

    // 8,000 assistant turns with calls (ids nothing kept has), each answered.
    mio.script([(200, completion("chatcmpl-2", "done", (1, 1)))]);
    let mut messages = vec![json!({"role": "user", "content": "hi"})];
    for n in 0..8_000 {
        let id = format!("x_{n}");
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "app_clock", "arguments": "{}"}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": "10:00"}));
    }
    let body = json!({"messages": messages, "tools": [app_clock_nested()]});

    let (status, answer) =
        probe_while(&app, &mio, "/v1/chat/completions?character=Mio", body).await;

    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["message"]["content"], "done");
    assert_eq!(mio.last()["messages"].as_array().unwrap().len(), 16_001);
}

#[actix_web::test]
async fn a_request_over_the_item_bound_is_a_400_in_openais_shape() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let item = json!({"role": "user", "content": "x"});
    let over = vec![item.clone(); MAX_REQUEST_ITEMS + 1];
    let refusal = |param: &str| {
        json!({"error": {"message": format!(
            "Invalid '{param}': array too long. Expected an array with maximum length \
             {MAX_REQUEST_ITEMS}, but got an array with length {} instead.",
            MAX_REQUEST_ITEMS + 1),
            "type": "invalid_request_error", "param": param, "code": "array_above_max_length"}})
    };

    let chat = app
        .post("/v1/chat/completions", &json!({"messages": over}))
        .await;
    let responses = app.post("/v1/responses", &json!({"input": over})).await;

    assert_eq!(chat, (400, refusal("messages")));
    assert_eq!(responses, (400, refusal("input")));
    assert!(
        upstream.received().is_empty(),
        "nothing reached the upstream"
    );
    // At the bound, the request goes.
    upstream.script([Answer::Json(200, response("resp_1", Vec::new()))]);
    let at = vec![item; MAX_REQUEST_ITEMS];
    let (status, answer) = app.post("/v1/responses", &json!({"input": at})).await;
    assert_eq!((status, &answer["id"]), (200, &json!("resp_1")), "{answer}");
}

/// An upstream on a raw socket that answers every request with a head, then one byte of a body
/// that never ends every 0.5 s.
fn trickling_upstream() -> String {
    let listener = listen(0).expect("the trickling upstream listens");
    let addr = listener.local_addr().unwrap();
    actix_web::rt::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            actix_web::rt::spawn(async move {
                let mut buf = Vec::new();
                if read_request(&mut stream, &mut buf).await.is_none() {
                    return;
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                            transfer-encoding: chunked\r\n\r\n1\r\n{\r\n";
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                // The trickle itself is the upstream's behaviour under test, not a wait.
                while stream.write_all(b"1\r\n \r\n").await.is_ok() && stream.flush().await.is_ok()
                {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            });
        }
    });
    format!("http://{addr}/v1")
}

#[actix_web::test]
async fn a_whole_answer_that_trickles_ends_at_the_timeout_and_gives_its_place_back() {
    let base = trickling_upstream();
    let app = chat_server(&base, |chat| {
        chat.timeout = Duration::from_secs(1);
        chat.max_concurrent_requests = 1;
    })
    .await;
    let timed_out = json!({"error": {
        "message": format!("the upstream {base} did not send its whole answer within 1 s"),
        "type": "upstream_error", "param": null, "code": "upstream_timeout"}});

    // Well under the test client's deadline: the answer would trickle for ever.
    let bounded = Duration::from_secs(15);
    let responses =
        tokio::time::timeout(bounded, app.post("/v1/responses", &json!({"input": "hi"})))
            .await
            .expect("the Responses request ended");
    // Its place was given back: the next request is not a 429.
    let chat = tokio::time::timeout(
        bounded,
        app.post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "hi"}]}),
        ),
    )
    .await
    .expect("the chat request ended");

    assert_eq!(responses, (504, timed_out.clone()));
    assert_eq!(chat, (504, timed_out));
}
