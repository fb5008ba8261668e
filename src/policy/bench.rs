//! The benchmarks' way onto the call policy, which has no public path of its own: a policy with
//! no approval rules and one session's recent calls, through which a benchmark puts a model's
//! calls exactly as a session core does ([`Policy::admit`], then [`Admission::run`] around the
//! dispatch). Not part of the crate's API (re-exported hidden, as `bench`).

use super::{Asker, DedupeWindow, Policy};
use crate::dispatch::Dispatcher;
use crate::domain::call::{ToolCall, ToolResult};
use crate::domain::connection::{Caller, ConnectionKind};
use crate::domain::tool::SharedTool;
use crate::events::EventHub;

/// A call policy of its own and one session's recent calls, as a model's session has them.
#[derive(Debug)]
pub struct BenchPolicy {
    policy: Policy,
    session: DedupeWindow,
}

impl BenchPolicy {
    /// A policy with no approval rules, announcing on `events`.
    pub fn new(events: EventHub) -> Self {
        Self {
            policy: Policy::new(events),
            session: DedupeWindow::new(),
        }
    }

    /// `call` of `tool` made by a model of `role`'s own session: admitted, then run through
    /// `dispatcher` (or answered without it, when a limit holds it back).
    pub async fn call(
        &self,
        dispatcher: &Dispatcher,
        role: &str,
        tool: &SharedTool,
        mut call: ToolCall,
    ) -> ToolResult {
        let asker = Asker {
            role,
            caller: Caller::Model,
            kind: Some(ConnectionKind::Client),
            dedupe: Some(&self.session),
        };
        match self.policy.admit(asker, tool, &mut call) {
            Ok(admission) => {
                admission
                    .run(call, |call| dispatcher.dispatch(tool, call))
                    .await
            }
            Err(refused) => *refused,
        }
    }
}
