//! Which kind of connection a character's session is: the one name reports, events, log lines
//! and error texts use.

use serde::Serialize;

/// Which kind of connection an active session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(into = "&'static str")]
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
    /// A text chat through `POST /v1/responses` (the Responses API; the server runs the tool
    /// loop of each request); never one of a manager's sessions.
    Responses,
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
            ConnectionKind::Responses => "responses",
        }
    }
}

impl From<ConnectionKind> for &'static str {
    fn from(kind: ConnectionKind) -> Self {
        kind.name()
    }
}

/// Who made a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Caller {
    /// A live model session, or a chat request's model.
    Model,
    /// `POST /api/tools/invoke`.
    Invoke,
    /// An MCP client of `/mcp` (`tools/call`).
    Mcp,
}

impl Caller {
    /// The caller as the API spells it.
    pub fn name(self) -> &'static str {
        match self {
            Caller::Model => "model",
            Caller::Invoke => "invoke",
            Caller::Mcp => "mcp",
        }
    }
}
