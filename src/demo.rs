//! `runtime-tools demo`: the whole round trip on this machine, with nothing else running.
//!
//! It starts three things in-process, each on a free loopback port: a scripted model (a small
//! OpenAI-Realtime websocket server), the real server with one character whose live session
//! connects to that model, and an example plugin (a callback HTTP server that registers its tool
//! over `POST /api/tools/register` with an `X-Plugin-Token`, exactly as an out-of-process plugin
//! would). Then the model
//! calls the tool, and every step is printed: the registration and its `affected_roles`, the
//! `session.update` the model saw, the callback payload, and the result the model got. At the
//! end everything is stopped, so nothing is left running.
//!
//! `main` calls [`run`]; the CLI test runs the binary.

use std::io::Write;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use anyhow::{Context, anyhow, bail};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::actors::router::RemoveCharacter;
use crate::actors::settings::CharacterSettings;
use crate::config::Settings;
use crate::session::settings::Dialect;
use crate::session::settings::SessionSettings;
use crate::startup::Application;

/// The demo's character.
const CHARACTER: &str = "Lanlan";

/// The example plugin's tool.
const TOOL: &str = "get_weather";

/// The example plugin's `source` tag.
const SOURCE: &str = "plugin:demo-weather";

/// The call id of the model's scripted call.
const CALL_ID: &str = "call_demo_1";

/// Longest wait for any one step: everything is local, so only a badly overloaded machine
/// comes near it, and then the demo fails with a message instead of hanging.
const STEP_DEADLINE: Duration = Duration::from_secs(20);

/// Runs the demo, writing the story to `out`. Must run inside an actix system.
pub async fn run(out: &mut impl Write) -> anyhow::Result<()> {
    writeln!(
        out,
        "runtime-tools demo: a plugin's tool, called by a model, on this machine"
    )?;

    let (model, mut model_events) = ScriptedModel::start().context("starting the model")?;
    step(
        out,
        1,
        &format!(
            "The scripted model (a fake OpenAI Realtime server) listens on {}",
            model.url
        ),
    )?;

    let mut settings = Settings {
        bind: "127.0.0.1:0".parse()?,
        characters: vec![CharacterSettings::new(CHARACTER)],
        workers: Some(1),
        ..Settings::default()
    };
    settings.characters[0].session = Some(SessionSettings::new(&model.url, Dialect::Openai));
    let app = Application::build(settings).await?;
    let base = format!("http://{}", app.local_addr());
    let router = app.router();
    let server = app.handle();
    actix_web::rt::spawn(app.run_until_stopped());
    let first_update = model_events
        .next_of("session.update", "the session's first session.update")
        .await?;
    step(
        out,
        2,
        &format!(
            "The server listens on {base}; character {CHARACTER:?}'s session connected and sent \
             its (still empty) tools"
        ),
    )?;
    json_block(out, &first_update)?;

    let (plugin, mut callbacks) = ExamplePlugin::start().context("starting the plugin")?;
    // The plugin's own secret: its first registration binds its source to it, so no other
    // process can change its tools. Never printed.
    let token = uuid::Uuid::new_v4().simple().to_string();
    let registration = json!({
        "name": TOOL,
        "description": "Get the weather for a location.",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"]
        },
        "callback_url": plugin.callback_url,
        "role": null,
        "source": SOURCE,
        "timeout_seconds": 10
    });
    step(
        out,
        3,
        &format!(
            "The example plugin serves {} and registers {TOOL:?} with its X-Plugin-Token (which \
             binds {SOURCE} to it): POST {base}/api/tools/register",
            plugin.callback_url
        ),
    )?;
    let (status, answer) =
        post(&format!("{base}/api/tools/register"), &registration, &token).await?;
    if status != 200 {
        bail!("registration answered HTTP {status}: {answer}");
    }
    writeln!(out, "    HTTP {status}")?;
    json_block(out, &answer)?;
    writeln!(out, "    affected_roles: {}", answer["affected_roles"])?;

    let update = model_events
        .next_of("session.update", "the session.update carrying the tool")
        .await?;
    step(
        out,
        4,
        "The session.update the model saw (acknowledged before the registration returned)",
    )?;
    json_block(out, &update)?;

    let arguments = json!({"location": "Shanghai"}).to_string();
    let call = json!({
        "type": "response.function_call_arguments.done", "event_id": "srv_demo_1",
        "response_id": "resp_demo_1", "item_id": "item_demo_1", "output_index": 0,
        "call_id": CALL_ID, "name": TOOL, "arguments": arguments,
    });
    let done = json!({
        "type": "response.done", "event_id": "srv_demo_2",
        "response": {"id": "resp_demo_1", "status": "completed", "output": [{
            "type": "function_call", "id": "item_demo_1", "call_id": CALL_ID,
            "name": TOOL, "arguments": arguments, "status": "completed"}]},
    });
    step(
        out,
        5,
        &format!("The model calls {TOOL:?} (response.function_call_arguments.done, response.done)"),
    )?;
    json_block(out, &call)?;
    model.push(&call).await?;
    model.push(&done).await?;

    let payload = within(STEP_DEADLINE, "the plugin's callback", callbacks.recv())
        .await?
        .ok_or_else(|| anyhow!("the plugin stopped before its callback was called"))?;
    step(out, 6, "The plugin's callback received")?;
    json_block(out, &payload)?;

    let result = model_events
        .next_of("conversation.item.create", "the result of the call")
        .await?;
    step(
        out,
        7,
        "The result the model got (conversation.item.create)",
    )?;
    json_block(out, &result)?;
    let next = model_events
        .next_of("response.create", "the response.create after the result")
        .await?;
    step(out, 8, "The model is asked to go on (response.create)")?;
    json_block(out, &next)?;

    let (status, answer) = post(
        &format!("{base}/api/tools/clear"),
        &json!({"source": SOURCE, "role": null}),
        &token,
    )
    .await?;
    step(
        out,
        9,
        &format!("At shutdown the plugin clears its tools: POST {base}/api/tools/clear"),
    )?;
    writeln!(out, "    HTTP {status}")?;
    json_block(out, &answer)?;

    // The character's session goes first, so it does not try to reconnect to the stopped model.
    router
        .send(RemoveCharacter {
            name: CHARACTER.into(),
        })
        .await??;
    server.stop(true).await;
    // The dispatcher keeps its connection to the plugin alive for the next call, which a
    // graceful stop would wait out; both peers are done, so they stop at once.
    plugin.server.stop(false).await;
    model.server.stop(false).await;
    writeln!(
        out,
        "\nDone: the server, the plugin and the model have stopped."
    )?;
    out.flush()?;
    Ok(())
}

fn step(out: &mut impl Write, n: u32, text: &str) -> std::io::Result<()> {
    writeln!(out, "\n[{n}] {text}")
}

/// `value` as indented JSON.
fn json_block(out: &mut impl Write, value: &Value) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    for line in text.lines() {
        writeln!(out, "    {line}")?;
    }
    Ok(())
}

async fn within<T>(
    deadline: Duration,
    what: &str,
    f: impl Future<Output = T>,
) -> anyhow::Result<T> {
    tokio::time::timeout(deadline, f).await.map_err(|_| {
        anyhow!(
            "timed out after {} s waiting for {what}",
            deadline.as_secs()
        )
    })
}

/// POSTs `body` as a plugin would, with its `token`; returns the status and the JSON answer.
async fn post(url: &str, body: &Value, token: &str) -> anyhow::Result<(u16, Value)> {
    let client = awc::Client::builder().timeout(STEP_DEADLINE).finish();
    // `Connection: close`, so stopping the server gracefully need not wait out a keep-alive.
    let mut response = client
        .post(url)
        .insert_header(("X-Plugin-Token", token))
        .force_close()
        .send_json(body)
        .await
        .map_err(|e| anyhow!("POST {url}: {e}"))?;
    let bytes = response.body().await.context("reading the answer")?;
    let answer = serde_json::from_slice(&bytes).context("the answer is not JSON")?;
    Ok((response.status().as_u16(), answer))
}

/// A listener on a free loopback port.
fn loopback_listener() -> std::io::Result<TcpListener> {
    TcpListener::bind("127.0.0.1:0")
}

/// The example plugin: one callback route that answers with the weather.
struct ExamplePlugin {
    callback_url: String,
    server: ServerHandle,
}

impl ExamplePlugin {
    /// Starts the callback server; each payload it receives arrives on the receiver.
    fn start() -> anyhow::Result<(Self, mpsc::UnboundedReceiver<Value>)> {
        let listener = loopback_listener()?;
        let callback_url = format!("http://{}/tools/{TOOL}", listener.local_addr()?);
        let (sender, received) = mpsc::unbounded_channel::<Value>();
        let server = HttpServer::new(move || {
            let sender = sender.clone();
            App::new().route(
                &format!("/tools/{TOOL}"),
                web::post().to(move |payload: web::Json<Value>| {
                    let sender = sender.clone();
                    async move {
                        let location = payload["arguments"]["location"].clone();
                        let _ = sender.send(payload.into_inner());
                        HttpResponse::Ok().json(json!({
                            "output": {"location": location, "temperature_c": 28, "sky": "clear"},
                            "is_error": false,
                        }))
                    }
                }),
            )
        })
        .workers(1)
        .disable_signals()
        .listen(listener)?
        .run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        Ok((
            Self {
                callback_url,
                server: handle,
            },
            received,
        ))
    }
}

/// The scripted model: accepts the session's websocket, acknowledges every `session.update`,
/// reports every client event, and pushes the events the script gives it.
struct ScriptedModel {
    url: String,
    server: ServerHandle,
    /// The connected session, to push server events to.
    session: Arc<Mutex<Option<actix_ws::Session>>>,
}

/// The client events the model received, in order.
struct ModelEvents(mpsc::UnboundedReceiver<Value>);

impl ModelEvents {
    /// The next client event of type `kind` (earlier events of other types are passed over).
    async fn next_of(&mut self, kind: &str, what: &str) -> anyhow::Result<Value> {
        within(STEP_DEADLINE, what, async {
            while let Some(event) = self.0.recv().await {
                if event["type"] == kind {
                    return Ok(event);
                }
            }
            Err(anyhow!("the model stopped before {what}"))
        })
        .await?
    }
}

#[derive(Clone)]
struct ModelState {
    events: mpsc::UnboundedSender<Value>,
    session: Arc<Mutex<Option<actix_ws::Session>>>,
}

impl ScriptedModel {
    fn start() -> anyhow::Result<(Self, ModelEvents)> {
        let listener = loopback_listener()?;
        let url = format!("ws://{}/v1/realtime?model=scripted", listener.local_addr()?);
        let (events, received) = mpsc::unbounded_channel();
        let state = ModelState {
            events,
            session: Arc::default(),
        };
        let session = state.session.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(web::Data::new(state.clone()))
                .route("/v1/realtime", web::get().to(model_handshake))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)?
        .run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        Ok((
            Self {
                url,
                server: handle,
                session,
            },
            ModelEvents(received),
        ))
    }

    /// Sends a server event to the connected session.
    async fn push(&self, event: &Value) -> anyhow::Result<()> {
        let session = self.session.lock().expect("model state").clone();
        let mut session = session.ok_or_else(|| anyhow!("no session is connected"))?;
        session
            .text(event.to_string())
            .await
            .map_err(|_| anyhow!("the session's connection closed"))
    }
}

async fn model_handshake(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<ModelState>,
) -> actix_web::Result<HttpResponse> {
    let (response, mut session, mut stream) = actix_ws::handle(&req, body)?;
    *state.session.lock().expect("model state") = Some(session.clone());
    let state = state.get_ref().clone();
    actix_web::rt::spawn(async move {
        let created = json!({"type": "session.created", "event_id": "srv_created",
                             "session": {"type": "realtime", "id": "sess_demo"}});
        let _ = session.text(created.to_string()).await;
        while let Some(Ok(message)) = stream.next().await {
            let actix_ws::Message::Text(text) = message else {
                continue;
            };
            let Ok(event) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            if event["type"] == "session.update" {
                let ack = json!({"type": "session.updated", "event_id": "srv_ack",
                                 "session": event["session"]});
                let _ = session.text(ack.to_string()).await;
            }
            let _ = state.events.send(event);
        }
    });
    Ok(response)
}
