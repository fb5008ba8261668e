//! `GET /metrics`, read with the official Prometheus Python client's text-format parser after
//! calls whose outcomes the test knows, and `GET /api/calls`, the recent calls.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, ClosedPort, Reply, invoke_ok, register};
use crate::event_stream::open;
use crate::helpers::{TestApp, spawn_app};
use crate::python::venv_python;

/// The parser: every family's type, and every sample as `[name, labels, value]`.
const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {"types": {}, "samples": []}
for family in text_string_to_metric_families(sys.stdin.read()):
    out["types"][family.name] = family.type
    for s in family.samples:
        out["samples"].append([s.name, s.labels, s.value])
print(json.dumps(out))
"#;

/// `/metrics` as the official parser reads it.
pub struct Scrape {
    pub types: BTreeMap<String, String>,
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Scrape {
    /// The value of the one sample `name` whose labels include `labels` (panics unless exactly
    /// one matches).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<f64> = self.matching(name, labels).map(|(_, v)| v).collect();
        assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
        found[0]
    }

    /// Every sample `name` whose labels include `labels`.
    pub fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = (&'a BTreeMap<String, String>, f64)> + 'a {
        self.samples
            .iter()
            .filter(move |(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(v))
            })
            .map(|(_, l, v)| (l, *v))
    }
}

/// Reads `/metrics` (asserting its content type) with the official parser.
pub async fn scrape(app: &TestApp) -> Scrape {
    let mut response = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response
        .headers()
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap();
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    let text = response.body().limit(1 << 24).await.unwrap();
    let python = venv_python().await;
    let parsed = actix_web::rt::task::spawn_blocking(move || {
        let mut child = Command::new(python)
            .args(["-c", PARSE])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python runs");
        child.stdin.take().unwrap().write_all(&text).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "the parser refused the exposition: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    })
    .await
    .unwrap();
    let types = serde_json::from_value(parsed["types"].clone()).unwrap();
    let samples = parsed["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s[0].as_str().unwrap().to_owned(),
                serde_json::from_value(s[1].clone()).unwrap(),
                s[2].as_f64().unwrap(),
            )
        })
        .collect();
    Scrape { types, samples }
}

fn tool(name: &str, url: &str, timeout_seconds: f64) -> Value {
    json!({"name": name, "callback_url": url, "role": "Mio", "source": "plugin:metrics",
           "timeout_seconds": timeout_seconds,
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}})
}

#[actix_web::test]
async fn metrics_count_each_outcome_and_time_each_call_and_the_recent_calls_list_them() {
    let app = spawn_app(&["Mio", "Lanlan"]).await;
    let callback = CallbackServer::start();
    callback.route("/ok", Reply::output(json!({"temperature_c": 28})));
    callback.route(
        "/err",
        Reply::json(json!({"error": "no such city", "is_error": true})),
    );
    callback.route("/hang", Reply::Hang);
    callback.route("/hold", Reply::HoldOpen);
    let closed = ClosedPort::new();
    register(&app, tool("ok_tool", &callback.url("/ok"), 30.0)).await;
    register(&app, tool("err_tool", &callback.url("/err"), 30.0)).await;
    register(&app, tool("slow_tool", &callback.url("/hang"), 1.0)).await;
    register(&app, tool("held_tool", &callback.url("/hold"), 30.0)).await;
    let mut dead = tool("dead_tool", &closed.url("/x"), 30.0);
    dead["source"] = json!("external");
    register(&app, dead).await;

    invoke_ok(&app, "ok_tool", json!({"city": "Kyoto"})).await;
    invoke_ok(&app, "ok_tool", json!({})).await;
    assert_eq!(
        invoke_ok(&app, "err_tool", json!({})).await["is_error"],
        true
    );
    assert_eq!(
        invoke_ok(&app, "slow_tool", json!({})).await["is_error"],
        true
    );
    assert_eq!(
        invoke_ok(&app, "dead_tool", json!({})).await["is_error"],
        true
    );
    // Arguments the schema refuses: the tool is not called.
    assert_eq!(
        invoke_ok(&app, "ok_tool", json!({"city": 7})).await["is_error"],
        true
    );
    // A call whose caller goes away is cancelled.
    let mut events = open(&app, "?role=Mio", None).await.expect("events open");
    let running = crate::callback_server::spawn_invoke(&app, "held_tool");
    callback.wait_for_requests(5).await;
    running.abort();
    let cancelled = events
        .wait_for("tool.call", |d| d["tool"] == "held_tool")
        .await
        .data;
    assert_eq!(
        (&cancelled["outcome"], &cancelled["cancelled"]),
        (&json!("cancelled"), &json!(true))
    );

    let scrape = scrape(&app).await;
    assert_eq!(scrape.types["runtime_tools_tool_calls"], "counter");
    assert_eq!(
        scrape.types["runtime_tools_tool_call_duration_seconds"],
        "histogram"
    );
    assert_eq!(scrape.types["runtime_tools_running_calls"], "gauge");
    let calls = |tool: &str, outcome: &str| {
        scrape.value(
            "runtime_tools_tool_calls_total",
            &[
                ("character", "Mio"),
                ("tool", tool),
                ("caller", "invoke"),
                ("kind", ""),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(calls("ok_tool", "ok"), 2.0);
    assert_eq!(calls("ok_tool", "invalid_arguments"), 1.0);
    assert_eq!(calls("err_tool", "tool_error"), 1.0);
    assert_eq!(calls("slow_tool", "timeout"), 1.0);
    assert_eq!(calls("dead_tool", "unreachable"), 1.0);
    assert_eq!(calls("held_tool", "cancelled"), 1.0);
    let total: f64 = scrape
        .matching("runtime_tools_tool_calls_total", &[])
        .map(|(_, v)| v)
        .sum();
    assert_eq!(total, 7.0);

    // Each tool's histogram: its count, and buckets that hold the calls by their duration.
    let count = |tool: &str| {
        scrape.value(
            "runtime_tools_tool_call_duration_seconds_count",
            &[("tool", tool)],
        )
    };
    assert_eq!(
        [
            count("ok_tool"),
            count("err_tool"),
            count("slow_tool"),
            count("held_tool")
        ],
        [3.0, 1.0, 1.0, 1.0]
    );
    let buckets = |tool: &str| -> Vec<(f64, f64)> {
        let mut buckets: Vec<(f64, f64)> = scrape
            .matching(
                "runtime_tools_tool_call_duration_seconds_bucket",
                &[("tool", tool)],
            )
            .map(|(labels, v)| (labels["le"].parse::<f64>().unwrap(), v))
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        buckets
    };
    let slow = buckets("slow_tool");
    assert_eq!(slow.first().unwrap().0, 0.001, "buckets from 1 ms");
    assert_eq!(slow[slow.len() - 2].0, 300.0, "to 300 s");
    assert_eq!(slow.last().unwrap(), &(f64::INFINITY, 1.0));
    // The timed-out call took its 1 s timeout: in no bucket below 1 s, in every one from 2.5 s.
    for (le, n) in &slow {
        if *le < 1.0 {
            assert_eq!(*n, 0.0, "le={le}");
        } else if *le >= 2.5 {
            assert_eq!(*n, 1.0, "le={le}");
        }
    }
    for tool in ["ok_tool", "err_tool", "held_tool"] {
        let b = buckets(tool);
        assert!(b.windows(2).all(|w| w[0].1 <= w[1].1), "{tool}: {b:?}");
        assert_eq!(b.last().unwrap().1, count(tool));
    }
    let sum = scrape.value(
        "runtime_tools_tool_call_duration_seconds_sum",
        &[("tool", "slow_tool")],
    );
    assert!((1.0..30.0).contains(&sum), "{sum}");

    // State read at scrape time, and the changes that made it.
    assert_eq!(
        scrape.value("runtime_tools_tools", &[("character", "Mio")]),
        5.0
    );
    assert_eq!(
        scrape.value("runtime_tools_tools", &[("character", "Lanlan")]),
        0.0
    );
    assert_eq!(scrape.value("runtime_tools_running_calls", &[]), 0.0);
    assert_eq!(
        scrape.value("runtime_tools_tool_changes_total", &[("op", "register")]),
        5.0
    );

    // The recent calls: newest first, every outcome, never the arguments or the output.
    let (status, listed) = app.get("/api/calls").await;
    assert_eq!(status, 200, "{listed}");
    let calls = listed["calls"].as_array().unwrap();
    let seen: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| (c["tool"].as_str().unwrap(), c["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("held_tool", "cancelled"),
            ("ok_tool", "invalid_arguments"),
            ("dead_tool", "unreachable"),
            ("slow_tool", "timeout"),
            ("err_tool", "tool_error"),
            ("ok_tool", "ok"),
            ("ok_tool", "ok"),
        ]
    );
    let first = &calls[0];
    let mut keys: Vec<&str> = first
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "call_id",
            "caller",
            "duration_ms",
            "kind",
            "outcome",
            "role",
            "source",
            "started_at",
            "tool",
            "trace_id"
        ]
    );
    assert_eq!(first["call_id"], cancelled["call_id"]);
    assert_eq!(first["trace_id"], cancelled["trace_id"]);
    assert_eq!(
        (
            &first["role"],
            &first["caller"],
            &first["kind"],
            &first["source"]
        ),
        (
            &json!("Mio"),
            &json!("invoke"),
            &json!(null),
            &json!("plugin:metrics")
        )
    );
    assert!(first["started_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(first["trace_id"].as_str().unwrap().len(), 32);
    let (_, two) = app.get("/api/calls?tool=ok_tool&role=Mio&limit=2").await;
    let tools: Vec<&Value> = two["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["outcome"])
        .collect();
    assert_eq!(tools, [&json!("invalid_arguments"), &json!("ok")]);
    let (_, none) = app.get("/api/calls?role=Lanlan").await;
    assert_eq!(none, json!({"calls": []}));
    let (status, unknown) = app.get("/api/calls?role=Nobody").await;
    assert_eq!(
        (status, unknown),
        (404, json!({"ok": false, "detail": "unknown role: Nobody"}))
    );
    let (status, refused) = app.get("/api/calls?limit=0").await;
    assert_eq!(status, 422);
    assert_eq!(refused["detail"][0]["loc"], json!(["query", "limit"]));
    assert_eq!(refused["detail"][0]["msg"], "must be 1 to 1000, got 0");
}

#[actix_web::test]
async fn the_tool_label_is_capped() {
    let app = spawn_app(&["Mio"]).await;
    let callback = CallbackServer::with("/ok", Reply::output(json!(1)));
    let cap = runtime_tools::limits::MAX_TOOL_LABELS;
    for i in 0..cap + 3 {
        let name = format!("t{i:03}");
        register(&app, tool(&name, &callback.url("/ok"), 30.0)).await;
        invoke_ok(&app, &name, json!({})).await;
    }
    let scrape = scrape(&app).await;
    let labels: std::collections::BTreeSet<String> = scrape
        .matching("runtime_tools_tool_calls_total", &[])
        .map(|(l, _)| l["tool"].clone())
        .collect();
    assert_eq!(labels.len(), cap + 1, "{cap} names and the overflow's");
    assert!(labels.contains("t000") && labels.contains(&format!("t{:03}", cap - 1)));
    assert!(!labels.contains(&format!("t{cap:03}")));
    assert_eq!(
        scrape.value("runtime_tools_tool_calls_total", &[("tool", "")]),
        3.0
    );
}

/// 600 tools come (100 past the cap) and go: a new tool then has a label of its own (the names of tools that are
/// gone gave theirs up, with their series), and a tool named `other` is not counted with the
/// calls past the cap, whose label no tool's name can be.
#[actix_web::test]
async fn the_labels_of_tools_that_are_gone_go_to_new_ones_and_no_tool_has_the_overflow_label() {
    let app = spawn_app(&["Mio"]).await;
    let callback = CallbackServer::with("/ok", Reply::output(json!(1)));
    let cap = runtime_tools::limits::MAX_TOOL_LABELS;
    // 100 more tools than the cap are there at once: the last 100 have no label of their own.
    for i in 0..cap + 100 {
        let name = format!("t{i:03}");
        register(&app, tool(&name, &callback.url("/ok"), 30.0)).await;
        invoke_ok(&app, &name, json!({})).await;
    }
    let (status, cleared) = app
        .post("/api/tools/clear", &json!({"source": "plugin:metrics"}))
        .await;
    assert_eq!(status, 200, "{cleared}");
    for name in ["fresh", "other"] {
        register(&app, tool(name, &callback.url("/ok"), 30.0)).await;
        invoke_ok(&app, name, json!({})).await;
    }
    let scrape = scrape(&app).await;
    let calls = |tool| scrape.value("runtime_tools_tool_calls_total", &[("tool", tool)]);
    assert_eq!((calls("fresh"), calls("other")), (1.0, 1.0));
    assert_eq!(calls(""), 100.0);
    let labels: std::collections::BTreeSet<String> = scrape
        .matching("runtime_tools_tool_calls_total", &[])
        .map(|(l, _)| l["tool"].clone())
        .collect();
    assert!(labels.len() <= cap + 1, "{}", labels.len());
    assert!(
        !labels.contains("t000"),
        "the series of a tool that is gone went with its label"
    );
}
