//! The driver of one request to a character's chat, whatever its wire format: it asks the
//! upstream round after round as its [`WireConversation`] says, runs the server's calls through
//! the dispatcher (concurrently, results in the model's order, each announced as `tool.call`),
//! and gives the app one answer — a stream that reads as one answer, or one whole answer.
//!
//! Before the first round answers with success nothing is sent to the app, so an upstream
//! error (or one that cannot be reached) is the app's answer, with the upstream's status; a
//! later error ends a stream the way its wire format ends one. Everything here is owned by the
//! request: the loop runs as a task of the worker that ends with the app's request (its handle
//! aborts it when the handler is dropped; a stream's ends when its body is), and with it the
//! upstream exchange and the running callbacks (their connections close).

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::{Either, join_all, select};
use hyper::header::CONTENT_TYPE;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::AbortOnDropHandle;

use super::answer::ModelCall;
use super::kept::{MAX_KEPT_BYTES, TooLarge};
use super::round::{Answer, MAX_CALLS_PER_ROUND, Step, Streamed, Unreadable, WireConversation};
use super::upstream::{AppHeaders, UpstreamBody, UpstreamError};
use super::wire::{error_body, error_text, refuses_tools};
use super::{ChatEndpoint, RequestPermit};
use crate::dispatch::{Dispatcher, Where};
use crate::domain::budget::{Budget, FIND_TOOLS, FindTools, found_result};
use crate::domain::call::Outcome;
use crate::domain::call::{ToolCall, ToolResult};
use crate::domain::registry::not_registered_text;
use crate::domain::snapshot::ToolCell;
use crate::domain::tool::SharedTool;
use crate::events::{CallStart, CallWatch, Caller, EventHub, SearchKind};
use crate::observe::trace::Span;
use crate::policy::{Asker, DedupeWindow, Policy};

/// How often a stream whose calls are running (one may wait for a person's approval) gets an
/// SSE comment.
pub(crate) const STREAM_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(10);

/// Frames waiting for an app that reads its stream slowly: the upstream is read only as fast
/// as the app takes what came before.
const STREAM_BUFFER: usize = 64;

/// What a request needs besides its body.
pub(crate) struct ChatContext {
    pub role: String,
    pub endpoint: Arc<ChatEndpoint>,
    /// The character's published tools.
    pub tools: ToolCell,
    /// `[character.tools]`: which of them each round offers.
    pub budget: Arc<Budget>,
    pub dispatcher: Dispatcher,
    pub events: EventHub,
    /// What each call passes before it runs (a person's approval).
    pub policy: Policy,
    /// The app's headers that pass upstream.
    pub app: AppHeaders,
    /// The trace context the app's request came with: the parent of the request's span.
    pub parent: Option<opentelemetry::trace::SpanContext>,
    /// The app's end of its connection: who the turns the request keeps are charged to.
    pub client: Option<std::net::SocketAddr>,
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

    /// The request's task ended before it said what to answer (the app went away meanwhile).
    fn unanswered() -> Self {
        Self::json(
            500,
            &error_body(
                "the chat request ended before it answered",
                "server_error",
                None,
                None,
            ),
        )
    }
}

/// Why a request ended without its answer.
enum Failure {
    Upstream(UpstreamError),
    /// The upstream answered with an error status (and, for the log, what that means).
    Status {
        status: u16,
        content_type: String,
        body: Bytes,
        note: Option<&'static str>,
    },
    /// The upstream answered with success, but not in the request's wire format.
    Invalid(String),
    /// An error event in the upstream's stream.
    StreamError(Value),
    /// The app went away.
    Gone,
}

impl From<Unreadable> for Failure {
    fn from(unreadable: Unreadable) -> Self {
        match unreadable {
            Unreadable::Invalid(text) => Failure::Invalid(text),
            Unreadable::Error(error) => Failure::StreamError(error),
        }
    }
}

impl Failure {
    /// How the request ended, and the upstream failure's reason, in the metrics.
    fn names(&self) -> (&'static str, Option<&'static str>) {
        match self {
            Failure::Upstream(e) => ("upstream_error", Some(e.reason())),
            Failure::Status { .. } => ("upstream_error", Some("status")),
            Failure::Invalid(_) => ("upstream_error", Some("invalid")),
            Failure::StreamError(_) => ("upstream_error", Some("stream_error")),
            Failure::Gone => ("gone", None),
        }
    }

    /// What the log and `GET /api/sessions` say of it.
    fn text(&self) -> String {
        match self {
            Failure::Upstream(e) => e.to_string(),
            Failure::Status {
                status, body, note, ..
            } => {
                let note = note.map(|n| format!(" ({n})")).unwrap_or_default();
                format!(
                    "the upstream answered HTTP {status}{note}: {}",
                    error_text(body)
                )
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

    /// Our code for it, in OpenAI's error shape.
    fn code(&self) -> &'static str {
        match self {
            Failure::Upstream(e) => e.code(),
            _ => "upstream_invalid",
        }
    }

    /// The app's answer when nothing was sent yet.
    fn reply(self) -> Reply {
        match self {
            Failure::Status {
                status,
                content_type,
                body,
                ..
            } => Reply::Whole {
                status,
                content_type,
                body,
            },
            failure => {
                let status = match &failure {
                    Failure::Upstream(e) => e.status(),
                    _ => 502,
                };
                let message = match &failure {
                    Failure::Upstream(e) => e.to_string(),
                    other => other.text(),
                };
                let body = error_body(&message, "upstream_error", None, Some(failure.code()));
                Reply::json(status, &body)
            }
        }
    }

    /// The error object that ends a stream already under way: the upstream's own when it sent
    /// one, else ours.
    fn error_object(self) -> Value {
        match self {
            Failure::StreamError(error) => error,
            Failure::Status { status, body, .. } => {
                super::wire::upstream_error_object(status, &body)
            }
            other => {
                json!({"message": other.text(), "type": "upstream_error", "param": null,
                       "code": other.code()})
            }
        }
    }
}

/// Serves one request: `conversation` holds the app's request, put together again with what
/// the character kept for it.
pub(crate) async fn serve<C: WireConversation + 'static>(
    ctx: ChatContext,
    conversation: C,
) -> Reply {
    let stream = conversation.streaming();
    let span = ctx
        .events
        .observer()
        .request_span(C::KIND, &ctx.role, ctx.parent.as_ref());
    let mut driver = Driver {
        span,
        ctx,
        conversation,
        stream: None,
        dedupe: DedupeWindow::new(),
    };
    // The tool loop's future is large (every await of the loop, the calls', the upstream
    // exchange's): it is boxed once (a spawned task's is), so the handler's future that
    // actix-web moves around as it polls, and the stream's task, stay small.
    if !stream {
        // A task of its own: each of the loop's wake-ups (an upstream answer, a callback's)
        // polls the loop alone rather than the app connection's whole dispatcher, which wakes
        // once, for the answer. The handle aborts the task when it is dropped: the app went
        // away, and the upstream exchange and the running callbacks go with the task.
        let work = AbortOnDropHandle::new(actix_web::rt::spawn(async move {
            match driver.run().await {
                Ok(Answer::Whole(answer)) => {
                    driver.count(None);
                    Reply::json(200, &answer)
                }
                Ok(Answer::Frames(_)) => {
                    unreachable!("a request without a stream is answered whole")
                }
                Err(failure) => {
                    driver.record(&failure);
                    failure.reply()
                }
            }
        }));
        return work.await.unwrap_or_else(|_| Reply::unanswered());
    }
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let (start, started) = oneshot::channel();
    driver.stream = Some(AppStream {
        tx: tx.clone(),
        start: Some(start),
    });
    let work = Box::pin(driver.run_stream());
    actix_web::rt::spawn(async move {
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
        Err(_) => Reply::unanswered(),
    }
}

/// The app's stream; `start` tells the handler, once, whether it began (`None`) or what to
/// answer instead.
struct AppStream {
    tx: mpsc::Sender<Bytes>,
    start: Option<oneshot::Sender<Option<Reply>>>,
}

struct Driver<C> {
    /// The request's span: the parent of its calls' spans; ends with the driver.
    span: Span,
    ctx: ChatContext,
    conversation: C,
    /// The app's stream, when it asked for one.
    stream: Option<AppStream>,
    /// The calls of this request's loop, for a tool with `dedupe_seconds`: a request is the
    /// conversation the server can tell (nothing ties two requests of one app together).
    dedupe: DedupeWindow,
}

impl<C: WireConversation> Driver<C> {
    /// The stream's whole life: its answer, or what ends it — the app's answer when nothing
    /// was sent yet, else the wire format's end of a failed stream.
    async fn run_stream(mut self) {
        let failure = match self.run().await {
            Ok(Answer::Frames(frames)) => {
                self.count(None);
                for frame in frames {
                    if self.send(frame).await.is_err() {
                        return;
                    }
                }
                return;
            }
            Ok(Answer::Whole(_)) => return self.count(None),
            Err(Failure::Gone) => return self.count(Some(&Failure::Gone)),
            Err(failure) => failure,
        };
        self.record(&failure);
        let Some(stream) = &mut self.stream else {
            return;
        };
        match stream.start.take() {
            Some(start) => {
                let _ = start.send(Some(failure.reply()));
            }
            None => {
                let frames = self.conversation.failure_frames(failure.error_object());
                self.issued();
                for frame in frames {
                    if self.send(frame).await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Counts the request as ended (with `failure`, or `None` when it answered).
    fn count(&mut self, failure: Option<&Failure>) {
        let metrics = self.ctx.events.observer().metrics();
        let (outcome, reason) = failure.map_or(("ok", None), Failure::names);
        metrics.model_request(C::KIND, &self.ctx.role, outcome);
        if let Some(reason) = reason {
            metrics.upstream_error(C::KIND, &self.ctx.role, reason);
            self.span.fail(reason);
        }
    }

    /// Logs a failure, counts it, and keeps it for the report.
    fn record(&mut self, failure: &Failure) {
        self.count(Some(failure));
        let text = failure.text();
        tracing::warn!(character = %self.ctx.role, kind = C::KIND.name(), "chat request failed: {text}");
        self.ctx.endpoint.failed(text);
        self.announce();
    }

    /// Records the id of the response the app got, if any: a later request that goes on from
    /// it belongs to this character, and is offered the tools this one found.
    fn issued(&self) {
        if let Some(id) = self.conversation.issued() {
            let found = self.conversation.tool_loop().found_names();
            self.ctx.endpoint.issued(id, found);
        }
    }

    /// Announces the endpoint's report (`chat.state`).
    fn announce(&self) {
        self.ctx
            .events
            .chat_state(&self.ctx.role, &self.ctx.endpoint.report());
    }

    /// The tool loop; its result is the app's answer (a stream's last frames).
    async fn run(&mut self) -> Result<Answer, Failure> {
        let endpoint = self.ctx.endpoint.clone();
        let upstream = endpoint.upstream();
        let snapshot = self.ctx.tools.load_full();
        let (takes, forgot) = endpoint.takes_tools(self.conversation.model(), snapshot.applied());
        if !takes {
            self.conversation.tool_loop_mut().withhold_tools();
        }
        if forgot {
            tracing::info!(character = %self.ctx.role, model = self.conversation.model(), "the character's tools changed since the model refused them: offering them again");
            self.announce();
        }
        self.conversation
            .tool_loop_mut()
            .set_budget(self.ctx.budget.clone());
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
            self.ctx
                .events
                .observer()
                .metrics()
                .model_round(C::KIND, &self.ctx.role);
            let stream = self.conversation.streaming();
            // A whole answer (an error, or a round without a stream) is read by this deadline.
            let deadline = upstream.deadline();
            let response = upstream
                .post(C::PATH, round.body, stream, &self.ctx.app)
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
                    .read(response.into_body(), &self.ctx.app, deadline)
                    .await
                    .map_err(Failure::Upstream)?;
                if refuses_tools(status, &body) && self.conversation.tool_loop_mut().refuse_tools()
                {
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
                    note: C::explain_status(status),
                });
            }
            if stream && content_type.starts_with("text/event-stream") {
                self.begin_stream()?;
                self.read_stream(response.into_body()).await?;
            } else {
                let body = upstream
                    .read(response.into_body(), &self.ctx.app, deadline)
                    .await
                    .map_err(Failure::Upstream)?;
                let frames = self.conversation.whole_answer(&body)?;
                if stream {
                    self.begin_stream()?;
                }
                for frame in frames {
                    self.send(frame).await?;
                }
            }
            match self.conversation.answered() {
                Step::Deliver => break,
                Step::Run(calls) => {
                    let results = self.run_calls(&calls).await;
                    self.conversation.ran(&calls, results);
                }
                Step::HandOff(server) => {
                    if !server.is_empty() {
                        let results = self.run_calls(&server).await;
                        self.conversation.hand_off(&server, results);
                    }
                    break;
                }
            }
        }
        let (answer, kept) = self.conversation.finish();
        self.issued();
        if let Some(kept) = kept {
            if let Err(TooLarge { bytes }) = C::keep(&endpoint, kept, self.ctx.client) {
                tracing::warn!(character = %self.ctx.role, bytes, "a turn handed back to the app is larger than the {MAX_KEPT_BYTES} bytes kept per character: its next request goes with only the app's calls");
            }
        }
        Ok(answer)
    }

    /// Tells the handler the stream began (once).
    fn begin_stream(&mut self) -> Result<(), Failure> {
        if let Some(stream) = &mut self.stream
            && let Some(start) = stream.start.take()
        {
            start.send(None).map_err(|_| Failure::Gone)?;
        }
        Ok(())
    }

    async fn send(&mut self, frame: Bytes) -> Result<(), Failure> {
        if let Some(stream) = &self.stream {
            stream.tx.send(frame).await.map_err(|_| Failure::Gone)?;
        }
        Ok(())
    }

    /// Reads a streamed round, forwarding to the app what the conversation says as it comes.
    async fn read_stream(&mut self, body: UpstreamBody) -> Result<(), Failure> {
        let endpoint = self.ctx.endpoint.clone();
        let mut events = endpoint.upstream().events(body, &self.ctx.app);
        self.conversation.stream_begins();
        while let Some(data) = events.next().await.map_err(Failure::Upstream)? {
            match self.conversation.stream_event(&data)? {
                Streamed::End => {
                    events.finish().await;
                    break;
                }
                Streamed::Held(frames) => {
                    for frame in frames {
                        self.send(frame).await?;
                    }
                }
                Streamed::Frames(frames) => {
                    let said = !frames.is_empty();
                    for frame in frames {
                        self.send(frame).await?;
                    }
                    if said {
                        // The response writes them now (with any held before them), before the
                        // rest of what the upstream sent is read: the person sees the first words
                        // without waiting for the later ones to be parsed.
                        tokio::task::yield_now().await;
                    }
                }
            }
        }
        Ok(())
    }

    /// Awaits `work` (a round's calls, which may wait for a person's approval); meanwhile a
    /// stream that has begun gets an SSE comment every [`STREAM_KEEP_ALIVE`], so neither the app
    /// nor a proxy takes the quiet for a dead connection.
    async fn keeping_alive<T>(&self, work: impl Future<Output = T>) -> T {
        let Some(tx) = self
            .stream
            .as_ref()
            .filter(|s| s.start.is_none())
            .map(|s| s.tx.clone())
        else {
            return work.await;
        };
        let mut work = std::pin::pin!(work);
        loop {
            let tick = std::pin::pin!(tokio::time::sleep(STREAM_KEEP_ALIVE));
            match select(work.as_mut(), tick).await {
                Either::Left((done, _)) => return done,
                Either::Right(_) => {
                    // A full buffer has frames on the way: the comment is not needed then.
                    let _ = tx.try_send(Bytes::from_static(b": keep-alive\n\n"));
                }
            }
        }
    }

    /// Runs the server's calls of a round concurrently; results in the model's order. The
    /// tools its `find_tools` calls found join the request's set (the next round offers them).
    async fn run_calls(&mut self, calls: &[ModelCall]) -> Vec<ToolResult> {
        let (results, found) = self.run_round_calls(calls).await;
        self.conversation
            .tool_loop_mut()
            .reveal(found.iter().map(String::as_str));
        results
    }

    /// A `find_tools` call the model made, answered here (it has no callback): the character's
    /// tools searched, the search announced (`tool.search`); the names found.
    fn find_tools(&self, call: &mut ToolCall) -> (ToolResult, Vec<String>) {
        let ask = match FindTools::from_call(call) {
            Ok(ask) => ask,
            Err(refused) => return (*refused, Vec::new()),
        };
        let snapshot = self.ctx.tools.load_full();
        let found = self.ctx.events.find_tools(
            &self.ctx.role,
            &snapshot,
            &ask,
            SearchKind::Session(C::KIND),
            false,
        );
        let names = found.tools.iter().map(|t| t.name.clone()).collect();
        (found_result(call, found.output), names)
    }

    async fn run_round_calls(&self, calls: &[ModelCall]) -> (Vec<ToolResult>, Vec<String>) {
        let tools = self.conversation.tool_loop();
        let sent: Vec<&str> = tools.sent_names().collect();
        let runs =
            calls.iter().enumerate().map(|(i, model_call)| {
                let mut call = ToolCall::from_raw(
                    model_call.id.clone(),
                    model_call.name.clone(),
                    model_call.arguments.clone(),
                );
                let tool = tools.tool_for(&model_call.name).cloned();
                let sent = &sent;
                async move {
                    if i < MAX_CALLS_PER_ROUND
                        && let Some(tool) = &tool
                        && tool.is_built_in()
                        && tool.name == FIND_TOOLS
                    {
                        // Announced as `tool.search`, not as a call of a plugin's tool.
                        return self.find_tools(&mut call);
                    }
                    // A request dropped (its app went away) drops its calls: announced as cancelled.
                    let watch = CallWatch::start(
                        &self.ctx.events,
                        CallStart {
                            role: &self.ctx.role,
                            tool: &model_call.name,
                            source: tool.as_ref().map(|t| t.source.as_str()),
                            // The id the server keeps (cut to its bound): what every record of
                            // the call, and its callback, name it by.
                            call_id: &call.call_id,
                            caller: Caller::Model,
                            kind: Some(C::KIND),
                            behavior: crate::domain::tool::Behavior::Blocking,
                        },
                        Some(self.span.context()),
                    );
                    call.trace = Some(watch.trace().clone());
                    let result = match &tool {
                    _ if i >= MAX_CALLS_PER_ROUND => call.failed(Outcome::Refused, format!(
                        "too many tool calls in one turn: at most {MAX_CALLS_PER_ROUND} run; \
                         the call was not run"
                    )),
                    Some(tool) => {
                        // Listed while it runs, so a plugin's progress reaches the event stream
                        // (a chat request has no "later" for the model: non-blocking tools run
                        // as blocking ones here).
                        let _listed = self.ctx.dispatcher.board().list(
                            &call.call_id,
                            Where {
                                role: self.ctx.role.clone(),
                                tool: tool.name.clone(),
                                source: tool.source.clone(),
                                session: None,
                            },
                        );
                        // A tool that needs approval: the request waits for the person.
                        let asker = Asker {
                            role: &self.ctx.role,
                            caller: Caller::Model,
                            kind: Some(C::KIND),
                            dedupe: Some(&self.dedupe),
                        };
                        match self.ctx.policy.admit(asker, tool, &mut call) {
                            Ok(admission) => {
                                admission
                                    .run(call, |call| self.ctx.dispatcher.dispatch(tool, call))
                                    .await
                            }
                            Err(refused) => *refused,
                        }
                    }
                    None => {
                        let error = not_registered_text(&call.name, None, sent.iter().copied());
                        call.failed(Outcome::UnknownTool, error)
                    }
                };
                    watch.finished(&result);
                    (result, Vec::new())
                }
            });
        let ran = self.keeping_alive(join_all(runs)).await;
        let searches = calls
            .iter()
            .take(MAX_CALLS_PER_ROUND)
            .filter(|c| tools.tool_for(&c.name).is_some_and(|t| t.is_built_in()))
            .count();
        self.ctx
            .endpoint
            .ran_calls(ran.len().min(MAX_CALLS_PER_ROUND) - searches);
        let mut found = Vec::new();
        let results = ran
            .into_iter()
            .map(|(result, names)| {
                found.extend(names);
                result
            })
            .collect();
        (results, found)
    }
}
