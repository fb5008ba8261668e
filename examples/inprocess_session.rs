//! An application that owns its model connection in-process makes it a character's session: an
//! actor that handles `SyncTools` (each new tool list, to be acknowledged), `SessionStatus` and
//! `CloseSession` joins the character with `JoinSession`; from then on every registration waits
//! for it, as for any session. When its model calls a tool, it runs the call with the
//! dispatcher directly — `find_tools` too, when the character holds more tools than its budget
//! and the list carries it: the server answers that call and hands the session the tools found
//! first. It announces its own state on the server's event hub
//! (`GET /api/events`, `session.state`), as the server's sessions do. When the person interrupts,
//! it cancels the calls still running (the dispatcher drops them), answers each with the text the
//! server's own sessions give the model, and announces it as a cancelled `tool.call`.
//!
//! ```text
//! cargo run --release --example inprocess_session
//! ```
//!
//! Here the "model" is scripted: it takes the tool lists and, once `convert_temperature` is
//! there, calls it. It builds the server on a free port, joins `Lanlan`, registers an in-process
//! tool through the router, makes the call, then calls a slow tool and the person interrupts;
//! it reads `GET /api/sessions` and the events it announced, prints each step and exits 0. The
//! test suite runs [`run`] (`tests/api/examples.rs`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use anyhow::{Context as _, bail};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use runtime_tools::embedding::{
    CallCanceller, CallStart, CallWatch, Caller, CloseSession, ConnectionKind, ConnectionReport,
    ConnectionState, Conversation, SessionHandle, SessionStatus, SyncError, SyncOutcome, SyncTools,
    ToolResult, rfc3339_now,
};
use runtime_tools::{
    Application, CallLocalTool, CharacterSettings, Dispatcher, EventHub, EventKind, JoinSession,
    LocalHandler, LocalToolHandler, Parameters, RegisterTool, Settings, SharedTool, ToolCall,
    ToolOutcome, ToolSpec, local_handler,
};
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

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
    /// The calls running now, each stoppable.
    running: Vec<RunningCall>,
}

/// A call of the model's that runs beside the conversation.
struct RunningCall {
    tool: SharedTool,
    call_id: String,
    started: Instant,
    canceller: CallCanceller,
    /// Observes the call (metrics, recent calls, its span, the `tool.call` event) until it ends.
    watch: CallWatch,
}

impl ScriptedModel {
    /// Starts observing a call of `tool`: what makes it a `tool.call` event, a metric, an
    /// entry of `GET /api/calls` and a span, like the server's own sessions' calls.
    fn watch(&self, tool: &SharedTool, call_id: &str) -> CallWatch {
        CallWatch::start(
            &self.events,
            CallStart {
                role: &self.character,
                tool: &tool.name,
                source: Some(&tool.source),
                call_id,
                caller: Caller::Model,
                kind: Some(ConnectionKind::Embedded),
                behavior: tool.behavior,
            },
            None,
        )
    }

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
            // It offers its model every tool it is handed.
            offered_tools: self.tools.len(),
            over_budget: false,
            gemini: None,
            running_calls: Vec::new(),
            conversation: Conversation::Idle,
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
        let mut call = ToolCall::from_raw("call_model_1".into(), call.name, call.arguments);
        let watch = self.watch(&tool, &call.call_id);
        // The callback's `traceparent` names the call's span.
        call.trace = Some(watch.trace().clone());
        Box::pin(
            async move { dispatcher.dispatch(&tool, call).await }
                .into_actor(self)
                .map(|result, act, _| {
                    watch.finished(&result);
                    act.calls_answered += 1;
                    Ok(result.model_text())
                }),
        )
    }
}

/// The model calls a tool that takes its time: it runs beside the conversation.
#[derive(Message)]
#[rtype(result = "()")]
struct ModelStartsCall {
    name: String,
    call_id: String,
}

impl Handler<ModelStartsCall> for ScriptedModel {
    type Result = ();

    fn handle(&mut self, call: ModelStartsCall, ctx: &mut Self::Context) {
        let Some(tool) = self.tools.iter().find(|t| t.name == call.name).cloned() else {
            return;
        };
        let mut model_call = ToolCall::from_raw(call.call_id.clone(), call.name, "{}".into());
        let watch = self.watch(&tool, &call.call_id);
        model_call.trace = Some(watch.trace().clone());
        let (canceller, running) = self
            .dispatcher
            .dispatch_cancellable(tool.clone(), model_call);
        self.running.push(RunningCall {
            tool,
            call_id: call.call_id.clone(),
            started: Instant::now(),
            canceller,
            watch,
        });
        ctx.spawn(running.into_actor(self).map(move |result, act, _| {
            // `None`: cancelled, and answered when it was.
            if let Some(result) = result {
                if let Some(i) = act.running.iter().position(|r| r.call_id == call.call_id) {
                    act.running.swap_remove(i).watch.finished(&result);
                }
                act.calls_answered += 1;
            }
        }));
    }
}

/// The person starts speaking: the calls of the turn they interrupt are cancelled. Returns the
/// text the model gets for each.
#[derive(Message)]
#[rtype(result = "Vec<String>")]
struct PersonInterrupts;

impl Handler<PersonInterrupts> for ScriptedModel {
    type Result = Vec<String>;

    fn handle(&mut self, _: PersonInterrupts, _: &mut Self::Context) -> Vec<String> {
        let mut answers = Vec::new();
        for call in std::mem::take(&mut self.running) {
            // The call's dispatch is dropped: its callback's connection closes, an MCP server
            // is told, an in-process tool's future is dropped.
            call.canceller.cancel();
            let ran = call.started.elapsed();
            let result = ToolResult::interrupted(call.call_id.clone(), call.tool.name.clone(), ran);
            self.calls_answered += 1;
            // Announced as cancelled (the result's outcome), with how long it ran.
            call.watch.finished(&result);
            answers.push(result.model_text());
        }
        answers
    }
}

/// An in-process tool that waits for a courier who never comes: only a cancel ends its call.
/// It says when a call started and when the call's future was dropped.
struct Courier {
    started: Mutex<Option<oneshot::Sender<()>>>,
    dropped: Mutex<Option<oneshot::Sender<()>>>,
}

/// Sends when dropped.
struct OnDrop(Option<oneshot::Sender<()>>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some(signal) = self.0.take() {
            let _ = signal.send(());
        }
    }
}

impl LocalHandler for Courier {
    fn call(&self, _: ToolCall) -> BoxFuture<'static, ToolOutcome> {
        if let Some(started) = self.started.lock().unwrap().take() {
            let _ = started.send(());
        }
        let dropped = OnDrop(self.dropped.lock().unwrap().take());
        async move {
            let _dropped = dropped;
            std::future::pending::<ToolOutcome>().await
        }
        .boxed()
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

/// A tool that takes no arguments.
fn no_parameters() -> Map<String, Value> {
    let Value::Object(schema) = json!({"type": "object", "properties": {}}) else {
        unreachable!("the schema is an object")
    };
    schema
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
/// that session), lets the session's model call it, then a slow tool the person interrupts, and
/// reads the sessions listing and the events. Returns `{"updates", "answer", "interrupted",
/// "courier_dropped", "connections", "announced", "cancelled"}`.
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
        running: Vec::new(),
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

    // A slow tool: the model calls it, and the person speaks before it answers.
    let (started, courier_started) = oneshot::channel();
    let (dropped, courier_dropped) = oneshot::channel();
    let courier = ToolSpec::local(
        "wait_for_courier",
        "Wait until the courier arrives.",
        Parameters::new(no_parameters()).context("the courier's parameters")?,
        "inproc:courier",
        LocalToolHandler(Arc::new(Courier {
            started: Mutex::new(Some(started)),
            dropped: Mutex::new(Some(dropped)),
        })),
    );
    router
        .send(RegisterTool {
            tool: courier,
            role: None,
        })
        .await
        .context("the router stopped")??;
    model
        .send(ModelStartsCall {
            name: "wait_for_courier".into(),
            call_id: "call_model_2".into(),
        })
        .await?;
    tokio::time::timeout(Duration::from_secs(10), courier_started)
        .await
        .context("the courier's call did not start")??;
    let interrupted = model.send(PersonInterrupts).await?;
    println!("the person interrupted; the model was told {interrupted:?}");
    let courier_dropped = tokio::time::timeout(Duration::from_secs(10), courier_dropped)
        .await
        .is_ok_and(|signal| signal.is_ok());
    println!("the courier's call was dropped: {courier_dropped}");

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

    let (mut announced, mut cancelled) = (0, 0);
    while let Ok(event) = events.events.try_recv() {
        announced += u64::from(event.kind == EventKind::SessionState);
        cancelled += u64::from(
            event.kind == EventKind::ToolCall
                && std::str::from_utf8(event.frame())
                    .is_ok_and(|f| f.contains("\"cancelled\":true")),
        );
    }
    println!("the session announced its state {announced} times and {cancelled} cancelled call");

    handle.stop(true).await;
    if report.affected_roles != ["Lanlan"] {
        bail!("the registration did not reach Lanlan: {report:?}");
    }
    let updates = model.send(Updates).await?;
    Ok(
        json!({"updates": updates, "answer": answer, "interrupted": interrupted,
               "courier_dropped": courier_dropped, "connections": connections,
               "announced": announced, "cancelled": cancelled}),
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
