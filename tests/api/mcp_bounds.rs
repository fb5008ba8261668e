//! An MCP server a plugin registers at run time, playing hostile ([`crate::fake_mcp`]): what
//! comes from it is bounded like a callback's answer. A tool larger than a registration's body
//! is skipped with the reason, a listing over its bound or whose cursor comes back ends there, a
//! page over the message bound fails the registration without being held, a `tools/call` result
//! over `dispatch.max_response_bytes` is an error naming the bound (as JSON or as an event
//! stream, the rest never read), and an answer that is not JSON is an error at once. A stdio
//! server of the configuration is bounded by the same rules.

use runtime_tools::limits::{MAX_LISTING_BYTES, MAX_MCP_MESSAGE_BYTES, MAX_TOOL_DEFINITION_BYTES};
use serde_json::{Value, json};

use crate::callback_server::{error_text, invoke_ok};
use crate::fake_mcp::{CallAnswer, FakeMcp, Listing};
use crate::faults::peak_rss;
use crate::helpers::{TestApp, settings, spawn_app, spawn_app_with};
use crate::python::venv_python;
use crate::redaction::odd_stdio_server;

async fn register(app: &TestApp, fake: &FakeMcp, name: &str) -> (u16, Value) {
    app.post(
        "/api/mcp/register",
        &json!({"name": name, "url": fake.url(), "timeout_seconds": 300}),
    )
    .await
}

/// The tools `GET /api/tools` lists, by name.
async fn listed_tools(app: &TestApp) -> Vec<String> {
    let (status, body) = app.get("/api/tools").await;
    assert_eq!(status, 200, "{body}");
    let tools = body["tools_by_role"]["Lanlan"].as_array();
    tools
        .into_iter()
        .flatten()
        .map(|t| t["name"].as_str().expect("a name").to_owned())
        .collect()
}

#[actix_web::test]
async fn a_tool_larger_than_a_registration_is_skipped_with_the_reason() {
    let app = spawn_app(&["Lanlan"]).await;
    let huge = MAX_TOOL_DEFINITION_BYTES + 1024;
    let fake = FakeMcp::start(
        Listing::HugeDescription(huge),
        CallAnswer::Text("ok".into()),
    );
    let (status, answer) = register(&app, &fake, "huge").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["tools"], json!([]), "{answer}");
    let skipped = &answer["skipped"][0];
    assert_eq!(skipped["name"], json!("huge"), "{answer}");
    let reason = skipped["reason"].as_str().expect("a reason");
    assert!(
        reason.contains(&format!("at most {MAX_TOOL_DEFINITION_BYTES} are taken")),
        "{reason}"
    );
    assert!(listed_tools(&app).await.is_empty());
}

#[actix_web::test]
async fn a_listing_ends_at_its_byte_bound() {
    let app = spawn_app(&["Lanlan"]).await;
    // Pages of one tool just under a registration's size each: more of them than the bound.
    let description = MAX_TOOL_DEFINITION_BYTES - 4096;
    let pages = MAX_LISTING_BYTES / description + 2;
    let fake = FakeMcp::start(
        Listing::Pages { pages, description },
        CallAnswer::Text("ok".into()),
    );
    let (status, answer) = register(&app, &fake, "big").await;
    assert_eq!(status, 200, "{answer}");
    let taken = answer["tools"].as_array().expect("tools").len();
    assert_eq!(
        taken,
        MAX_LISTING_BYTES / (description + 100),
        "{}",
        answer["skipped"]
    );
    assert_eq!(
        answer["skipped"],
        json!([{"name": "…", "reason": format!(
            "the listing is over {MAX_LISTING_BYTES} bytes: the rest were not taken")}])
    );
    assert_eq!(listed_tools(&app).await.len(), taken);
}

#[actix_web::test]
async fn a_cursor_that_comes_back_ends_the_listing() {
    let app = spawn_app(&["Lanlan"]).await;
    let fake = FakeMcp::start(Listing::RepeatingCursor, CallAnswer::Text("ok".into()));
    let (status, answer) = register(&app, &fake, "again").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["tools"], json!(["again"]), "{answer}");
    assert_eq!(
        answer["skipped"],
        json!([
            {"name": "again", "reason": "listed more than once: the first is taken"},
            {"name": "…", "reason":
                "the server gave the cursor \"page-2\" a second time: the listing ends there"}
        ])
    );
}

#[actix_web::test]
async fn a_listing_page_over_the_message_bound_is_refused_unread() {
    let app = spawn_app(&["Lanlan"]).await;
    let fake = FakeMcp::start(
        Listing::HugeDescription(200 << 20),
        CallAnswer::Text("ok".into()),
    );
    let (status, answer) = register(&app, &fake, "flood").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        (&answer["ok"], &answer["stage"], &answer["error"]),
        (
            &json!(false),
            &json!("tools/list"),
            &json!(format!(
                "tools/list: Mcp error: -32099: its answer to tools/list is over the \
                 {MAX_MCP_MESSAGE_BYTES}-byte limit (the MCP message bound)"
            ))
        ),
        "{answer}"
    );
    assert!(listed_tools(&app).await.is_empty());
    // Nothing near the 200 MiB was held (the whole test process, every test running in it).
    assert!(peak_rss() < 1 << 30, "peak RSS {} bytes", peak_rss());
}

/// `tools/call` answers of 300 MiB, as JSON and as an event stream: an error naming the bound,
/// and the rest never read.
#[actix_web::test]
async fn a_call_result_over_max_response_bytes_is_an_error_naming_it() {
    let app = spawn_app(&["Lanlan"]).await;
    let fake = FakeMcp::start(
        Listing::Tools(vec![json!({"name": "dump", "description": "Dumps.",
                                   "inputSchema": {"type": "object"}})]),
        CallAnswer::Huge {
            bytes: 300 << 20,
            stream: false,
        },
    );
    let (status, answer) = register(&app, &fake, "dumper").await;
    assert_eq!(status, 200, "{answer}");
    let limit = runtime_tools::DispatchSettings::default().max_response_bytes;
    for stream in [false, true] {
        fake.set_call(CallAnswer::Huge {
            bytes: 300 << 20,
            stream,
        });
        let before = fake.written();
        let result = invoke_ok(&app, "dump", json!({})).await;
        let error = error_text(&result);
        assert!(
            error.contains(&format!(
                "its answer to tools/call is over the {limit}-byte limit (dispatch.max_response_bytes)"
            )),
            "stream {stream}: {error}"
        );
        // The server stopped reading: the fake could not write the rest.
        let written = fake.written() - before;
        assert!(
            written < 100 << 20,
            "stream {stream}: {written} bytes were taken"
        );
    }
    assert!(peak_rss() < 1 << 30, "peak RSS {} bytes", peak_rss());
}

#[actix_web::test]
async fn an_answer_that_is_not_json_is_an_error_at_once() {
    let app = spawn_app(&["Lanlan"]).await;
    let fake = FakeMcp::start(
        Listing::Tools(vec![json!({"name": "busy", "description": "Busy.",
                                   "inputSchema": {"type": "object"}})]),
        CallAnswer::NotJson,
    );
    let (status, answer) = register(&app, &fake, "html").await;
    assert_eq!(status, 200, "{answer}");
    // Its timeout is 300 s: the error is the answer's, not the timeout's.
    let result = invoke_ok(&app, "busy", json!({})).await;
    let error = error_text(&result);
    assert!(
        error.contains("it answered tools/call with something that is not a JSON-RPC message")
            && error.contains("<html>busy</html>"),
        "{error}"
    );
    assert_eq!(fake.calls(), 1);
}

/// A stdio server (the official MCP SDK's) listing a tool larger than a registration and
/// answering a call with more than `dispatch.max_response_bytes`: bounded as an HTTP one is.
#[actix_web::test]
async fn a_stdio_servers_listing_and_results_are_bounded_as_an_http_servers_are() {
    let python = venv_python().await;
    let huge = MAX_TOOL_DEFINITION_BYTES + 1024;
    let limit = runtime_tools::DispatchSettings::default().max_response_bytes;
    let app = spawn_app_with(runtime_tools::Settings {
        mcp_servers: vec![odd_stdio_server(
            python,
            &[
                ("HUGE_DESCRIPTION_BYTES", &huge.to_string()),
                ("DUMP_BYTES", &(limit + 1024).to_string()),
            ],
        )],
        ..settings(&["Lanlan"])
    })
    .await;
    let mut events = crate::event_stream::open(&app, "", Some("0"))
        .await
        .expect("stream opens");
    events
        .wait_for("tools.changed", |d| d["source"] == "mcp:odd")
        .await;

    let (_, mcp) = app.get("/api/mcp").await;
    let report = &mcp["mcp_servers"]["odd"];
    assert_eq!(report["tools"], json!(["dump", "leak"]), "{report}");
    assert_eq!(report["skipped"][0]["name"], json!("huge"), "{report}");
    let reason = report["skipped"][0]["reason"].as_str().expect("a reason");
    assert!(
        reason.contains(&format!("at most {MAX_TOOL_DEFINITION_BYTES} are taken")),
        "{reason}"
    );
    assert_eq!(listed_tools(&app).await, ["dump", "leak"]);

    let result = invoke_ok(&app, "dump", json!({})).await;
    let error = error_text(&result);
    assert!(
        error.contains(&format!(
            "over the {limit}-byte limit (dispatch.max_response_bytes)"
        )),
        "{error}"
    );
}
