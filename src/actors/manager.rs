//! `SessionManager`: one actor per character. It owns that character's tools — it is the only
//! writer of the character's [`ToolCell`], through its [`ToolWriter`] — and its set of active
//! sessions, and pushes every change to every one of those sessions.
//!
//! The active sessions are any recipients of [`SyncTools`]: the server's own connection
//! (`mode = "client"`), the relays of apps connected through `GET /v1/realtime`, attachments to
//! live calls, and an application's in-process sessions. A change waits for all of them and
//! fails the character if any refused or timed out. Every one is offered the character's
//! budget: the server's own apply it ([`OfferTools`]); an in-process session is handed the set
//! the manager works out for it, and its model's `find_tools` is answered here
//! ([`crate::session::embedded`]).
//!
//! Only the [`Router`](super::router::Router) talks to managers. Handlers apply a change
//! synchronously, in mailbox order (so changes to one character apply in the order they arrive),
//! publish the new snapshot before answering, and never await: waiting for the sessions'
//! acknowledgements happens in a spawned future.
//!
//! A manager that ends — removed, rebuilt, or unwound by a panic — closes every session it
//! holds. A restarted or rebuilt manager opens its own client connection again with the tools
//! of the last snapshot plus the changes it lacks; the relays and attachments it held are closed
//! (a relay's app with 1001 "going away"), and an app that reconnects, or attaches again, gets
//! the same tools.

use std::sync::Arc;

use actix::prelude::*;
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Either, join_all};
use tokio::sync::oneshot;

use serde::Serialize;

use crate::actors::change::ChangeFailure;
use crate::chat::ChatReport;
use crate::dispatch::Dispatcher;
use crate::domain::budget::Budget;
use crate::domain::call::ToolOutcome;
use crate::domain::connection::ConnectionKind;
use crate::domain::registry::Change;
use crate::domain::snapshot::{Superseded, ToolCell, ToolWriter};
use crate::events::EventHub;
use crate::policy::Policy;
use crate::session::attach::{Attachment, JoinError, Joined};
use crate::session::embedded::{self, Budgeted, SearchFor};
use crate::session::settings::Dialect;
use crate::session::settings::{
    DEFAULT_SYNC_TIMEOUT, SessionMode, SessionProtocol, SessionSettings,
};
use crate::session::shell::{MODEL_CONNECT_TIMEOUT, SYNC_FALLBACK_MARGIN};
use crate::session::{
    AddContext, CharacterTools, CloseSession, ConnectionReport, ConnectionState, Conversation,
    GeminiSession, OfferTools, RealtimeSession, SessionHandle, SessionStatus, SyncError,
    SyncOutcome, SyncTools,
};

/// Apply change number `number` to this character's tools, publish the result and sync the
/// sessions; the outcome (sync included) goes to `reply`. A reply channel instead of a response
/// future lets the router send to hundreds of managers with no task, timer or allocation per
/// manager beyond the channel, and wait for them all against one deadline.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct ApplyChange {
    /// The router numbers each character's changes from 1, in the order it sends them.
    pub number: u64,
    pub change: Arc<Change>,
    pub reply: oneshot::Sender<ChangeOutcome>,
}

/// What a change did to one character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChangeOutcome {
    /// Tools removed.
    pub removed: usize,
    /// `Err` says why the change did not reach every live session (or the character at all).
    pub sync: Result<(), ChangeFailure>,
}

/// A character's sessions, for `GET /api/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionReport {
    /// The server's own connection (`mode = "client"`); without one, `connected` while any
    /// relay or attachment is open and `none` otherwise.
    pub state: ConnectionState,
    /// The most recent tool update of any of its connections.
    pub last_sync: Option<SyncOutcome>,
    /// Tools in the last update the server's own connection (or, without one, the most
    /// recently synced connection) acknowledged.
    pub acknowledged_tools: usize,
    /// Every active session: the server's own, relays, attachments, in-process ones.
    pub connections: Vec<ConnectionReport>,
    /// The character's text chat endpoint (`POST /v1/chat/completions`), present only when it
    /// has `[character.chat]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chat: Option<ChatReport>,
}

impl SessionReport {
    /// The report of a character without a session.
    pub fn none() -> Self {
        Self {
            state: ConnectionState::None,
            last_sync: None,
            acknowledged_tools: 0,
            connections: Vec::new(),
            chat: None,
        }
    }

    /// Sums up a character's connections; `client` is its own connection's report, if it has
    /// one (it is also listed in `connections`). Connections that closed meanwhile are left out.
    pub fn of(mut connections: Vec<ConnectionReport>) -> Self {
        connections.retain(|c| c.state != ConnectionState::Closed);
        let client = connections
            .iter()
            .find(|c| c.kind == ConnectionKind::Client);
        let latest = connections
            .iter()
            .filter(|c| c.last_sync.is_some())
            .max_by(|a, b| {
                let at = |c: &ConnectionReport| c.last_sync.as_ref().map(|s| s.at.clone());
                at(a).cmp(&at(b))
            });
        let state = match client {
            Some(client) => client.state,
            None if connections.is_empty() => ConnectionState::None,
            None => ConnectionState::Connected,
        };
        Self {
            state,
            last_sync: client.or(latest).and_then(|c| c.last_sync.clone()),
            acknowledged_tools: client.or(latest).map_or(0, |c| c.acknowledged_tools),
            connections,
            chat: None,
        }
    }
}

/// The character's model-session state.
#[derive(Message, Debug)]
#[rtype(result = "SessionReport")]
pub(crate) struct ReportSession;

/// Make `session` one of this character's active sessions; it is sent the current tool list
/// at once, before this is answered.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct AddSession(pub SessionHandle);

/// Join the live call at `url` (an attachment); answers once the first tool update settled, or
/// at once with [`AttachmentsFull`] when the character holds `max` attachments already.
#[derive(Message, Debug)]
#[rtype(result = "Result<Joined, AttachmentsFull>")]
pub(crate) struct JoinCall {
    pub url: String,
    pub api_key: Option<String>,
    pub max: usize,
}

/// The character is attached to this many calls, its most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttachmentsFull(pub usize);

/// Leave the call at `url`; answers whether an attachment to it was open.
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub(crate) struct LeaveCall {
    pub url: String,
}

/// Close this character's relays and attachments (the server is stopping); answers once each
/// is gone, its close frames sent.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct CloseConnections;

/// Fault injection for tests of panic containment: makes this manager panic.
#[doc(hidden)]
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct InjectPanic;

/// Sent by a manager as it goes away, so its owner can bring back one that died unexpectedly.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ManagerGone {
    pub character: String,
    /// Which incarnation of the character's manager ended.
    pub generation: u64,
}

/// Who to tell when a manager ends, and which incarnation it is.
#[derive(Clone)]
pub(crate) struct Watcher {
    pub recipient: Recipient<ManagerGone>,
    pub generation: u64,
}

pub(crate) struct SessionManager {
    character: String,
    tools: ToolWriter,
    /// How the character's model is reached (`None`: no `[character.session]`).
    settings: Option<SessionSettings>,
    /// How many of its tools one session is offered (`[character.tools]`).
    budget: Arc<Budget>,
    /// What its sessions run calls with.
    dispatcher: Dispatcher,
    /// Where its sessions announce their state and the calls they answer.
    events: EventHub,
    /// What its sessions' calls pass before they run; told when the character's tools change.
    policy: Policy,
    /// The active sessions; closed ones are dropped before each use.
    sessions: Vec<SessionHandle>,
    watcher: Option<Watcher>,
}

impl SessionManager {
    /// Starts a manager for `character` that takes over `cell`: it starts from the snapshot
    /// there plus the numbered `replay` changes the snapshot lacks (a restart's or rebuild's),
    /// published before this returns; then its own model session, when `settings` say how to
    /// reach one in client mode. Its sessions run calls with `dispatcher` and announce their
    /// state and the calls they answer on `events`, and pass `policy` before each call runs;
    /// each is offered the character's tools within `budget`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch<'a>(
        character: String,
        cell: ToolCell,
        replay: impl IntoIterator<Item = (u64, &'a Arc<Change>)>,
        settings: Option<SessionSettings>,
        budget: Arc<Budget>,
        dispatcher: Dispatcher,
        events: EventHub,
        policy: Policy,
        watcher: Option<Watcher>,
    ) -> Addr<Self> {
        let tools = ToolWriter::resume(cell, replay);
        let mut sessions = Vec::new();
        if let Some(settings) = settings.as_ref().filter(|s| s.mode == SessionMode::Client) {
            let api_key = settings.api_key().unwrap_or_else(|e| {
                tracing::warn!(character = %character, error = %format!("{e:#}"), "connecting without an API key");
                None
            });
            let upstream = Some(settings.url.clone());
            let (name, tools) = (character.clone(), character_tools(&tools, &budget));
            let (launched, dispatcher) = (settings.clone(), dispatcher.clone());
            let handle = match settings.protocol {
                SessionProtocol::OpenaiRealtime => {
                    let client = RealtimeSession::launch(
                        name,
                        launched,
                        api_key,
                        dispatcher,
                        events.clone(),
                        policy.clone(),
                        tools,
                    );
                    SessionHandle::of_session(ConnectionKind::Client, upstream, &client)
                }
                SessionProtocol::GeminiLive => {
                    let client = GeminiSession::launch(
                        name,
                        launched,
                        api_key,
                        dispatcher,
                        events.clone(),
                        policy.clone(),
                        tools,
                    );
                    SessionHandle::of_session(ConnectionKind::Client, upstream, &client)
                }
            };
            sessions.push(handle);
        }
        SessionManager::create(|ctx| {
            // An unbounded mailbox never parks the router, so messages to one manager are queued
            // strictly in send order (a parked send is retried later and could overtake).
            ctx.set_mailbox_capacity(0);
            SessionManager {
                character,
                tools,
                settings,
                budget,
                dispatcher,
                events,
                policy,
                sessions,
                watcher,
            }
        })
    }

    /// The sessions still open.
    fn open_sessions(&mut self) -> &[SessionHandle] {
        self.sessions.retain(SessionHandle::is_open);
        &self.sessions
    }

    /// How long a session may take to acknowledge a tool list.
    fn sync_timeout(&self) -> std::time::Duration {
        self.settings
            .as_ref()
            .map_or(DEFAULT_SYNC_TIMEOUT, |s| s.sync_timeout)
    }

    /// The one place a change leaves for the sessions: pushes the whole current list to every
    /// active session of the character and waits for all of them.
    ///
    /// `None`: nothing to wait for (no session). `Some`: resolves when every session settled;
    /// `Err` names each that refused or timed out.
    fn sync_sessions(&mut self) -> Option<BoxFuture<'static, Result<(), ChangeFailure>>> {
        let timeout = self.sync_timeout();
        if self.open_sessions().is_empty() {
            // A character without a session copies no tool list: a fan-out over many such
            // characters would otherwise build one per character and change.
            return None;
        }
        let tools = character_tools(&self.tools, &self.budget);
        let replies: Vec<_> = self
            .sessions
            .iter_mut()
            .map(|s| {
                let kind = s.kind;
                let reply = hand(s, &tools);
                async move {
                    // The session settles its update itself within `timeout`; this bound only
                    // catches one that never answers.
                    let bound = timeout + 2 * SYNC_FALLBACK_MARGIN;
                    let outcome = match tokio::time::timeout(bound, reply).await {
                        Ok(Ok(outcome)) => outcome,
                        Ok(Err(_)) => Err(SyncError::Gone),
                        Err(_) => Err(SyncError::NotAcknowledged(timeout)),
                    };
                    (kind, outcome)
                }
            })
            .collect();
        Some(
            async move {
                let failures: Vec<(ConnectionKind, SyncError)> = join_all(replies)
                    .await
                    .into_iter()
                    .filter_map(|(kind, outcome)| Some((kind, outcome.err()?)))
                    .collect();
                if failures.is_empty() {
                    Ok(())
                } else {
                    Err(ChangeFailure::Sessions(failures))
                }
            }
            .boxed(),
        )
    }
}

/// The current tools and the budget, as the server's own sessions take them.
fn character_tools(tools: &ToolWriter, budget: &Arc<Budget>) -> CharacterTools {
    CharacterTools::of(tools.current(), budget)
}

/// Hands `session` the character's tools: with the budget to a session of the server's own
/// (it offers its model the set the budget gives for what it found); to an application's
/// in-process session, the set the manager works out for it, when that changed.
fn hand(
    session: &mut SessionHandle,
    tools: &CharacterTools,
) -> impl std::future::Future<Output = Result<Result<(), SyncError>, MailboxError>> + use<> {
    if let Some(offer) = &session.offer {
        return Either::Left(offer.send(OfferTools(tools.clone())));
    }
    let list = match session.budgeted.as_mut() {
        Some(budgeted) => budgeted.offer(tools),
        None => Some(tools.list.clone()),
    };
    Either::Right(match list {
        Some(list) => Either::Left(session.sync.send(SyncTools(list))),
        // Nothing it is handed changed.
        None => Either::Right(std::future::ready(Ok(Ok(())))),
    })
}

impl Actor for SessionManager {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Self::Context) {
        tracing::debug!(character = %self.character, tools = self.tools.current().registry().len(), "session manager started");
    }
}

impl Drop for SessionManager {
    /// Closes the session however the manager ends — stopped, replaced, or unwound by a panic —
    /// so a restarted manager never leaves a second connection behind.
    fn drop(&mut self) {
        for session in self.sessions.drain(..) {
            session.close.do_send(CloseSession);
        }
        if let Some(watcher) = self.watcher.take() {
            watcher.recipient.do_send(ManagerGone {
                character: std::mem::take(&mut self.character),
                generation: watcher.generation,
            });
        }
    }
}

impl Handler<ReportSession> for SessionManager {
    type Result = ResponseFuture<SessionReport>;

    fn handle(&mut self, _: ReportSession, _: &mut Self::Context) -> Self::Result {
        let reports: Vec<_> = self
            .open_sessions()
            .iter()
            .map(|s| {
                let reply = s.status.send(SessionStatus);
                let (kind, upstream) = (s.kind, s.upstream.clone());
                // An in-process session's report is the application's; whether it is over
                // budget is the manager's to say.
                let over_budget = s.budgeted.as_ref().is_some_and(Budgeted::over_budget);
                async move {
                    let mut report = reply.await.unwrap_or_else(|_| ConnectionReport {
                        kind,
                        since: String::new(),
                        upstream,
                        state: ConnectionState::Closed,
                        last_sync: None,
                        acknowledged_tools: 0,
                        calls_answered: 0,
                        clashes: Vec::new(),
                        offered_tools: 0,
                        over_budget: false,
                        gemini: None,
                        running_calls: Vec::new(),
                        conversation: Conversation::Idle,
                    });
                    report.over_budget |= over_budget;
                    report
                }
            })
            .collect();
        Box::pin(async move { SessionReport::of(join_all(reports).await) })
    }
}

impl Handler<ApplyChange> for SessionManager {
    type Result = ();

    fn handle(&mut self, msg: ApplyChange, _: &mut Self::Context) {
        // The receiver may be gone (the router stopped waiting): nothing to tell then.
        let effect = match self.tools.apply(msg.number, &msg.change) {
            Ok(effect) => effect,
            Err(Superseded) => {
                // A newer manager of this character took over its tools, this change included.
                let _ = msg.reply.send(ChangeOutcome {
                    removed: 0,
                    sync: Err(ChangeFailure::Superseded),
                });
                return;
            }
        };
        let removed = effect.removed;
        if effect.changed {
            // A pending approval is for the registration it was asked under: one replaced or
            // removed voids it.
            self.policy
                .tools_changed(&self.character, self.tools.current().tools());
        }
        match effect.changed.then(|| self.sync_sessions()).flatten() {
            None => drop(msg.reply.send(ChangeOutcome {
                removed,
                sync: Ok(()),
            })),
            Some(sync) => {
                actix::spawn(async move {
                    let sync = sync.await;
                    let _ = msg.reply.send(ChangeOutcome { removed, sync });
                });
            }
        }
    }
}

/// Tell every live session of the character a plugin's context: it succeeds when one of them
/// took it; otherwise each session's reason (or that there is none).
#[derive(Message, Debug)]
#[rtype(result = "Result<(), ChangeFailure>")]
pub(crate) struct TellSessions(pub AddContext);

impl Handler<TellSessions> for SessionManager {
    type Result = ResponseFuture<Result<(), ChangeFailure>>;

    fn handle(
        &mut self,
        TellSessions(context): TellSessions,
        _: &mut Self::Context,
    ) -> Self::Result {
        let told: Vec<_> = self
            .open_sessions()
            .iter()
            .filter_map(|s| {
                let reply = s.context.as_ref()?.send(context.clone());
                let kind = s.kind;
                Some(async move {
                    let outcome = match reply.await {
                        Ok(outcome) => outcome,
                        Err(_) => Err(SyncError::Gone.to_string()),
                    };
                    (kind, outcome)
                })
            })
            .collect();
        Box::pin(async move {
            if told.is_empty() {
                return Err(ChangeFailure::NoLiveSession);
            }
            let outcomes = join_all(told).await;
            if outcomes.iter().any(|(_, outcome)| outcome.is_ok()) {
                return Ok(());
            }
            Err(ChangeFailure::Sessions(
                outcomes
                    .into_iter()
                    .filter_map(|(kind, outcome)| Some((kind, SyncError::Other(outcome.err()?))))
                    .collect(),
            ))
        })
    }
}

impl Handler<AddSession> for SessionManager {
    type Result = ();

    fn handle(&mut self, AddSession(mut session): AddSession, ctx: &mut Self::Context) {
        tracing::debug!(character = %self.character, kind = session.kind.name(), "session added");
        // The current list goes out before anything the session receives later; nobody waits
        // for this acknowledgement.
        let tools = character_tools(&self.tools, &self.budget);
        match &session.offer {
            Some(offer) => offer.do_send(OfferTools(tools)),
            None => {
                let mut budgeted = Budgeted::new(ctx.address().recipient().downgrade());
                if let Some(list) = budgeted.offer(&tools) {
                    session.sync.do_send(SyncTools(list));
                }
                session.budgeted = Some(budgeted);
            }
        }
        // The handles of sessions that ended since the last use go now: a character whose
        // apps come and go without a change in between must not keep one per app.
        self.sessions.retain(SessionHandle::is_open);
        self.sessions.push(session);
    }
}

impl Handler<SearchFor> for SessionManager {
    type Result = ResponseFuture<ToolOutcome>;

    /// An in-process session's model called its `find_tools`.
    fn handle(&mut self, search: SearchFor, _: &mut Self::Context) -> Self::Result {
        let timeout = self.sync_timeout();
        let tools = character_tools(&self.tools, &self.budget);
        embedded::search(
            &mut self.sessions,
            search,
            &self.character,
            &tools,
            &self.events,
            timeout,
        )
    }
}

impl Handler<JoinCall> for SessionManager {
    type Result = ResponseFuture<Result<Joined, AttachmentsFull>>;

    fn handle(&mut self, msg: JoinCall, _: &mut Self::Context) -> Self::Result {
        let open = self.open_sessions();
        let attachments = open.iter().filter(|s| s.kind == ConnectionKind::Attach);
        if attachments
            .clone()
            .any(|s| s.upstream.as_deref() == Some(&msg.url))
        {
            return Box::pin(async { Ok(Ok(Ok(()))) });
        }
        // Counted here, where attachments are added in mailbox order, so two requests at once
        // cannot both take the last place.
        if attachments.count() >= msg.max {
            let max = msg.max;
            return Box::pin(async move { Err(AttachmentsFull(max)) });
        }
        // A character without `[character.session]` joins calls in the GA OpenAI dialect with
        // the default sync timeout and runaway guard.
        let settings = self
            .settings
            .clone()
            .unwrap_or_else(|| SessionSettings::new(&msg.url, Dialect::Openai));
        let (attachment, joined) = Attachment::launch(
            self.character.clone(),
            &settings,
            msg.url.clone(),
            msg.api_key,
            self.dispatcher.clone(),
            self.events.clone(),
            self.policy.clone(),
            character_tools(&self.tools, &self.budget),
        );
        self.sessions.push(SessionHandle::of_session(
            ConnectionKind::Attach,
            Some(msg.url),
            &attachment,
        ));
        // The handshake, then the call's description and the first update: bounded, so the
        // request answers; an update still pending then is reported, and may still succeed.
        let wait = MODEL_CONNECT_TIMEOUT + settings.sync_timeout;
        Box::pin(async move {
            Ok(match tokio::time::timeout(wait, joined).await {
                Ok(Ok(joined)) => joined,
                Ok(Err(_)) => Err(JoinError::Ended),
                Err(_) => Ok(Err(SyncError::NotJoined(wait))),
            })
        })
    }
}

impl Handler<LeaveCall> for SessionManager {
    type Result = bool;

    fn handle(&mut self, msg: LeaveCall, _: &mut Self::Context) -> bool {
        let before = self.open_sessions().len();
        self.sessions.retain(|s| {
            let this = s.kind == ConnectionKind::Attach && s.upstream.as_deref() == Some(&msg.url);
            if this {
                s.close.do_send(CloseSession);
            }
            !this
        });
        self.sessions.len() < before
    }
}

impl Handler<CloseConnections> for SessionManager {
    type Result = ResponseFuture<()>;

    /// Replies once every relay and attachment is gone (see [`CloseSession`]).
    fn handle(&mut self, _: CloseConnections, _: &mut Self::Context) -> Self::Result {
        let mut closing = Vec::new();
        self.sessions.retain(|s| {
            let connection = matches!(s.kind, ConnectionKind::Relay | ConnectionKind::Attach);
            if connection {
                closing.push(s.close.send(CloseSession));
            }
            !connection
        });
        Box::pin(async move {
            join_all(closing).await;
        })
    }
}

impl Handler<InjectPanic> for SessionManager {
    type Result = ();

    fn handle(&mut self, _: InjectPanic, _: &mut Self::Context) {
        panic!(
            "fault injected into the session manager of {}",
            self.character
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection(
        kind: ConnectionKind,
        state: ConnectionState,
        at: &str,
        tools: usize,
    ) -> ConnectionReport {
        ConnectionReport {
            kind,
            since: at.into(),
            upstream: Some("ws://127.0.0.1:9/v1/realtime".into()),
            state,
            last_sync: Some(SyncOutcome {
                ok: true,
                error: None,
                at: at.into(),
            }),
            acknowledged_tools: tools,
            calls_answered: 0,
            clashes: Vec::new(),
            offered_tools: tools,
            over_budget: false,
            gemini: None,
            running_calls: Vec::new(),
            conversation: Conversation::Idle,
        }
    }

    #[test]
    fn the_summary_follows_the_client_or_the_latest_sync_and_drops_closed_connections() {
        let (early, late) = ("2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.000Z");
        let relay = connection(ConnectionKind::Relay, ConnectionState::Connected, late, 2);
        let closed = connection(ConnectionKind::Attach, ConnectionState::Closed, late, 3);
        let client = connection(ConnectionKind::Client, ConnectionState::Backoff, early, 1);

        let with_client = SessionReport::of(vec![relay.clone(), client.clone()]);
        assert_eq!(with_client.state, ConnectionState::Backoff);
        assert_eq!(with_client.last_sync.unwrap().at, early);
        assert_eq!(with_client.acknowledged_tools, 1);
        assert_eq!(with_client.connections, [relay.clone(), client]);

        let relays_only = SessionReport::of(vec![relay.clone(), closed.clone()]);
        assert_eq!(relays_only.state, ConnectionState::Connected);
        assert_eq!(relays_only.acknowledged_tools, 2);
        assert_eq!(relays_only.connections, [relay]);

        assert_eq!(SessionReport::of(vec![closed]), SessionReport::none());
    }
}
