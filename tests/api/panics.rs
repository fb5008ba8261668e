//! Panic containment: a panicking in-process tool or character manager stops only itself; a dead
//! manager is reported in `failed_roles` and comes back with every tool that applied to it.

use actix::prelude::*;
use runtime_tools::actors::local_tool::{CallLocalTool, local_handler};
use std::time::Duration;

use runtime_tools::actors::router::{InjectManagerPanic, RegisterTool, RoleFailure};
use runtime_tools::domain::call::ToolOutcome;
use runtime_tools::domain::callback_url::CallbackUrl;
use runtime_tools::domain::tool::{ToolSpec, empty_parameters};
use serde_json::json;

use crate::helpers::{spawn_app, tool_body};

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
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let (status, _) = app
        .register(&tool_body("a", "http://127.0.0.1:9/a", "plugin:w"))
        .await;
    assert_eq!(status, 200);
    let mut scoped = tool_body("mine", "http://127.0.0.1:9/m", "plugin:w");
    scoped["role"] = json!("Mio");
    assert_eq!(app.register(&scoped).await.0, 200);

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
            error: "session manager stopped before answering".into()
        }]
    );
    // Restarted with every tool that applied to it, the failed change included.
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
}
