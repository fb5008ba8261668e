//! The driver of one chat request: it asks the upstream round after round as its
//! [`Conversation`] says, runs the server's calls through the dispatcher (concurrently, results
//! in the model's order, each announced as `tool.call`), and gives the app one answer — a
//! stream that looks like one message, or one completion.
//!
//! Before the first round answers with success nothing is sent to the app, so an upstream
//! error (or one that cannot be reached) is the app's answer, with the upstream's status; a
//! later error ends a stream with an error event. Everything here is owned by the request:
//! when the app goes away, the request's future is dropped, and with it the upstream exchange
//! and the running callbacks (their connections close).

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::{Either, join_all, select};
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};

use super::answer::{self, ModelCall, RoundAnswer, StreamRound};
use super::conversation::{Conversation, MAX_CALLS_PER_ROUND, Step};
use super::turns::{self, HANDED_TURN_TTL, MAX_HANDED_TURN_BYTES, MAX_HANDED_TURNS, TooLarge};
use super::upstream::{AppHeaders, UpstreamError};
use super::wire::{self, AppStream, ChatRequest, error_body, error_text, refuses_tools};
use super::{ChatEndpoint, RequestPermit};
use crate::dispatch::{Dispatcher, Where};
use crate::domain::call::{ToolCall, ToolResult};
use crate::domain::connection::ConnectionKind;
use crate::domain::registry::not_registered_text;
use crate::domain::snapshot::ToolCell;
use crate::domain::tool::SharedTool;
use crate::events::{CallAnnouncement, Caller, EventHub, ToolCallFinished};

/// Chunks waiting for an app that reads its stream slowly: the upstream is read only as fast
/// as the app takes what came before.
const STREAM_BUFFER: usize = 64;

/// What a request needs besides its body.
pub(crate) struct ChatContext {
    pub role: String,
    pub endpoint: Arc<ChatEndpoint>,
    /// The character's published tools.
    pub tools: ToolCell,
    pub dispatcher: Dispatcher,
    pub events: EventHub,
    /// The app's headers that pass upstream.
    pub app: AppHeaders,
    /// The request's place among the character's running requests: held as long as its work.
    pub _permit: RequestPermit,
}

/// The app's answer.
#[derive(Debug)]
pub(crate) enum Reply {
    /// A whole answer: status, content type and body (a completion, or an error).
    Whole {
        status: u16,
        content_type: String,
        body: Bytes,
    },
    /// A stream of SSE frames.
    Stream(mpsc::Receiver<Bytes>),
}

impl Reply {
    fn json(status: u16, body: &Value) -> Self {
        Self::Whole {
            status,
            content_type: "application/json".into(),
            body: Bytes::from(body.to_string()),
        }
    }
}

/// Why a request ended without its answer.
enum Failure {
    Upstream(UpstreamError),
    /// The upstream answered with an error status.
    Status {
        status: u16,
        content_type: String,
        body: Bytes,
    },
    /// The upstream answered with success, but not with a chat completion.
    Invalid(String),
    /// An error event in the upstream's stream.
    StreamError(Value),
    /// The app went away.
    Gone,
}

impl Failure {
    /// What the log and `GET /api/sessions` say of it.
    fn text(&self) -> String {
        match self {
            Failure::Upstream(e) => e.to_string(),
            Failure::Status { status, body, .. } => {
                format!("the upstream answered HTTP {status}: {}", error_text(body))
            }
            Failure::Invalid(text) => text.clone(),
            Failure::StreamError(error) => {
                format!(
                    "the upstream's stream ended with an error: {}",
                    error_text(error.to_string().as_bytes())
                )
            }
            Failure::Gone => "the app went away".into(),
        }
    }

    /// The app's answer when nothing was sent yet.
    fn reply(self) -> Reply {
        match self {
            Failure::Status {
                status,
                content_type,
                body,
            } => Reply::Whole {
                status,
                content_type,
                body,
            },
            Failure::Upstream(e) => Reply::json(
                e.status(),
                &error_body(&e.to_string(), "upstream_error", None, Some(e.code())),
            ),
            failure @ (Failure::Invalid(_) | Failure::StreamError(_) | Failure::Gone) => {
                Reply::json(
                    502,
                    &error_body(
                        &failure.text(),
                        "upstream_error",
                        None,
                        Some("upstream_invalid"),
                    ),
                )
            }
        }
    }

    /// The error event that ends a stream already under way.
    fn event(self) -> Bytes {
        let error = match self {
            Failure::StreamError(error) => error,
            Failure::Status { status, body, .. } => wire::upstream_error_object(status, &body),
            other => {
                let code = match &other {
                    Failure::Upstream(e) => e.code(),
                    _ => "upstream_invalid",
                };
                json!({"message": other.text(), "type": "upstream_error", "param": null, "code": code})
            }
        };
        AppStream::error(&error)
    }
}

/// Serves one chat request.
pub(crate) async fn complete(ctx: ChatContext, mut request: ChatRequest) -> Reply {
    let settings = ctx.endpoint.settings();
    let prompt = turns::last_prompt(&request.messages);
    let (messages, restored) = ctx.endpoint.begin(std::mem::take(&mut request.messages));
    if restored.missed > 0 {
        tracing::warn!(character = %ctx.role, turns = restored.missed, "a request carried turns whose server calls were forgotten (kept at most {} h, {MAX_HANDED_TURNS} turns and {} MiB): the model sees only the app's calls of them", HANDED_TURN_TTL.as_secs() / 3600, MAX_HANDED_TURN_BYTES >> 20);
    }
    let stream = request.stream;
    let include_usage = request.include_usage;
    let conversation = Conversation::new(
        request,
        messages,
        settings.model.clone(),
        settings.max_tool_rounds,
        settings.vision,
    );
    let mut driver = Driver {
        ctx,
        conversation,
        prompt,
        out: Out::Collect {
            first: None,
            last: None,
        },
    };
    if !stream {
        return match driver.run().await {
            Ok(completion) => Reply::json(200, &completion.unwrap_or_default()),
            Err(failure) => {
                driver.record(&failure);
                failure.reply()
            }
        };
    }
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let (start, started) = oneshot::channel();
    driver.out = Out::Stream {
        tx: tx.clone(),
        start: Some(start),
        encoder: AppStream::new(include_usage),
    };
    actix_web::rt::spawn(async move {
        let work = std::pin::pin!(driver.run_stream());
        let gone = std::pin::pin!(tx.closed());
        // The app went away: dropping the work closes the upstream exchange and the callbacks.
        if let Either::Right(_) = select(work, gone).await {
            tracing::debug!(
                "a chat stream's app went away; its upstream request and calls were cancelled"
            );
        }
    });
    match started.await {
        Ok(Some(reply)) => reply,
        Ok(None) => Reply::Stream(rx),
        // The stream's task ended without a word: the app went away meanwhile.
        Err(_) => Reply::json(
            500,
            &error_body(
                "the chat request ended before it answered",
                "server_error",
                None,
                None,
            ),
        ),
    }
}

/// Where the answer goes.
enum Out {
    /// A completion, built at the end: the first round's completion (its `id`, `created`) and
    /// the last one.
    Collect {
        first: Option<Map<String, Value>>,
        last: Option<Map<String, Value>>,
    },
    /// A stream; `start` tells the handler, once, whether it began (`None`) or what to answer
    /// instead.
    Stream {
        tx: mpsc::Sender<Bytes>,
        start: Option<oneshot::Sender<Option<Reply>>>,
        encoder: AppStream,
    },
}

struct Driver {
    ctx: ChatContext,
    conversation: Conversation,
    /// The person's last message of the app's request: a turn handed back follows it.
    prompt: Option<Value>,
    out: Out,
}

impl Driver {
    /// The stream's whole life: its answer, or what ends it — the app's answer when nothing
    /// was sent yet, else an error event.
    async fn run_stream(mut self) {
        let failure = match self.run().await {
            Ok(_) | Err(Failure::Gone) => return,
            Err(failure) => failure,
        };
        self.record(&failure);
        if let Out::Stream { tx, start, .. } = &mut self.out {
            match start.take() {
                Some(start) => {
                    let _ = start.send(Some(failure.reply()));
                }
                None => {
                    let _ = tx.send(failure.event()).await;
                }
            }
        }
    }

    /// Logs a failure and keeps it for the report.
    fn record(&self, failure: &Failure) {
        let text = failure.text();
        tracing::warn!(character = %self.ctx.role, "chat request failed: {text}");
        self.ctx.endpoint.failed(text);
        self.announce();
    }

    /// Announces the endpoint's report (`chat.state`).
    fn announce(&self) {
        self.ctx
            .events
            .chat_state(&self.ctx.role, &self.ctx.endpoint.report());
    }

    /// The tool loop; its result is the completion (or `None` for a stream, which has sent
    /// its answer).
    async fn run(&mut self) -> Result<Option<Value>, Failure> {
        let endpoint = self.ctx.endpoint.clone();
        let upstream = endpoint.upstream();
        let snapshot = self.ctx.tools.load_full();
        let (takes, forgot) = endpoint.takes_tools(self.conversation.model(), snapshot.applied());
        if !takes {
            self.conversation.withhold_tools();
        }
        if forgot {
            tracing::info!(character = %self.ctx.role, model = self.conversation.model(), "the character's tools changed since the model refused them: offering them again");
            self.announce();
        }
        loop {
            let snapshot = self.ctx.tools.load_full();
            let registered: Vec<SharedTool> = snapshot.tools().cloned().collect();
            let round = self.conversation.next_round(&registered);
            if endpoint.clashes(&round.clashes) {
                if !round.clashes.is_empty() {
                    tracing::info!(character = %self.ctx.role, clashes = ?round.clashes, "registered tools left out of a chat request: the app has tools of the same names");
                }
                self.announce();
            }
            endpoint.round();
            let stream = self.conversation.request().stream;
            let response = upstream
                .chat(round.body, stream, &self.ctx.app)
                .await
                .map_err(Failure::Upstream)?;
            let status = response.status().as_u16();
            let content_type = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            if !response.status().is_success() {
                let body = upstream
                    .read(response.into_body(), &self.ctx.app)
                    .await
                    .map_err(Failure::Upstream)?;
                if refuses_tools(status, &body) && self.conversation.refuse_tools() {
                    let model = self.conversation.model().to_owned();
                    let error = error_text(&body);
                    tracing::warn!(character = %self.ctx.role, model = %model, status, "the model refused tools; asking again without them until the character's tools change: {error}");
                    endpoint.refused_tools(&model, snapshot.applied(), error);
                    self.announce();
                    continue;
                }
                return Err(Failure::Status {
                    status,
                    content_type,
                    body,
                });
            }
            let mut answer = if stream && content_type.starts_with("text/event-stream") {
                self.begin_stream()?;
                self.read_stream(response.into_body()).await?
            } else {
                self.read_completion(response.into_body()).await?
            };
            let text = answer.text.clone();
            match self.conversation.answered(&mut answer) {
                Step::Deliver { finish_reason } => return self.deliver(&finish_reason, &[]).await,
                Step::Run(calls) => {
                    let results = self.run_calls(&calls).await;
                    self.conversation.ran(&text, &calls, results);
                }
                Step::HandOff { all, server, app } => {
                    if !server.is_empty() {
                        let results = self.run_calls(&server).await;
                        let turn =
                            self.conversation
                                .hand_off(&all, server, results, self.prompt.take());
                        if let Err(TooLarge { bytes }) = endpoint.keep(turn) {
                            tracing::warn!(character = %self.ctx.role, bytes, "a turn handed back to the app is larger than the {MAX_HANDED_TURN_BYTES} bytes kept per character: its next request goes with only the app's calls");
                        }
                    }
                    return self.deliver("tool_calls", &app).await;
                }
            }
        }
    }

    /// Tells the handler the stream began (once).
    fn begin_stream(&mut self) -> Result<(), Failure> {
        if let Out::Stream { start, .. } = &mut self.out
            && let Some(start) = start.take()
        {
            start.send(None).map_err(|_| Failure::Gone)?;
        }
        Ok(())
    }

    async fn send(&mut self, frame: Bytes) -> Result<(), Failure> {
        if let Out::Stream { tx, .. } = &self.out {
            tx.send(frame).await.map_err(|_| Failure::Gone)?;
            // The response writes it now, before the rest of what the upstream sent is read:
            // the person sees the first words without waiting for the later ones to be parsed.
            tokio::task::yield_now().await;
        }
        Ok(())
    }

    fn encoder(&mut self) -> &mut AppStream {
        match &mut self.out {
            Out::Stream { encoder, .. } => encoder,
            Out::Collect { .. } => unreachable!("only a stream has an encoder"),
        }
    }

    /// Reads a streamed round, forwarding its text to the app as it comes.
    async fn read_stream(&mut self, body: Incoming) -> Result<RoundAnswer, Failure> {
        let endpoint = self.ctx.endpoint.clone();
        let mut events = endpoint.upstream().events(body, &self.ctx.app);
        let mut round = StreamRound::default();
        self.encoder().new_round();
        while let Some(data) = events.next().await.map_err(Failure::Upstream)? {
            if data.trim() == "[DONE]" {
                break;
            }
            let Ok(mut chunk) = serde_json::from_str::<Map<String, Value>>(&data) else {
                return Err(Failure::Invalid(format!(
                    "the upstream's stream sent data that is not a JSON object: {}",
                    error_text(data.as_bytes())
                )));
            };
            if let Some(error) = chunk.remove("error").filter(|e| !e.is_null()) {
                return Err(Failure::StreamError(error));
            }
            self.encoder().adopt_header(&chunk);
            if round.take(&mut chunk) {
                let frame = self.encoder().forward(chunk);
                self.send(frame).await?;
            }
        }
        Ok(round.finish())
    }

    /// Reads a whole completion (a stream whose upstream answered without streaming gets its
    /// text as one part).
    async fn read_completion(&mut self, body: Incoming) -> Result<RoundAnswer, Failure> {
        let endpoint = self.ctx.endpoint.clone();
        let body = endpoint
            .upstream()
            .read(body, &self.ctx.app)
            .await
            .map_err(Failure::Upstream)?;
        let Some(completion) = answer::read_completion(&body) else {
            return Err(Failure::Invalid(format!(
                "the upstream answered with success, but not with a chat completion: {}",
                error_text(&body)
            )));
        };
        match &mut self.out {
            Out::Collect { first, last } => {
                if first.is_none() {
                    *first = Some(completion.object.clone());
                }
                *last = Some(completion.object);
            }
            Out::Stream { .. } => {
                self.begin_stream()?;
                let encoder = self.encoder();
                encoder.adopt_header(&completion.object);
                encoder.new_round();
                if !completion.answer.text.is_empty() {
                    let chunk = json!({"choices": [{"index": 0,
                        "delta": {"content": completion.answer.text}, "finish_reason": null}]});
                    let frame = encoder.forward(chunk.as_object().cloned().unwrap_or_default());
                    self.send(frame).await?;
                }
            }
        }
        Ok(completion.answer)
    }

    /// Runs the server's calls of a round concurrently; results in the model's order.
    async fn run_calls(&self, calls: &[ModelCall]) -> Vec<ToolResult> {
        let sent: Vec<&str> = self.conversation.sent_names().collect();
        let runs = calls.iter().enumerate().map(|(i, model_call)| {
            let call = ToolCall::from_raw(
                model_call.id.clone(),
                model_call.name.clone(),
                model_call.arguments.clone(),
            );
            let tool = self.conversation.tool_for(&model_call.name).cloned();
            let sent = &sent;
            async move {
                // A request dropped (its app went away) drops its calls: announced as cancelled.
                let announcement = CallAnnouncement::start(
                    &self.ctx.events,
                    ToolCallFinished {
                        role: &self.ctx.role,
                        tool: &model_call.name,
                        source: tool.as_ref().map(|t| t.source.as_str()),
                        call_id: &model_call.id,
                        caller: Caller::Model,
                        kind: Some(ConnectionKind::Chat),
                        duration_ms: 0.0,
                        is_error: false,
                        cancelled: false,
                        behavior: crate::domain::tool::Behavior::Blocking,
                    },
                );
                let result = match &tool {
                    _ if i >= MAX_CALLS_PER_ROUND => call.error(format!(
                        "too many tool calls in one turn: at most {MAX_CALLS_PER_ROUND} run; \
                         the call was not run"
                    )),
                    Some(tool) => {
                        // Listed while it runs, so a plugin's progress reaches the event stream
                        // (a chat request has no "later" for the model: non-blocking tools run
                        // as blocking ones here).
                        let _listed = self.ctx.dispatcher.board().list(
                            &model_call.id,
                            Where {
                                role: self.ctx.role.clone(),
                                tool: tool.name.clone(),
                                session: None,
                            },
                        );
                        self.ctx.dispatcher.dispatch(tool, call).await
                    }
                    None => {
                        let error = not_registered_text(&call.name, None, sent.iter().copied());
                        call.error(error)
                    }
                };
                announcement.finished(result.is_error);
                result
            }
        });
        let results = join_all(runs).await;
        self.ctx
            .endpoint
            .ran_calls(results.len().min(MAX_CALLS_PER_ROUND));
        results
    }

    /// The app's answer: the end of its stream, or its completion.
    async fn deliver(
        &mut self,
        finish_reason: &str,
        app: &[ModelCall],
    ) -> Result<Option<Value>, Failure> {
        let usage = self.conversation.usage().cloned();
        match &mut self.out {
            Out::Collect { first, last } => {
                let last = last.take().unwrap_or_default();
                let completion = wire::final_completion(
                    last,
                    first.as_ref(),
                    self.conversation.text(),
                    app,
                    finish_reason,
                    usage,
                );
                Ok(Some(Value::Object(completion)))
            }
            Out::Stream { encoder, .. } => {
                let mut frames = encoder.app_calls(app);
                frames.push(encoder.finish(finish_reason));
                frames.extend(encoder.usage(usage));
                frames.push(AppStream::done());
                for frame in frames {
                    self.send(frame).await?;
                }
                Ok(None)
            }
        }
    }
}
