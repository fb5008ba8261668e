//! Live model sessions. One core ([`core::SessionCore`]: acknowledged tool sync, the open turns
//! and their calls answered with their exact output and images, the runaway guard, the
//! session's own tools, the connection's state and its `session.state` / `tool.call` events)
//! speaks each wire protocol through an adapter ([`realtime`]: the OpenAI Realtime family) and
//! serves three kinds of connection, each a thin actor that says what its kind does
//! differently:
//!
//! - [`RealtimeSession`] (`client.rs`): the server's own websocket to the model, supervised and
//!   reconnected with backoff (`mode = "client"`: headless use and the demo);
//! - [`relay::Relay`]: an app's realtime connection relayed through `GET /v1/realtime`, both
//!   ways, everything passed through but the app's `session.update` (the registered tools
//!   merged in) and the server's own updates and answers;
//! - [`attach::Attachment`]: a second websocket to a live call the app started elsewhere
//!   (`POST /api/sessions/attach`).
//!
//! Each is one of its character's active sessions: the character's
//! [`SessionManager`](crate::actors::manager::SessionManager) sends every one of them the new
//! tool list ([`SyncTools`]) and waits for them all. An application's own in-process session
//! joins the same way, by handling [`SyncTools`]; its manager hands it the budget's set and
//! answers its model's `find_tools` ([`embedded`]).

pub(crate) mod attach;
pub(crate) mod calls;
mod client;
pub(crate) mod core;
pub(crate) mod embedded;
pub(crate) mod gemini;
pub(crate) mod live;
pub(crate) mod outbox;
pub(crate) mod realtime;
pub(crate) mod relay;
pub(crate) mod relaying;
pub(crate) mod settings;
pub(crate) mod shell;
mod supervised;
pub(crate) mod sync;
pub(crate) mod wire;

use std::sync::Arc;

use actix::prelude::*;
use serde::Serialize;

pub use self::core::{Conversation, ResumptionReport, RunningCallReport, SyncError, SyncOutcome};
pub(crate) use client::RealtimeSession;
pub(crate) use live::GeminiSession;
pub use shell::MAX_EVENT_BYTES;

use crate::domain::budget::Budget;
use crate::domain::call::Scheduling;
use crate::domain::connection::ConnectionKind;
use crate::domain::snapshot::ToolSnapshot;
use crate::domain::tool::SharedTool;

/// Push a character's current tool list into a session and wait for its acknowledgement. For
/// an in-process session the list is the character's budget's set for it (its own
/// `find_tools` among them when over budget: see the `embedded` module).
/// Answers at once when the session is not connected (the list goes out on connect). Every
/// active session of a character handles it: the server's own, relays, attachments, and an
/// application's in-process session (which says why it did not take a list with
/// [`SyncError::Other`]).
#[derive(Message, Debug)]
#[rtype(result = "Result<(), SyncError>")]
pub struct SyncTools(pub Arc<[SharedTool]>);

/// The character's tools and its budget, as the server's own sessions take them: each offers
/// its model the set the budget allows for what it found, and searches the snapshot when its
/// model calls `find_tools`. The manager sends it to every session that takes it (see
/// [`SessionHandle`]); an in-process session gets [`SyncTools`] instead.
#[derive(Message, Debug)]
#[rtype(result = "Result<(), SyncError>")]
pub(crate) struct OfferTools(pub CharacterTools);

/// A character's tools as one of its sessions holds them.
#[derive(Debug, Clone)]
pub(crate) struct CharacterTools {
    /// Every tool, in registration order (the snapshot's, shared by all its sessions).
    pub list: Arc<[SharedTool]>,
    /// What `find_tools` searches: the snapshot `list` was read from.
    pub snapshot: Arc<ToolSnapshot>,
    /// `[character.tools]`.
    pub budget: Arc<Budget>,
}

impl CharacterTools {
    /// The tools of `snapshot` under `budget`.
    pub(crate) fn of(snapshot: &Arc<ToolSnapshot>, budget: &Arc<Budget>) -> Self {
        Self {
            list: snapshot.tools().cloned().collect(),
            snapshot: snapshot.clone(),
            budget: budget.clone(),
        }
    }

    /// No tools yet (a relay before it joins its character).
    pub(crate) fn none() -> Self {
        Self::listed(Arc::from([]))
    }

    /// A bare list under the default budget, with nothing to search: what a session is handed
    /// by whoever sends [`SyncTools`] instead of the manager's [`OfferTools`].
    pub(crate) fn listed(list: Arc<[SharedTool]>) -> Self {
        Self {
            list,
            snapshot: Arc::default(),
            budget: Arc::default(),
        }
    }
}

/// One connection's state, for `GET /api/sessions`.
#[derive(Message, Debug)]
#[rtype(result = "ConnectionReport")]
pub struct SessionStatus;

/// Close the connection for good (the character was removed or rebuilt, the attachment
/// detached, or the server is stopping). The server's own sessions reply once they are gone:
/// their close frames went out and the model answered, or `CLOSE_GRACE` (two seconds) passed.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct CloseSession;

/// A plugin's text for the conversation (`POST /api/sessions/context`): told to the model,
/// which answers it by `respond`'s scheduling (`None`: not asked to). Fails with the reason
/// when the session cannot take it.
#[derive(Message, Debug, Clone)]
#[rtype(result = "Result<(), String>")]
pub(crate) struct AddContext {
    pub text: Arc<str>,
    pub respond: Option<Scheduling>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConnectionState {
    /// No session is configured.
    None,
    Connecting,
    Connected,
    /// Waiting before the next connection attempt.
    Backoff,
    /// Ended for good: a relay or an attachment that closed. Only its last `session.state`
    /// event says so; the listing no longer shows it.
    Closed,
}

impl ConnectionState {
    /// The state as the API spells it.
    pub fn name(self) -> &'static str {
        match self {
            ConnectionState::None => "none",
            ConnectionState::Connecting => "connecting",
            ConnectionState::Connected => "connected",
            ConnectionState::Backoff => "backoff",
            ConnectionState::Closed => "closed",
        }
    }
}

/// One active session of a character.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectionReport {
    pub kind: ConnectionKind,
    /// When it connected (RFC 3339, UTC); for the client, its current connection or attempt.
    pub since: String,
    /// The model endpoint it talks to; null for an in-process session.
    pub upstream: Option<String>,
    pub state: ConnectionState,
    /// The outcome of its last tool update, or null before the first.
    pub last_sync: Option<SyncOutcome>,
    /// Registered tools in the last update it acknowledged.
    pub acknowledged_tools: usize,
    /// Calls of registered tools the server answered on it.
    pub calls_answered: u64,
    /// Registered tools left out because the app has a tool of the same name.
    pub clashes: Vec<String>,
    /// The server's tools the session is offered now (`find_tools` and `call_tool` included;
    /// the app's own not).
    pub offered_tools: usize,
    /// The character holds more tools than the session is offered and it cannot search for the
    /// rest (`[character.tools] search = "off"`).
    pub over_budget: bool,
    /// A Gemini Live session (`kind = "gemini-live"`): its resumption handle's age, its moves
    /// to a new connection made and refused; absent for other sessions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gemini: Option<ResumptionReport>,
    /// The calls running in this session now.
    pub running_calls: Vec<RunningCallReport>,
    /// Where its conversation stands (`idle` for a session that does not say).
    pub conversation: Conversation,
}

/// One active session of a character, as its manager holds it: every tool list goes to `sync`,
/// `status` reports it, `close` ends it when the character goes away.
#[derive(Clone)]
pub struct SessionHandle {
    pub kind: ConnectionKind,
    /// The model endpoint, if it has one (an attachment's is the call's URL).
    pub upstream: Option<String>,
    pub sync: Recipient<SyncTools>,
    pub status: Recipient<SessionStatus>,
    pub close: Recipient<CloseSession>,
    /// Where a plugin's context goes (`POST /api/sessions/context`); `None` for a session that
    /// takes none (an application's in-process session).
    pub(crate) context: Option<Recipient<AddContext>>,
    /// Where the character's tools go with its budget ([`OfferTools`]): the server's own
    /// sessions, which apply the budget themselves; `None` for an in-process session, which
    /// is sent [`SyncTools`].
    pub(crate) offer: Option<Recipient<OfferTools>>,
    /// What the manager holds of a session it sends [`SyncTools`] (an in-process one): what
    /// its model found and the set it was last handed. Set when it joins.
    pub(crate) budgeted: Option<embedded::Budgeted>,
}

impl SessionHandle {
    /// The handle of a session actor.
    pub fn new<A>(kind: ConnectionKind, upstream: Option<String>, session: &Addr<A>) -> Self
    where
        A: Actor + Handler<SyncTools> + Handler<SessionStatus> + Handler<CloseSession>,
        A::Context: actix::dev::ToEnvelope<A, SyncTools>
            + actix::dev::ToEnvelope<A, SessionStatus>
            + actix::dev::ToEnvelope<A, CloseSession>,
    {
        Self {
            kind,
            upstream,
            sync: session.clone().recipient(),
            status: session.clone().recipient(),
            close: session.clone().recipient(),
            context: None,
            offer: None,
            budgeted: None,
        }
    }

    /// The handle of one of the server's own session actors, which also takes context.
    pub(crate) fn of_session<A>(
        kind: ConnectionKind,
        upstream: Option<String>,
        session: &Addr<A>,
    ) -> Self
    where
        A: Actor
            + Handler<SyncTools>
            + Handler<SessionStatus>
            + Handler<CloseSession>
            + Handler<AddContext>
            + Handler<OfferTools>,
        A::Context: actix::dev::ToEnvelope<A, SyncTools>
            + actix::dev::ToEnvelope<A, SessionStatus>
            + actix::dev::ToEnvelope<A, CloseSession>
            + actix::dev::ToEnvelope<A, AddContext>
            + actix::dev::ToEnvelope<A, OfferTools>,
    {
        Self {
            context: Some(session.clone().recipient()),
            offer: Some(session.clone().recipient()),
            ..Self::new(kind, upstream, session)
        }
    }

    /// An application's in-process session (see `examples/inprocess_session.rs`).
    pub fn embedded<A>(session: &Addr<A>) -> Self
    where
        A: Actor + Handler<SyncTools> + Handler<SessionStatus> + Handler<CloseSession>,
        A::Context: actix::dev::ToEnvelope<A, SyncTools>
            + actix::dev::ToEnvelope<A, SessionStatus>
            + actix::dev::ToEnvelope<A, CloseSession>,
    {
        Self::new(ConnectionKind::Embedded, None, session)
    }

    /// Whether the session is still running.
    pub fn is_open(&self) -> bool {
        self.sync.connected()
    }
}

impl std::fmt::Debug for SessionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHandle")
            .field("kind", &self.kind)
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}
