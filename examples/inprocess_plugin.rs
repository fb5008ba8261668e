//! An in-process plugin: Rust code in the same process as the server registers an actor as a
//! tool through the router, and the tool is then called over HTTP like any other.
//!
//! ```text
//! cargo run --release --example inprocess_plugin
//! ```
//!
//! It builds the application on `127.0.0.1:0` (a free port, so it never collides with a running
//! server), registers `convert_temperature` for every character, invokes it through
//! `POST /api/tools/invoke`, prints each step, stops the server and exits 0. The test suite runs
//! [`run`] too (`tests/api/examples.rs`), so this example cannot rot.

use actix::prelude::*;
use anyhow::{Context as _, bail};
use runtime_tools::{
    Application, CallLocalTool, CharacterSettings, Parameters, RegisterTool, Settings, ToolOutcome,
    ToolSpec, local_handler,
};
use serde_json::{Map, Value, json};

/// The tool: converts degrees Celsius to Fahrenheit. An actor, so it may keep state (here, a
/// count of the calls it has answered) without locks.
struct TemperatureConverter {
    calls: u64,
}

impl Actor for TemperatureConverter {
    type Context = Context<Self>;
}

impl Handler<CallLocalTool> for TemperatureConverter {
    /// `Ok(output)` is what the model receives; `Err(text)` becomes an error result.
    type Result = ToolOutcome;

    fn handle(&mut self, CallLocalTool(call): CallLocalTool, _: &mut Self::Context) -> ToolOutcome {
        self.calls += 1;
        let Some(celsius) = call.arguments.get("celsius").and_then(Value::as_f64) else {
            return Err("argument 'celsius' must be a number".to_owned());
        };
        Ok(json!({
            "celsius": celsius,
            "fahrenheit": celsius * 9.0 / 5.0 + 32.0,
            "calls_answered": self.calls,
        }))
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

/// Starts a server, registers the in-process tool, calls it over HTTP and stops the server.
/// Returns the invoke route's answer.
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
    actix_web::rt::spawn(app.run_until_stopped());
    println!("server listening on {base}");

    // Register: the same router message the HTTP register route sends. The schema is checked
    // and compiled first, as the register route does; a bad one is an error here, not a panic.
    let parameters = Parameters::new(parameters()).context("the tool's parameters")?;
    let converter = TemperatureConverter { calls: 0 }.start();
    let tool = ToolSpec::local(
        "convert_temperature",
        "Convert a temperature from Celsius to Fahrenheit.",
        parameters,
        "inproc:units",
        local_handler(converter.recipient()),
    );
    let report = router
        .send(RegisterTool { tool, role: None })
        .await
        .context("the router stopped")??;
    println!(
        "registered convert_temperature: affected_roles {:?}, failed_roles {:?}",
        report.affected_roles, report.failed_roles
    );

    // Invoke over HTTP, exactly as a plugin author testing a tool would.
    let mut response = awc::Client::new()
        .post(format!("{base}/api/tools/invoke"))
        .send_json(&json!({
            "name": "convert_temperature",
            "arguments": {"celsius": 28},
            "role": "Lanlan",
            "call_id": "call_example"
        }))
        .await
        .map_err(|e| anyhow::anyhow!("invoke request failed: {e}"))?;
    let status = response.status();
    let answer: Value = response
        .json()
        .await
        .map_err(|e| anyhow::anyhow!("invoke answer is not JSON: {e}"))?;
    println!("POST /api/tools/invoke -> {status}: {answer}");

    handle.stop(true).await;
    if !status.is_success() || answer["is_error"] != json!(false) {
        bail!("the tool call did not succeed: {status} {answer}");
    }
    Ok(answer)
}

#[actix_web::main]
async fn main() -> anyhow::Result<()> {
    let _log = runtime_tools::telemetry::init();
    run().await?;
    Ok(())
}
