//! Call policy: what a call must pass after its tool is resolved and before it runs. Today
//! that is a person's approval ([`approvals`]: the calls that wait for one, their decisions, the
//! characters' rules); whatever else a call must pass before its callback (a tool's own bounds
//! on how its calls run) belongs here too, on the same path.
//!
//! [`Policy`] is one shared handle per server, held beside the event hub and given to everyone
//! who takes a call: every session core, the chat driver, `/mcp`'s handler and the invoke route
//! ask [`Policy::admit`] for each call and run it only through [`Admission::run`]; the manager
//! tells it when a character's tools changed ([`Policy::tools_changed`]); the approval routes
//! list and decide ([`Policy::pending_approvals`], [`Policy::decide_approval`]). It announces
//! what a person must see (`approval.requested`, `approval.resolved`) on the hub, and keeps
//! nothing of the hub's.
//!
//! Plain: no actix. Its locks are its own, taken before the hub's when both are (an event is
//! published under the policy's lock, so `approval.resolved` never precedes
//! `approval.requested`).

mod approvals;

use std::future::Future;
use std::sync::{Arc, Mutex};

use self::approvals::Pending;
pub(crate) use self::approvals::{DecideError, PendingApproval};
use crate::domain::call::{ToolCall, ToolResult};
use crate::domain::connection::{Caller, ConnectionKind};
use crate::domain::tool::SharedTool;
use crate::events::EventHub;

/// Who asks: the character and the caller, as `tool.call` names them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asker<'a> {
    pub(crate) role: &'a str,
    pub(crate) caller: Caller,
    pub(crate) kind: Option<ConnectionKind>,
}

/// The server's call policy; cheap to clone (a shared handle).
#[derive(Clone)]
pub(crate) struct Policy {
    inner: Arc<Inner>,
}

struct Inner {
    /// Where what a person must see is announced.
    events: EventHub,
    /// The calls that wait for a person's approval. Locked before the hub's state.
    approvals: Mutex<approvals::Approvals>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy").finish_non_exhaustive()
    }
}

/// What a call was admitted with: run it only through [`Admission::run`]. Dropping it before it
/// ran gives back what it holds (a pending approval is cancelled).
#[derive(Debug)]
#[must_use = "a call runs only through its admission"]
pub(crate) struct Admission {
    /// The person's approval the call waits for before it runs, when its tool needs one.
    approval: Option<Pending>,
}

impl Policy {
    /// A policy with no rules yet, announcing on `events`.
    pub(crate) fn new(events: EventHub) -> Self {
        Self {
            inner: Arc::new(Inner {
                events,
                approvals: Mutex::default(),
            }),
        }
    }

    /// The one check of a call before it runs, whoever makes it: a model's call of a tool that
    /// needs approval on the asker's character is held for a person (announced as
    /// `approval.requested`); the invoke route's caller is the person trying the tool, so it
    /// is never asked. A call refused here (arguments that fail the tool's schema when a person
    /// would be asked, a character with too many calls waiting) is answered with the returned
    /// result and never runs.
    pub(crate) fn admit(
        &self,
        asker: Asker<'_>,
        tool: &SharedTool,
        call: &mut ToolCall,
    ) -> Result<Admission, Box<ToolResult>> {
        let approval = match asker.caller {
            Caller::Invoke => None,
            Caller::Model | Caller::Mcp => self.approval_for(asker, tool, call)?,
        };
        Ok(Admission { approval })
    }

    /// `role`'s tools are now `tools` (the manager, after each change that changed them): what
    /// was held for a registration that was replaced or removed ends (a pending approval is
    /// cancelled, "the tool changed").
    pub(crate) fn tools_changed<'a>(
        &self,
        role: &str,
        tools: impl Iterator<Item = &'a SharedTool>,
    ) {
        self.approvals_tools_changed(role, tools);
    }
}

impl Admission {
    /// Whether the call waits for a person's approval before it runs (a live session answers
    /// it at once as awaiting it, and tells its outcome later).
    pub(crate) fn waits_for_approval(&self) -> bool {
        self.approval.is_some()
    }

    /// Runs `call` through `run` once its admission lets it (at once when nothing holds it):
    /// the one path from an admitted call to its run. A call that is not let through (denied,
    /// expired, cancelled while it waited) gets the result the model is told instead.
    pub(crate) async fn run<F, Fut>(self, call: ToolCall, run: F) -> ToolResult
    where
        F: FnOnce(ToolCall) -> Fut,
        Fut: Future<Output = ToolResult>,
    {
        let call = match self.approval {
            None => call,
            Some(pending) => match pending.decided(call).await {
                Ok(call) => call,
                Err(result) => return result,
            },
        };
        run(call).await
    }
}
