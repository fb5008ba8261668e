//! Call policy: what a call must pass after its tool is resolved and before it runs: a
//! person's approval ([`approvals`]: the calls that wait for one, their decisions, the
//! characters' rules) and the tool's own limits on how its calls run ([`limits`]:
//! `dedupe_seconds` against each session's recent calls ([`dedupe`]), `rate`, and
//! `max_concurrent`, whose calls wait for their turn ([`queue`])). Whatever else a call must pass
//! before its callback belongs here too, on the same path.
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
pub(crate) mod bench;
mod dedupe;
mod limits;
mod queue;

use std::future::Future;
use std::sync::{Arc, Mutex};

use self::approvals::Pending;
pub(crate) use self::approvals::{DecideError, PendingApproval};
pub(crate) use self::dedupe::DedupeWindow;
pub use self::dedupe::{MAX_REMEMBERED_BYTES, MAX_REMEMBERED_CALLS};
use self::limits::Limited;
pub use self::queue::MAX_WAITING;
use crate::domain::call::{ToolCall, ToolResult};
use crate::domain::connection::{Caller, ConnectionKind};
use crate::domain::tool::SharedTool;
use crate::events::EventHub;

/// Who asks: the character and the caller, as `tool.call` names them, and the recent calls of
/// the session or conversation the call is made in (a repeat of one of them gets its result,
/// for a tool with `dedupe_seconds`; `None`: the caller never repeats itself, as an invoke).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asker<'a> {
    pub(crate) role: &'a str,
    pub(crate) caller: Caller,
    pub(crate) kind: Option<ConnectionKind>,
    pub(crate) dedupe: Option<&'a DedupeWindow>,
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
    /// The limits' state of each registration with a rate or a `max_concurrent`. Never locked
    /// with another of the policy's locks.
    limits: Mutex<limits::Registrations>,
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
    /// What the call holds of its tool's limits (`None`: the tool has none).
    limited: Option<Box<Limited>>,
}

impl Policy {
    /// A policy with no rules yet, announcing on `events`.
    pub(crate) fn new(events: EventHub) -> Self {
        Self {
            inner: Arc::new(Inner {
                events,
                approvals: Mutex::default(),
                limits: Mutex::default(),
            }),
        }
    }

    /// The one check of a call before it runs, whoever makes it: a model's call of a tool that
    /// needs approval on the asker's character is held for a person (announced as
    /// `approval.requested`); the invoke route's caller is the person trying the tool, so it
    /// is never asked. A call of a tool with limits passes them too: a model's repeat gets the
    /// first call's result (`dedupe_seconds`), a call beyond the `rate` is refused, and a call
    /// beyond `max_concurrent` takes its place in the queue (once approved, when it waits for a
    /// person). A call refused here (arguments that fail the tool's schema when a person would
    /// be asked, a character with too many calls waiting, the tool's rate reached) is answered
    /// with the returned result and never runs.
    pub(crate) fn admit(
        &self,
        asker: Asker<'_>,
        tool: &SharedTool,
        call: &mut ToolCall,
    ) -> Result<Admission, Box<ToolResult>> {
        if !tool.limits.is_none() {
            return self.admit_limited(asker, tool, call);
        }
        let approval = match asker.caller {
            Caller::Invoke => None,
            Caller::Model | Caller::Mcp => self.approval_for(asker, tool, call)?,
        };
        Ok(Admission {
            approval,
            limited: None,
        })
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
    /// it at once as awaiting it, and tells its outcome later): it does, or it repeats a call
    /// that does.
    pub(crate) fn waits_for_approval(&self) -> bool {
        self.approval.is_some()
            || self
                .limited
                .as_ref()
                .is_some_and(|l| l.repeats_one_approving())
    }

    /// Runs `call` through `run` once its admission lets it (at once when nothing holds it):
    /// the one path from an admitted call to its run. A call that is not let through (denied,
    /// expired, cancelled while it waited, busy: its turn did not come within its timeout) gets
    /// the result the model is told instead; a repeat gets its first call's. Dropping the
    /// future gives back what the call holds (its place in its tool's queue, at once).
    pub(crate) async fn run<F, Fut>(self, call: ToolCall, run: F) -> ToolResult
    where
        F: FnOnce(ToolCall) -> Fut,
        Fut: Future<Output = ToolResult>,
    {
        let Some(mut limited) = self.limited else {
            let call = match self.approval {
                None => call,
                Some(pending) => match pending.decided(call).await {
                    Ok(call) => call,
                    Err(result) => return result,
                },
            };
            return run(call).await;
        };
        if let Some(repeat) = limited.take_repeat() {
            return repeat.result(call).await;
        }
        let call = match self.approval {
            None => call,
            Some(pending) => match pending.decided(call).await {
                Ok(call) => {
                    limited.approved();
                    call
                }
                Err(result) => return limited.ended(result),
            },
        };
        let turn = match limited.turn(&call).await {
            Ok(turn) => turn,
            Err(busy) => return limited.ended(busy),
        };
        let result = run(call).await;
        // The turn goes to the next call as soon as this one has its result.
        drop(turn);
        limited.ended(result)
    }
}
