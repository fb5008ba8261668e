//! An application that owns its model connection in-process makes it a character's session: an
//! actor that handles `SyncTools` (each new tool list, to be acknowledged), `SessionStatus` and
//! `CloseSession` joins the character with `JoinSession`; from then on every registration waits
//! for it, as for any session. When its model calls a tool, it runs the call with the
//! dispatcher directly. It announces its own state on the server's event hub
//! (`GET /api/events`, `session.state`), as the server's sessions do.
//!
//! ```text
//! cargo run --release --example inprocess_session
//! ```
//!
//! Here the "model" is scripted: it takes the tool lists and, once `convert_temperature` is
//! there, calls it. It builds the server on a free port, joins `Lanlan`, registers an in-process
//! tool through the router, makes the call, reads `GET /api/sessions` and the `session.state`
//! events it announced, prints each step and exits 0. The test suite runs [`run`] (`tests/api/examples.rs`).

use std::sync::Arc;

use actix::prelude::*;
use anyhow::{Context as _, bail};
use runtime_tools::actors::local_tool::{CallLocalTool, local_handler};
use runtime_tools::actors::router::{JoinSession, RegisterTool};
use runtime_tools::config::{CharacterSettings, Settings};
use runtime_tools::dispatch::Dispatcher;
use runtime_tools::domain::arguments::Parameters;
use runtime_tools::domain::call::{ToolCall, ToolOutcome};
use runtime_tools::domain::tool::{SharedTool, ToolSpec};
use runtime_tools::events::{EventHub, EventKind};
use runtime_tools::session::core::rfc3339_now;
use runtime_tools::session::{
    CloseSession, ConnectionKind, ConnectionReport, ConnectionState, SessionHandle, SessionStatus,
    SyncError, SyncOutcome, SyncTools,
};
use runtime_tools::startup::Application;
use serde_json::{Map, Value, json};

/// The application's own model session. A real one would send each tool list to its model
/// and answer `SyncTools` when the model acknowledged it.
struct ScriptedModel {
    character: String,
    since: String,
    tools: Arc<[SharedTool]>,
    updates: u64,
    last_sync: Option<SyncOutcome>,
    calls_answered: u64,
    dispatcher: Dispatcher,
    /// Where it announces its state, as `session.state`.
    events: EventHub,
}

impl ScriptedModel {
    /// Its entry in `GET /api/sessions` (and its `session.state` events).
    fn report(&self) -> ConnectionReport {
        ConnectionReport {
            kind: ConnectionKind::Embedded,
            since: self.since.clone(),
            upstream: None,
            state: ConnectionState::Connected,
            last_sync: self.last_sync.clone(),
            acknowledged_tools: self.tools.len(),
            calls_answered: self.calls_answered,
            clashes: Vec::new(),
        }
    }
}

impl Actor for ScriptedModel {
    type Context = Context<Self>;
}

impl Handler<SyncTools> for ScriptedModel {
    /// `Ok(())` once the model has the list; `Err(SyncError::Other(why))` puts the character in
    /// `failed_roles`.
    type Result = Result<(), SyncError>;

    fn handle(&mut self, SyncTools(tools): SyncTools, _: &mut Self::Context) -> Self::Result {
        self.tools = tools;
        self.updates += 1;
        self.last_sync = Some(SyncOutcome::now(&Ok(())));
        self.events.session_state(&self.character, &self.report());
        Ok(())
    }
}

impl Handler<SessionStatus> for ScriptedModel {
    type Result = MessageResult<SessionStatus>;

    fn handle(&mut self, _: SessionStatus, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.report())
    }
}

impl Handler<CloseSession> for ScriptedModel {
    type Result = ();

    fn handle(&mut self, _: CloseSession, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

/// The scripted model calls a tool by name, as a real model's function call would arrive.
#[derive(Message)]
#[rtype(result = "Result<String, String>")]
struct ModelCalls {
    name: String,
    arguments: String,
}

impl Handler<ModelCalls> for ScriptedModel {
    /// The text the model would get back.
    type Result = ResponseActFuture<Self, Result<String, String>>;

    fn handle(&mut self, call: ModelCalls, _: &mut Self::Context) -> Self::Result {
        let Some(tool) = self.tools.iter().find(|t| t.name == call.name).cloned() else {
            return Box::pin(fut::ready(Err(format!(
                "{} is not in the session",
                call.name
            ))));
        };
        let dispatcher = self.dispatcher.clone();
        let call = ToolCall::from_raw("call_model_1".into(), call.name, call.arguments);
        Box::pin(
            async move { dispatcher.dispatch(&tool, call).await }
                .into_actor(self)
                .map(|result, act, _| {
                    act.calls_answered += 1;
                    Ok(result.model_text())
                }),
        )
    }
}

/// An in-process tool for the model to call.
struct TemperatureConverter;

impl Actor for TemperatureConverter {
    type Context = Context<Self>;
}

impl Handler<CallLocalTool> for TemperatureConverter {
    type Result = ToolOutcome;

    fn handle(&mut self, CallLocalTool(call): CallLocalTool, _: &mut Self::Context) -> ToolOutcome {
        let celsius = call
            .arguments
            .get("celsius")
            .and_then(Value::as_f64)
            .ok_or("argument 'celsius' must be a number")?;
        Ok(json!({"fahrenheit": celsius * 9.0 / 5.0 + 32.0}))
    }
}

fn parameters() -> Map<String, Value> {
    let Value::Object(schema) = json!({
        "type": "object",
        "properties": {"celsius": {"type": "number"}},
        "required": ["celsius"]
    }) else {
        unreachable!("the schema is an object")
    };
    schema
}

/// Starts a server, joins an in-process session to `Lanlan`, registers a tool (which waits for
/// that session), lets the session's model call it, and reads the sessions listing and the
/// events. Returns `{"updates", "answer", "connections", "announced"}`.
pub async fn run() -> anyhow::Result<Value> {
    let settings = Settings {
        bind: "127.0.0.1:0".parse()?,
        characters: vec![CharacterSettings::new("Lanlan")],
        ..Settings::default()
    };
    let app = Application::build(settings).await?;
    let base = format!("http://{}", app.local_addr());
    let router = app.router();
    let handle = app.handle();
    // Lanlan's events from now on (what `GET /api/events?role=Lanlan` streams).
    let mut events = app.events().subscribe(Some("Lanlan".into()), None);
    let model = ScriptedModel {
        character: "Lanlan".into(),
        since: rfc3339_now(),
        tools: Arc::from([]),
        updates: 0,
        last_sync: None,
        calls_answered: 0,
        dispatcher: app.dispatcher(),
        events: app.events(),
    }
    .start();
    actix_web::rt::spawn(app.run_until_stopped());
    println!("server listening on {base}");

    // Join: the session gets the current (empty) list before this returns.
    router
        .send(JoinSession {
            role: "Lanlan".into(),
            session: SessionHandle::embedded(&model),
        })
        .await
        .context("the router stopped")??;
    println!("joined Lanlan's sessions");

    // A registration returns only once every session of the character acknowledged it.
    let tool = ToolSpec::local(
        "convert_temperature",
        "Convert a temperature from Celsius to Fahrenheit.",
        Parameters::new(parameters()).context("the tool's parameters")?,
        "inproc:units",
        local_handler(TemperatureConverter.start().recipient()),
    );
    let report = router
        .send(RegisterTool { tool, role: None })
        .await
        .context("the router stopped")??;
    println!(
        "registered convert_temperature: affected_roles {:?}, failed_roles {:?}",
        report.affected_roles, report.failed_roles
    );

    let answer = model
        .send(ModelCalls {
            name: "convert_temperature".into(),
            arguments: r#"{"celsius": 28}"#.into(),
        })
        .await
        .context("the session stopped")?
        .map_err(anyhow::Error::msg)?;
    println!("the model called convert_temperature and got {answer}");

    let sessions: Value = awc::Client::new()
        .get(format!("{base}/api/sessions"))
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("sessions request failed: {e}"))?
        .json()
        .await
        .map_err(|e| anyhow::anyhow!("sessions answer is not JSON: {e}"))?;
    let connections = sessions["sessions_by_role"]["Lanlan"]["connections"].clone();
    println!("GET /api/sessions -> Lanlan's connections: {connections}");

    let mut announced = 0;
    while let Ok(event) = events.events.try_recv() {
        announced += u64::from(event.kind == EventKind::SessionState);
    }
    println!("the session announced its state {announced} times");

    handle.stop(true).await;
    if report.affected_roles != ["Lanlan"] {
        bail!("the registration did not reach Lanlan: {report:?}");
    }
    let updates = model.send(Updates).await?;
    Ok(
        json!({"updates": updates, "answer": answer, "connections": connections,
              "announced": announced}),
    )
}

/// How many tool lists the session took.
#[derive(Message)]
#[rtype(result = "u64")]
struct Updates;

impl Handler<Updates> for ScriptedModel {
    type Result = u64;

    fn handle(&mut self, _: Updates, _: &mut Self::Context) -> u64 {
        self.updates
    }
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let _log = runtime_tools::telemetry::init();
    run().await?;
    Ok(())
}
