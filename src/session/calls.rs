//! Bookkeeping for the model's function calls: which calls each response made and which are
//! answered (so exactly one `response.create` follows the last answer), the images each model
//! turn still takes, and the runaway guard.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::domain::images::TurnBudget;

/// Calls of the responses still open.
#[derive(Debug, Default)]
pub struct ResponseCalls {
    responses: HashMap<String, OpenResponse>,
    /// The budget of a call that belongs to no known response: a turn of its own.
    lone: TurnBudget,
}

#[derive(Debug, Default)]
struct OpenResponse {
    calls: HashSet<String>,
    answered: HashSet<String>,
    done: bool,
    images: TurnBudget,
}

impl ResponseCalls {
    /// A call was announced. Returns false if it was already known (not to be run twice).
    pub fn started(&mut self, response_id: Option<&str>, call_id: &str) -> bool {
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

    /// A call was answered. Returns true when `response.create` must be sent now.
    pub fn answered(&mut self, response_id: Option<&str>, call_id: &str) -> bool {
        let Some(r) = response_id else {
            return true;
        };
        if let Some(open) = self.responses.get_mut(r) {
            open.answered.insert(call_id.to_owned());
        }
        self.close_if_complete(r)
    }

    /// The response finished. Returns true when `response.create` must be sent now.
    pub fn done(&mut self, response_id: &str) -> bool {
        match self.responses.get_mut(response_id) {
            Some(open) => open.done = true,
            None => return false,
        }
        self.close_if_complete(response_id)
    }

    fn close_if_complete(&mut self, response_id: &str) -> bool {
        let complete = self.responses.get(response_id).is_some_and(|open| {
            open.done && !open.calls.is_empty() && open.calls.is_subset(&open.answered)
        });
        if complete {
            self.responses.remove(response_id);
        }
        complete
    }

    /// The images the turn of `response_id` still takes (shared by every call of the response).
    pub fn image_budget(&mut self, response_id: Option<&str>) -> &mut TurnBudget {
        match response_id {
            Some(r) => &mut self.responses.entry(r.to_owned()).or_default().images,
            None => {
                self.lone = TurnBudget::default();
                &mut self.lone
            }
        }
    }

    /// Forgets everything (a new connection starts a new conversation state).
    pub fn clear(&mut self) {
        self.responses.clear();
    }
}

/// Admits at most `max` calls within any `window`.
#[derive(Debug)]
pub struct CallLimiter {
    max: usize,
    window: Duration,
    recent: VecDeque<Instant>,
}

impl CallLimiter {
    pub fn new(max: usize, window: Duration) -> Self {
        Self {
            max,
            window,
            recent: VecDeque::new(),
        }
    }

    /// Whether a call made at `now` may run.
    pub fn admit(&mut self, now: Instant) -> bool {
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

    pub fn reset(&mut self) {
        self.recent.clear();
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn window(&self) -> Duration {
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
