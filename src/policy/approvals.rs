//! Pending approvals: the one store of the calls that wait for a person's decision, whoever
//! made them (a live session's model, a chat request's, an MCP client of `/mcp`). It is part of
//! the shared [`Policy`], so every kind of session reaches the same store, and it announces
//! `approval.requested` and `approval.resolved` on the event hub.
//!
//! A call is checked against its tool's schema first (a call that fails it is answered with the
//! fix-it text and never asks anyone); then it is held as a [`Pending`], which owns the call as
//! the model made it. Only a decision through the store (`POST /api/approvals/{id}`) lets it go
//! on, and then with exactly the call it holds. A pending approval ends once: approved or
//! denied by the person, expired by its own timer (armed in [`Pending::decided`]), or cancelled —
//! its tool replaced or removed ([`Policy::tools_changed`]) or its waiter dropped
//! (its session ended, its request went away, the call was cancelled).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::PoisonError;
use std::time::{Duration, Instant, SystemTime};

use futures_util::future::{Either, select};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use super::{Asker, Policy};
use crate::domain::approval::{
    MAX_PENDING_PER_CHARACTER, Resolution, cancelled_text, denied_text, expired_text, new_id,
    sha256_hex,
};
use crate::domain::call::{Outcome, ToolCall, ToolResult};
use crate::domain::connection::{Caller, ConnectionKind};
use crate::domain::tool::SharedTool;
use crate::events::{EventKind, Scope};

/// How many decided, expired or cancelled ids are remembered, so a late decision is told which
/// (409) rather than "unknown" (404).
const REMEMBERED: usize = 4096;

/// A pending approval as `GET /api/approvals` lists it and `approval.requested` announces it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PendingApproval {
    pub(crate) id: String,
    pub(crate) role: String,
    pub(crate) tool: String,
    pub(crate) source: String,
    pub(crate) call_id: String,
    pub(crate) caller: Caller,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<ConnectionKind>,
    /// The arguments as the model sent them, parsed.
    pub(crate) arguments: Map<String, Value>,
    /// Lowercase hex SHA-256 of the exact argument text the model sent.
    pub(crate) arguments_sha256: String,
    /// The registration the call was asked under.
    pub(crate) generation: u64,
    pub(crate) timeout_seconds: u64,
    /// RFC 3339, UTC.
    pub(crate) requested_at: String,
    pub(crate) expires_at: String,
}

/// `approval.resolved`.
#[derive(Debug, Serialize)]
struct Resolved<'a> {
    id: &'a str,
    role: &'a str,
    tool: &'a str,
    call_id: &'a str,
    outcome: Resolution,
    reason: Option<&'a str>,
}

/// What the waiter of a pending approval is told.
#[derive(Debug)]
enum Verdict {
    Approved,
    Denied(Option<String>),
    Cancelled(String),
}

struct Entry {
    record: PendingApproval,
    tool: SharedTool,
    tell: oneshot::Sender<Verdict>,
}

/// The store's state, behind the policy's lock for it.
#[derive(Default)]
pub(super) struct Approvals {
    /// By id, in the order asked (ids are compared only for equality; order comes from `order`).
    pending: HashMap<String, Entry>,
    order: u64,
    asked: HashMap<String, u64>,
    /// Per character: the tool names that always need approval (`[character.approval]`).
    rules: HashMap<String, HashSet<String>>,
    /// Ids that ended, and how, oldest first.
    ended: VecDeque<String>,
    endings: HashMap<String, Resolution>,
}

impl Approvals {
    fn end(&mut self, id: &str, resolution: Resolution) -> Option<Entry> {
        let entry = self.pending.remove(id)?;
        self.asked.remove(id);
        if self.ended.len() == REMEMBERED
            && let Some(old) = self.ended.pop_front()
        {
            self.endings.remove(&old);
        }
        self.ended.push_back(id.to_owned());
        self.endings.insert(id.to_owned(), resolution);
        Some(entry)
    }
}

/// Why a decision was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DecideError {
    /// No approval of this id is pending or remembered.
    Unknown,
    /// It ended already, this way.
    Ended(Resolution),
}

/// A call waiting for a person's approval. Its caller keeps the call itself, as the model made
/// it, and runs exactly that once [`Pending::decided`] lets it; dropping it before a decision
/// cancels the approval.
pub(crate) struct Pending {
    policy: Policy,
    id: String,
    tool: String,
    timeout: Duration,
    expires: Instant,
    verdict: oneshot::Receiver<Verdict>,
    done: bool,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("id", &self.id)
            .field("tool", &self.tool)
            .finish_non_exhaustive()
    }
}

impl Pending {
    /// Waits for the decision on `call` (at most until the approval expires): the call to run,
    /// as it was held, or the result the model is given instead.
    pub(crate) async fn decided(mut self, call: ToolCall) -> Result<ToolCall, ToolResult> {
        let expiry = std::pin::pin!(tokio::time::sleep_until(self.expires.into()));
        let verdict = match select(&mut self.verdict, expiry).await {
            Either::Left((told, _)) => told.ok(),
            Either::Right(_) => {
                if self
                    .policy
                    .end_approval(&self.id, Resolution::Expired, None)
                {
                    tracing::info!(tool = %self.tool, approval = %self.id, outcome = Resolution::Expired.name(), "an approval expired before a decision");
                    None
                } else {
                    // A decision (or a cancel) ended the record at the same moment, and was
                    // taken first: whatever ends a record tells its waiter before it lets the
                    // store's lock go, so the verdict is here already.
                    self.verdict.try_recv().ok()
                }
            }
        };
        self.done = true;
        match verdict {
            Some(Verdict::Approved) => Ok(call),
            Some(Verdict::Denied(reason)) => {
                Err(call.failed(Outcome::Denied, denied_text(&self.tool, reason.as_deref())))
            }
            Some(Verdict::Cancelled(why)) => {
                Err(call.failed(Outcome::Cancelled, cancelled_text(&self.tool, &why)))
            }
            None => Err(call.failed(Outcome::Expired, expired_text(&self.tool, self.timeout))),
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // Dropped before its decision: its session ended, its request went away, or the call
        // was cancelled.
        if !self.done {
            self.policy.end_approval(
                &self.id,
                Resolution::Cancelled,
                Some("the call was cancelled: its session ended or its caller went away"),
            );
        }
    }
}

impl Policy {
    fn approvals(&self) -> std::sync::MutexGuard<'_, Approvals> {
        self.inner
            .approvals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the tools that always need approval on `role`, whatever their registration says.
    pub(crate) fn set_approval_rules(&self, role: &str, always: Vec<String>) {
        let mut approvals = self.approvals();
        if always.is_empty() {
            approvals.rules.remove(role);
        } else {
            approvals
                .rules
                .insert(role.to_owned(), always.into_iter().collect());
        }
    }

    /// The approval timeout of calls of `tool` on `role`, when they need approval.
    pub(crate) fn approval_required(&self, role: &str, tool: &SharedTool) -> Option<Duration> {
        let by_rule = || {
            self.approvals()
                .rules
                .get(role)
                .is_some_and(|names| names.contains(&tool.name))
        };
        (tool.approval.required || by_rule()).then_some(tool.approval.timeout)
    }

    /// Holds `call` of `tool` for a person's approval when the tool needs it on the asker's
    /// character (`None`: it does not), announced as `approval.requested`. A call whose
    /// arguments fail the tool's schema is answered with the fix-it text instead, and one past
    /// the character's bound on pending approvals is refused; neither asks anyone.
    pub(super) fn approval_for(
        &self,
        asker: Asker<'_>,
        tool: &SharedTool,
        call: &mut ToolCall,
    ) -> Result<Option<Pending>, Box<ToolResult>> {
        match self.approval_required(asker.role, tool) {
            None => Ok(None),
            Some(timeout) => self.request_approval(asker, tool, call, timeout).map(Some),
        }
    }

    fn request_approval(
        &self,
        asker: Asker<'_>,
        tool: &SharedTool,
        call: &mut ToolCall,
        timeout: Duration,
    ) -> Result<Pending, Box<ToolResult>> {
        if let Err(refused) = call.check_arguments(&tool.parameters) {
            return Err(Box::new(
                call.failed(Outcome::InvalidArguments, refused.message(&tool.name)),
            ));
        }
        let now = SystemTime::now();
        let expires = Instant::now() + timeout;
        let id = new_id();
        let record = PendingApproval {
            id: id.clone(),
            role: asker.role.to_owned(),
            tool: tool.name.clone(),
            source: tool.source.clone(),
            call_id: call.call_id.clone(),
            caller: asker.caller,
            kind: asker.kind,
            arguments: call.arguments.clone(),
            arguments_sha256: sha256_hex(&call.raw_arguments),
            generation: tool.generation,
            timeout_seconds: timeout.as_secs(),
            requested_at: rfc3339(now),
            expires_at: rfc3339(now + timeout),
        };
        let (tell, verdict) = oneshot::channel();
        {
            let mut approvals = self.approvals();
            let held = approvals
                .pending
                .values()
                .filter(|e| e.record.role == asker.role)
                .count();
            if held >= MAX_PENDING_PER_CHARACTER {
                drop(approvals);
                return Err(Box::new(call.failed(
                    Outcome::Refused,
                    format!(
                        "too many calls wait for approval on this character (at most \
                         {MAX_PENDING_PER_CHARACTER}); the call of '{}' was not run and nobody \
                         was asked",
                        tool.name
                    ),
                )));
            }
            // Announced under the lock, so `approval.resolved` can never come first.
            self.inner.events.publish(
                EventKind::ApprovalRequested,
                Scope::Roles(vec![asker.role.into()]),
                &record,
            );
            approvals.order += 1;
            let order = approvals.order;
            approvals.asked.insert(id.clone(), order);
            approvals.pending.insert(
                id.clone(),
                Entry {
                    record,
                    tool: tool.clone(),
                    tell,
                },
            );
        }
        tracing::info!(role = %asker.role, tool = %tool.name, call_id = %call.call_id, approval = %id, "a call waits for approval");
        Ok(Pending {
            policy: self.clone(),
            id,
            tool: tool.name.clone(),
            timeout,
            expires,
            verdict,
            done: false,
        })
    }

    /// The pending approvals (of `role` only, when given), oldest first.
    pub(crate) fn pending_approvals(&self, role: Option<&str>) -> Vec<PendingApproval> {
        let approvals = self.approvals();
        let mut listed: Vec<(u64, PendingApproval)> = approvals
            .pending
            .values()
            .filter(|e| role.is_none_or(|r| e.record.role == r))
            .map(|e| {
                let order = approvals.asked.get(&e.record.id).copied().unwrap_or(0);
                (order, e.record.clone())
            })
            .collect();
        listed.sort_unstable_by_key(|(order, _)| *order);
        listed.into_iter().map(|(_, record)| record).collect()
    }

    /// The person's decision on approval `id`. Single use: a decided, expired or cancelled one
    /// is refused with how it ended.
    pub(crate) fn decide_approval(
        &self,
        id: &str,
        approve: bool,
        reason: Option<String>,
    ) -> Result<(), DecideError> {
        let mut approvals = self.approvals();
        let resolution = if approve {
            Resolution::Approved
        } else {
            Resolution::Denied
        };
        let Some(entry) = approvals.end(id, resolution) else {
            return Err(approvals
                .endings
                .get(id)
                .map_or(DecideError::Unknown, |r| DecideError::Ended(*r)));
        };
        self.announce_end(&entry, resolution, reason.as_deref());
        let Entry { record, tell, .. } = entry;
        let verdict = if approve {
            Verdict::Approved
        } else {
            Verdict::Denied(reason)
        };
        // Told before the lock is let go: the waiter's expiry timer, which ends the record under
        // the same lock, either ends it first (this decision is then refused) or finds it gone
        // and this verdict already waiting. The decision that wins is the one that runs.
        let _ = tell.send(verdict);
        drop(approvals);
        tracing::info!(role = %record.role, tool = %record.tool, approval = %id, outcome = resolution.name(), "an approval was decided");
        Ok(())
    }

    /// `role`'s tools are now `tools`: a pending approval whose tool was replaced or removed is
    /// cancelled ("the tool changed").
    pub(super) fn approvals_tools_changed<'a>(
        &self,
        role: &str,
        tools: impl Iterator<Item = &'a SharedTool>,
    ) {
        let mut approvals = self.approvals();
        if !approvals.pending.values().any(|e| e.record.role == role) {
            return;
        }
        let tools: Vec<&SharedTool> = tools.collect();
        let void: Vec<String> = approvals
            .pending
            .values()
            .filter(|e| {
                e.record.role == role && !tools.iter().any(|t| std::sync::Arc::ptr_eq(t, &e.tool))
            })
            .map(|e| e.record.id.clone())
            .collect();
        const WHY: &str = "the tool changed (it was replaced or removed)";
        for id in void {
            if let Some(entry) = approvals.end(&id, Resolution::Cancelled) {
                self.announce_end(&entry, Resolution::Cancelled, Some(WHY));
                let _ = entry.tell.send(Verdict::Cancelled(WHY.to_owned()));
            }
        }
    }

    /// Ends approval `id` as `resolution` unless it ended already; whether it did now.
    fn end_approval(&self, id: &str, resolution: Resolution, reason: Option<&str>) -> bool {
        let mut approvals = self.approvals();
        match approvals.end(id, resolution) {
            Some(entry) => {
                self.announce_end(&entry, resolution, reason);
                true
            }
            None => false,
        }
    }

    fn announce_end(&self, entry: &Entry, outcome: Resolution, reason: Option<&str>) {
        let record = &entry.record;
        self.inner.events.publish(
            EventKind::ApprovalResolved,
            Scope::Roles(vec![record.role.as_str().into()]),
            &Resolved {
                id: &record.id,
                role: &record.role,
                tool: &record.tool,
                call_id: &record.call_id,
                outcome,
                reason,
            },
        );
    }
}

fn rfc3339(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::domain::approval::Approval;
    use crate::domain::tool::{ToolSpec, test_tool};
    use crate::events::{EventHub, EventSettings};

    fn policy() -> Policy {
        Policy::new(EventHub::new(&EventSettings::default()))
    }

    fn needs_approval(name: &str) -> SharedTool {
        let plain = test_tool(name, "");
        let ToolHandler::Remote(endpoint) = &plain.handler else {
            unreachable!("a remote test tool")
        };
        Arc::new(
            ToolSpec::remote(
                name,
                "",
                plain.parameters.clone(),
                "plugin:w",
                endpoint.callback_url.clone(),
                endpoint.timeout,
            )
            .with_approval(Approval {
                required: true,
                ..Approval::default()
            }),
        )
    }

    fn asker() -> Asker<'static> {
        Asker {
            role: "Mio",
            caller: Caller::Model,
            kind: Some(ConnectionKind::Client),
            dedupe: None,
        }
    }

    fn call(id: &str) -> ToolCall {
        ToolCall::from_raw(id.into(), "send".into(), r#"{"to":  "Ann"}"#.into())
    }

    use crate::domain::tool::ToolHandler;

    #[test]
    fn a_tool_without_the_policy_asks_nobody_unless_the_character_says_so() {
        let policy = policy();
        let plain = test_tool("send", "");
        assert!(
            policy
                .approval_for(asker(), &plain, &mut call("c1"))
                .unwrap()
                .is_none()
        );
        policy.set_approval_rules("Mio", vec!["send".into()]);
        let held = policy
            .approval_for(asker(), &plain, &mut call("c1"))
            .unwrap();
        assert!(held.is_some());
        assert_eq!(policy.pending_approvals(Some("Lanlan")).len(), 0);
        assert_eq!(policy.pending_approvals(Some("Mio")).len(), 1);
    }

    #[test]
    fn a_decision_is_taken_once_and_a_dropped_waiter_cancels() {
        let policy = policy();
        let tool = needs_approval("send");
        let held = policy
            .approval_for(asker(), &tool, &mut call("c1"))
            .unwrap()
            .unwrap();
        let record = policy.pending_approvals(None).remove(0);
        assert_eq!(record.arguments_sha256, sha256_hex(r#"{"to":  "Ann"}"#));
        assert_eq!(record.generation, tool.generation);
        assert_eq!(policy.decide_approval(&record.id, false, None), Ok(()));
        assert_eq!(
            policy.decide_approval(&record.id, true, None),
            Err(DecideError::Ended(Resolution::Denied))
        );
        assert_eq!(
            policy.decide_approval("apr_nope", true, None),
            Err(DecideError::Unknown)
        );
        drop(held);
        let second = policy
            .approval_for(asker(), &tool, &mut call("c2"))
            .unwrap()
            .unwrap();
        let id = policy.pending_approvals(None).remove(0).id;
        drop(second);
        assert_eq!(
            policy.decide_approval(&id, true, None),
            Err(DecideError::Ended(Resolution::Cancelled))
        );
    }

    #[test]
    fn a_replaced_tool_voids_its_pending_approvals_and_the_set_is_bounded() {
        let policy = policy();
        let tool = needs_approval("send");
        let mut held = Vec::new();
        for i in 0..MAX_PENDING_PER_CHARACTER {
            held.push(
                policy
                    .approval_for(asker(), &tool, &mut call(&format!("c{i}")))
                    .unwrap()
                    .unwrap(),
            );
        }
        let refused = policy
            .approval_for(asker(), &tool, &mut call("over"))
            .unwrap_err();
        assert_eq!(refused.outcome, Outcome::Refused);
        // Another character has its own bound.
        let other = Asker {
            role: "Lanlan",
            ..asker()
        };
        let _theirs = policy
            .approval_for(other, &tool, &mut call("x"))
            .unwrap()
            .unwrap();
        policy.approvals_tools_changed("Mio", [&tool].into_iter());
        assert_eq!(
            policy.pending_approvals(Some("Mio")).len(),
            MAX_PENDING_PER_CHARACTER
        );
        let replaced = needs_approval("send");
        policy.approvals_tools_changed("Mio", [&replaced].into_iter());
        assert!(policy.pending_approvals(Some("Mio")).is_empty());
        assert_eq!(policy.pending_approvals(Some("Lanlan")).len(), 1);
    }

    #[test]
    fn arguments_that_fail_the_schema_ask_nobody() {
        let policy = policy();
        let mut bad = ToolCall::from_raw("c1".into(), "send".into(), "[1]".into());
        let refused = policy
            .approval_for(asker(), &needs_approval("send"), &mut bad)
            .unwrap_err();
        assert_eq!(refused.outcome, Outcome::InvalidArguments);
        assert!(policy.pending_approvals(None).is_empty());
    }
}
