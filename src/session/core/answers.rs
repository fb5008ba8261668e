//! The model's calls and their answers: a call of the app's own tool is left to the app; every
//! other call is checked against the runaway guard and the tools the session has, run by the
//! actor, and answered with its exact output and the images the model takes; the turn goes on
//! (one request) once its last call is answered, unless the app has calls of its own in it.

use std::time::Instant;

use super::{Call, Effect, Run, SessionCore, Ticket};
use crate::domain::call::{ToolCall, ToolResult};
use crate::domain::registry::not_registered_text;
use crate::events::{Caller, ToolCallFinished};

impl SessionCore {
    /// Whether the server answers calls of `name`: every call but those of the session's own
    /// tools (the app's), which the app answers.
    fn is_ours(&self, name: &str) -> bool {
        !self.own_tools.iter().any(|t| t.name == name)
    }

    pub(super) fn on_call(&mut self, call: Call) {
        if !self.is_ours(&call.name) {
            if let Some(turn) = &call.turn {
                self.calls.foreign(turn);
            }
            return;
        }
        if !self.calls.started(call.turn.as_deref(), &call.call_id) {
            return;
        }
        let turn = call.turn;
        let started = Instant::now();
        let tool_call = ToolCall::from_raw(call.call_id, call.name, call.arguments);
        if !self.limiter.admit(started) {
            let error = format!(
                "tool call limit reached: more than {} calls within {} s; the call was not run",
                self.limiter.max(),
                self.limiter.window().as_secs_f64()
            );
            tracing::warn!(character = %self.character, tool = %tool_call.name, "runaway guard refused a tool call");
            let result = tool_call.error(error);
            self.answer(turn, result, None, started);
            return;
        }
        let Some(tool) = self
            .registered
            .iter()
            .find(|t| t.name == tool_call.name)
            .cloned()
        else {
            let available = self
                .registered
                .iter()
                .map(|t| t.name.as_str())
                .filter(|n| self.is_ours(n));
            let error = not_registered_text(&tool_call.name, None, available);
            let result = tool_call.error(error);
            self.answer(turn, result, None, started);
            return;
        };
        self.effects.push(Effect::Run(Box::new(Run {
            call: tool_call,
            ticket: Ticket {
                tool,
                turn,
                connection: self.connection,
                started,
            },
        })));
    }

    /// A call the core asked to run finished.
    pub fn answered(&mut self, ticket: Ticket, result: ToolResult) {
        let Ticket {
            tool,
            turn,
            connection,
            started,
        } = ticket;
        if connection != self.connection || !self.connected {
            self.announce_call(&result, Some(&tool.source), started);
            tracing::debug!(character = %self.character, call_id = %result.call_id, "dropping the answer to a call of a connection that has ended");
            return;
        }
        self.answer(turn, result, Some(&tool.source), started);
    }

    /// Announces a finished call of the model's (`source` is `None` for a tool the character
    /// does not have, or a call the runaway guard refused).
    fn announce_call(&self, result: &ToolResult, source: Option<&str>, started: Instant) {
        self.events.tool_call(&ToolCallFinished {
            role: &self.character,
            tool: &result.name,
            source,
            call_id: &result.call_id,
            caller: Caller::Model,
            kind: Some(self.kind),
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            is_error: result.is_error,
        });
    }

    /// Answers a call: its exact output, then (when the model takes images and the turn has
    /// room) its images; images that cannot go are named in the output. The call is announced
    /// as `tool.call`.
    fn answer(
        &mut self,
        turn: Option<String>,
        mut result: ToolResult,
        source: Option<&str>,
        started: Instant,
    ) {
        self.announce_call(&result, source, started);
        let warning = if self.protocol.takes_images() {
            self.calls
                .image_budget(turn.as_deref())
                .take(&mut result.images)
        } else {
            let dropped = std::mem::take(&mut result.images).len();
            (dropped > 0).then(|| self.protocol.images_not_taken(dropped))
        };
        result.add_image_warnings(warning.into_iter().collect());
        let event_id = self.event_id("call");
        let output = self
            .protocol
            .call_output(&result.call_id, &result.model_text(), &event_id);
        self.effects.push(Effect::Upstream(output));
        if !result.images.is_empty() {
            let event_id = self.event_id("images");
            let images = self.protocol.images(&result, &event_id);
            self.effects.push(Effect::Upstream(images));
        }
        self.calls_answered += 1;
        if self.calls.answered(turn.as_deref(), &result.call_id) {
            self.continue_turn();
        }
    }

    pub(super) fn continue_turn(&mut self) {
        let event_id = self.event_id("response");
        let text = self.protocol.continue_turn(&event_id);
        self.effects.push(Effect::Upstream(text));
    }
}
