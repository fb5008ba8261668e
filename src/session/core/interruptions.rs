//! What a new user turn abandons. In a voice conversation the person talks over the model: when
//! they begin a new turn, or the provider cancels a response, the calls of the turns left behind
//! still running are cancelled — answered at once with the text that says so (the model has an
//! answer for every call it made), announced as cancelled with how long they ran, and dropped by
//! the actor — and none of those turns is asked to go on: a result that comes late would make
//! the model speak of what nobody asks about any more. Which events of a protocol mean a new
//! turn is its adapter's to say ([`Interruption`]); `cancel_on_interruption = false` keeps every
//! call running to its end, as if nothing had happened.

use super::answers::RunningCall;
use super::{Effect, Interruption, SessionCore, Ticket};
use crate::domain::call::ToolResult;
use crate::domain::peer_id;

impl SessionCore {
    /// The person interrupted, or the provider cancelled (see [`Interruption`]): the turns it
    /// abandons are never continued, and their calls still running are cancelled
    /// ([`Effect::Cancel`]), each answered as cancelled. Nothing, when the character has
    /// `cancel_on_interruption` off.
    pub(crate) fn interrupted(&mut self, interruption: Interruption) {
        if let Interruption::Calls(ids) = &interruption {
            self.provider_cancelled(ids);
            return;
        }
        if !self.cancel_on_interruption {
            return;
        }
        match &interruption {
            Interruption::NewTurn => self.calls.abandon_all(),
            Interruption::Turn(turn) => self.calls.abandon(turn),
            Interruption::Calls(_) => unreachable!("handled above"),
        }
        // A non-blocking call belongs to no turn: it runs on (see `later.rs`).
        let cancelled = self.take_running(|call| match &interruption {
            Interruption::NewTurn => !call.is_detached(),
            Interruption::Turn(turn) => call.turn.as_deref() == Some(turn.as_str()),
            Interruption::Calls(_) => false,
        });
        if cancelled.is_empty() {
            return;
        }
        tracing::debug!(character = %self.character, kind = self.kind.name(), calls = cancelled.len(), ?interruption, "cancelling the calls of an abandoned turn");
        for (ticket, call) in cancelled {
            self.effects.push(Effect::Cancel(ticket));
            let result = ToolResult::interrupted(
                call.call_id,
                call.tool.name.clone(),
                call.started.elapsed(),
            )
            .answering(call.model_call_id);
            self.answer_cancelled(&result, call.watch);
        }
    }

    /// The provider cancelled these calls (it takes no answer for them): those still running
    /// are dropped and announced as cancelled, and their turn's other answers go without them.
    fn provider_cancelled(&mut self, ids: &[String]) {
        // The provider names calls by its own ids; the core keeps them cut to their bound.
        let cancelled = self.take_running(|call| {
            ids.iter()
                .any(|id| peer_id::call_id(id) == call.call_id.as_str())
        });
        if !cancelled.is_empty() {
            tracing::debug!(character = %self.character, kind = self.kind.name(), calls = cancelled.len(), "the provider cancelled running calls");
        }
        for (ticket, call) in cancelled {
            self.effects.push(Effect::Cancel(ticket));
            let result = ToolResult::interrupted(
                call.call_id,
                call.tool.name.clone(),
                call.started.elapsed(),
            );
            call.watch.finished(&result);
            self.needs_no_answer(call.turn.as_deref(), &result.call_id);
        }
    }

    /// The connection ended under its running calls: the actor drops them with it, and they are
    /// announced as cancelled (nobody is left to answer).
    pub(super) fn drop_running(&mut self) {
        for (_, call) in self.take_running(|_| true) {
            let result = ToolResult::interrupted(
                call.call_id,
                call.tool.name.clone(),
                call.started.elapsed(),
            );
            call.watch.finished(&result);
        }
    }

    /// Takes the running calls `which` picks, in the order they started (so the model gets
    /// their answers in its own order).
    fn take_running(&mut self, which: impl Fn(&RunningCall) -> bool) -> Vec<(Ticket, RunningCall)> {
        let mut tickets: Vec<Ticket> = self
            .running
            .iter()
            .filter(|(_, call)| which(call))
            .map(|(ticket, _)| *ticket)
            .collect();
        tickets.sort_unstable();
        tickets
            .into_iter()
            .filter_map(|ticket| self.running.remove(&ticket).map(|call| (ticket, call)))
            .collect()
    }
}
