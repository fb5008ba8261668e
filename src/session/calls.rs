//! Bookkeeping for the model's function calls: which calls each response made and which are
//! answered (so exactly one `response.create` follows the last answer), the images each model
//! turn still takes, and the runaway guard.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::domain::images::TurnBudget;

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
    images: TurnBudget,
}

impl ResponseCalls {
    /// A call was announced. Returns false if it was already known (not to be run twice).
    pub(crate) fn started(&mut self, response_id: Option<&str>, call_id: &str) -> bool {
        match response_id {
            Some(r) => self
                .responses
                .entry(r.to_owned())
                .or_default()
                .calls
                .insert(call_id.to_owned()),
            None => true,
        }
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

    /// A call was answered. Returns true when `response.create` must be sent now.
    pub(crate) fn answered(&mut self, response_id: Option<&str>, call_id: &str) -> bool {
        let Some(r) = response_id else {
            return true;
        };
        if let Some(open) = self.responses.get_mut(r) {
            open.answered.insert(call_id.to_owned());
        }
        self.close_if_complete(r)
    }

    /// The response finished. Returns true when `response.create` must be sent now.
    pub(crate) fn done(&mut self, response_id: &str) -> bool {
        match self.responses.get_mut(response_id) {
            Some(open) => open.done = true,
            None => return false,
        }
        self.close_if_complete(response_id)
    }

    /// Forgets a response once it is done and every call the server runs is answered; true
    /// when the server is the one to ask for the next response (it ran calls, the app none).
    fn close_if_complete(&mut self, response_id: &str) -> bool {
        let complete = self
            .responses
            .get(response_id)
            .is_some_and(|open| open.done && open.calls.is_subset(&open.answered));
        if !complete {
            return false;
        }
        let open = self
            .responses
            .remove(response_id)
            .expect("a complete response is open");
        !open.calls.is_empty() && !open.foreign
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

    #[test]
    fn one_response_create_after_the_last_answer() {
        let mut r = ResponseCalls::default();
        assert!(r.started(Some("r1"), "a"));
        assert!(r.started(Some("r1"), "b"));
        assert!(!r.started(Some("r1"), "a"));
        assert!(!r.answered(Some("r1"), "a"));
        assert!(!r.done("r1"));
        assert!(r.answered(Some("r1"), "b"));
        assert!(!r.answered(Some("r1"), "b"), "only once");
    }

    #[test]
    fn done_after_all_answers_sends_it() {
        let mut r = ResponseCalls::default();
        r.started(Some("r1"), "a");
        assert!(!r.answered(Some("r1"), "a"));
        assert!(r.done("r1"));
    }

    #[test]
    fn responses_that_called_app_tools_are_continued_by_the_app() {
        let mut r = ResponseCalls::default();
        r.started(Some("r1"), "a");
        r.foreign("r1");
        assert!(!r.answered(Some("r1"), "a"));
        assert!(!r.done("r1"), "the app sends its own response.create");
        assert!(!r.done("r1"), "and the response is forgotten");
        r.foreign("r2");
        assert!(!r.done("r2"));
    }

    #[test]
    fn calls_without_a_response_answer_alone() {
        let mut r = ResponseCalls::default();
        assert!(r.started(None, "a"));
        assert!(r.answered(None, "a"));
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
