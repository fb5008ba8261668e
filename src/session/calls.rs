//! Bookkeeping for the model's function calls: which calls each response made and which are
//! answered (so exactly one `response.create` follows the last answer), which responses the
//! person abandoned by interrupting (never continued; their later calls are not run), the images
//! each model turn still takes, and the runaway guard.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use opentelemetry::trace::SpanContext;

use crate::domain::images::TurnBudget;
use crate::observe::trace::Span;

/// Calls of the responses still open.
#[derive(Debug, Default)]
pub(crate) struct ResponseCalls {
    responses: HashMap<String, OpenResponse>,
    /// The budget of a call that belongs to no known response: a turn of its own.
    lone: TurnBudget,
}

#[derive(Debug, Default)]
struct OpenResponse {
    calls: HashSet<String>,
    answered: HashSet<String>,
    done: bool,
    /// It also called tools the app answers: the app asks for the next response.
    foreign: bool,
    /// The person interrupted it: nobody asks it to go on, and its later calls are not run.
    abandoned: bool,
    images: TurnBudget,
    /// The turn's span, the parent of its calls' spans: made at its first call, ended when the
    /// response is forgotten.
    trace: Option<Span>,
}

/// Where a response stands after one of its calls was answered, or it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TurnState {
    /// Calls of it still run, or it has not finished.
    Open,
    /// Finished, and every call the server runs answered (or it was abandoned). `go_on`: the
    /// server is the one to ask for the next response (it ran calls, the app none, and the
    /// person did not interrupt).
    Complete { go_on: bool },
}

/// What a call that arrives is to the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// A new call: to run.
    New,
    /// Announced before (e.g. again in `response.done`): not run twice.
    Repeated,
    /// A new call of a response the person abandoned: answered as cancelled, not run.
    Abandoned,
}

impl ResponseCalls {
    /// A call was announced: what it is to the session.
    pub(crate) fn started(&mut self, response_id: Option<&str>, call_id: &str) -> Arrival {
        let Some(r) = response_id else {
            return Arrival::New;
        };
        let open = self.responses.entry(r.to_owned()).or_default();
        if !open.calls.insert(call_id.to_owned()) {
            Arrival::Repeated
        } else if open.abandoned {
            Arrival::Abandoned
        } else {
            Arrival::New
        }
    }

    /// The span of the response's turn (made by `start` at its first call), to be the parent of
    /// a call's span; `None` for a call that belongs to no response.
    pub(crate) fn turn_trace(
        &mut self,
        response_id: Option<&str>,
        start: impl FnOnce(&str) -> Span,
    ) -> Option<SpanContext> {
        let r = response_id?;
        let open = self.responses.entry(r.to_owned()).or_default();
        Some(open.trace.get_or_insert_with(|| start(r)).context().clone())
    }

    /// The person interrupted the response (or it was cancelled): it is never continued, and
    /// calls of it still to come are not run. Forgotten once it is done.
    pub(crate) fn abandon(&mut self, response_id: &str) {
        let open = self.responses.entry(response_id.to_owned()).or_default();
        if open.done {
            self.responses.remove(response_id);
        } else {
            open.abandoned = true;
        }
    }

    /// The person began a new turn: every response open now is abandoned.
    pub(crate) fn abandon_all(&mut self) {
        self.responses.retain(|_, open| {
            open.abandoned = true;
            !open.done
        });
    }

    /// A call of a tool the app answers was announced: the app, which sees its own calls and
    /// sends its own `response.create`, continues this response; the server never sends a
    /// second one.
    pub(crate) fn foreign(&mut self, response_id: &str) {
        self.responses
            .entry(response_id.to_owned())
            .or_default()
            .foreign = true;
    }

    /// A call was answered (or, cancelled by the provider, needs no answer): where its
    /// response stands now.
    pub(crate) fn answered(&mut self, response_id: Option<&str>, call_id: &str) -> TurnState {
        let Some(r) = response_id else {
            return TurnState::Complete { go_on: true };
        };
        if let Some(open) = self.responses.get_mut(r) {
            open.answered.insert(call_id.to_owned());
        }
        self.close_if_complete(r)
    }

    /// The response finished: where it stands now.
    pub(crate) fn done(&mut self, response_id: &str) -> TurnState {
        match self.responses.get_mut(response_id) {
            Some(open) => open.done = true,
            None => return TurnState::Open,
        }
        self.close_if_complete(response_id)
    }

    /// Forgets a response once it is done and every call the server runs is answered (an
    /// abandoned one once it is done).
    fn close_if_complete(&mut self, response_id: &str) -> TurnState {
        let complete = self.responses.get(response_id).is_some_and(|open| {
            open.done && (open.abandoned || open.calls.is_subset(&open.answered))
        });
        if !complete {
            return TurnState::Open;
        }
        let open = self
            .responses
            .remove(response_id)
            .expect("a complete response is open");
        TurnState::Complete {
            go_on: !open.calls.is_empty() && !open.foreign && !open.abandoned,
        }
    }

    /// The images the turn of `response_id` still takes (shared by every call of the response).
    pub(crate) fn image_budget(&mut self, response_id: Option<&str>) -> &mut TurnBudget {
        match response_id {
            Some(r) => &mut self.responses.entry(r.to_owned()).or_default().images,
            None => {
                self.lone = TurnBudget::default();
                &mut self.lone
            }
        }
    }

    /// Forgets everything (a new connection starts a new conversation state).
    pub(crate) fn clear(&mut self) {
        self.responses.clear();
    }
}

/// Admits at most `max` calls within any `window`.
#[derive(Debug)]
pub(crate) struct CallLimiter {
    max: usize,
    window: Duration,
    recent: VecDeque<Instant>,
}

impl CallLimiter {
    pub(crate) fn new(max: usize, window: Duration) -> Self {
        Self {
            max,
            window,
            recent: VecDeque::new(),
        }
    }

    /// Whether a call made at `now` may run.
    pub(crate) fn admit(&mut self, now: Instant) -> bool {
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.window)
        {
            self.recent.pop_front();
        }
        if self.recent.len() >= self.max {
            return false;
        }
        self.recent.push_back(now);
        true
    }

    pub(crate) fn reset(&mut self) {
        self.recent.clear();
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    pub(crate) fn window(&self) -> Duration {
        self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the server asks for the next response now.
    fn go_on(state: TurnState) -> bool {
        matches!(state, TurnState::Complete { go_on: true })
    }

    #[test]
    fn one_response_create_after_the_last_answer() {
        let mut r = ResponseCalls::default();
        assert_eq!(r.started(Some("r1"), "a"), Arrival::New);
        assert_eq!(r.started(Some("r1"), "b"), Arrival::New);
        assert_eq!(r.started(Some("r1"), "a"), Arrival::Repeated);
        assert!(!go_on(r.answered(Some("r1"), "a")));
        assert!(!go_on(r.done("r1")));
        assert!(go_on(r.answered(Some("r1"), "b")));
        assert!(!go_on(r.answered(Some("r1"), "b")), "only once");
    }

    #[test]
    fn done_after_all_answers_sends_it() {
        let mut r = ResponseCalls::default();
        r.started(Some("r1"), "a");
        assert!(!go_on(r.answered(Some("r1"), "a")));
        assert!(go_on(r.done("r1")));
    }

    #[test]
    fn responses_that_called_app_tools_are_continued_by_the_app() {
        let mut r = ResponseCalls::default();
        r.started(Some("r1"), "a");
        r.foreign("r1");
        assert!(!go_on(r.answered(Some("r1"), "a")));
        assert!(
            !go_on(r.done("r1")),
            "the app sends its own response.create"
        );
        assert!(!go_on(r.done("r1")), "and the response is forgotten");
        r.foreign("r2");
        assert!(!go_on(r.done("r2")));
    }

    #[test]
    fn calls_without_a_response_answer_alone() {
        let mut r = ResponseCalls::default();
        assert_eq!(r.started(None, "a"), Arrival::New);
        assert_eq!(r.started(None, "a"), Arrival::New);
        assert!(go_on(r.answered(None, "a")));
    }

    #[test]
    fn an_abandoned_response_is_never_continued_and_runs_no_more_calls() {
        let mut r = ResponseCalls::default();
        r.started(Some("r1"), "a");
        r.abandon("r1");
        assert_eq!(r.started(Some("r1"), "b"), Arrival::Abandoned);
        assert_eq!(r.started(Some("r1"), "a"), Arrival::Repeated);
        assert!(!go_on(r.answered(Some("r1"), "a")));
        assert!(!go_on(r.done("r1")), "no response.create for it");
        assert!(r.responses.is_empty(), "forgotten once done");

        // Done before the interruption, with a call still running: forgotten at once.
        r.started(Some("r2"), "c");
        assert!(!go_on(r.done("r2")));
        r.started(Some("r3"), "d");
        r.abandon_all();
        assert!(!r.responses.contains_key("r2"));
        assert!(!go_on(r.answered(Some("r2"), "c")));
        assert_eq!(r.started(Some("r3"), "e"), Arrival::Abandoned);
        assert!(!go_on(r.done("r3")));

        // A response cancelled before any call of it arrived: its calls are not run either.
        r.abandon("r4");
        assert_eq!(r.started(Some("r4"), "f"), Arrival::Abandoned);
        assert!(!go_on(r.done("r4")));
        assert!(r.responses.is_empty());

        // A response after the interruption goes on as ever.
        assert_eq!(r.started(Some("r5"), "g"), Arrival::New);
        assert!(!go_on(r.done("r5")));
        assert!(go_on(r.answered(Some("r5"), "g")));

        // Every call answered, the response not done yet, when the person speaks: it is not
        // continued either.
        r.started(Some("r6"), "h");
        assert!(!go_on(r.answered(Some("r6"), "h")));
        r.abandon_all();
        assert!(!go_on(r.done("r6")));
    }

    #[test]
    fn limiter_window() {
        let t0 = Instant::now();
        let mut l = CallLimiter::new(2, Duration::from_secs(10));
        assert!(l.admit(t0));
        assert!(l.admit(t0 + Duration::from_secs(1)));
        assert!(!l.admit(t0 + Duration::from_secs(2)));
        assert!(l.admit(t0 + Duration::from_secs(10)));
        l.reset();
        assert!(l.admit(t0 + Duration::from_secs(10)));
    }
}
