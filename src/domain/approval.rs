//! Approval of a call by a person: a tool's policy, what a pending approval records, and what
//! the model is told of each outcome. Plain: the store that holds pending approvals and their
//! timers is `policy::approvals`.

use std::fmt::Write as _;
use std::time::Duration;

use ring::rand::SecureRandom as _;
use serde::Serialize;

/// Default of `approval_timeout_seconds`.
pub(crate) const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(120);

/// Largest `approval_timeout_seconds` (an hour).
pub(crate) const MAX_APPROVAL_TIMEOUT_SECONDS: u64 = 3600;

/// Most approvals one character may have pending at once; a call past it is refused at once
/// (never queued).
pub(crate) const MAX_PENDING_PER_CHARACTER: usize = 32;

/// Longest `reason` a decision may carry, in characters.
pub(crate) const MAX_REASON_CHARS: usize = 1024;

/// Whether a tool's calls wait for a person's approval, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Approval {
    pub required: bool,
    pub timeout: Duration,
}

impl Default for Approval {
    fn default() -> Self {
        Self {
            required: false,
            timeout: DEFAULT_APPROVAL_TIMEOUT,
        }
    }
}

impl Approval {
    /// The policy as a registration names it: `"always"` or `"never"`.
    pub fn name(self) -> &'static str {
        if self.required { "always" } else { "never" }
    }

    /// `"always"` → required, `"never"` → not; anything else → `None`.
    pub fn required_by_name(name: &str) -> Option<bool> {
        match name {
            "always" => Some(true),
            "never" => Some(false),
            _ => None,
        }
    }
}

/// An MCP server's policy for its tools (`approval` of a `[[mcp_server]]` or a runtime MCP
/// registration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpApproval {
    #[default]
    Never,
    Always,
    /// Every tool whose annotations do not say `readOnlyHint: true` (a missing annotation
    /// counts as destructive: annotations are the server's word, not a guarantee).
    Destructive,
}

impl McpApproval {
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "never" => Some(Self::Never),
            "always" => Some(Self::Always),
            "destructive" => Some(Self::Destructive),
            _ => None,
        }
    }

    /// Whether a tool with `read_only` (its `readOnlyHint`, if it has one) needs approval.
    pub fn requires(self, read_only: Option<bool>) -> bool {
        match self {
            Self::Never => false,
            Self::Always => true,
            Self::Destructive => read_only != Some(true),
        }
    }
}

/// What became of a pending approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Resolution {
    Approved,
    Denied,
    Expired,
    Cancelled,
}

impl Resolution {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
        }
    }

    /// How a later decision's 409 names it.
    pub(crate) fn already(self) -> &'static str {
        match self {
            Self::Approved => "already approved",
            Self::Denied => "already denied",
            Self::Expired => "expired before a decision",
            Self::Cancelled => "cancelled before a decision",
        }
    }
}

/// The error the model is given when the person declined the call.
pub(crate) fn denied_text(tool: &str, reason: Option<&str>) -> String {
    let reason = match reason {
        Some(r) if !r.is_empty() => format!(" (their reason: {r})"),
        _ => " (they gave no reason)".to_owned(),
    };
    format!(
        "the person declined the call of '{tool}'{reason}; it was not run. Do not try this call \
         again unless the person asks for it."
    )
}

/// The error the model is given when nobody answered the approval request in time.
pub(crate) fn expired_text(tool: &str, waited: Duration) -> String {
    format!(
        "nobody answered the approval request for '{tool}' within {} s, so the call was not run; \
         this is not a refusal: you may ask the person and call it again.",
        waited.as_secs()
    )
}

/// The error of a call whose approval was cancelled (`why`: the tool changed, the session
/// ended).
pub(crate) fn cancelled_text(tool: &str, why: &str) -> String {
    format!("the call of '{tool}' was cancelled while it waited for approval: {why}")
}

/// What a live session's model is answered at once for a call that waits for approval.
pub(crate) fn awaiting_output(tool: &str) -> String {
    serde_json::json!({"status": "awaiting_approval", "tool": tool}).to_string()
}

/// The lowercase hex SHA-256 of `text`.
pub(crate) fn sha256_hex(text: &str) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, text.as_bytes()).as_ref())
}

/// A new approval id: `apr_` and 128 random bits from the system's generator, in hex.
pub(crate) fn new_id() -> String {
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .expect("the system's random generator works");
    format!("apr_{}", hex(&bytes))
}

fn hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(text, "{b:02x}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_long() {
        let (a, b) = (new_id(), new_id());
        assert_ne!(a, b);
        assert_eq!(a.len(), 4 + 32);
        assert!(a.starts_with("apr_"));
    }

    #[test]
    fn digest_of_exact_text() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn destructive_counts_a_missing_hint() {
        assert!(McpApproval::Destructive.requires(None));
        assert!(McpApproval::Destructive.requires(Some(false)));
        assert!(!McpApproval::Destructive.requires(Some(true)));
        assert!(McpApproval::Always.requires(Some(true)));
        assert!(!McpApproval::Never.requires(None));
    }

    #[test]
    fn denied_and_expired_say_different_things() {
        let denied = denied_text("t", Some("no"));
        let expired = expired_text("t", Duration::from_secs(2));
        assert!(denied.contains("declined") && denied.contains("no"));
        assert!(expired.contains("nobody answered") && !expired.contains("declined"));
    }
}
