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
//! joins the same way, by handling [`SyncTools`].

pub mod attach;
pub mod calls;
mod client;
pub mod core;
pub mod outbox;
pub mod realtime;
pub mod relay;
pub mod settings;
pub mod shell;
pub mod sync;

use std::sync::Arc;

use actix::prelude::*;
use serde::Serialize;

pub use self::core::{SyncError, SyncOutcome};
pub use client::{INITIAL_BACKOFF, MAX_BACKOFF, RealtimeSession};
pub use shell::MAX_EVENT_BYTES;

use crate::domain::tool::SharedTool;

/// Push a character's current tool list into a session and wait for its acknowledgement.
/// Answers at once when the session is not connected (the list goes out on connect). Every
/// active session of a character handles it: the server's own, relays, attachments, and an
/// application's in-process session (which says why it did not take a list with
/// [`SyncError::Other`]).
#[derive(Message, Debug)]
#[rtype(result = "Result<(), SyncError>")]
pub struct SyncTools(pub Arc<[SharedTool]>);

/// One connection's state, for `GET /api/sessions`.
#[derive(Message, Debug)]
#[rtype(result = "ConnectionReport")]
pub struct SessionStatus;

/// Close the connection for good (the character was removed or rebuilt, the attachment
/// detached, or the server is stopping). The server's own sessions reply once they are gone:
/// their close frames went out and the model answered, or [`shell::CLOSE_GRACE`] passed.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct CloseSession;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
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

/// Which kind of connection an active session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(into = "&'static str")]
#[schema(rename_all = "lowercase")]
pub enum ConnectionKind {
    /// The server's own connection (`mode = "client"`).
    Client,
    /// An app's connection through `GET /v1/realtime`.
    Relay,
    /// A live call joined with `POST /api/sessions/attach`.
    Attach,
    /// An application's in-process session.
    Embedded,
    /// A text chat through `POST /v1/chat/completions` (the server runs the tool loop of each
    /// request); never one of a manager's sessions.
    Chat,
}

impl ConnectionKind {
    /// The kind as the API spells it (reports, events, log lines, error texts).
    pub fn name(self) -> &'static str {
        match self {
            ConnectionKind::Client => "client",
            ConnectionKind::Relay => "relay",
            ConnectionKind::Attach => "attach",
            ConnectionKind::Embedded => "embedded",
            ConnectionKind::Chat => "chat",
        }
    }
}

impl From<ConnectionKind> for &'static str {
    fn from(kind: ConnectionKind) -> Self {
        kind.name()
    }
}

/// One active session of a character.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ConnectionReport {
    pub kind: ConnectionKind,
    /// When it connected (RFC 3339, UTC); for the client, its current connection or attempt.
    pub since: String,
    /// The model endpoint it talks to; null for an in-process session.
    #[schema(required = true)]
    pub upstream: Option<String>,
    pub state: ConnectionState,
    /// The outcome of its last tool update, or null before the first.
    #[schema(required = true)]
    pub last_sync: Option<SyncOutcome>,
    /// Registered tools in the last update it acknowledged.
    pub acknowledged_tools: usize,
    /// Calls of registered tools the server answered on it.
    pub calls_answered: u64,
    /// Registered tools left out because the app has a tool of the same name.
    pub clashes: Vec<String>,
}

/// A character's sessions, for `GET /api/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SessionReport {
    /// The server's own connection (`mode = "client"`); without one, `connected` while any
    /// relay or attachment is open and `none` otherwise.
    pub state: ConnectionState,
    /// The most recent tool update of any of its connections.
    #[schema(required = true)]
    pub last_sync: Option<SyncOutcome>,
    /// Tools in the last update the server's own connection (or, without one, the most
    /// recently synced connection) acknowledged.
    pub acknowledged_tools: usize,
    /// Every active session: the server's own, relays, attachments, in-process ones.
    pub connections: Vec<ConnectionReport>,
    /// The character's text chat endpoint (`POST /v1/chat/completions`), present only when it
    /// has `[character.chat]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub chat: Option<crate::chat::ChatReport>,
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
