//! What reaches the model besides the answers it waits for: the results of non-blocking calls
//! (answered at once as running, their results delivered when they come), a running call's
//! progress, and a plugin's context — and when the model is asked to speak of them.
//!
//! Each is added to the conversation as soon as it comes (a protocol's
//! [`note`](super::Protocol::note) or [`late_result`](super::Protocol::late_result)), so they
//! reach the model in the order they became ready. What follows is its [`Scheduling`]:
//! `silent` asks nothing; `interrupt` cancels a response in progress and asks for one at once;
//! `when_idle` asks for a response only at a moment when none is in progress, none was asked
//! for that has not begun, and the person is not speaking — after a `response.done`, once the
//! reply to the person's turn has begun and ended (or did not begin within [`REPLY_GRACE`]), or
//! once a response asked for has begun and ended (or did not begin within
//! [`RESPONSE_START_GRACE`]). One response covers everything added before it began, so one that
//! begins for any reason (the person's turn, the app, a turn's answers, an earlier result)
//! leaves nothing to ask for: results that become ready together get one `response.create`. A protocol whose provider schedules these itself (Gemini Live)
//! gets the scheduling with the item and nothing more.

use std::time::Duration;

use serde::Serialize;

use super::answers::RunningCall;
use super::{Effect, SessionCore, Ticket};
use crate::domain::call::Scheduling;
use crate::domain::call::ToolResult;
use crate::domain::tool::Behavior;

/// How long after the person stopped speaking the reply to their turn may take to begin before
/// the session counts as idle without it: a provider's turn detection starts its response within
/// a few hundred milliseconds of the end of speech; a session whose app starts responses itself
/// may start none.
pub const REPLY_GRACE: Duration = Duration::from_millis(1500);

/// How long a response the server asked for (`response.create`) may take to begin
/// (`response.created`) before the session counts as idle without it: a provider starts a
/// response at once; one that answered with an error (a response already active) starts none.
pub const RESPONSE_START_GRACE: Duration = Duration::from_millis(2000);

/// A wait of the floor that is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// [`REPLY_GRACE`] after the person's stop of this number.
    ReplyGrace(u64),
    /// [`RESPONSE_START_GRACE`] after the ask of this number.
    ResponseStart(u64),
}
/// Whether the model may be asked to speak now, and whether it should be.
#[derive(Debug, Default)]
pub(super) struct Floor {
    /// A response is in progress (between `response.created` and `response.done`).
    responding: bool,
    /// The person is speaking.
    speaking: bool,
    /// The person stopped speaking, and the reply to their turn has not begun: the number of
    /// that stop, which its [`REPLY_GRACE`] timer names.
    reply_expected: Option<u64>,
    stops: u64,
    /// A response was asked for and has not begun: the number of that ask, which its
    /// [`RESPONSE_START_GRACE`] timer names.
    asked: Option<u64>,
    asks: u64,
    /// Something was added that asks for a response when the session is idle.
    wanted: bool,
}

impl Floor {
    fn idle(&self) -> bool {
        !self.responding && !self.speaking && self.reply_expected.is_none() && self.asked.is_none()
    }

    /// Who has the floor, for the report.
    pub(super) fn state(&self) -> Conversation {
        if self.speaking {
            Conversation::PersonSpeaking
        } else if self.responding {
            Conversation::Responding
        } else if self.asked.is_some() {
            Conversation::ResponseAsked
        } else if self.reply_expected.is_some() {
            Conversation::AwaitingReply
        } else {
            Conversation::Idle
        }
    }
}

/// Where a live conversation stands, as far as the server knows: when the model may be asked to
/// speak of a late result (only when `idle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Conversation {
    /// No response in progress, nobody speaking.
    Idle,
    /// A response is in progress.
    Responding,
    /// A response was asked for and has not begun (for at most [`RESPONSE_START_GRACE`]).
    ResponseAsked,
    /// The person is speaking.
    PersonSpeaking,
    /// The person stopped speaking; the reply to their turn has not begun.
    AwaitingReply,
}

impl SessionCore {
    /// A response began: it covers everything added so far.
    pub(super) fn turn_started(&mut self) {
        self.floor.responding = true;
        self.floor.reply_expected = None;
        self.floor.asked = None;
        self.floor.wanted = false;
    }

    /// A response ended (after its calls were settled): a moment to speak, if nobody else is.
    pub(super) fn turn_ended(&mut self) {
        self.floor.responding = false;
        self.respond_if_idle();
    }

    /// The person began speaking.
    pub(super) fn speech_started(&mut self) {
        self.floor.speaking = true;
    }

    /// The person stopped speaking: the reply to their turn comes next, or [`REPLY_GRACE`]
    /// passes without it ([`reply_grace_over`](Self::reply_grace_over)).
    pub(super) fn speech_stopped(&mut self) {
        self.floor.speaking = false;
        self.floor.stops += 1;
        self.floor.reply_expected = Some(self.floor.stops);
        self.effects.push(Effect::WakeAfter(
            REPLY_GRACE,
            Wake::ReplyGrace(self.floor.stops),
        ));
    }

    /// A wait is over: the reply to the person's turn, or a response asked for, did not begin
    /// in time (unless it did meanwhile).
    pub(crate) fn woke(&mut self, wake: Wake) {
        let (waited, number) = match wake {
            Wake::ReplyGrace(stop) => (&mut self.floor.reply_expected, stop),
            Wake::ResponseStart(ask) => (&mut self.floor.asked, ask),
        };
        if *waited == Some(number) {
            *waited = None;
            self.respond_if_idle();
        }
    }

    /// A response was asked for (a turn's answers all went, or something added): nothing more
    /// to ask for until it has begun (it covers all added so far) and ended, or until
    /// [`RESPONSE_START_GRACE`] passes without it.
    pub(super) fn response_asked(&mut self) {
        self.floor.wanted = false;
        self.floor.asks += 1;
        self.floor.asked = Some(self.floor.asks);
        self.effects.push(Effect::WakeAfter(
            RESPONSE_START_GRACE,
            Wake::ResponseStart(self.floor.asks),
        ));
    }

    /// Asks for a response if one is wanted and the session is idle.
    fn respond_if_idle(&mut self) {
        if self.floor.wanted && self.floor.idle() && self.connected {
            self.floor.wanted = false;
            self.continue_turn();
        }
    }

    /// A new connection: nobody speaks, nothing is wanted.
    pub(super) fn reset_floor(&mut self) {
        self.floor = Floor::default();
    }

    /// What follows something added to the conversation, by `scheduling`.
    fn speak(&mut self, scheduling: Scheduling) {
        if self.protocol.schedules_itself() {
            return;
        }
        match scheduling {
            Scheduling::Silent => {}
            Scheduling::WhenIdle => {
                self.floor.wanted = true;
                self.respond_if_idle();
            }
            Scheduling::Interrupt => {
                if self.floor.asked.is_some() && !self.floor.responding {
                    // The response asked for has not begun: it will cover this.
                    self.floor.wanted = false;
                    return;
                }
                if self.floor.responding {
                    let event_id = self.event_id("cancel");
                    if let Some(cancel) = self.protocol.cancel_response(&event_id) {
                        self.effects.push(Effect::Upstream(cancel));
                    }
                }
                self.floor.wanted = false;
                self.continue_turn();
            }
        }
    }

    /// Tells the model `text`; `scheduling` says whether (and when) it is asked to answer,
    /// `None` not at all.
    fn add_note(&mut self, text: &str, scheduling: Option<Scheduling>) {
        let event_id = self.event_id("note");
        let respond = scheduling.is_some_and(|s| s != Scheduling::Silent);
        let frame = self.protocol.note(text, respond, &event_id);
        self.effects.push(Effect::Upstream(frame));
        if let Some(scheduling) = scheduling {
            self.speak(scheduling);
        }
    }

    /// A plugin's context for the conversation (`POST /api/sessions/context`): told to the
    /// model, answered by `respond`'s scheduling. Fails when the session is not connected.
    pub(crate) fn add_context(
        &mut self,
        text: &str,
        respond: Option<Scheduling>,
    ) -> Result<(), String> {
        if !self.connected {
            return Err(format!("the {} session is not connected", self.kind.name()));
        }
        self.add_note(text, respond);
        Ok(())
    }

    /// A running call's progress (`POST /api/tools/calls/{call_id}/progress`): told to the model,
    /// which answers it when idle if `speak`. The tool's name when the call runs here.
    pub(crate) fn progress(&mut self, call_id: &str, message: &str, speak: bool) -> Option<String> {
        let tool = self
            .running
            .values()
            .find(|call| call.call_id == call_id)?
            .tool
            .name
            .clone();
        let text = format!("Progress of the tool call {tool} (call_id {call_id}): {message}");
        self.add_note(&text, speak.then_some(Scheduling::WhenIdle));
        Some(tool)
    }

    /// A non-blocking call's result came (or the server ended the call: a cancelled result): it is
    /// announced, added to the conversation with its images, and spoken of by its scheduling.
    pub(super) fn deliver_late(&mut self, call: RunningCall, mut result: ToolResult) {
        call.watch.finished(&result);
        if !self.connected {
            return;
        }
        let warning = if self.protocol.takes_images() {
            self.calls.image_budget(None).take(&mut result.images)
        } else {
            let dropped = std::mem::take(&mut result.images).len();
            (dropped > 0).then(|| self.protocol.images_not_taken(dropped))
        };
        result.add_image_warnings(warning.into_iter().collect());
        let event_id = self.event_id("result");
        // A call that waited for approval was answered as awaiting it: its outcome is a message
        // (the protocol's note), whatever the tool's own behavior.
        let (frame, scheduling) = if call.waits_for_approval {
            let text = result.approval_text();
            let frame = self.protocol.note(&text, true, &event_id);
            (frame, Scheduling::WhenIdle)
        } else {
            (
                self.protocol.late_result(&result, &event_id),
                result.scheduling,
            )
        };
        self.effects.push(Effect::Upstream(frame));
        self.send_images(&result);
        self.events.late_result(&crate::events::LateResult {
            role: &self.character,
            tool: &result.name,
            call_id: &result.call_id,
            kind: self.kind,
            scheduling: result.scheduling,
            is_error: result.is_error,
        });
        self.speak(scheduling);
    }

    /// The character's tools changed: a non-blocking call of a tool it no longer has is
    /// cancelled, and the model told so.
    pub(super) fn cancel_removed_calls(&mut self) {
        let registered = self.registered.clone();
        let gone: Vec<Ticket> = self
            .running
            .iter()
            .filter(|(_, call)| {
                call.behavior == Behavior::NonBlocking
                    && !registered.iter().any(|t| t.name == call.tool.name)
            })
            .map(|(ticket, _)| *ticket)
            .collect();
        for ticket in gone {
            let Some(call) = self.running.remove(&ticket) else {
                continue;
            };
            self.effects.push(Effect::Cancel(ticket));
            let result = ToolResult::tool_removed(
                call.call_id.clone(),
                call.tool.name.clone(),
                call.started.elapsed(),
            )
            .answering(call.model_call_id.clone());
            self.deliver_late(call, result);
        }
    }

    /// The calls running now, in the order they started, for the report.
    pub(super) fn running_report(&self) -> Vec<super::RunningCallReport> {
        let mut calls: Vec<(&Ticket, &RunningCall)> = self.running.iter().collect();
        calls.sort_unstable_by_key(|(ticket, _)| **ticket);
        calls
            .into_iter()
            .map(|(_, call)| super::RunningCallReport {
                tool: call.tool.name.clone(),
                call_id: call.call_id.clone(),
                behavior: call.behavior,
                started: call.started_at.clone(),
                running_ms: u64::try_from(call.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            })
            .collect()
    }
}
