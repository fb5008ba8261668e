//! Panic containment: a panicking in-process tool or character manager stops only itself; a dead
//! manager is reported in `failed_roles` and comes back with every tool that applied to it.

use actix::prelude::*;
use runtime_tools::faults::InjectManagerPanic;
use runtime_tools::{
    CallLocalTool, CallbackUrl, ChangeFailure, Dialect, RegisterTool, ReplaceSource, RoleFailure,
    SessionSettings, ToolOutcome, ToolSpec, UnregisterTool, empty_parameters, local_handler,
};
use std::time::Duration;

use serde_json::json;

use crate::fake_realtime::{AckMode, FakeRealtime, update_tool_names};
use crate::helpers::{TestApp, settings, spawn_app, spawn_app_with, tool_body};

/// A remote tool of `source` whose callback nobody answers (these tests never call it).
fn remote_tool(name: &str, source: &str) -> ToolSpec {
    ToolSpec::remote(
        name,
        format!("{name} tool"),
        empty_parameters(),
        source,
        CallbackUrl::parse("http://127.0.0.1:9/t").unwrap(),
        Duration::from_secs(30),
    )
}

/// One character, Mio, with a live session that has taken its first (empty) tool list.
async fn mio_with_session() -> (FakeRealtime, TestApp) {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut settings = settings(&["Mio"]);
    settings.characters[0].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    let app = spawn_app_with(settings).await;
    fake.nth_update(1).await;
    (fake, app)
}

/// An in-process tool that panics when asked to `explode`.
struct Fragile;

impl Actor for Fragile {
    type Context = Context<Self>;
}

impl Handler<CallLocalTool> for Fragile {
    type Result = ToolOutcome;

    fn handle(&mut self, CallLocalTool(call): CallLocalTool, _: &mut Self::Context) -> ToolOutcome {
        if call.arguments.get("explode") == Some(&json!(true)) {
            panic!("fragile tool asked to explode");
        }
        Ok(json!("intact"))
    }
}

#[actix_web::test]
async fn a_panicking_local_tool_becomes_a_tool_error_and_nothing_else_stops() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let handler = local_handler(Fragile.start().recipient());
    let tool = ToolSpec::local(
        "fragile",
        "Breaks.",
        empty_parameters(),
        "inproc:test",
        handler,
    );
    let report = app
        .router
        .send(RegisterTool { tool, role: None })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.affected_roles, ["Lanlan", "Mio"]);

    let invoke = |arguments| json!({"name": "fragile", "arguments": arguments, "role": "Mio", "call_id": "c1"});
    let (status, body) = app.post("/api/tools/invoke", &invoke(json!({}))).await;
    assert_eq!((status, body["output"].clone()), (200, json!("intact")));

    let (status, body) = app
        .post("/api/tools/invoke", &invoke(json!({"explode": true})))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"ok": true, "name": "fragile", "call_id": "c1", "output": null, "is_error": true,
               "error": "in-process tool 'fragile' stopped before answering (it may have panicked)"})
    );
    // The server and the other parts keep working.
    let (status, body) = app
        .register(&tool_body(
            "get_weather",
            "http://127.0.0.1:9/cb",
            "plugin:w",
        ))
        .await;
    assert_eq!(
        (status, body["affected_roles"].clone()),
        (200, json!(["Lanlan", "Mio"]))
    );
}

#[actix_web::test]
async fn a_panicking_manager_is_reported_then_restarted_with_its_tools() {
    // Mio has a live session: what the restarted manager really holds is what it pushes there.
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut settings = settings(&["Lanlan", "Mio"]);
    settings.characters[1].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    let app = spawn_app_with(settings).await;
    fake.nth_update(1).await;
    let (status, _) = app
        .register(&tool_body("a", "http://127.0.0.1:9/a", "plugin:w"))
        .await;
    assert_eq!(status, 200);
    let mut scoped = tool_body("mine", "http://127.0.0.1:9/m", "plugin:w");
    scoped["role"] = json!("Mio");
    assert_eq!(app.register(&scoped).await.0, 200);
    assert_eq!(fake.connections(), 1);

    // Both messages are queued before the router runs either: the change meets the manager
    // that is about to panic, and reports it; the other character is unaffected.
    let inject = app.router.send(InjectManagerPanic { role: "Mio".into() });
    let url = CallbackUrl::parse("http://127.0.0.1:9/b").unwrap();
    let b = ToolSpec::remote(
        "b",
        "b tool",
        empty_parameters(),
        "plugin:w",
        url,
        Duration::from_secs(30),
    );
    let register = app.router.send(RegisterTool {
        tool: b,
        role: None,
    });
    inject.await.unwrap().unwrap();
    let report = register.await.unwrap().unwrap();
    assert_eq!(report.affected_roles, ["Lanlan"]);
    assert_eq!(
        report.failed_roles,
        [RoleFailure {
            role: "Mio".into(),
            error: ChangeFailure::Stopped
        }]
    );
    assert_eq!(
        report.failed_roles[0].error.to_string(),
        "session manager stopped before answering"
    );
    // Restarted with every tool that applied to it, the failed change included: its new
    // session's first update carries them, in order, and the listing shows the same.
    fake.wait_connections(2).await;
    let first_of_restart = fake
        .wait_for("the restarted session's first update", |events| {
            events
                .iter()
                .filter(|e| e["type"] == "session.update")
                .find(|e| update_tool_names(e).contains(&"b".to_owned()))
                .cloned()
        })
        .await;
    assert_eq!(update_tool_names(&first_of_restart), ["a", "mine", "b"]);
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["a", "b"], "Mio": ["a", "mine", "b"]})
    );
    let (status, body) = app
        .register(&tool_body("c", "http://127.0.0.1:9/c", "plugin:w"))
        .await;
    assert_eq!(
        (status, body["affected_roles"].clone()),
        (200, json!(["Lanlan", "Mio"]))
    );
    assert_eq!(body["failed_roles"], json!([]));
    fake.update_with_tools(&["a", "mine", "b", "c"]).await;
}

#[actix_web::test]
async fn changes_queued_to_a_dead_manager_are_applied_in_order_after_the_restart() {
    let (fake, app) = mio_with_session().await;

    // Five changes queued behind the panic, one of them undoing another: replayed out of order
    // they would leave a different list.
    let inject = app.router.send(InjectManagerPanic { role: "Mio".into() });
    let tool = |name: &str| remote_tool(name, "plugin:w");
    let role = || Some("Mio".to_owned());
    let r1 = app.router.send(RegisterTool {
        tool: tool("x"),
        role: role(),
    });
    let r2 = app.router.send(RegisterTool {
        tool: tool("y"),
        role: role(),
    });
    let r3 = app.router.send(UnregisterTool {
        name: "x".into(),
        role: role(),
    });
    let r4 = app.router.send(RegisterTool {
        tool: tool("z"),
        role: role(),
    });
    let r5 = app.router.send(RegisterTool {
        tool: tool("x"),
        role: role(),
    });
    inject.await.unwrap().unwrap();
    for report in [r1.await, r2.await, r3.await, r4.await, r5.await] {
        let report = report.unwrap().unwrap();
        assert_eq!(
            report.failed_roles.len() + report.affected_roles.len(),
            1,
            "{report:?}"
        );
    }
    assert_eq!(app.tool_names(None).await, json!({"Mio": ["y", "z", "x"]}));
    fake.wait_connections(2).await;
    fake.update_with_tools(&["y", "z", "x"]).await;
    // A later change lands after the replayed ones.
    let (status, body) = app
        .post(
            "/api/tools/unregister",
            &json!({"name": "y", "role": "Mio"}),
        )
        .await;
    assert_eq!(
        (status, body["affected_roles"].clone()),
        (200, json!(["Mio"]))
    );
    fake.update_with_tools(&["z", "x"]).await;
    assert_eq!(app.tool_names(None).await, json!({"Mio": ["z", "x"]}));
}

#[actix_web::test]
async fn an_mcp_replacement_queued_to_a_dead_manager_is_replayed_in_order() {
    let (fake, app) = mio_with_session().await;
    let replace = |names: &[&str]| ReplaceSource {
        source: "mcp:s".into(),
        tools: names.iter().map(|n| remote_tool(n, "mcp:s")).collect(),
        roles: Some(vec!["Mio".into()]),
        owner: None,
    };
    let report = app
        .router
        .send(RegisterTool {
            tool: remote_tool("p", "plugin:w"),
            role: None,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.affected_roles, ["Mio"]);
    let report = app.router.send(replace(&["m1", "m2"])).await.unwrap();
    assert_eq!(report.affected_roles, ["Mio"]);
    fake.update_with_tools(&["p", "m1", "m2"]).await;

    // Two listings of the MCP server queued behind the panic: replayed out of order (or not at
    // all) they would leave another list.
    let inject = app.router.send(InjectManagerPanic { role: "Mio".into() });
    let second = app.router.send(replace(&["m2", "m3"]));
    let third = app.router.send(replace(&["m3"]));
    inject.await.unwrap().unwrap();
    for report in [second.await.unwrap(), third.await.unwrap()] {
        assert_eq!(
            report.failed_roles.len() + report.affected_roles.len(),
            1,
            "{report:?}"
        );
    }
    assert_eq!(app.tool_names(None).await, json!({"Mio": ["p", "m3"]}));
    fake.wait_connections(2).await;
    fake.update_with_tools(&["p", "m3"]).await;
}
