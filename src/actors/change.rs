//! What a change of tools did: per character, taken or failed and why. The managers say it of
//! their character, the router gathers it for the whole change, and the HTTP answers, the
//! events and the log write it as text.

use std::time::Duration;

use serde::Serialize;

use crate::domain::connection::ConnectionKind;
use crate::domain::role::RoleName;
use crate::session::SyncError;

/// Per-character outcome of a change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ChangeReport {
    /// Characters whose tools changed and whose session took the new list.
    pub affected_roles: Vec<RoleName>,
    /// Characters that could not take the change (or its sync), and why.
    pub failed_roles: Vec<RoleFailure>,
    /// Registry entries removed, summed over the characters whose manager answered
    /// (unregister, clear, auto-removal).
    pub removed: usize,
}

impl ChangeReport {
    /// The characters of `failed_roles`, in order.
    pub fn failed_role_names(&self) -> Vec<&str> {
        self.failed_roles.iter().map(|f| f.role.as_str()).collect()
    }
}

/// A character that could not take a change, and why (the answers and events carry the reason
/// as its text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RoleFailure {
    pub role: String,
    #[serde(serialize_with = "as_text")]
    pub error: ChangeFailure,
}

/// Why a character did not take a change: typed until the edge, where its text is what the
/// HTTP answers, the events and the log say.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeFailure {
    /// Its sessions did not take the new list: the one, or each of several with its kind.
    #[error("{}", sessions_text(.0))]
    Sessions(Vec<(ConnectionKind, SyncError)>),
    /// A newer manager of the character took over its tools, this change included.
    #[error("session manager was replaced before answering")]
    Superseded,
    /// The manager stopped (a panic) with the change in its mailbox; it was restarted with it.
    #[error("session manager stopped before answering")]
    Stopped,
    /// The manager was found stopped as the change was routed; it was restarted with it.
    #[error("session manager had stopped; it was restarted with its tools")]
    Restarted,
    /// The manager did not answer within the request's deadline.
    #[error("session manager did not answer within {} s", .0.as_secs_f64())]
    NoAnswer(Duration),
    /// A plugin's context found no live session of the character to tell (and it has no text
    /// chat to keep it for).
    #[error("no live session: the character has no connected model session to tell")]
    NoLiveSession,
    /// The change named a character that does not exist (an MCP server's `roles`).
    #[error("unknown role: {0}")]
    UnknownRole(String),
}

/// With one session, its reason speaks for itself; with several, each says which kind of
/// connection it was.
fn sessions_text(failures: &[(ConnectionKind, SyncError)]) -> String {
    match failures {
        [(_, only)] => only.to_string(),
        several => several
            .iter()
            .map(|(kind, error)| format!("{} session: {error}", kind.name()))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

fn as_text<S: serde::Serializer>(error: &ChangeFailure, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(error)
}
