//! In-process tools: an actor handling `CallLocalTool`, registered through the router like any
//! other tool. It lists with `is_remote: false` and `callback_url: null`, and a call through
//! `POST /api/tools/invoke` reaches the actor and returns its output.

use actix::prelude::*;
use runtime_tools::{
    CallLocalTool, ChangeReport, Parameters, RegisterTool, ToolOutcome, ToolSpec, local_handler,
};
use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app, tool_body};

/// An in-process dice tool: echoes what it was called with, or fails when asked to.
struct Dice {
    calls: usize,
}

impl Actor for Dice {
    type Context = Context<Self>;
}

impl Handler<CallLocalTool> for Dice {
    type Result = ToolOutcome;

    fn handle(&mut self, CallLocalTool(call): CallLocalTool, _: &mut Self::Context) -> ToolOutcome {
        self.calls += 1;
        if call.arguments.get("fail") == Some(&json!(true)) {
            return Err("the die fell off the table".to_owned());
        }
        Ok(json!({
            "rolled": call.arguments.get("sides").cloned().unwrap_or(json!(6)),
            "tool": call.name,
            "call_id": call.call_id,
            "raw_arguments": call.raw_arguments,
            "calls_so_far": self.calls,
        }))
    }
}

fn dice_schema() -> Parameters {
    let Value::Object(schema) = json!({
        "type": "object",
        "properties": {"sides": {"type": "integer"}}
    }) else {
        unreachable!()
    };
    Parameters::new(schema).expect("a valid schema")
}

/// Registers a fresh `Dice` actor as `name` for `role` through the router.
pub async fn register_dice(app: &TestApp, name: &str, role: Option<&str>) -> ChangeReport {
    let dice = Dice { calls: 0 }.start();
    let tool = ToolSpec::local(
        name,
        "Roll a die.",
        dice_schema(),
        "inproc:dice",
        local_handler(dice.recipient()),
    );
    app.router
        .send(RegisterTool {
            tool,
            role: role.map(str::to_owned),
        })
        .await
        .expect("router answers")
        .expect("registered")
}

fn dice_view(name: &str) -> Value {
    json!({"name": name, "description": "Roll a die.", "source": "inproc:dice",
           "callback_url": null, "is_remote": false})
}

#[actix_web::test]
async fn a_local_tool_lists_as_not_remote_beside_remote_tools() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    assert_eq!(
        app.register(&tool_body(
            "weather",
            "http://127.0.0.1:9333/cb",
            "plugin:w"
        ))
        .await
        .0,
        200
    );
    let report = register_dice(&app, "roll_dice", None).await;
    assert_eq!(
        report,
        ChangeReport {
            affected_roles: vec!["Lanlan".into(), "Mio".into()],
            failed_roles: vec![],
            removed: 0,
        }
    );
    let report = register_dice(&app, "mio_dice", Some("Mio")).await;
    assert_eq!(report.affected_roles, ["Mio"]);
    let weather = json!({"name": "weather", "description": "weather tool", "source": "plugin:w",
                         "callback_url": "http://127.0.0.1:9333/cb", "is_remote": true});
    assert_eq!(
        app.listing(None).await,
        json!({"ok": true, "tools_by_role": {
            "Lanlan": [weather, dice_view("roll_dice")],
            "Mio": [weather, dice_view("roll_dice"), dice_view("mio_dice")],
        }})
    );
}

#[actix_web::test]
async fn invoking_a_local_tool_returns_the_actors_output() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    register_dice(&app, "roll_dice", None).await;
    let (status, answer) = app
        .post(
            "/api/tools/invoke",
            &json!({"name": "roll_dice", "arguments": {"sides": 20}, "call_id": "call_1"}),
        )
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({
                "ok": true, "name": "roll_dice", "call_id": "call_1", "is_error": false,
                "output": {"rolled": 20, "tool": "roll_dice", "call_id": "call_1",
                           "raw_arguments": "{\"sides\":20}", "calls_so_far": 1}
            })
        )
    );
    // Both characters share the one actor of a global registration.
    let (status, answer) = app
        .post(
            "/api/tools/invoke",
            &json!({"name": "roll_dice", "role": "Mio", "call_id": "call_2"}),
        )
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({
                "ok": true, "name": "roll_dice", "call_id": "call_2", "is_error": false,
                "output": {"rolled": 6, "tool": "roll_dice", "call_id": "call_2",
                           "raw_arguments": "{}", "calls_so_far": 2}
            })
        )
    );
}

#[actix_web::test]
async fn a_local_tool_error_is_a_tool_error() {
    let app = spawn_app(&["Lanlan"]).await;
    register_dice(&app, "roll_dice", None).await;
    let (status, answer) = app
        .post(
            "/api/tools/invoke",
            &json!({"name": "roll_dice", "arguments": {"fail": true}, "call_id": "call_x"}),
        )
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({
                "ok": true, "name": "roll_dice", "call_id": "call_x", "is_error": true,
                "output": null, "error": "the die fell off the table"
            })
        )
    );
}

#[actix_web::test]
async fn a_role_scoped_local_tool_is_invoked_only_for_its_role() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    register_dice(&app, "mio_dice", Some("Mio")).await;
    let (status, answer) = app
        .post(
            "/api/tools/invoke",
            &json!({"name": "mio_dice", "role": "Mio", "call_id": "c"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["output"]["tool"], "mio_dice");
    // Without a role the first character that has it answers.
    let (status, answer) = app
        .post(
            "/api/tools/invoke",
            &json!({"name": "mio_dice", "call_id": "d"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["output"]["call_id"], "d");
    let (status, answer) = app
        .post(
            "/api/tools/invoke",
            &json!({"name": "mio_dice", "role": "Lanlan"}),
        )
        .await;
    assert_eq!(
        (status, answer),
        (
            404,
            json!({"ok": false, "detail": "tool 'mio_dice' is not registered for role Lanlan; available tools: none"})
        )
    );
}

#[actix_web::test]
async fn local_tools_are_removed_by_unregister_and_clear_over_http() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    register_dice(&app, "d1", None).await;
    register_dice(&app, "d2", None).await;
    register_dice(&app, "d3", Some("Mio")).await;
    assert_eq!(
        app.post("/api/tools/unregister", &json!({"name": "d1"}))
            .await,
        (
            200,
            json!({"ok": true, "removed": true, "name": "d1", "affected_roles": ["Lanlan", "Mio"], "failed_roles": []})
        )
    );
    assert_eq!(
        app.post("/api/tools/clear", &json!({"source": "inproc:dice"}))
            .await,
        (
            200,
            json!({"ok": true, "removed": 3, "source": "inproc:dice", "affected_roles": ["Lanlan", "Mio"], "failed_roles": []})
        )
    );
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": [], "Mio": []}));
}

#[actix_web::test]
async fn a_remote_registration_replaces_a_local_tool_of_the_same_name() {
    let app = spawn_app(&["Lanlan"]).await;
    register_dice(&app, "roll", None).await;
    assert_eq!(
        app.register(&tool_body("roll", "http://localhost:9/roll", "plugin:r"))
            .await
            .0,
        200
    );
    assert_eq!(
        app.listing(None).await,
        json!({"ok": true, "tools_by_role": {"Lanlan": [
            {"name": "roll", "description": "roll tool", "source": "plugin:r",
             "callback_url": "http://localhost:9/roll", "is_remote": true}
        ]}})
    );
    // And back: the last registration wins either way.
    register_dice(&app, "roll", None).await;
    assert_eq!(
        app.listing(None).await,
        json!({"ok": true, "tools_by_role": {"Lanlan": [dice_view("roll")]}})
    );
}
