//! `SessionCore`: what a session does with the realtime protocol, whatever carries it. The
//! server's own connection ([`Transport::Client`]), a relay of an app's connection
//! ([`Transport::Relay`]) and an attachment to a live call ([`Transport::Attach`]) all hold one
//! and differ only in how the bytes travel.
//!
//! It owns the acknowledged tool sync (one update in flight, newer changes merged into the
//! next), the acknowledgements still awaited — the app's and the server's, matched in the order
//! they were sent, since the two can interleave on one connection — the open responses and their
//! calls (exactly one `response.create` after the last answer), the runaway guard, and the tools
//! the session has of its own (the app's), which are kept in every update and never answered by
//! the server. It answers each call with its exact output and the images the model takes, and
//! announces the connection's state, each settled sync (`session.state`) and each answered call
//! (`tool.call`) on the event hub. Plain code: the actor that holds it feeds it events and
//! carries out the [`Effect`]s it asks for.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use super::calls::{CallLimiter, ResponseCalls};
use super::protocol::{self, Dialect, ForeignTool, FunctionCall, Keep, ServerEvent};
use super::settings::SessionSettings;
use super::sync::SyncState;
use super::{ConnectionKind, ConnectionReport, ConnectionState};
use crate::domain::call::{ToolCall, ToolResult};
use crate::domain::registry::not_registered_text;
use crate::domain::tool::SharedTool;
use crate::events::{Caller, EventHub, ToolCallFinished};

/// Which connection the core serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// The server's own connection to the model (`mode = "client"`).
    Client,
    /// An app's connection, relayed through the server (`GET /v1/realtime`).
    Relay,
    /// A second connection to a call the app started elsewhere (`POST /api/sessions/attach`).
    Attach,
}

impl From<Transport> for ConnectionKind {
    fn from(transport: Transport) -> Self {
        match transport {
            Transport::Client => ConnectionKind::Client,
            Transport::Relay => ConnectionKind::Relay,
            Transport::Attach => ConnectionKind::Attach,
        }
    }
}

/// Who waits for one tool update to settle.
pub type Waiter = oneshot::Sender<Result<(), String>>;

/// Something the actor must do for the core.
#[derive(Debug)]
pub enum Effect {
    /// Send this text frame upstream.
    Upstream(String),
    /// Start (or restart) the sync timer of the update in flight; when it fires, call
    /// [`SessionCore::sync_timer_fired`] with this version.
    ArmSyncTimer(u64),
    /// Run this call of a registered tool, then hand the result and the ticket to
    /// [`SessionCore::answered`]. Boxed: a call is far larger than the other effects.
    Run(Box<Run>),
}

/// One call of a registered tool to run.
#[derive(Debug)]
pub struct Run {
    pub call: ToolCall,
    pub ticket: Ticket,
}

/// What the core needs back with a call's result.
#[derive(Debug)]
pub struct Ticket {
    pub tool: SharedTool,
    pub response_id: Option<String>,
    /// The connection the call came on: an answer that outlives it is not sent on the next.
    pub connection: u64,
    /// When the model's call arrived (the `tool.call` event's duration).
    pub started: Instant,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SyncOutcome {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// RFC 3339, UTC.
    pub at: String,
}

impl SyncOutcome {
    /// The outcome of a sync settled now.
    pub fn now(outcome: &Result<(), String>) -> Self {
        Self {
            ok: outcome.is_ok(),
            error: outcome.clone().err(),
            at: rfc3339_now(),
        }
    }
}

/// The current time as RFC 3339, UTC, to the millisecond.
pub fn rfc3339_now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// The error of an update the session answered with an `error` event.
fn refused(message: &str) -> String {
    format!("model session refused the tool update: {message}")
}

/// What a waiter hears when the connection ends before its update settled.
pub const CLOSED_BEFORE_ACK: &str = "model session closed before acknowledging the tool update";

/// The error of an update with no acknowledgement within `timeout`.
pub fn not_acknowledged(timeout: Duration) -> String {
    format!(
        "model session did not acknowledge the tool update (no session.updated within {} s)",
        timeout.as_secs_f64()
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    App,
    Server,
}

/// A `session.update` sent upstream and not yet answered.
#[derive(Debug)]
struct Pending {
    origin: Origin,
    event_id: Option<String>,
    /// The tool names it carries, when it sets `tools`.
    names: Option<Names>,
    /// How many registered tools it carries.
    registered: usize,
    /// Timed out: its waiters have failed; a late acknowledgement is swallowed.
    abandoned: bool,
}

/// The tool names an update carries: the session's own, then the registered ones (kept as the
/// shared tools, so that sending an update copies no name).
#[derive(Debug)]
struct Names {
    own: Vec<String>,
    registered: Arc<[SharedTool]>,
}

impl Names {
    fn iter(&self) -> impl Iterator<Item = &str> {
        self.own
            .iter()
            .map(String::as_str)
            .chain(self.registered.iter().map(|t| t.name.as_str()))
    }

    /// The same names as `echoed`, in any order (a provider may list them in its own).
    fn same_as(&self, echoed: &[String]) -> bool {
        if self.own.len() + self.registered.len() != echoed.len() {
            return false;
        }
        let mut mine: Vec<&str> = self.iter().collect();
        let mut theirs: Vec<&str> = echoed.iter().map(String::as_str).collect();
        mine.sort_unstable();
        theirs.sort_unstable();
        mine == theirs
    }
}

/// The protocol state of one session connection.
#[derive(Debug)]
pub struct SessionCore {
    character: String,
    transport: Transport,
    /// The model endpoint (an attachment's: the call's URL).
    upstream: String,
    /// Where the connection's state and the calls it answers are announced.
    events: EventHub,
    state: ConnectionState,
    /// When it connected (the client: its current connection or attempt).
    since: String,
    dialect: Dialect,
    sync_timeout: Duration,
    /// The character's tools, newest list.
    registered: Arc<[SharedTool]>,
    /// The session's own tools (the app's), kept in every update; their calls are the app's.
    own_tools: Vec<ForeignTool>,
    /// The app's session settings, merged over its updates (relay) or read from the session's
    /// events (attach).
    own_settings: Map<String, Value>,
    /// Registered tool names the last server update put into the session (attach: tells ours
    /// from the app's in what the session echoes).
    ours_in_session: Vec<String>,
    /// Counts connections; 0 before the first.
    connection: u64,
    connected: bool,
    /// Connected, and (attach) the session has said which tools it has.
    ready: bool,
    sync: SyncState<Waiter>,
    /// Updates awaiting `session.updated` (or `error`), in the order sent.
    pending: VecDeque<Pending>,
    /// Tool names of the last acknowledgement, to recognise a late repeat of it.
    acknowledged: Option<Vec<String>>,
    calls: ResponseCalls,
    limiter: CallLimiter,
    clashes: Vec<String>,
    last_sync: Option<SyncOutcome>,
    acknowledged_tools: usize,
    calls_answered: u64,
    next_event: u64,
    effects: Vec<Effect>,
}

impl SessionCore {
    /// The core of a connection to `upstream`; it starts out `connecting`.
    pub fn new(
        character: String,
        transport: Transport,
        upstream: String,
        settings: &SessionSettings,
        events: EventHub,
        tools: Arc<[SharedTool]>,
    ) -> Self {
        Self {
            character,
            transport,
            upstream,
            events,
            state: ConnectionState::Connecting,
            since: rfc3339_now(),
            dialect: settings.dialect,
            sync_timeout: settings.sync_timeout,
            registered: tools,
            own_tools: Vec::new(),
            own_settings: Map::new(),
            ours_in_session: Vec::new(),
            connection: 0,
            connected: false,
            ready: false,
            sync: SyncState::new(),
            pending: VecDeque::new(),
            acknowledged: None,
            calls: ResponseCalls::default(),
            limiter: CallLimiter::new(
                settings.max_tool_calls_per_window,
                settings.tool_call_window,
            ),
            clashes: Vec::new(),
            last_sync: None,
            acknowledged_tools: 0,
            calls_answered: 0,
            next_event: 0,
            effects: Vec::new(),
        }
    }

    pub fn character(&self) -> &str {
        &self.character
    }

    pub fn transport(&self) -> Transport {
        self.transport
    }

    pub fn sync_timeout(&self) -> Duration {
        self.sync_timeout
    }

    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// The model endpoint (an attachment's: the call's URL).
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    pub fn state(&self) -> ConnectionState {
        self.state
    }

    /// Moves to `state`, announcing it when it is a change; a new attempt to connect starts a
    /// new `since`.
    pub fn set_state(&mut self, state: ConnectionState) {
        if state == ConnectionState::Connecting {
            self.since = rfc3339_now();
        }
        if self.state != state {
            self.state = state;
            self.announce();
        }
    }

    /// Announces the connection's report as `session.state`.
    pub fn announce(&self) {
        self.events.session_state(&self.character, &self.report());
    }

    /// This connection's entry in `GET /api/sessions` (and its `session.state` event).
    pub fn report(&self) -> ConnectionReport {
        ConnectionReport {
            kind: self.transport.into(),
            since: self.since.clone(),
            upstream: Some(self.upstream.clone()),
            state: self.state,
            last_sync: self.last_sync.clone(),
            acknowledged_tools: self.acknowledged_tools,
            calls_answered: self.calls_answered,
            clashes: self.clashes.clone(),
        }
    }

    /// The effects asked for since the last call, in order.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// The last sync's outcome, or `None` before the first.
    pub fn last_sync(&self) -> Option<&SyncOutcome> {
        self.last_sync.as_ref()
    }

    /// Registered tools in the last update the session acknowledged.
    pub fn acknowledged_tools(&self) -> usize {
        self.acknowledged_tools
    }

    /// Calls of registered tools this connection's session answered.
    pub fn calls_answered(&self) -> u64 {
        self.calls_answered
    }

    /// Registered tools left out because the session has a tool of that name.
    pub fn clashes(&self) -> &[String] {
        &self.clashes
    }

    fn event_id(&mut self, kind: &str) -> String {
        self.next_event += 1;
        format!("rt_{kind}_{}", self.next_event)
    }

    /// The connection is up. The client sends the current tools at once; a relay sends them
    /// when there are any; an attachment first waits for the session to say which tools it has
    /// (so the app's are kept), and `waiter` hears how its first update went.
    pub fn connected(&mut self, waiter: Option<Waiter>) {
        self.connection += 1;
        self.connected = true;
        self.since = rfc3339_now();
        self.set_state(ConnectionState::Connected);
        self.limiter.reset();
        self.calls.clear();
        self.pending.clear();
        match self.transport {
            Transport::Client => {
                self.ready = true;
                self.sync.connected();
                self.send_update();
            }
            Transport::Relay => {
                self.ready = true;
                if self.registered.is_empty() {
                    // Nothing to add until the app sends its settings or a tool is registered.
                    if let Some(waiter) = waiter {
                        let _ = waiter.send(Ok(()));
                    }
                } else if self.sync.changed(waiter).is_some() {
                    self.send_update();
                }
            }
            Transport::Attach => {
                self.ready = false;
                if let Some(waiter) = waiter {
                    self.sync.changed(Some(waiter));
                }
                let version = self.sync.connected();
                self.effects.push(Effect::ArmSyncTimer(version));
            }
        }
    }

    /// The connection is gone: every waiter fails; nothing is in flight.
    pub fn disconnected(&mut self) {
        self.connected = false;
        self.ready = false;
        self.pending.clear();
        for waiter in self.sync.disconnected() {
            let _ = waiter.send(Err(CLOSED_BEFORE_ACK.to_owned()));
        }
    }

    /// The character's tools changed. Returns the waiter when there is nothing to wait for: the
    /// session is not connected (the list goes out on connect, so the change succeeds at once),
    /// or it already has this very list.
    pub fn tools_changed(
        &mut self,
        tools: Arc<[SharedTool]>,
        waiter: Option<Waiter>,
    ) -> Option<Waiter> {
        let unchanged = same_tools(&self.registered, &tools);
        self.registered = tools;
        if !self.connected {
            return waiter;
        }
        // The list the session has (or is getting) already: e.g. the one a relay starts with,
        // sent again as it joins its character's sessions. After a failed update it goes again.
        if unchanged
            && self.sync.in_flight().is_none()
            && self.last_sync.as_ref().is_none_or(|s| s.ok)
        {
            return waiter;
        }
        if self.sync.changed(waiter).is_some() && self.ready {
            self.send_update();
        }
        None
    }

    /// Sends `session.update` with the session's own tools and the registered ones.
    fn send_update(&mut self) {
        let Some(version) = self.sync.in_flight() else {
            return;
        };
        let event_id = self.event_id("sync");
        let kept: Arc<[SharedTool]> = if self.own_tools.is_empty() {
            self.registered.clone()
        } else {
            let (kept, clashes) = protocol::without_clashes(&self.registered, &self.own_tools);
            self.note_clashes(clashes);
            kept.into()
        };
        let keep = Keep {
            tools: &self.own_tools,
            settings: Some(&self.own_settings),
        };
        let text = protocol::merged_update_text(self.dialect, &kept, keep, &event_id);
        if self.transport == Transport::Attach {
            self.ours_in_session = kept.iter().map(|t| t.name.clone()).collect();
        }
        let names = Names {
            own: self.own_tools.iter().map(|t| t.name.clone()).collect(),
            registered: kept,
        };
        self.pending.push_back(Pending {
            origin: Origin::Server,
            event_id: Some(event_id),
            registered: names.registered.len(),
            names: Some(names),
            abandoned: false,
        });
        self.effects.push(Effect::Upstream(text));
        self.effects.push(Effect::ArmSyncTimer(version));
    }

    fn note_clashes(&mut self, clashes: Vec<String>) {
        if clashes != self.clashes {
            if !clashes.is_empty() {
                tracing::warn!(
                    character = %self.character,
                    transport = ?self.transport,
                    tools = ?clashes,
                    "registered tools left out of the session: the app has tools of the same name"
                );
            }
            self.clashes = clashes;
        }
    }

    /// The sync timer of `version` fired: if that update is still unsettled, it failed.
    pub fn sync_timer_fired(&mut self, version: u64) {
        if self.sync.in_flight() != Some(version) {
            return;
        }
        let error = if self.ready {
            for p in self.pending.iter_mut() {
                if p.origin == Origin::Server && !p.abandoned {
                    p.abandoned = true;
                }
            }
            not_acknowledged(self.sync_timeout)
        } else {
            format!(
                "the call's session did not say which tools it has (no session.created or \
                 session.updated within {} s); the tools were not sent, so the app's are kept",
                self.sync_timeout.as_secs_f64()
            )
        };
        self.settle(Err(error), 0);
    }

    /// Settles the server update in flight and sends the next one if changes are waiting.
    fn settle(&mut self, outcome: Result<(), String>, registered: usize) {
        let settled = match outcome {
            Ok(()) => self.sync.acknowledged(),
            Err(_) => self.sync.failed(),
        };
        let Some(settled) = settled else {
            tracing::debug!(character = %self.character, "ignoring an acknowledgement with no update in flight");
            return;
        };
        match &outcome {
            Ok(()) => self.acknowledged_tools = registered,
            Err(error) => {
                tracing::warn!(character = %self.character, transport = ?self.transport, %error, "tool update not acknowledged")
            }
        }
        self.last_sync = Some(SyncOutcome::now(&outcome));
        // Announced before anyone waiting hears the outcome, so the change's own event
        // (`tools.changed`, after every session settled) always follows it.
        self.announce();
        for waiter in settled.waiters {
            let _ = waiter.send(outcome.clone());
        }
        if settled.send_next.is_some() && self.ready {
            self.send_update();
        }
    }

    /// A text frame from upstream. Returns whether an app behind a relay sees it: everything
    /// but the answers to the server's own updates.
    pub fn from_upstream(&mut self, text: &str) -> bool {
        match protocol::parse_server_event(text) {
            Ok(ServerEvent::SessionCreated { tools }) => {
                if self.transport == Transport::Attach {
                    // A session that lists no tools as it starts has none.
                    self.learn(text, Some(tools.unwrap_or_default()));
                }
                true
            }
            Ok(ServerEvent::SessionUpdated { tools }) => self.on_session_updated(text, tools),
            Ok(ServerEvent::Error { message, event_id }) => self.on_error(&message, event_id),
            Ok(ServerEvent::FunctionCall(call)) => {
                self.on_call(call);
                true
            }
            Ok(ServerEvent::ResponseDone { response_id, calls }) => {
                for call in calls {
                    self.on_call(call);
                }
                if let Some(response_id) = response_id
                    && self.calls.done(&response_id)
                {
                    self.request_response();
                }
                true
            }
            Ok(ServerEvent::Ignored) => true,
            Err(e) => {
                if self.transport != Transport::Relay {
                    tracing::warn!(character = %self.character, error = %e, "ignoring a malformed event from the model session");
                }
                true
            }
        }
    }

    /// A text frame from the app (relay). Returns the text to send upstream instead, when the
    /// event is a `session.update` whose tools the registered ones were merged into.
    pub fn from_app(&mut self, text: &str) -> Option<String> {
        let update = protocol::app_session_update(self.dialect, &self.registered, text)?;
        self.own_settings.extend(update.settings);
        let mut registered = 0;
        if let Some(own) = update.tools {
            self.own_tools = own;
            registered = self.registered.len() - update.clashes.len();
            self.note_clashes(update.clashes);
        }
        self.pending.push_back(Pending {
            origin: Origin::App,
            event_id: update.event_id,
            names: update.names.map(|own| Names {
                own,
                registered: Arc::from([]),
            }),
            registered,
            abandoned: false,
        });
        update.rewritten
    }

    /// The session described itself (attach): its tools, less the ones the server put there,
    /// are the app's. The first description lets the waiting update go.
    fn learn(&mut self, text: &str, tools: Option<Vec<ForeignTool>>) {
        if let Some(mut session) = protocol::session_object(text) {
            session.remove("tools");
            self.own_settings = session;
        }
        let Some(tools) = tools else {
            return;
        };
        self.own_tools = tools
            .into_iter()
            .filter(|t| !self.ours_in_session.contains(&t.name))
            .collect();
        if !self.ready && self.connected {
            self.ready = true;
            if self.registered.is_empty() {
                // Nothing to add: the session already has everything.
                if self.sync.in_flight().is_some() {
                    self.settle(Ok(()), 0);
                }
            } else {
                if self.sync.in_flight().is_none() {
                    self.sync.changed(None);
                }
                self.send_update();
            }
        }
    }

    fn on_session_updated(&mut self, text: &str, echoed: Option<Vec<ForeignTool>>) -> bool {
        let names: Option<Vec<String>> = echoed
            .as_ref()
            .map(|tools| tools.iter().map(|t| t.name.clone()).collect());
        // An update that timed out may still be answered late; past it, its answer never came.
        while let Some(front) = self.pending.front().filter(|p| p.abandoned) {
            let late = matching(front.names.as_ref(), names.as_deref());
            self.pending.pop_front();
            if late {
                tracing::debug!(character = %self.character, "late acknowledgement of a timed-out tool update");
                return false;
            }
        }
        let awaited = self.pending.front().is_some_and(|front| {
            match (&front.names, names.as_deref()) {
                (Some(expected), Some(echoed)) if !expected.same_as(echoed) => {
                    // Not what the front update carries: for an attachment, someone else's
                    // update; otherwise the front's answer, unless it repeats the previous one.
                    self.transport != Transport::Attach
                        && self.acknowledged.as_deref() != Some(echoed)
                }
                _ => true,
            }
        });
        if awaited {
            let front = self.pending.pop_front().expect("the front was just seen");
            self.acknowledged =
                names.or_else(|| front.names.map(|n| n.iter().map(str::to_owned).collect()));
            return match front.origin {
                Origin::App => true,
                Origin::Server => {
                    self.settle(Ok(()), front.registered);
                    false
                }
            };
        }
        if names.is_some() && names == self.acknowledged {
            tracing::debug!(character = %self.character, "ignoring a repeated acknowledgement of the previous update");
            return false;
        }
        match self.transport {
            Transport::Attach => {
                // The app changed the call's session over its own connection: keep its tools,
                // and put back the registered ones if its update left them out.
                self.learn(text, echoed);
                let present = names.unwrap_or_default();
                let missing = self.ours_in_session.iter().any(|n| !present.contains(n));
                if missing && self.ready && self.sync.changed(None).is_some() {
                    self.send_update();
                }
                false
            }
            Transport::Relay => true,
            Transport::Client => false,
        }
    }

    fn on_error(&mut self, message: &str, event_id: Option<String>) -> bool {
        let position = match &event_id {
            Some(id) => self
                .pending
                .iter()
                .position(|p| p.event_id.as_deref() == Some(id.as_str())),
            // Without an event id, an error while the server's update is the next to be
            // answered is taken as its refusal, as the providers send it.
            None => self
                .pending
                .iter()
                .position(|p| !p.abandoned)
                .filter(|&i| self.pending[i].origin == Origin::Server),
        };
        let Some(position) = position else {
            if self.transport != Transport::Relay {
                tracing::warn!(character = %self.character, error = %message, event_id = ?event_id, "model session reported an error");
            }
            return true;
        };
        let pending = self.pending.remove(position).expect("the position exists");
        match pending.origin {
            Origin::App => true,
            Origin::Server => {
                if !pending.abandoned {
                    self.settle(Err(refused(message)), 0);
                }
                // An error that names no event may be the app's: it sees it too.
                event_id.is_none()
            }
        }
    }

    /// Whether the server answers calls of `name`: every call but those of the session's own
    /// tools (the app's), which the app answers.
    fn is_ours(&self, name: &str) -> bool {
        !self.own_tools.iter().any(|t| t.name == name)
    }

    fn on_call(&mut self, call: FunctionCall) {
        if !self.is_ours(&call.name) {
            if let Some(response_id) = &call.response_id {
                self.calls.foreign(response_id);
            }
            return;
        }
        if !self
            .calls
            .started(call.response_id.as_deref(), &call.call_id)
        {
            return;
        }
        let response_id = call.response_id;
        let started = Instant::now();
        let tool_call = ToolCall::from_raw(call.call_id, call.name, call.arguments);
        if !self.limiter.admit(started) {
            let error = format!(
                "tool call limit reached: more than {} calls within {} s; the call was not run",
                self.limiter.max(),
                self.limiter.window().as_secs_f64()
            );
            tracing::warn!(character = %self.character, tool = %tool_call.name, "runaway guard refused a tool call");
            let result = tool_call.error(error);
            self.answer(response_id, result, None, started);
            return;
        }
        let Some(tool) = self
            .registered
            .iter()
            .find(|t| t.name == tool_call.name)
            .cloned()
        else {
            let available = self
                .registered
                .iter()
                .map(|t| t.name.as_str())
                .filter(|n| self.is_ours(n));
            let error = not_registered_text(&tool_call.name, None, available);
            let result = tool_call.error(error);
            self.answer(response_id, result, None, started);
            return;
        };
        self.effects.push(Effect::Run(Box::new(Run {
            call: tool_call,
            ticket: Ticket {
                tool,
                response_id,
                connection: self.connection,
                started,
            },
        })));
    }

    /// A call the core asked to run finished.
    pub fn answered(&mut self, ticket: Ticket, result: ToolResult) {
        let Ticket {
            tool,
            response_id,
            connection,
            started,
        } = ticket;
        if connection != self.connection || !self.connected {
            self.announce_call(&result, Some(&tool.source), started);
            tracing::debug!(character = %self.character, call_id = %result.call_id, "dropping the answer to a call of a connection that has ended");
            return;
        }
        self.answer(response_id, result, Some(&tool.source), started);
    }

    /// Announces a finished call of the model's (`source` is `None` for a tool the character
    /// does not have, or a call the runaway guard refused).
    fn announce_call(&self, result: &ToolResult, source: Option<&str>, started: Instant) {
        self.events.tool_call(&ToolCallFinished {
            role: &self.character,
            tool: &result.name,
            source,
            call_id: &result.call_id,
            caller: Caller::Model,
            kind: Some(self.transport.into()),
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            is_error: result.is_error,
        });
    }

    /// Answers a call: its exact output, then (when the model takes images and the turn has
    /// room) one user message with its images; images that cannot go are named in the output.
    /// The call is announced as `tool.call`.
    fn answer(
        &mut self,
        response_id: Option<String>,
        mut result: ToolResult,
        source: Option<&str>,
        started: Instant,
    ) {
        self.announce_call(&result, source, started);
        let warning = if self.dialect.takes_images() {
            self.calls
                .image_budget(response_id.as_deref())
                .take(&mut result.images)
        } else {
            protocol::images_not_taken(self.dialect, &mut result.images)
        };
        result.add_image_warnings(warning.into_iter().collect());
        let event_id = self.event_id("call");
        let event =
            protocol::function_call_output(&result.call_id, &result.model_text(), &event_id);
        self.effects.push(Effect::Upstream(event.to_string()));
        if !result.images.is_empty() {
            let event_id = self.event_id("images");
            self.effects.push(Effect::Upstream(protocol::image_message(
                &result, &event_id,
            )));
        }
        self.calls_answered += 1;
        if self.calls.answered(response_id.as_deref(), &result.call_id) {
            self.request_response();
        }
    }

    fn request_response(&mut self) {
        let event_id = self.event_id("response");
        self.effects.push(Effect::Upstream(
            protocol::response_create(&event_id).to_string(),
        ));
    }
}

/// The same tool definitions (the very same registrations), in the same order.
fn same_tools(a: &[SharedTool], b: &[SharedTool]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| Arc::ptr_eq(a, b))
}

/// Whether an acknowledgement echoing `echoed` answers an update that carried `expected`
/// (either unknown counts as a match).
fn matching(expected: Option<&Names>, echoed: Option<&[String]>) -> bool {
    match (expected, echoed) {
        (Some(expected), Some(echoed)) => expected.same_as(echoed),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::call::ToolAnswer;
    use crate::domain::images::ToolImage;
    use crate::domain::tool::test_tools;
    use crate::events::{EventSettings, Subscription};

    const URL: &str = "ws://127.0.0.1:9/v1/realtime";

    fn tools(names: &[&str]) -> Arc<[SharedTool]> {
        test_tools(names).into()
    }

    fn core(transport: Transport, registered: &[&str]) -> SessionCore {
        core_on(transport, registered, Dialect::Openai, &hub())
    }

    fn hub() -> EventHub {
        EventHub::new(&EventSettings::default())
    }

    fn core_on(
        transport: Transport,
        registered: &[&str],
        dialect: Dialect,
        events: &EventHub,
    ) -> SessionCore {
        let settings = SessionSettings::new(URL, dialect);
        SessionCore::new(
            "Mio".into(),
            transport,
            URL.into(),
            &settings,
            events.clone(),
            tools(registered),
        )
    }

    /// The events published since the last look: (kind, data).
    fn published(subscription: &mut Subscription) -> Vec<(String, Value)> {
        let mut events = Vec::new();
        while let Ok(event) = subscription.events.try_recv() {
            let frame = std::str::from_utf8(event.frame()).unwrap();
            let line = |prefix: &str| {
                frame
                    .lines()
                    .find_map(|l| l.strip_prefix(prefix))
                    .unwrap()
                    .trim()
                    .to_owned()
            };
            let data = serde_json::from_str(&line("data:")).unwrap();
            events.push((line("event:"), data));
        }
        events
    }

    /// A successful output of `text` (exact JSON) with `images`.
    fn output(call: &ToolCall, text: &str, images: Vec<ToolImage>) -> ToolResult {
        let answer = ToolAnswer {
            output: serde_json::value::RawValue::from_string(text.into()).unwrap(),
            error: None,
            images: None,
        };
        call.result(answer, images)
    }

    fn image(prompt: &str) -> ToolImage {
        ToolImage {
            mime: "image/png",
            width: 1,
            height: 1,
            data_b64: "iVBO".into(),
            vision_prompt: prompt.into(),
        }
    }

    /// The one call of a registered tool the core asked to run.
    fn the_run(core: &mut SessionCore) -> Run {
        match core.take_effects().pop() {
            Some(Effect::Run(run)) => *run,
            other => panic!("expected a call to run, got {other:?}"),
        }
    }

    /// The events sent upstream since the last look, as JSON.
    fn sent(core: &mut SessionCore) -> Vec<Value> {
        core.take_effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::Upstream(text) => Some(serde_json::from_str(&text).unwrap()),
                _ => None,
            })
            .collect()
    }

    fn names(update: &Value) -> Vec<&str> {
        update["session"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect()
    }

    fn updated(names: &[&str]) -> String {
        let tools: Vec<Value> = names
            .iter()
            .map(|n| json!({"type": "function", "name": n}))
            .collect();
        json!({"type": "session.updated", "session": {"type": "realtime", "tools": tools}})
            .to_string()
    }

    fn waiter() -> (Waiter, oneshot::Receiver<Result<(), String>>) {
        oneshot::channel()
    }

    #[test]
    fn acknowledgements_are_matched_in_order_and_only_the_apps_reach_the_app() {
        let mut relay = core(Transport::Relay, &["lookup"]);
        relay.connected(None);
        let first = sent(&mut relay);
        assert_eq!(
            names(&first[0]),
            ["lookup"],
            "the registered tools go up at once"
        );

        // The app's update goes up merged while the server's is still unanswered.
        let app = r#"{"type":"session.update","event_id":"a1","session":{"type":"realtime","tools":[{"type":"function","name":"own"}]}}"#;
        let merged: Value = serde_json::from_str(&relay.from_app(app).unwrap()).unwrap();
        assert_eq!(names(&merged), ["own", "lookup"]);

        // A change while both wait: one update in flight, so it waits for the first answer.
        let (w, mut rx) = waiter();
        assert!(
            relay
                .tools_changed(tools(&["lookup", "more"]), Some(w))
                .is_none()
        );
        assert!(sent(&mut relay).is_empty());

        // The first answer is the server's: the app does not see it; the change goes out next,
        // keeping the app's tool.
        assert!(!relay.from_upstream(&updated(&["lookup"])));
        let next = sent(&mut relay);
        assert_eq!(names(&next[0]), ["own", "lookup", "more"]);
        // The second answer is the app's: it sees it.
        assert!(relay.from_upstream(&updated(&["own", "lookup"])));
        assert!(rx.try_recv().is_err(), "not settled by the app's answer");
        assert!(!relay.from_upstream(&updated(&["own", "lookup", "more"])));
        assert_eq!(rx.try_recv().unwrap(), Ok(()));
        assert_eq!(relay.acknowledged_tools(), 2);
    }

    #[test]
    fn errors_settle_the_update_they_name() {
        let mut relay = core(Transport::Relay, &["lookup"]);
        relay.connected(None);
        let update = sent(&mut relay).remove(0);
        relay.from_app(r#"{"type":"session.update","event_id":"a1","session":{"tools":[]}}"#);
        let app_error = json!({"type": "error", "error": {"message": "bad", "event_id": "a1"}});
        assert!(
            relay.from_upstream(&app_error.to_string()),
            "the app's error is the app's"
        );
        let ours =
            json!({"type": "error", "error": {"message": "no", "event_id": update["event_id"]}});
        assert!(!relay.from_upstream(&ours.to_string()));
        assert_eq!(
            relay.last_sync().unwrap().error.as_deref(),
            Some("model session refused the tool update: no")
        );
    }

    #[test]
    fn calls_of_the_apps_tools_are_left_to_the_app() {
        let mut relay = core(Transport::Relay, &["get_weather", "own"]);
        relay.connected(None);
        sent(&mut relay);
        relay.from_app(
            r#"{"type":"session.update","session":{"tools":[{"type":"function","name":"own"}]}}"#,
        );
        assert_eq!(relay.clashes(), ["own"]);
        let call = |id: &str, name: &str| {
            json!({"type": "response.function_call_arguments.done", "response_id": "r1",
                   "call_id": id, "name": name, "arguments": "{}"})
            .to_string()
        };
        assert!(relay.from_upstream(&call("c1", "own")));
        assert!(relay.take_effects().is_empty(), "the app's call is not run");
        assert!(relay.from_upstream(&call("c2", "get_weather")));
        let run = the_run(&mut relay);
        assert_eq!(run.call.call_id, "c2");
        let done = json!({"type": "response.done", "response": {"id": "r1", "output": []}});
        relay.from_upstream(&done.to_string());
        let result = output(&run.call, "1", Vec::new());
        relay.answered(run.ticket, result);
        let answers = sent(&mut relay);
        assert_eq!(
            answers.len(),
            1,
            "an output, and no response.create: the app continues"
        );
        assert_eq!(answers[0]["item"]["call_id"], "c2");
        assert_eq!(relay.calls_answered(), 1);
    }

    #[test]
    fn an_attachment_waits_for_the_calls_tools_and_keeps_them() {
        let mut attach = core(Transport::Attach, &["lookup"]);
        let (w, mut rx) = waiter();
        attach.connected(Some(w));
        assert!(
            sent(&mut attach).is_empty(),
            "nothing before the session describes itself"
        );
        let created = json!({"type": "session.created", "session": {"type": "realtime",
            "tool_choice": "required", "tools": [{"type": "function", "name": "app_tool"}]}});
        attach.from_upstream(&created.to_string());
        let update = sent(&mut attach).remove(0);
        assert_eq!(names(&update), ["app_tool", "lookup"]);
        assert_eq!(update["session"]["tool_choice"], "required");
        attach.from_upstream(&updated(&["app_tool", "lookup"]));
        assert_eq!(rx.try_recv().unwrap(), Ok(()));

        // The app replaces its tools over its own connection, leaving ours out: put back.
        attach.from_upstream(&updated(&["app_tool_2"]));
        let again = sent(&mut attach).remove(0);
        assert_eq!(names(&again), ["app_tool_2", "lookup"]);
    }

    #[test]
    fn a_timed_out_update_fails_and_its_late_answer_is_swallowed() {
        let mut client = core(Transport::Client, &["a"]);
        let (w, mut rx) = waiter();
        client.connected(None);
        sent(&mut client);
        client.from_upstream(&updated(&["a"]));
        client.tools_changed(tools(&["a", "b"]), Some(w));
        let version = client.sync.in_flight().unwrap();
        client.sync_timer_fired(version);
        assert_eq!(
            rx.try_recv().unwrap(),
            Err(
                "model session did not acknowledge the tool update (no session.updated within 5 s)"
                    .into()
            )
        );
        let (w, mut rx) = waiter();
        client.tools_changed(tools(&["a", "b", "c"]), Some(w));
        sent(&mut client);
        client.from_upstream(&updated(&["a", "b"]));
        assert!(rx.try_recv().is_err(), "the late answer settles nothing");
        client.from_upstream(&updated(&["a", "b", "c"]));
        assert_eq!(rx.try_recv().unwrap(), Ok(()));
    }

    #[test]
    fn answers_carry_exact_output_and_images_on_every_kind_and_are_announced() {
        for transport in [Transport::Client, Transport::Relay, Transport::Attach] {
            let events = hub();
            let mut subscription = events.subscribe(None, None);
            let mut session = core_on(transport, &["cam"], Dialect::Openai, &events);
            session.connected(None);
            if transport == Transport::Attach {
                session.from_upstream(
                    &json!({"type": "session.created", "session": {"tools": []}}).to_string(),
                );
            }
            sent(&mut session);
            let connected = published(&mut subscription);
            assert_eq!(connected[0].0, "session.state", "{transport:?}");
            assert_eq!(connected[0].1["state"], "connected", "{transport:?}");
            assert_eq!(
                connected[0].1["kind"],
                json!(transport),
                "the event names the kind of connection"
            );
            session.from_upstream(
                &json!({"type": "response.function_call_arguments.done", "response_id": "r1",
                        "call_id": "c1", "name": "cam", "arguments": "{}"})
                .to_string(),
            );
            let run = the_run(&mut session);
            let result = output(&run.call, r#"{"n": 1.50}"#, vec![image("look")]);
            session.answered(run.ticket, result);
            let answers = sent(&mut session);
            assert_eq!(
                answers[0]["item"],
                json!({"type": "function_call_output", "call_id": "c1", "output": r#"{"n": 1.50}"#}),
                "{transport:?}: the exact output text"
            );
            assert_eq!(answers[1]["item"]["role"], "user", "{transport:?}");
            assert_eq!(
                answers[1]["item"]["content"][1]["image_url"], "data:image/png;base64,iVBO",
                "{transport:?}: the image follows the output"
            );
            let calls = published(&mut subscription);
            assert_eq!(calls.len(), 1, "{transport:?}: {calls:?}");
            let (kind, mut data) = calls.into_iter().next().unwrap();
            assert_eq!(kind, "tool.call");
            assert!(data["duration_ms"].as_f64().unwrap() >= 0.0);
            data.as_object_mut().unwrap().remove("duration_ms");
            let kind = serde_json::to_value(ConnectionKind::from(transport)).unwrap();
            assert_eq!(
                data,
                json!({"role": "Mio", "tool": "cam", "source": "plugin:w", "call_id": "c1",
                       "caller": "model", "kind": kind, "is_error": false}),
                "{transport:?}: no arguments, no output, the kind of session"
            );
        }
    }

    #[test]
    fn a_session_that_takes_no_images_is_told_what_it_missed() {
        let mut relay = core_on(Transport::Relay, &["cam"], Dialect::Glm, &hub());
        relay.connected(None);
        sent(&mut relay);
        relay.from_upstream(
            &json!({"type": "response.function_call_arguments.done", "response_id": "r1",
                    "call_id": "c1", "name": "cam", "arguments": "{}"})
            .to_string(),
        );
        let run = the_run(&mut relay);
        let result = output(&run.call, "7", vec![image("")]);
        relay.answered(run.ticket, result);
        let answers = sent(&mut relay);
        assert_eq!(answers.len(), 1, "no image message: {answers:?}");
        assert_eq!(
            answers[0]["item"]["output"],
            r#"{"result":7,"_image_warnings":["1 image(s) not shown: this model session (glm dialect) takes no images"]}"#
        );
    }

    #[test]
    fn a_settled_sync_is_announced_with_the_connections_report() {
        let events = hub();
        let mut subscription = events.subscribe(None, None);
        let mut relay = core_on(Transport::Relay, &[], Dialect::Openai, &events);
        relay.connected(None);
        published(&mut subscription);
        let (w, mut rx) = waiter();
        assert!(relay.tools_changed(tools(&["a"]), Some(w)).is_none());
        sent(&mut relay);
        relay.from_upstream(&updated(&["a"]));
        assert_eq!(rx.try_recv().unwrap(), Ok(()));
        let state = published(&mut subscription);
        assert_eq!(state.len(), 1, "{state:?}");
        assert_eq!(state[0].1["kind"], "relay");
        assert_eq!(state[0].1["last_sync"]["ok"], true);
        assert_eq!(state[0].1["acknowledged_tools"], 1);
    }
}
