//! Churn of what requests and calls leave behind: chat requests (plain, streamed, a client that
//! goes away, an upstream that closes mid-stream), `/mcp` sessions (deleted and abandoned),
//! MCP servers registered at run time and removed, event-stream subscribers that come and go,
//! and callbacks that time out, answer late, or are cancelled by an interruption.

use std::process::Command;

use futures_util::StreamExt;
use serde_json::{Value, json};

use super::{Server, cycles};
use crate::callback_server::{CallbackServer, Reply};
use crate::child::LineChild;
use crate::fake_chat::{Answer, FakeChat, chunk, completion, text_chunks};
use crate::fake_realtime::{AckMode, EVENT_DEADLINE, FakeRealtime};
use crate::python::{repo_file, venv_python};
use crate::sessions::{call_event, response_done};

/// Cycles before the reading the bounds are held against.
const WARM_UP: usize = 12;

const CHAT_PATH: &str = "/v1/chat/completions?character=Chat";

/// One chat request; `stream` asks for a streamed answer. Returns the status and the body.
async fn chat(server: &Server, stream: bool) -> (u16, String) {
    let body = json!({"model": "m", "stream": stream,
                      "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, text) = server
        .exchange(
            "POST",
            CHAT_PATH,
            &[("content-type", "application/json")],
            &body.to_string(),
        )
        .await;
    (status, text)
}

/// Chat cycle `cycle` (of four sorts, in turn); `held` counts the upstream connections held
/// without an answer so far.
async fn chat_cycle(server: &Server, upstream: &FakeChat, cycle: usize, held: &mut usize) {
    let id = format!("c{cycle}");
    match cycle % 4 {
        0 => {
            upstream.script([Answer::Json(200, completion(&id, "plain", (3, 1)))]);
            let (status, text) = chat(server, false).await;
            assert_eq!(status, 200, "{text}");
            assert!(text.contains("plain"), "{text}");
        }
        1 => {
            upstream.script([Answer::stream(text_chunks(&id, &["str", "eamed"], (3, 2)))]);
            let (status, text) = chat(server, true).await;
            assert_eq!(status, 200, "{text}");
            assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        }
        2 => {
            // The client goes away while the upstream has not answered: the server closes its
            // upstream request.
            upstream.script([Answer::HoldOpen]);
            let before = upstream.received().len();
            let url = server.url(CHAT_PATH);
            let request = actix_web::rt::spawn(async move {
                let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
                awc::Client::new()
                    .post(url)
                    .send_json(&body)
                    .await
                    .map(drop)
            });
            upstream.wait_for_requests(before + 1).await;
            request.abort();
            *held += 1;
            upstream.wait_for_closed(*held).await;
        }
        _ => {
            // The upstream closes its connection in the middle of the stream (no `[DONE]`).
            upstream.script([Answer::Sse {
                events: vec![chunk(&id, json!({"content": "cut"}), None).to_string()],
                gate_at: None,
                close_delimited: true,
            }]);
            let (status, text) = chat(server, true).await;
            assert_eq!(status, 200, "{text}");
            assert!(text.contains("cut"), "{text}");
        }
    }
}

/// An `initialize` of `/mcp`, for the session id it answers with.
async fn mcp_session(server: &Server) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "churn", "version": "1"}}});
    let (status, headers, body) = server
        .exchange(
            "POST",
            "/mcp?role=Chat",
            &[
                ("accept", "application/json, text/event-stream"),
                ("content-type", "application/json"),
            ],
            &initialize.to_string(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    headers
        .into_iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("mcp-session-id"))
        .map(|(_, v)| v)
        .expect("a session id")
}

/// A subscriber of the event stream that reads its `hello` and goes.
async fn subscriber(server: &Server) {
    let mut response = awc::Client::new()
        .get(server.url("/api/events"))
        .send()
        .await
        .expect("the stream opens");
    assert_eq!(response.status().as_u16(), 200);
    let first = tokio::time::timeout(EVENT_DEADLINE, response.next())
        .await
        .expect("hello in time")
        .expect("a first frame")
        .expect("readable");
    assert!(
        String::from_utf8_lossy(&first).contains("hello"),
        "{first:?}"
    );
}

/// A server whose character `Chat` has `upstream` as its chat model.
fn chat_server(test: &str, upstream: &FakeChat) -> Server {
    let config = format!(
        "[[character]]\nname = \"Chat\"\n[character.chat]\nurl = \"{}\"\n",
        upstream.base()
    );
    Server::start(test, &config)
}

#[actix_web::test]
async fn chat_requests_plain_streamed_abandoned_and_cut_off_leave_nothing() {
    let upstream = FakeChat::start();
    let server = chat_server("chat", &upstream);
    let mut held = 0;
    let mut run = async |from: usize, to: usize| {
        for cycle in from..to {
            chat_cycle(&server, &upstream, cycle, &mut held).await;
        }
    };
    run(0, warm_up()).await;
    // At rest: the upstream connections the chat client keeps alive, one per worker.
    let warm = server.at_rest(2).await;
    let total = cycles(300);
    run(warm_up(), warm_up() + total).await;
    server
        .holds_bounds(
            "chat (plain, streamed, client gone, upstream cut mid-stream)",
            total,
            &warm,
            2,
        )
        .await;
}

/// Ends `/mcp` session `session` with a `DELETE`.
async fn delete_mcp_session(server: &Server, session: &str) {
    let (status, _, body) = server
        .exchange(
            "DELETE",
            "/mcp?role=Chat",
            &[("mcp-session-id", session)],
            "",
        )
        .await;
    assert!(matches!(status, 200 | 202 | 204), "{status} {body}");
}

#[actix_web::test]
async fn mcp_sessions_deleted_or_abandoned_leave_nothing() {
    let upstream = FakeChat::start();
    let server = chat_server("mcp", &upstream);
    let deleted = async |from: usize, to: usize| {
        for _ in from..to {
            let session = mcp_session(&server).await;
            delete_mcp_session(&server, &session).await;
        }
    };
    deleted(0, warm_up()).await;
    let warm = server.at_rest(0).await;
    let total = cycles(300);
    deleted(warm_up(), warm_up() + total).await;
    server
        .holds_bounds("/mcp sessions (deleted)", total, &warm, 0)
        .await;
    // Sessions the client never ends leave no connection, descriptor or thread behind; their
    // state is kept until the session's idle expiry, for at most `max_sessions` (64) of them
    // per character: the least recently used goes when a new one would be one too many. Each
    // holds about 160 KiB.
    for _ in 0..total {
        mcp_session(&server).await;
    }
    server
        .holds_bounds_keeping("/mcp sessions (abandoned)", total, &warm, 0, 64 * 256)
        .await;
}

#[actix_web::test]
async fn mcp_servers_registered_at_run_time_and_removed_leave_nothing() {
    let upstream = FakeChat::start();
    let server = chat_server("runtime-mcp", &upstream);
    let python = venv_python().await;
    let mut plugin = LineChild::spawn(
        Command::new(python)
            .arg(repo_file("tests/mcp_plugin.py"))
            .arg(server.url(""))
            .arg("weather")
            .arg("--no-register"),
    );
    let listening = plugin.expect_line("listening ").await;
    let url = format!("http://127.0.0.1:{}/mcp", &listening["listening ".len()..]);
    let run = async |from: usize, to: usize| {
        for _ in from..to {
            let register = json!({"name": "weather", "url": url, "source": "plugin:weather",
                                  "role": "Chat"});
            let (status, answer) = server.post("/api/mcp/register", &register).await;
            assert_eq!(status, 200, "{answer}");
            let (status, answer) = server
                .post("/api/mcp/unregister", &json!({"name": "weather"}))
                .await;
            assert_eq!(
                (status, &answer["removed"]),
                (200, &json!(true)),
                "{answer}"
            );
        }
    };
    run(0, warm_up()).await;
    let warm = server.at_rest(0).await;
    let total = cycles(300);
    run(warm_up(), warm_up() + total).await;
    server
        .holds_bounds("runtime MCP servers (registered, removed)", total, &warm, 0)
        .await;
}

#[actix_web::test]
async fn event_stream_subscribers_that_come_and_go_leave_nothing() {
    let upstream = FakeChat::start();
    let server = chat_server("events", &upstream);
    let run = async |from: usize, to: usize| {
        for _ in from..to {
            subscriber(&server).await;
        }
    };
    run(0, warm_up()).await;
    let warm = server.at_rest(0).await;
    let total = cycles(300);
    run(warm_up(), warm_up() + total).await;
    server
        .holds_bounds("event-stream subscribers", total, &warm, 0)
        .await;
}

/// A tool of `Caller` answered at `path` of `callback` within `timeout` seconds.
fn tool(name: &str, callback: &CallbackServer, path: &str, timeout: u64) -> Value {
    json!({"name": name, "description": name, "callback_url": callback.url(path),
           "role": "Caller", "source": "plugin:churn", "timeout_seconds": timeout})
}

#[actix_web::test]
async fn callbacks_that_time_out_answer_late_or_are_cancelled_leave_nothing() {
    let model = FakeRealtime::start(AckMode::Immediate).await;
    let config = format!(
        "[[character]]\nname = \"Caller\"\n[character.session]\nkind = \"openai-realtime\"\n\
         url = \"{}\"\n\
         max_tool_calls_per_window = 1000000\n",
        model.url
    );
    let server = Server::start("callbacks", &config);
    let callback = CallbackServer::with("/slow", Reply::HoldOpen);
    callback.route(
        "/late",
        Reply::after(
            std::time::Duration::from_millis(1500),
            Reply::output(json!("late")),
        ),
    );
    let interrupted = CallbackServer::with("/held", Reply::HoldOpen);
    server.register(&tool("slow", &callback, "/slow", 1)).await;
    server.register(&tool("late", &callback, "/late", 1)).await;
    server
        .register(&tool("held", &interrupted, "/held", 60))
        .await;
    model.update_with_tools(&["slow", "late", "held"]).await;

    // Calls that time out (their callback never answers, or answers after the timeout) run
    // in batches at once; each call the model makes is cancelled by the person speaking.
    let mut cancelled = 0;
    let mut run = async |from: usize, to: usize| {
        const BATCH: usize = 50;
        let timeouts = async {
            for batch in (from..to).step_by(BATCH) {
                let invokes = (batch..to.min(batch + BATCH)).map(|cycle| {
                    let name = if cycle % 2 == 0 { "slow" } else { "late" };
                    let body = json!({"name": name, "arguments": {}, "role": "Caller"});
                    let server = &server;
                    async move {
                        let (status, answer) = server.post("/api/tools/invoke", &body).await;
                        assert_eq!(
                            (status, &answer["is_error"]),
                            (200, &json!(true)),
                            "{answer}"
                        );
                    }
                });
                futures_util::future::join_all(invokes).await;
            }
        };
        let interruptions = async {
            for cycle in from..to {
                let (response, call) = (format!("r{cycle}"), format!("call{cycle}"));
                model.push(call_event(&response, &call, "held", "{}")).await;
                model
                    .push(response_done(&response, &[(&call, "held", "{}")]))
                    .await;
                interrupted.wait_for_requests(cycle + 1).await;
                model
                    .push(json!({"type": "input_audio_buffer.speech_started",
                                 "event_id": format!("speech{cycle}"), "audio_start_ms": 0,
                                 "item_id": format!("user{cycle}")}))
                    .await;
                cancelled += 1;
                interrupted.wait_for_closed(cancelled).await;
            }
        };
        futures_util::join!(timeouts, interruptions);
    };
    run(0, warm_up()).await;
    // At rest: the session's connection to its model.
    let warm = server.at_rest(1).await;
    let total = cycles(300);
    run(warm_up(), warm_up() + total).await;
    server
        .holds_bounds(
            "callbacks (timed out, answered late, cancelled by an interruption)",
            total * 2,
            &warm,
            1,
        )
        .await;
}

/// The cycles before the warm reading ([`super::warm_up`]).
fn warm_up() -> usize {
    super::warm_up(WARM_UP)
}
