//! `EventHub`: the change events behind `GET /api/events` (Server-Sent Events).
//!
//! A plain type, shared by handle: the router publishes `tools.changed`, each model session
//! `session.state` and the calls it answers, the invoke route and the `/mcp` endpoint the calls
//! they run (`tool.call`), the MCP board each MCP server's state (`mcp.state`), the call
//! policy (`crate::policy`) its approvals (`approval.requested`, `approval.resolved`).
//! Every event gets the next id and is kept in a bounded ring, so a client that reconnects with
//! `Last-Event-ID` gets what it missed (or a `reset` when the ring no longer holds it, or when it
//! missed more than its buffer holds). Each subscriber has a bounded buffer, which the replay
//! fills first and publishing fills without ever waiting: a subscriber that falls behind is
//! dropped (its stream ends; it may reconnect and resume), so a stuck reader never slows a change,
//! a call or another subscriber, and holds at most its buffer's worth of events.
//!
//! Nothing here knows the actor system; the HTTP route turns a [`Subscription`] into the response
//! body with [`EventStream`].

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::Stream;
use serde::Serialize;
use sse_stream::Sse;
use tokio::sync::mpsc;

pub use self::calls::{CallStart, CallWatch, Caller, ToolCallFinished};
pub(crate) use self::search::{SearchKind, ToolSearched};
use crate::domain::call::Scheduling;
use crate::domain::connection::ConnectionKind;
use crate::domain::role::RoleName;
use crate::observe::Observer;

mod calls;
mod search;

/// Events kept for `Last-Event-ID` resumption: enough for a client that reconnects within a
/// busy minute.
pub const RING_CAPACITY: usize = 1024;

/// Bytes the kept events may take, each counted at twice its data (the data, and the SSE frame
/// built from it once it is sent) and its record. Most events are a few hundred bytes, so the
/// count bounds the ring; an event that carries much (`approval.requested` holds the call's
/// arguments) makes the oldest go sooner, and one larger than this is kept alone.
pub const RING_MAX_BYTES: usize = 4 * 1024 * 1024;

/// Events a subscriber may have waiting before it is dropped, the replay of a resumed stream
/// included (a resume that missed more gets a `reset`). A reader that keeps up never holds more
/// than a few; one this far behind is stuck, and waiting for it would slow everyone.
pub const SUBSCRIBER_BUFFER: usize = 256;

/// How often an idle stream gets a comment line: under the idle timeouts of common proxies and
/// clients (30 s and up), so a quiet connection is neither closed nor mistaken for a dead one.
pub(crate) const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(15);

/// The comment an idle stream sends every [`KEEP_ALIVE_INTERVAL`].
const KEEP_ALIVE_FRAME: &[u8] = b": keep-alive\n\n";

/// The tunables of the event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSettings {
    /// Interval of the keep-alive comment on an idle stream.
    pub keep_alive: Duration,
    /// Events a subscriber may have waiting before it is dropped.
    pub subscriber_buffer: usize,
}

impl Default for EventSettings {
    fn default() -> Self {
        Self {
            keep_alive: KEEP_ALIVE_INTERVAL,
            subscriber_buffer: SUBSCRIBER_BUFFER,
        }
    }
}

/// The kinds of event, by their SSE `event:` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// First event of every connection: the server instance and its start time.
    Hello,
    /// The `Last-Event-ID` a client resumed from is no longer held: re-read the state.
    Reset,
    /// A change request (or an automatic change) was applied.
    ToolsChanged,
    /// A model session's connection state or last sync changed.
    SessionState,
    /// A tool call finished.
    ToolCall,
    /// A character's chat endpoint changed: a model refused tools (or is offered them again),
    /// a request failed, or the tools left out for clashes changed.
    ChatState,
    /// An MCP server (configured, or registered at run time) changed state, or one registered
    /// at run time was registered or removed.
    McpState,
    /// A non-blocking call's result was delivered to its session's model.
    ToolResult,
    /// A plugin reported a running call's progress.
    ToolProgress,
    /// A plugin added text to the live conversations (`POST /api/sessions/context`).
    ContextAdded,
    /// A call waits for a person's approval.
    ApprovalRequested,
    /// A pending approval ended: approved, denied, expired or cancelled.
    ApprovalResolved,
    /// A search of a character's tools was made.
    ToolSearch,
}

impl EventKind {
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Hello => "hello",
            EventKind::Reset => "reset",
            EventKind::ToolsChanged => "tools.changed",
            EventKind::SessionState => "session.state",
            EventKind::ToolCall => "tool.call",
            EventKind::ChatState => "chat.state",
            EventKind::McpState => "mcp.state",
            EventKind::ToolResult => "tool.result",
            EventKind::ToolProgress => "tool.progress",
            EventKind::ContextAdded => "context.added",
            EventKind::ApprovalRequested => "approval.requested",
            EventKind::ApprovalResolved => "approval.resolved",
            EventKind::ToolSearch => "tool.search",
        }
    }
}

/// Which `?role=` subscribers an event concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every subscriber.
    All,
    /// Subscribers of these roles, and those without a role filter.
    Roles(Vec<RoleName>),
}

impl Scope {
    fn concerns(&self, role: Option<&str>) -> bool {
        match (self, role) {
            (Scope::All, _) | (_, None) => true,
            (Scope::Roles(roles), Some(role)) => roles.iter().any(|r| r == role),
        }
    }
}

/// One published event, encoded once for every subscriber.
#[derive(Debug)]
pub struct Event {
    pub id: u64,
    pub kind: EventKind,
    scope: Scope,
    /// The data, as JSON.
    data: String,
    /// The whole SSE frame — `event:`, `data:`, `id:` and the blank line — built when it is
    /// first sent (an event nobody receives is never framed).
    frame: OnceLock<Bytes>,
}

impl Event {
    /// The bytes it holds in the ring: its record, its data and (once sent) its frame, which
    /// repeats the data with a few dozen bytes of framing.
    fn held_bytes(&self) -> usize {
        const FRAMING: usize = 64;
        std::mem::size_of::<Self>() + 2 * self.data.len() + FRAMING
    }

    fn new(id: u64, kind: EventKind, scope: Scope, data: String) -> Self {
        Self {
            id,
            kind,
            scope,
            data,
            frame: OnceLock::new(),
        }
    }

    pub fn frame(&self) -> &Bytes {
        self.frame
            .get_or_init(|| sse_frame(self.kind, self.id, self.data.clone()))
    }
}

/// The data of an event as JSON. Every payload is a struct of strings, numbers and lists:
/// serialising cannot fail.
fn json(data: &impl Serialize) -> String {
    serde_json::to_string(data).unwrap_or_else(|_| "null".to_owned())
}

/// The SSE frame of one event.
fn frame(kind: EventKind, id: u64, data: &impl Serialize) -> Bytes {
    sse_frame(kind, id, json(data))
}

/// The SSE frame of one event's JSON. Compact JSON has no line breaks, so the data is one
/// `data:` line.
fn sse_frame(kind: EventKind, id: u64, data: String) -> Bytes {
    Sse::default()
        .event(kind.name())
        .data(data)
        .id(id.to_string())
        .into()
}

/// What `op` a `tools.changed` event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(into = "&'static str")]
pub enum ChangeOp {
    Register,
    Unregister,
    Clear,
    /// A dead plugin origin's tools were removed.
    AutoRemoved,
    /// An MCP server's tools were (re)listed, changed, or removed when it went away.
    Mcp,
    /// Restored tools whose callback accepted a connection again were given to the models.
    Restored,
}

impl ChangeOp {
    /// The op as events and log lines spell it.
    pub fn name(self) -> &'static str {
        match self {
            ChangeOp::Register => "register",
            ChangeOp::Unregister => "unregister",
            ChangeOp::Clear => "clear",
            ChangeOp::AutoRemoved => "auto_removed",
            ChangeOp::Mcp => "mcp",
            ChangeOp::Restored => "restored",
        }
    }
}

impl From<ChangeOp> for &'static str {
    fn from(op: ChangeOp) -> Self {
        op.name()
    }
}

/// The data of `tools.changed`; `F` is the failed-role entry the change report carries.
#[derive(Debug, Serialize)]
pub struct ToolsChanged<'a, F> {
    pub op: ChangeOp,
    /// The tool, for register and unregister.
    pub name: Option<&'a str>,
    /// The source, for register, clear, auto-removal and MCP.
    pub source: Option<&'a str>,
    pub affected_roles: &'a [RoleName],
    pub failed_roles: &'a [F],
}

/// The data of `session.state`: the role and its session report (`R`), flattened.
#[derive(Debug, Serialize)]
pub(crate) struct SessionState<'a, R> {
    pub role: &'a str,
    #[serde(flatten)]
    pub report: &'a R,
}

/// The data of `tool.result`: a non-blocking call's result reached its session's model. Never
/// the output.
#[derive(Debug, Serialize)]
pub struct LateResult<'a> {
    pub role: &'a str,
    pub tool: &'a str,
    pub call_id: &'a str,
    pub kind: ConnectionKind,
    /// When the model speaks of it: `when_idle`, `silent` or `interrupt`.
    pub scheduling: Scheduling,
    pub is_error: bool,
}

/// The data of `tool.progress`: a plugin's progress message for a running call.
#[derive(Debug, Serialize)]
pub struct ToolProgress<'a> {
    pub role: &'a str,
    pub tool: &'a str,
    pub call_id: &'a str,
    pub message: &'a str,
    /// The model was asked to speak of it (when idle).
    pub speak: bool,
    /// The call runs in a live session, whose model was told.
    pub delivered: bool,
}

/// The data of `context.added`: a plugin's text for the conversations, and whose it is; `F` is
/// the failed-role entry of the report.
#[derive(Debug, Serialize)]
pub struct ContextAdded<'a, F> {
    /// The source the plugin's token binds (`null` for a plugin without one).
    pub source: Option<&'a str>,
    /// The character asked for (`null`: every character with a live session).
    pub role: Option<&'a str>,
    pub text: &'a str,
    /// The model was asked to answer it.
    pub respond: bool,
    pub affected_roles: &'a [RoleName],
    pub failed_roles: &'a [F],
}

#[derive(Debug, Serialize)]
struct Hello<'a> {
    instance_id: &'a str,
    started_at: &'a str,
}

#[derive(Debug, Serialize)]
struct Reset<'a> {
    /// The `Last-Event-ID` the client sent.
    last_event_id: &'a str,
    /// The oldest event still held (`null` when none is).
    oldest_event_id: Option<u64>,
    /// The newest event so far (0 before the first).
    newest_event_id: u64,
}

/// A shared handle on the hub; cheap to clone.
#[derive(Clone)]
pub struct EventHub {
    inner: Arc<Inner>,
}

struct Inner {
    /// Random per start, so a client can tell a restarted server from a reconnect.
    instance_id: String,
    /// RFC 3339, UTC.
    started_at: String,
    subscriber_buffer: usize,
    state: Mutex<State>,
    /// What records every call announced here (metrics, the recent calls, spans).
    observer: Observer,
}

struct State {
    /// Set by [`EventHub::close`]: the server is stopping.
    closed: bool,
    /// The id of the last event published (0 before the first).
    newest: u64,
    ring: VecDeque<Arc<Event>>,
    /// What the ring's events hold ([`Event::held_bytes`]), at most [`RING_MAX_BYTES`] but for
    /// the newest event alone.
    ring_bytes: usize,
    subscribers: Vec<Subscriber>,
}

struct Subscriber {
    role: Option<String>,
    tx: mpsc::Sender<Arc<Event>>,
}

/// A new subscriber's stream: what it gets first (`hello`, and a `reset` when it cannot resume),
/// then the events it missed and every event as it is published, from its bounded channel.
pub struct Subscription {
    pub opening: Vec<Bytes>,
    pub events: mpsc::Receiver<Arc<Event>>,
}

impl std::fmt::Debug for EventHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventHub")
            .field("instance_id", &self.inner.instance_id)
            .finish_non_exhaustive()
    }
}

impl EventHub {
    /// A hub for a server instance starting now, with an observer that exports no spans.
    pub fn new(settings: &EventSettings) -> Self {
        Self::with_observer(settings, Observer::default())
    }

    /// A hub whose calls `observer` records.
    pub fn with_observer(settings: &EventSettings, observer: Observer) -> Self {
        Self {
            inner: Arc::new(Inner {
                instance_id: uuid::Uuid::new_v4().simple().to_string(),
                started_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
                subscriber_buffer: settings.subscriber_buffer.max(1),
                state: Mutex::new(State {
                    closed: false,
                    newest: 0,
                    ring: VecDeque::with_capacity(RING_CAPACITY),
                    ring_bytes: 0,
                    subscribers: Vec::new(),
                }),
                observer,
            }),
        }
    }

    /// What records the calls announced here.
    pub fn observer(&self) -> &Observer {
        &self.inner.observer
    }

    /// This server instance's id (random per start).
    pub fn instance_id(&self) -> &str {
        &self.inner.instance_id
    }

    /// When this server instance started (RFC 3339, UTC).
    pub fn started_at(&self) -> &str {
        &self.inner.started_at
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The lock is held only to number, store and hand out events; a panic there cannot leave
        // the ring in a state worse than losing the stream.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Publishes one event: numbers it, keeps it in the ring and offers it to every subscriber it
    /// concerns, without waiting for any of them.
    pub fn publish(&self, kind: EventKind, scope: Scope, data: &impl Serialize) {
        let data = json(data);
        let mut state = self.state();
        let event = Arc::new(Event::new(state.newest + 1, kind, scope, data));
        state.newest = event.id;
        let cost = event.held_bytes();
        while state.ring.len() >= RING_CAPACITY
            || (!state.ring.is_empty() && state.ring_bytes + cost > RING_MAX_BYTES)
        {
            let Some(oldest) = state.ring.pop_front() else {
                break;
            };
            state.ring_bytes -= oldest.held_bytes();
        }
        state.ring_bytes += cost;
        state.ring.push_back(event.clone());
        state.subscribers.retain(|s| {
            if !event.scope.concerns(s.role.as_deref()) {
                return !s.tx.is_closed();
            }
            match s.tx.try_send(event.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::info!(role = ?s.role, event_id = event.id, "dropped an event subscriber that fell behind");
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
    }

    /// `tools.changed` for the roles of a change report.
    pub fn tools_changed<F: Serialize>(&self, change: &ToolsChanged<'_, F>, failed: &[&str]) {
        let mut roles = change.affected_roles.to_vec();
        roles.extend(failed.iter().map(|r| RoleName::from(*r)));
        self.publish(EventKind::ToolsChanged, Scope::Roles(roles), change);
    }

    /// `session.state` of one role.
    pub fn session_state<R: Serialize>(&self, role: &str, report: &R) {
        self.publish(
            EventKind::SessionState,
            Scope::Roles(vec![role.into()]),
            &SessionState { role, report },
        );
    }

    /// `chat.state` of one role: its chat endpoint's report (`R`).
    pub fn chat_state<R: Serialize>(&self, role: &str, report: &R) {
        self.publish(
            EventKind::ChatState,
            Scope::Roles(vec![role.into()]),
            &SessionState { role, report },
        );
    }

    /// `mcp.state` of one MCP server: its name and kind, then its report (`R`), flattened. Every
    /// subscriber gets it: an MCP server is not one character's.
    pub fn mcp_state<R: Serialize>(&self, name: &str, kind: &str, report: &R) {
        #[derive(Serialize)]
        struct McpState<'a, R> {
            name: &'a str,
            kind: &'a str,
            #[serde(flatten)]
            report: &'a R,
        }
        self.publish(
            EventKind::McpState,
            Scope::All,
            &McpState { name, kind, report },
        );
    }

    /// `tool.result` of a non-blocking call's delivered result.
    pub fn late_result(&self, result: &LateResult<'_>) {
        self.publish(
            EventKind::ToolResult,
            Scope::Roles(vec![result.role.into()]),
            result,
        );
    }

    /// `tool.progress` of a running call.
    pub fn tool_progress(&self, progress: &ToolProgress<'_>) {
        self.publish(
            EventKind::ToolProgress,
            Scope::Roles(vec![progress.role.into()]),
            progress,
        );
    }

    /// `context.added` of a plugin's text, for the roles it reached or failed.
    pub fn context_added<F: Serialize>(&self, context: &ContextAdded<'_, F>, failed: &[&str]) {
        let mut roles = context.affected_roles.to_vec();
        roles.extend(failed.iter().map(|r| RoleName::from(*r)));
        self.publish(EventKind::ContextAdded, Scope::Roles(roles), context);
    }

    /// Subscribes to the events `role` concerns (every event for `None`), resuming after
    /// `last_event_id` when the ring still holds what followed it and the subscriber's buffer
    /// can take it all.
    pub fn subscribe(&self, role: Option<String>, last_event_id: Option<&str>) -> Subscription {
        let mut state = self.state();
        let newest = state.newest;
        let oldest = state.ring.front().map(|e| e.id);
        let resume = last_event_id.map(|text| (text, text.trim().parse::<u64>().ok()));
        // The events after `from` are all held when `from` is the newest or the event just
        // before the oldest held; anything else (unknown, too old, or from another instance with
        // more events) cannot be resumed. Nor can more than the subscriber's buffer: the replay
        // waits in it like any event, so that a subscriber holds at most its buffer's worth.
        let buffer = self.inner.subscriber_buffer;
        let missed = resume.and_then(|(_, from)| {
            let from = from.filter(|&f| f <= newest && oldest.is_none_or(|o| f + 1 >= o))?;
            let missed: Vec<Arc<Event>> = state
                .ring
                .iter()
                .filter(|e| e.id > from && e.scope.concerns(role.as_deref()))
                .take(buffer + 1)
                .cloned()
                .collect();
            (missed.len() <= buffer).then_some((from, missed))
        });
        let mut opening = Vec::new();
        let hello = Hello {
            instance_id: &self.inner.instance_id,
            started_at: &self.inner.started_at,
        };
        let (tx, events) = mpsc::channel(buffer);
        match (resume, missed) {
            (None, _) => opening.push(frame(EventKind::Hello, newest, &hello)),
            (Some(_), Some((from, missed))) => {
                // `hello` carries the resumption point, so a client that loses the connection
                // again before the replay resumes from the same place.
                opening.push(frame(EventKind::Hello, from, &hello));
                for event in missed {
                    // At most `buffer` events into an empty channel of that capacity.
                    let _ = tx.try_send(event);
                }
            }
            (Some((text, _)), None) => {
                opening.push(frame(EventKind::Hello, newest, &hello));
                let reset = Reset {
                    last_event_id: text,
                    oldest_event_id: oldest,
                    newest_event_id: newest,
                };
                opening.push(frame(EventKind::Reset, newest, &reset));
            }
        }
        if !state.closed {
            // Those that went since the last event go now: with no event between them, each
            // subscriber that comes and goes would otherwise stay (a few KiB each).
            state.subscribers.retain(|s| !s.tx.is_closed());
            state.subscribers.push(Subscriber { role, tx });
        }
        Subscription { opening, events }
    }

    /// Ends every stream (after what it already holds) and every later one after its opening:
    /// the server is stopping, and a graceful stop waits for open responses to finish.
    pub fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        state.subscribers.clear();
    }
}

/// A subscription as an SSE response body: the opening frames, then each event, with a
/// keep-alive comment whenever the stream has been idle for the keep-alive interval. It ends when
/// the hub drops the subscriber.
pub(crate) struct EventStream {
    opening: VecDeque<Bytes>,
    events: mpsc::Receiver<Arc<Event>>,
    keep_alive: tokio::time::Interval,
}

impl EventStream {
    pub(crate) fn new(subscription: Subscription, keep_alive: Duration) -> Self {
        let mut interval = tokio::time::interval_at(
            tokio::time::Instant::now() + keep_alive,
            keep_alive.max(Duration::from_millis(1)),
        );
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self {
            opening: subscription.opening.into(),
            events: subscription.events,
            keep_alive: interval,
        }
    }
}

impl Stream for EventStream {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(frame) = self.opening.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        match self.events.poll_recv(cx) {
            Poll::Ready(Some(event)) => {
                // Anything sent counts as activity: the keep-alive is for idle streams.
                self.keep_alive.reset();
                return Poll::Ready(Some(Ok(event.frame().clone())));
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        match self.keep_alive.poll_tick(cx) {
            Poll::Ready(_) => Poll::Ready(Some(Ok(Bytes::from_static(KEEP_ALIVE_FRAME)))),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn hub(buffer: usize) -> EventHub {
        EventHub::new(&EventSettings {
            keep_alive: KEEP_ALIVE_INTERVAL,
            subscriber_buffer: buffer,
        })
    }

    /// `(event, id, data)` of an SSE frame.
    fn parse(frame: &Bytes) -> (String, u64, Value) {
        let text = std::str::from_utf8(frame).unwrap();
        assert!(text.ends_with("\n\n"), "{text:?}");
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}: ")))
                .unwrap_or_else(|| panic!("no {name} in {text:?}"))
                .to_owned()
        };
        (
            field("event"),
            field("id").parse().unwrap(),
            serde_json::from_str(&field("data")).unwrap(),
        )
    }

    fn publish_call(hub: &EventHub, role: &str, call_id: &str) {
        hub.publish(
            EventKind::ToolCall,
            Scope::Roles(vec![role.into()]),
            &json!({"role": role, "call_id": call_id}),
        );
    }

    fn received(sub: &mut Subscription) -> Vec<u64> {
        let mut ids = Vec::new();
        while let Ok(event) = sub.events.try_recv() {
            ids.push(event.id);
        }
        ids
    }

    #[test]
    fn hello_names_the_instance_and_the_newest_id() {
        let hub = hub(8);
        publish_call(&hub, "A", "c1");
        let sub = hub.subscribe(None, None);
        assert_eq!(sub.opening.len(), 1);
        let (event, id, data) = parse(&sub.opening[0]);
        assert_eq!((event.as_str(), id), ("hello", 1));
        assert_eq!(data["instance_id"], json!(hub.instance_id()));
        assert_eq!(hub.instance_id().len(), 32);
        assert!(data["started_at"].as_str().unwrap().ends_with('Z'));
        assert_ne!(hub.instance_id(), self::hub(8).instance_id());
    }

    #[test]
    fn ids_increase_and_frames_carry_the_data() {
        let hub = hub(8);
        let mut sub = hub.subscribe(None, None);
        publish_call(&hub, "A", "c1");
        publish_call(&hub, "B", "c2");
        let first = sub.events.try_recv().unwrap();
        let second = sub.events.try_recv().unwrap();
        assert_eq!((first.id, second.id), (1, 2));
        let (event, id, data) = parse(second.frame());
        assert_eq!((event.as_str(), id), ("tool.call", 2));
        assert_eq!(data, json!({"role": "B", "call_id": "c2"}));
    }

    #[test]
    fn a_call_is_announced_once_as_it_ended_and_as_cancelled_when_dropped_unfinished() {
        let hub = hub(8);
        let mut sub = hub.subscribe(None, None);
        let call = |call_id| CallStart {
            role: "A",
            tool: "t",
            source: Some("s"),
            call_id,
            caller: Caller::Model,
            kind: Some(ConnectionKind::Relay),
            behavior: crate::domain::tool::Behavior::Blocking,
        };
        let done = CallWatch::start(&hub, call("c1"), None);
        let trace_id = done.trace().trace_id().to_string();
        let result = crate::domain::call::ToolCall::from_raw("c1".into(), "t".into(), "{}".into())
            .failed(crate::domain::call::Outcome::Timeout, "slow".into());
        done.finished(&result);
        drop(CallWatch::start(&hub, call("c2"), None));
        let mut announced = Vec::new();
        while let Ok(event) = sub.events.try_recv() {
            let (_, _, mut data) = parse(event.frame());
            assert!(data["duration_ms"].as_f64().unwrap() >= 0.0, "{data}");
            data["duration_ms"] = json!(null);
            assert_eq!(data["trace_id"].as_str().unwrap().len(), 32, "{data}");
            data["trace_id"] = json!(null);
            announced.push(data);
        }
        assert_eq!(
            announced,
            [
                json!({"role": "A", "tool": "t", "source": "s", "call_id": "c1", "caller": "model",
                       "kind": "relay", "duration_ms": null, "is_error": true, "cancelled": false,
                       "behavior": "blocking", "outcome": "timeout", "trace_id": null}),
                json!({"role": "A", "tool": "t", "source": "s", "call_id": "c2", "caller": "model",
                       "kind": "relay", "duration_ms": null, "is_error": true, "cancelled": true,
                       "behavior": "blocking", "outcome": "cancelled", "trace_id": null}),
            ]
        );
        // Both are recorded once, newest first, with the trace their callbacks would name.
        let recent = hub
            .observer()
            .recent_calls(&crate::observe::recent::CallFilter {
                limit: 10,
                ..Default::default()
            });
        let seen: Vec<(&str, &str)> = recent
            .iter()
            .map(|c| (&*c.call_id, c.outcome.name()))
            .collect();
        assert_eq!(seen, [("c2", "cancelled"), ("c1", "timeout")]);
        assert_eq!(recent[1].trace_id, trace_id);
    }

    #[test]
    fn role_filter_keeps_its_roles_and_events_for_everyone() {
        let hub = hub(8);
        let mut only_a = hub.subscribe(Some("A".into()), None);
        publish_call(&hub, "A", "c1");
        publish_call(&hub, "B", "c2");
        hub.tools_changed(
            &ToolsChanged::<String> {
                op: ChangeOp::Register,
                name: Some("t"),
                source: Some("s"),
                affected_roles: &["B".into()],
                failed_roles: &[],
            },
            &["A"],
        );
        hub.publish(EventKind::ToolsChanged, Scope::All, &json!({}));
        assert_eq!(received(&mut only_a), [1, 3, 4]);
    }

    #[test]
    fn resume_replays_what_followed_and_only_that() {
        let hub = hub(8);
        for i in 0..5 {
            publish_call(&hub, if i % 2 == 0 { "A" } else { "B" }, "c");
        }
        let mut sub = hub.subscribe(None, Some("2"));
        assert_eq!(sub.opening.len(), 1);
        let (event, id, _) = parse(&sub.opening[0]);
        assert_eq!((event.as_str(), id), ("hello", 2));
        assert_eq!(received(&mut sub), [3, 4, 5]);
        let mut filtered = hub.subscribe(Some("A".into()), Some("2"));
        assert_eq!(received(&mut filtered), [3, 5]);
        let mut current = hub.subscribe(None, Some("5"));
        assert_eq!(received(&mut current), [0u64; 0], "nothing missed");
        // The replay waits in the subscriber's buffer: live events come after it.
        publish_call(&hub, "A", "c");
        assert_eq!(received(&mut sub), [6]);
    }

    #[test]
    fn a_replay_longer_than_the_buffer_is_a_reset() {
        let hub = hub(4);
        for _ in 0..10 {
            publish_call(&hub, "A", "c");
        }
        // Four missed fill the buffer exactly; five would not fit.
        let mut fits = hub.subscribe(None, Some("6"));
        assert_eq!(received(&mut fits), [7, 8, 9, 10]);
        let mut too_many = hub.subscribe(None, Some("5"));
        assert_eq!(too_many.opening.len(), 2);
        let (event, id, data) = parse(&too_many.opening[1]);
        assert_eq!((event.as_str(), id), ("reset", 10));
        assert_eq!(
            data,
            json!({"last_event_id": "5", "oldest_event_id": 1, "newest_event_id": 10})
        );
        assert_eq!(received(&mut too_many), [0u64; 0]);
        // What a role filter leaves out does not count: B missed none of the ten.
        assert_eq!(hub.subscribe(Some("B".into()), Some("0")).opening.len(), 1);
    }

    #[test]
    fn resume_from_a_lost_or_foreign_id_is_a_reset() {
        let hub = hub(RING_CAPACITY);
        for _ in 0..(RING_CAPACITY + 10) {
            publish_call(&hub, "A", "c");
        }
        let newest = (RING_CAPACITY + 10) as u64;
        // The ring holds 11..=newest: resuming from 10 misses nothing, from 9 it would.
        let mut edge = hub.subscribe(None, Some("10"));
        assert_eq!(edge.opening.len(), 1);
        assert_eq!(received(&mut edge).len(), RING_CAPACITY);
        for lost in ["9", "0", "99999", "not-a-number"] {
            let sub = hub.subscribe(None, Some(lost));
            assert_eq!(sub.opening.len(), 2, "{lost}");
            let (event, id, data) = parse(&sub.opening[1]);
            assert_eq!((event.as_str(), id), ("reset", newest), "{lost}");
            assert_eq!(
                data,
                json!({"last_event_id": lost, "oldest_event_id": 11, "newest_event_id": newest})
            );
        }
    }

    #[test]
    fn the_ring_is_bounded_by_bytes_and_keeps_the_newest_event_whatever_its_size() {
        let hub = hub(RING_CAPACITY);
        let big = "b".repeat(64 * 1024);
        for _ in 0..RING_CAPACITY {
            publish_call(&hub, "A", &big);
        }
        let state = hub.state();
        let cost = state.ring.back().unwrap().held_bytes();
        assert!(cost > 2 * big.len(), "{cost}");
        assert_eq!(state.ring.len(), RING_MAX_BYTES / cost);
        assert!(state.ring_bytes <= RING_MAX_BYTES);
        assert_eq!(
            state.ring_bytes,
            state.ring.iter().map(|e| e.held_bytes()).sum::<usize>()
        );
        drop(state);
        // An event past the bound alone replaces them all, and can still be resumed from before.
        let before = hub.state().newest;
        publish_call(&hub, "A", &"h".repeat(RING_MAX_BYTES));
        assert_eq!(hub.state().ring.len(), 1);
        let mut resumed = hub.subscribe(None, Some(&before.to_string()));
        assert_eq!(received(&mut resumed), [before + 1]);
        // Small events again: the huge one goes as soon as they need its room.
        publish_call(&hub, "A", "c");
        assert_eq!(hub.state().ring.len(), 1);
    }

    #[test]
    fn a_subscriber_that_falls_behind_is_dropped_and_others_keep_everything() {
        let hub = hub(4);
        let mut stuck = hub.subscribe(None, None);
        let mut reader = hub.subscribe(None, None);
        for i in 0..10 {
            publish_call(&hub, "A", "c");
            assert_eq!(received(&mut reader), [i + 1]);
        }
        // The stuck one got its buffer's worth, then its channel closed.
        assert_eq!(received(&mut stuck), [1, 2, 3, 4]);
        assert!(stuck.events.is_closed());
        assert_eq!(hub.state().subscribers.len(), 1);
    }

    #[test]
    fn closing_ends_every_stream_now_and_later() {
        let hub = hub(4);
        let mut before = hub.subscribe(None, None);
        publish_call(&hub, "A", "c");
        hub.close();
        assert_eq!(received(&mut before), [1]);
        assert!(before.events.is_closed());
        let after = hub.subscribe(None, None);
        assert_eq!(after.opening.len(), 1, "hello");
        assert!(after.events.is_closed());
    }

    #[test]
    fn closed_subscribers_are_forgotten() {
        let hub = hub(4);
        drop(hub.subscribe(Some("B".into()), None));
        drop(hub.subscribe(None, None));
        publish_call(&hub, "A", "c");
        assert_eq!(hub.state().subscribers.len(), 0);
    }

    #[test]
    fn subscribers_that_went_are_forgotten_when_the_next_comes_with_no_event_between() {
        let hub = hub(4);
        for _ in 0..100 {
            drop(hub.subscribe(None, None));
        }
        let _open = hub.subscribe(None, None);
        assert_eq!(hub.state().subscribers.len(), 1);
    }

    #[test]
    fn tools_changed_data_is_exact() {
        let hub = hub(4);
        let mut sub = hub.subscribe(None, None);
        #[derive(Serialize)]
        struct Failure {
            role: &'static str,
            error: &'static str,
        }
        hub.tools_changed(
            &ToolsChanged {
                op: ChangeOp::AutoRemoved,
                name: None,
                source: Some("plugin:x"),
                affected_roles: &["A".into()],
                failed_roles: &[Failure {
                    role: "B",
                    error: "boom",
                }],
            },
            &["B"],
        );
        let event = sub.events.try_recv().unwrap();
        assert_eq!(
            parse(event.frame()).2,
            json!({"op": "auto_removed", "name": null, "source": "plugin:x",
                   "affected_roles": ["A"], "failed_roles": [{"role": "B", "error": "boom"}]})
        );
    }
}
