//! `SessionCore`: what a live session does with the character's tools and the model's calls,
//! whatever the wire protocol and however the bytes travel.
//!
//! It owns the acknowledged tool sync (one update in flight, newer changes merged into the
//! next), the acknowledgements still awaited — the app's and the server's, matched in the order
//! they were sent, since the two can interleave on one connection — the open turns and their
//! calls (one request to go on after the last answer), the runaway guard, and the tools the
//! session has of its own (the app's), which are kept in every update and never answered by the
//! server. It answers each call with its exact output and the images the model takes, decides
//! which running calls a new user turn abandons (and answers them as cancelled), and announces
//! the connection's state, each settled sync (`session.state`) and each answered call
//! (`tool.call`) on the event hub.
//!
//! It also applies the character's tool budget: the session is offered the set
//! [`Budget::offer`](crate::domain::budget::Budget::offer) gives for what it found (`found.rs`),
//! answers the model's `find_tools` from the character's snapshot, and holds that answer until
//! the update that adds the tools found is acknowledged (or, on a protocol whose tools need a
//! new connection, offers `call_tool` instead and runs the found tools through it).
//!
//! Plain code, in the core's own words: the wire protocol is a [`Protocol`] adapter that reads
//! the model's frames into [`ModelEvent`]s and writes the frames the core decides on; the actor
//! that holds the core (one per kind of connection) feeds it, carries out the [`Effect`]s it
//! asks for, and decides what a kind of connection does differently — when the first update
//! goes, and what becomes of what the session says that is not an answer to the server
//! ([`Seen`]).

mod acks;
mod answers;
mod found;
mod interruptions;
mod later;
#[cfg(test)]
mod tests;
mod words;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::oneshot;

pub(crate) use self::acks::AppUpdate;
use self::acks::Pending;
use self::answers::RunningCall;
use self::found::Held;
use self::later::Floor;
pub(crate) use self::later::Wake;
pub use self::later::{Conversation, REPLY_GRACE, RESPONSE_START_GRACE};
pub use self::words::SyncError;
pub(crate) use self::words::{
    Answers, Call, ForeignTool, Interruption, Keep, ModelEvent, Protocol, ReadError, Seen,
    without_clashes,
};
use super::calls::{CallLimiter, ResponseCalls};
use super::settings::SessionSettings;
use super::sync::SyncState;
use super::{CharacterTools, ConnectionReport, ConnectionState};
use crate::domain::budget::Found;
use crate::domain::call::{ToolCall, ToolResult};
use crate::domain::connection::ConnectionKind;
use crate::domain::tool::SharedTool;
use crate::events::EventHub;
use crate::policy::{Admission, DedupeWindow, Policy};

/// Who waits for one tool update to settle.
pub(crate) type Waiter = oneshot::Sender<Result<(), SyncError>>;

/// Something the actor must do for the core.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Send this text frame upstream.
    Upstream(String),
    /// Start (or restart) the sync timer of the update in flight; when it fires, call
    /// [`SessionCore::sync_timer_fired`] with this version.
    ArmSyncTimer(u64),
    /// Run this call of a registered tool, then hand the result and the ticket to
    /// [`SessionCore::answered`]. Boxed: a call is far larger than the other effects.
    Run(Box<Run>),
    /// Cancel the call of this ticket, which still runs: drop it at once. The core has answered
    /// it already, and drops a result that comes anyway.
    Cancel(Ticket),
    /// Open a new connection that resumes this session and starts with this setup (a protocol
    /// whose tools need a new connection, [`Protocol::tools_need_new_connection`]); its
    /// acknowledgement comes on the new connection.
    Reconnect(String),
    /// After this long, call [`SessionCore::woke`] with this (a wait of `later.rs` is over).
    WakeAfter(Duration, Wake),
}

/// One call of a registered tool to run.
#[derive(Debug)]
pub(crate) struct Run {
    pub call: ToolCall,
    pub tool: SharedTool,
    pub ticket: Ticket,
    /// What the call passed (the call policy): it runs only through this, once it lets it.
    pub admission: Admission,
}

/// A resuming session's handle and switches.
#[derive(Debug, Default)]
struct Resumption {
    handle_at: Option<std::time::Instant>,
    switches: u64,
    refused: u64,
}

impl Resumption {
    fn report(&self) -> ResumptionReport {
        ResumptionReport {
            handle_age_ms: self
                .handle_at
                .map(|at| u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX)),
            switches: self.switches,
            refused: self.refused,
        }
    }
}

/// How a session that takes new tools on a new connection (Gemini Live) resumes itself, for
/// the sessions listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResumptionReport {
    /// Milliseconds since the latest resumption handle came; null before the first.
    pub handle_age_ms: Option<u64>,
    /// Times the session moved to a new connection (new tools, or the provider's `goAway`).
    pub switches: u64,
    /// Tool updates that failed because no moment came to open a new connection in time.
    pub refused: u64,
}

/// One call running in a session, for the sessions listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunningCallReport {
    pub tool: String,
    pub call_id: String,
    /// `blocking`: the model waits for it; `non_blocking`: answered as running, its result
    /// follows when it comes.
    pub behavior: crate::domain::tool::Behavior,
    /// When the model's call arrived, RFC 3339, UTC.
    pub started: String,
    /// How long it has run, in milliseconds.
    pub running_ms: u64,
}

/// Names one call the core asked to run: what the actor hands back with its result, or cancels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Ticket(u64);

/// The outcome of a tool update, as the sessions listing shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyncOutcome {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// RFC 3339, UTC.
    pub at: String,
}

impl SyncOutcome {
    /// The outcome of a sync settled now.
    pub fn now(outcome: &Result<(), SyncError>) -> Self {
        Self {
            ok: outcome.is_ok(),
            error: outcome.as_ref().err().map(ToString::to_string),
            at: rfc3339_now(),
        }
    }
}

/// The current time as RFC 3339, UTC, to the millisecond.
pub fn rfc3339_now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// The protocol state of one session connection.
#[derive(Debug)]
pub(crate) struct SessionCore {
    character: String,
    /// What kind of connection it is, for its report, its events and its log lines.
    kind: ConnectionKind,
    protocol: Box<dyn Protocol>,
    /// The model endpoint (an attachment's: the call's URL).
    upstream: String,
    /// Where the connection's state and the calls it answers are announced.
    events: EventHub,
    /// What each call passes before it runs (a person's approval, the tool's limits).
    policy: Policy,
    /// The model connection's recent calls, for the tools with `dedupe_seconds`: a new one with
    /// each connection (a new conversation).
    dedupe: DedupeWindow,
    state: ConnectionState,
    /// When it connected (the client: its current connection or attempt).
    since: String,
    sync_timeout: Duration,
    /// Other connections update the same session (an attached call, which the app updates over
    /// its own): an acknowledgement that matches nothing awaited is theirs.
    shared: bool,
    /// The character's tools (every one, newest list), what `find_tools` searches, and the
    /// character's budget.
    character_tools: CharacterTools,
    /// The tools this session's model found with `find_tools`.
    found: Found,
    /// The server's tools the session is offered now: the budget's offer for what it found
    /// (what every server update carries, less the tools the app has of its own).
    registered: Arc<[SharedTool]>,
    /// The character holds more tools than the session is offered, and it cannot search.
    over_budget: bool,
    /// Answers of `find_tools` that wait for the update carrying the tools they found.
    held: Vec<Held>,
    /// The calls made through `call_tool`, by call id: their answers go back under its name.
    through_call_tool: HashMap<String, &'static str>,
    /// The registered tools the last server update carried.
    sent_registered: Arc<[SharedTool]>,
    /// The session's own tools (the app's), kept in every update; their calls are the app's.
    own_tools: Vec<ForeignTool>,
    /// The app's session settings, merged over its updates (relay) or read from the session's
    /// events (attach).
    own_settings: Map<String, Value>,
    connected: bool,
    /// Connected, and able to take an update (an attachment: once the session said which tools
    /// it has).
    ready: bool,
    /// Why an update held until the session is ready fails, when it never is.
    not_ready: Option<SyncError>,
    sync: SyncState<Waiter>,
    /// Updates awaiting their acknowledgement (or an error), in the order sent.
    pending: VecDeque<Pending>,
    /// Tool names of the last acknowledgement, to recognise a late repeat of it.
    acknowledged: Option<Vec<String>>,
    calls: ResponseCalls,
    /// The calls the actor runs now, by ticket.
    running: HashMap<Ticket, RunningCall>,
    /// The number of the next ticket (in the order calls start).
    next_ticket: u64,
    /// The answers held for one frame per turn ([`Answers::TogetherPerTurn`]), by turn.
    batches: HashMap<String, Vec<ToolResult>>,
    /// Updates sent since the connection opened (a protocol whose tools need a new connection
    /// sends only its first on the connection itself).
    updates_on_connection: u64,
    /// Why the update in flight waits to be sent, when its actor says (it fails with this
    /// reason if the sync timer fires first).
    waiting_because: Option<String>,
    /// A session that takes new tools on a new connection resumed from a handle: its handle
    /// and connection switches, for the report.
    resumption: Option<Resumption>,
    /// A new user turn cancels the calls it abandons (`cancel_on_interruption`).
    cancel_on_interruption: bool,
    limiter: CallLimiter,
    /// When the model may be asked to speak (see `later.rs`).
    floor: Floor,
    clashes: Vec<String>,
    last_sync: Option<SyncOutcome>,
    acknowledged_tools: usize,
    calls_answered: u64,
    next_event: u64,
    effects: Vec<Effect>,
}

impl SessionCore {
    /// The core of a `kind` connection to `upstream`, speaking `protocol`; it starts out
    /// `connecting`. `shared`: other connections update the same session.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        character: String,
        kind: ConnectionKind,
        protocol: Box<dyn Protocol>,
        upstream: String,
        settings: &SessionSettings,
        events: EventHub,
        policy: Policy,
        tools: CharacterTools,
        shared: bool,
    ) -> Self {
        let mut core = Self {
            character,
            kind,
            protocol,
            upstream,
            events,
            policy,
            dedupe: DedupeWindow::new(),
            state: ConnectionState::Connecting,
            since: rfc3339_now(),
            sync_timeout: settings.sync_timeout,
            shared,
            character_tools: tools,
            found: Found::default(),
            registered: Arc::from([]),
            over_budget: false,
            held: Vec::new(),
            through_call_tool: HashMap::new(),
            sent_registered: Arc::from([]),
            own_tools: Vec::new(),
            own_settings: Map::new(),
            connected: false,
            ready: false,
            not_ready: None,
            sync: SyncState::new(),
            pending: VecDeque::new(),
            acknowledged: None,
            calls: ResponseCalls::default(),
            running: HashMap::new(),
            next_ticket: 0,
            batches: HashMap::new(),
            updates_on_connection: 0,
            waiting_because: None,
            resumption: None,
            cancel_on_interruption: settings.cancel_on_interruption,
            limiter: CallLimiter::new(
                settings.max_tool_calls_per_window,
                settings.tool_call_window,
            ),
            floor: Floor::default(),
            clashes: Vec::new(),
            last_sync: None,
            acknowledged_tools: 0,
            calls_answered: 0,
            next_event: 0,
            effects: Vec::new(),
        };
        core.reoffer();
        core
    }

    /// The session resumes itself on new connections: its report says how (see
    /// [`ResumptionReport`]).
    pub(crate) fn resumes(&mut self) {
        self.resumption.get_or_insert_with(Resumption::default);
    }

    /// A new resumption handle came.
    pub(crate) fn handle_received(&mut self) {
        if let Some(r) = &mut self.resumption {
            r.handle_at = Some(std::time::Instant::now());
        }
    }

    /// The session moved to a new connection.
    pub(crate) fn switched(&mut self) {
        if let Some(r) = &mut self.resumption {
            r.switches += 1;
        }
    }

    /// Whether a call of the session's runs now.
    pub(crate) fn has_running_calls(&self) -> bool {
        !self.running.is_empty()
    }

    /// Whether the connection is up.
    pub(crate) fn is_connected(&self) -> bool {
        self.connected
    }

    /// The update that gives the session the tools of the last one sent (to open a new
    /// connection with).
    pub(crate) fn current_update(&mut self) -> String {
        let event_id = self.event_id("sync");
        let keep = Keep {
            tools: &self.own_tools,
            settings: Some(&self.own_settings),
        };
        self.protocol
            .tool_update(&self.sent_registered, keep, &event_id)
    }

    /// The update that opens the connection when no update of the server's is on its way (a
    /// relay whose app's setup came while no tool was registered): the session's own settings
    /// and tools. `None` while one is on its way (it opens the connection).
    pub(crate) fn own_setup(&mut self) -> Option<String> {
        if self.sync.in_flight().is_some() {
            return None;
        }
        self.updates_on_connection += 1;
        Some(self.current_update())
    }

    /// The connection opened for the update in flight failed before it took it (`reason`):
    /// the update is refused.
    pub(crate) fn update_connection_failed(&mut self, reason: String) {
        self.on_refused(reason, None);
    }

    pub(crate) fn character(&self) -> &str {
        &self.character
    }

    pub(crate) fn sync_timeout(&self) -> Duration {
        self.sync_timeout
    }

    /// The model endpoint (an attachment's: the call's URL).
    pub(crate) fn upstream(&self) -> &str {
        &self.upstream
    }

    pub(crate) fn state(&self) -> ConnectionState {
        self.state
    }

    /// The server's tools the session is offered now (the character's newest list, within its
    /// budget).
    pub(crate) fn registered(&self) -> &[SharedTool] {
        &self.registered
    }

    /// The registered tools the last server update carried.
    pub(crate) fn sent_registered(&self) -> &[SharedTool] {
        &self.sent_registered
    }

    /// Moves to `state`, announcing it when it is a change; a new attempt to connect starts a
    /// new `since`.
    pub(crate) fn set_state(&mut self, state: ConnectionState) {
        if state == ConnectionState::Connecting {
            self.since = rfc3339_now();
        }
        if self.state != state {
            self.state = state;
            self.announce();
        }
    }

    /// Announces the connection's report as `session.state`.
    pub(crate) fn announce(&self) {
        self.events.session_state(&self.character, &self.report());
    }

    /// This connection's entry in `GET /api/sessions` (and its `session.state` event).
    pub(crate) fn report(&self) -> ConnectionReport {
        ConnectionReport {
            kind: self.kind,
            since: self.since.clone(),
            upstream: Some(self.upstream.clone()),
            state: self.state,
            last_sync: self.last_sync.clone(),
            acknowledged_tools: self.acknowledged_tools,
            calls_answered: self.calls_answered,
            clashes: self.clashes.clone(),
            offered_tools: self.registered.len(),
            over_budget: self.over_budget,
            gemini: self.resumption.as_ref().map(Resumption::report),
            running_calls: self.running_report(),
            conversation: self.floor.state(),
        }
    }

    /// The effects asked for since the last call, in order.
    pub(crate) fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    fn event_id(&mut self, kind: &str) -> String {
        self.next_event += 1;
        format!("rt_{kind}_{}", self.next_event)
    }

    /// The connection is up: a new conversation (no calls, no updates awaited). What goes first
    /// is the actor's to say: [`sync_now`](Self::sync_now),
    /// [`sync_if_registered`](Self::sync_if_registered) or
    /// [`hold_until_described`](Self::hold_until_described).
    pub(crate) fn connected(&mut self) {
        self.connected = true;
        self.since = rfc3339_now();
        self.set_state(ConnectionState::Connected);
        self.limiter.reset();
        self.dedupe = DedupeWindow::new();
        self.reset_floor();
        self.calls.clear();
        self.batches.clear();
        self.pending.clear();
        self.held.clear();
        self.through_call_tool.clear();
        self.updates_on_connection = 0;
    }

    /// Sends the current tools at once (a session the server itself opened).
    pub(crate) fn sync_now(&mut self) {
        self.ready = true;
        self.sync.connected();
        self.send_update();
    }

    /// Sends the current tools when there are any (a relay: the app's own settings come from
    /// the app); `waiter` hears how that went, or at once when nothing was to be sent.
    pub(crate) fn sync_if_registered(&mut self, waiter: Option<Waiter>) {
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

    /// Sends nothing until the session says which tools it has ([`described`](Self::described)),
    /// so its own are kept; `waiter` hears how the first update went, or `why_not` when the
    /// session never says within the sync timeout.
    pub(crate) fn hold_until_described(&mut self, waiter: Option<Waiter>, why_not: SyncError) {
        self.ready = false;
        self.not_ready = Some(why_not);
        if let Some(waiter) = waiter {
            self.sync.changed(Some(waiter));
        }
        let version = self.sync.connected();
        self.effects.push(Effect::ArmSyncTimer(version));
    }

    /// The connection is gone: every waiter fails; nothing is in flight, and the calls still
    /// running go with it (announced as cancelled).
    pub(crate) fn disconnected(&mut self) {
        self.drop_running();
        self.reset_floor();
        self.connected = false;
        self.ready = false;
        self.pending.clear();
        self.batches.clear();
        // Answers held for an update that will never be acknowledged go with the connection
        // (their calls announced as cancelled).
        self.held.clear();
        self.through_call_tool.clear();
        self.waiting_because = None;
        for waiter in self.sync.disconnected() {
            let _ = waiter.send(Err(SyncError::Closed));
        }
    }

    /// The character's tools changed. Returns the waiter when there is nothing to wait for: the
    /// session is not connected (the list goes out on connect, so the change succeeds at once),
    /// or the set it is offered is the very one it has (over budget, a change to a tool it is
    /// not offered changes nothing it sees).
    pub(crate) fn tools_changed(
        &mut self,
        tools: CharacterTools,
        waiter: Option<Waiter>,
    ) -> Option<Waiter> {
        let list_changed = !same_tools(&self.character_tools.list, &tools.list);
        self.character_tools = tools;
        let unchanged = !self.reoffer();
        if list_changed {
            self.cancel_removed_calls();
        }
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

    /// The session's own tools and settings changed elsewhere (an attached call that the app
    /// updated, or that described itself): they are kept from now on. A session held until it
    /// described itself is ready now, and its first update goes.
    pub(crate) fn described(
        &mut self,
        own_tools: Vec<ForeignTool>,
        settings: Option<Map<String, Value>>,
    ) {
        if let Some(settings) = settings {
            self.own_settings = settings;
        }
        self.own_tools = own_tools;
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
                if self.protocol.tools_need_new_connection() {
                    // What changed while the session was held goes in this first update: one
                    // more would be one more connection.
                    self.sync.covers_latest();
                }
                self.send_update();
            }
        }
    }

    /// Only the session's settings changed elsewhere.
    pub(crate) fn described_settings(&mut self, settings: Map<String, Value>) {
        self.own_settings = settings;
    }

    /// The character's list changed, handed over without its snapshot or budget (a
    /// [`SyncTools`](super::SyncTools)): the session keeps searching the snapshot it has.
    pub(crate) fn list_changed(
        &mut self,
        list: Arc<[SharedTool]>,
        waiter: Option<Waiter>,
    ) -> Option<Waiter> {
        let tools = CharacterTools {
            list,
            ..self.character_tools.clone()
        };
        self.tools_changed(tools, waiter)
    }

    /// Sends the tools again (an attached call whose app left them out of its own update).
    pub(crate) fn resend(&mut self) {
        if self.ready && self.sync.changed(None).is_some() {
            self.send_update();
        }
    }

    /// Sends an update with the session's own tools and the registered ones.
    fn send_update(&mut self) {
        let Some(version) = self.sync.in_flight() else {
            return;
        };
        let event_id = self.event_id("sync");
        let kept: Arc<[SharedTool]> = if self.own_tools.is_empty() {
            self.registered.clone()
        } else {
            let (kept, clashes) = without_clashes(&self.registered, &self.own_tools);
            self.note_clashes(clashes);
            kept.into()
        };
        let keep = Keep {
            tools: &self.own_tools,
            settings: Some(&self.own_settings),
        };
        let text = self.protocol.tool_update(&kept, keep, &event_id);
        self.sent_registered = kept.clone();
        self.expect_acknowledgement(event_id, kept);
        let on_new_connection =
            self.protocol.tools_need_new_connection() && self.updates_on_connection > 0;
        self.updates_on_connection += 1;
        self.waiting_because = None;
        self.effects.push(if on_new_connection {
            Effect::Reconnect(text)
        } else {
            Effect::Upstream(text)
        });
        self.effects.push(Effect::ArmSyncTimer(version));
    }

    fn note_clashes(&mut self, clashes: Vec<String>) {
        if clashes != self.clashes {
            if !clashes.is_empty() {
                tracing::warn!(
                    character = %self.character,
                    kind = self.kind.name(),
                    tools = ?clashes,
                    "registered tools left out of the session: the app has tools of the same name"
                );
            }
            self.clashes = clashes;
        }
    }

    /// The sync timer of `version` fired: if that update is still unsettled, it failed.
    pub(crate) fn sync_timer_fired(&mut self, version: u64) {
        if self.sync.in_flight() != Some(version) {
            return;
        }
        let error = if self.ready {
            self.abandon_server_updates();
            match self.waiting_because.take() {
                Some(reason) => {
                    if let Some(r) = &mut self.resumption {
                        r.refused += 1;
                    }
                    SyncError::NotResumable(reason)
                }
                None if self.protocol.tools_need_new_connection() => {
                    SyncError::NoSetupComplete(self.sync_timeout)
                }
                None => SyncError::NotAcknowledged(self.sync_timeout),
            }
        } else {
            self.not_ready
                .clone()
                .unwrap_or(SyncError::NotAcknowledged(self.sync_timeout))
        };
        self.settle(Err(error), 0);
    }

    /// The update in flight cannot be sent yet, for `reason` (a connection to open that cannot
    /// be opened now): if the sync timer fires first, the update fails with it. The actor sends
    /// it when it can; its acknowledgement, even late, is taken.
    pub(crate) fn update_waits(&mut self, reason: String) {
        if self.sync.in_flight().is_some() {
            self.waiting_because = Some(reason);
        }
    }

    /// A timed-out update of `registered` tools was taken after all: the report says so.
    fn took_late(&mut self, registered: usize) {
        self.acknowledged_tools = registered;
        self.last_sync = Some(SyncOutcome::now(&Ok(())));
        self.announce();
    }

    /// Settles the server update in flight and sends the next one if changes are waiting.
    fn settle(&mut self, outcome: Result<(), SyncError>, registered: usize) {
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
                tracing::warn!(character = %self.character, kind = self.kind.name(), %error, "tool update not acknowledged")
            }
        }
        self.last_sync = Some(SyncOutcome::now(&outcome));
        // Announced before anyone waiting hears the outcome, so the change's own event
        // (`tools.changed`, after every session settled) always follows it.
        self.announce();
        for waiter in settled.waiters {
            let _ = waiter.send(outcome.clone());
        }
        // The model hears what `find_tools` found once the session has it.
        self.release_held(settled.version, &outcome);
        if settled.send_next.is_some() && self.ready {
            self.send_update();
        }
    }

    /// A text frame from upstream: what the session does with it, and what became of it.
    pub(crate) fn on_upstream(&mut self, text: &str) -> Seen {
        match self.protocol.read(text) {
            Ok(ModelEvent::Started { tools }) => Seen::Described {
                started: true,
                tools,
            },
            Ok(ModelEvent::Updated { tools }) => self.on_updated(tools),
            Ok(ModelEvent::Refused { message, event_id }) => self.on_refused(message, event_id),
            Ok(ModelEvent::Call(call)) => {
                self.on_call(call);
                Seen::Pass
            }
            Ok(ModelEvent::TurnDone {
                turn,
                calls,
                cancelled,
            }) => {
                if cancelled && let Some(turn) = &turn {
                    self.interrupted(Interruption::Turn(turn.clone()));
                }
                for call in calls {
                    self.on_call(call);
                }
                if let Some(turn) = turn {
                    let state = self.calls.done(&turn);
                    self.turn_settled(Some(&turn), state);
                }
                self.turn_ended();
                Seen::Pass
            }
            Ok(ModelEvent::Interrupted(interruption)) => {
                self.interrupted(interruption);
                Seen::Pass
            }
            Ok(ModelEvent::TurnStarted) => {
                self.turn_started();
                Seen::Pass
            }
            Ok(ModelEvent::SpeechStarted) => {
                self.speech_started();
                self.interrupted(Interruption::NewTurn);
                Seen::Pass
            }
            Ok(ModelEvent::SpeechStopped) => {
                self.speech_stopped();
                Seen::Pass
            }
            Ok(ModelEvent::Other) => Seen::Pass,
            Err(e) => Seen::Unreadable(e),
        }
    }
}

/// The same tool definitions (the very same registrations), in the same order.
fn same_tools(a: &[SharedTool], b: &[SharedTool]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| Arc::ptr_eq(a, b))
}
