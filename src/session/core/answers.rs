//! The model's calls and their answers: a call of the app's own tool is left to the app; every
//! other call is checked against the runaway guard and the tools the session has, run by the
//! actor, and answered with its exact output and the images the model takes; the turn goes on
//! (one request) once its last call is answered, unless the app has calls of its own in it or
//! the person interrupted it.

use std::sync::Arc;
use std::time::Instant;

use super::{Answers, Call, Effect, Run, SessionCore, Ticket};
use crate::domain::call::{Outcome, ToolAnswer, ToolCall, ToolResult};
use crate::domain::peer_id;
use crate::domain::registry::not_registered_text;
use crate::domain::tool::{Behavior, SharedTool};
use crate::events::{CallStart, CallWatch, Caller};
use crate::policy::Asker;
use crate::session::calls::{Arrival, TurnState};

/// A call the actor runs now.
#[derive(Debug)]
pub(super) struct RunningCall {
    pub(super) tool: SharedTool,
    pub(super) turn: Option<String>,
    pub(super) call_id: String,
    /// The model's own id, when it was longer than `call_id`: what the call is answered with.
    pub(super) model_call_id: Option<Arc<str>>,
    /// When the model's call arrived (the `tool.call` event's duration).
    pub(super) started: Instant,
    /// The same, RFC 3339, for the sessions listing.
    pub(super) started_at: String,
    /// A non-blocking call was answered as running: its result is delivered when it comes, and
    /// a new user turn does not cancel it.
    pub(super) behavior: Behavior,
    /// The call waited for a person's approval: it was answered at once as awaiting it, and
    /// its outcome is told later, like a non-blocking call's result.
    pub(super) waits_for_approval: bool,
    /// Observes the call until it is answered (or dropped with the session, as cancelled).
    pub(super) watch: CallWatch,
}

impl RunningCall {
    /// Whether the call was answered at once and belongs to no turn (a non-blocking call, or
    /// one that waited for approval): its result is delivered when it comes, and a new user
    /// turn passes it by.
    pub(super) fn is_detached(&self) -> bool {
        self.behavior == Behavior::NonBlocking || self.waits_for_approval
    }
}

impl SessionCore {
    /// Whether the server answers calls of `name`: every call but those of the session's own
    /// tools (the app's), which the app answers.
    fn is_ours(&self, name: &str) -> bool {
        !self.own_tools.iter().any(|t| t.name == name)
    }

    pub(super) fn on_call(&mut self, mut call: Call) {
        if !self.is_ours(&call.name) {
            if let Some(turn) = &call.turn {
                self.calls.foreign(turn);
            }
            return;
        }
        let started = Instant::now();
        // A found tool called through `call_tool` is a call of that tool from here on.
        self.through_call_tool(&mut call);
        // The core knows a call by the id the server keeps (a model's longer id cut and marked);
        // the model's own is answered with (`ToolResult::model_call_id`).
        let kept = peer_id::call_id(&call.call_id);
        let arrival = self.calls.started(call.turn.as_deref(), &kept);
        if arrival == Arrival::Repeated {
            return;
        }
        let watch = self.watch(&call.name, &kept, call.turn.as_deref());
        if arrival == Arrival::Abandoned {
            // A call of a turn the person interrupted: not run, answered as cancelled.
            let (kept, model_call_id) = peer_id::split_call_id(call.call_id);
            let result = ToolResult::interrupted(kept, call.name, started.elapsed())
                .answering(model_call_id);
            self.answer_cancelled(&result, watch);
            return;
        }
        let turn = call.turn;
        let mut tool_call = ToolCall::from_raw(call.call_id, call.name, call.arguments);
        if !self.limiter.admit(started) {
            let error = format!(
                "tool call limit reached: more than {} calls within {} s; the call was not run",
                self.limiter.max(),
                self.limiter.window().as_secs_f64()
            );
            tracing::warn!(character = %self.character, tool = %peer_id::name(&tool_call.name), "runaway guard refused a tool call");
            let result = tool_call.failed(Outcome::Refused, error);
            self.answer(turn, result, watch);
            return;
        }
        if let Some(tool) = self.built_in_tool(&tool_call.name).cloned() {
            self.built_in(turn, tool_call, &tool, watch);
            return;
        }
        let Some(tool) = self.tool(&tool_call.name).cloned() else {
            let available = self
                .registered
                .iter()
                .map(|t| t.name.as_str())
                .filter(|n| self.is_ours(n));
            let error = not_registered_text(&tool_call.name, None, available);
            let result = tool_call.failed(Outcome::UnknownTool, error);
            self.answer(turn, result, watch);
            return;
        };
        tool_call.trace = Some(watch.trace().clone());
        let asker = Asker {
            role: &self.character,
            caller: Caller::Model,
            kind: Some(self.kind),
            dedupe: Some(&self.dedupe),
        };
        let admission = match self.policy.admit(asker, &tool, &mut tool_call) {
            Ok(admission) => admission,
            Err(refused) => {
                self.answer(turn, *refused, watch);
                return;
            }
        };
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        let behavior = tool.behavior;
        let turn = match behavior {
            // A call that waits for a person is answered now, so the model can say what it is
            // about to do and ask: the turn goes on, and the outcome comes later.
            _ if admission.waits_for_approval() => {
                let awaiting =
                    tool_call.result(ToolAnswer::awaiting_approval(&tool_call), Vec::new());
                self.send_answer(turn, awaiting);
                None
            }
            Behavior::Blocking => turn,
            Behavior::NonBlocking => {
                // Answered now (or, for a protocol that carries such calls itself, left out of
                // its turn's answers): the turn goes on without it.
                if self.protocol.answers_running_calls() {
                    let running = tool_call.result(ToolAnswer::running(&tool_call), Vec::new());
                    self.send_answer(turn, running);
                } else {
                    self.needs_no_answer(turn.as_deref(), &tool_call.call_id);
                }
                None
            }
        };
        self.running.insert(
            ticket,
            RunningCall {
                tool: tool.clone(),
                turn,
                call_id: tool_call.call_id.clone(),
                model_call_id: tool_call.long_model_call_id().cloned(),
                started,
                started_at: super::rfc3339_now(),
                behavior,
                waits_for_approval: admission.waits_for_approval(),
                watch,
            },
        );
        self.effects.push(Effect::Run(Box::new(Run {
            call: tool_call,
            tool,
            ticket,
            admission,
        })));
    }

    /// Starts observing a call of `name`, in the trace of its turn.
    fn watch(&mut self, name: &str, call_id: &str, turn: Option<&str>) -> CallWatch {
        let (kind, character) = (self.kind, &self.character);
        let observer = self.events.observer();
        let parent = self
            .calls
            .turn_trace(turn, |turn| observer.turn_span(kind, character, turn));
        let tool = self.tool(name);
        CallWatch::start(
            &self.events,
            CallStart {
                role: &self.character,
                tool: name,
                source: tool.map(|t| t.source.as_str()),
                call_id,
                caller: Caller::Model,
                kind: Some(self.kind),
                behavior: tool.map_or(Behavior::Blocking, |t| t.behavior),
            },
            parent.as_ref(),
        )
    }

    /// The character's tool of this name (offered to the session or not: a model may call one
    /// it was offered before the set moved on), or the session's own built-in one.
    fn tool(&self, name: &str) -> Option<&SharedTool> {
        self.character_tools
            .list
            .iter()
            .find(|t| t.name == name)
            .or_else(|| self.built_in_tool(name))
    }

    /// A call the core asked to run finished. The result of a call cancelled meanwhile (or of
    /// a connection that has ended) is dropped: it was answered, or announced, then.
    pub(crate) fn answered(&mut self, ticket: Ticket, result: ToolResult) {
        let Some(call) = self.running.remove(&ticket) else {
            tracing::debug!(character = %self.character, call_id = %result.call_id, "dropping the result of a cancelled call");
            return;
        };
        if call.is_detached() {
            self.deliver_late(call, result);
            return;
        }
        self.answer(call.turn, result, call.watch);
    }

    /// Answers a call: its exact output, then (when the model takes images and the turn has
    /// room) its images; images that cannot go are named in the output. The call is announced
    /// as `tool.call`.
    pub(super) fn answer(&mut self, turn: Option<String>, result: ToolResult, watch: CallWatch) {
        watch.finished(&result);
        self.send_answer(turn, result);
    }

    /// Sends a call's answer (held for its turn's one frame, for a protocol that answers so),
    /// and goes on with its turn when it was the last.
    fn send_answer(&mut self, turn: Option<String>, mut result: ToolResult) {
        self.answered_as(&mut result);
        let warning = if self.protocol.takes_images() {
            self.calls
                .image_budget(turn.as_deref())
                .take(&mut result.images)
        } else {
            let dropped = std::mem::take(&mut result.images).len();
            (dropped > 0).then(|| self.protocol.images_not_taken(dropped))
        };
        result.add_image_warnings(warning.into_iter().collect());
        let call_id = result.call_id.clone();
        match (self.protocol.answers(), &turn) {
            (Answers::TogetherPerTurn, Some(turn)) => {
                self.batches.entry(turn.clone()).or_default().push(result);
            }
            _ => {
                self.send_output(&result);
                self.send_images(&result);
            }
        }
        let state = self.calls.answered(turn.as_deref(), &call_id);
        self.turn_settled(turn.as_deref(), state);
    }

    /// A call the provider cancelled by id: it needs no answer, and the turn's other answers go
    /// without it.
    pub(super) fn needs_no_answer(&mut self, turn: Option<&str>, call_id: &str) {
        self.through_call_tool.remove(call_id);
        let state = self.calls.answered(turn, call_id);
        self.turn_settled(turn, state);
    }

    /// A turn's answers all came (or it was abandoned): the answers held for one frame go,
    /// then, when the server is the one to, the request to go on.
    pub(super) fn turn_settled(&mut self, turn: Option<&str>, state: TurnState) {
        let TurnState::Complete { go_on } = state else {
            return;
        };
        if let Some(results) = turn.and_then(|turn| self.batches.remove(turn))
            && !results.is_empty()
        {
            let event_id = self.event_id("call");
            let frame = self.protocol.call_outputs(&results, &event_id);
            self.effects.push(Effect::Upstream(frame));
            self.calls_answered += results.len() as u64;
            for result in &results {
                self.send_images(result);
            }
        }
        if go_on {
            self.continue_turn();
        }
    }

    /// The frame that shows the model a result's images, when it has some left.
    pub(super) fn send_images(&mut self, result: &ToolResult) {
        if !result.images.is_empty() {
            let event_id = self.event_id("images");
            let images = self.protocol.images(result, &event_id);
            self.effects.push(Effect::Upstream(images));
        }
    }

    /// Answers a call the person interrupted with `result` (which says so), announced as
    /// cancelled. Its turn is abandoned: nothing asks it to go on.
    pub(super) fn answer_cancelled(&mut self, result: &ToolResult, watch: CallWatch) {
        watch.finished(result);
        let mut result = result.clone();
        self.answered_as(&mut result);
        self.send_output(&result);
    }

    /// The frame that gives the model a call's output.
    fn send_output(&mut self, result: &ToolResult) {
        let event_id = self.event_id("call");
        let output = self.protocol.call_output(result, &event_id);
        self.effects.push(Effect::Upstream(output));
        self.calls_answered += 1;
    }

    pub(super) fn continue_turn(&mut self) {
        let event_id = self.event_id("response");
        if let Some(text) = self.protocol.continue_turn(&event_id) {
            self.effects.push(Effect::Upstream(text));
            self.response_asked();
        }
    }
}
