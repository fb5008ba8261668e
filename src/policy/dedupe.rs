//! `dedupe_seconds`: a model that makes the same call twice — same tool registration, same
//! arguments (as canonical JSON), in the same session or conversation — while the first runs or
//! within that many seconds after it ended, gets the first call's result, and the tool is called
//! once. Realtime voice models do repeat a function call a moment apart; the light should not
//! toggle twice.
//!
//! A [`DedupeWindow`] is one session's or conversation's: its holder (a live session's core, for
//! each model connection; a chat request's driver; an `/mcp` session) makes it and gives it to
//! every call it asks the policy about, so a repeat is never recognised across sessions,
//! conversations or characters. It lives as long as its holder and is bounded by count
//! ([`MAX_REMEMBERED_CALLS`]) and by the bytes of the results it keeps
//! ([`MAX_REMEMBERED_BYTES`]): the oldest go first, and a result larger than the bound is not
//! kept once its call ended (a repeat made while it ran still gets it).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::domain::call::{Outcome, ToolCall, ToolResult};
use crate::domain::limits::canonical_json;
use crate::domain::tool::SharedTool;

/// Calls one session or conversation remembers (running, or ended within their tool's
/// `dedupe_seconds`): a model that makes more distinct calls of deduplicated tools within five
/// minutes is not repeating itself.
pub const MAX_REMEMBERED_CALLS: usize = 64;

/// Bytes of ended calls' results one session or conversation keeps (output, error and images):
/// a result may be megabytes, and a repeat of a call whose result was not kept simply runs.
pub const MAX_REMEMBERED_BYTES: usize = 4 * 1024 * 1024;

/// The recent calls of one session or conversation; cheap to clone (a shared handle).
#[derive(Debug, Clone, Default)]
pub(crate) struct DedupeWindow {
    inner: Arc<Mutex<Recent>>,
}

#[derive(Debug, Default)]
struct Recent {
    /// Oldest first.
    calls: VecDeque<Remembered>,
    /// Bytes of the kept results of the ended calls.
    bytes: usize,
    next_id: u64,
}

/// The result of a call, once it has one: `None` while it runs.
type Sent = Option<Arc<ToolResult>>;

#[derive(Debug)]
struct Remembered {
    id: u64,
    /// SHA-256 of the registration's number and the arguments' canonical text.
    key: [u8; 32],
    state: State,
}

#[derive(Debug)]
enum State {
    /// It runs; a repeat waits for what this receives. `approving`: it waits for a person's
    /// approval (a repeat is answered the same way, at once).
    Running {
        result: watch::Receiver<Sent>,
        approving: bool,
    },
    /// It ended; its result is given to repeats until `until`.
    Ended {
        result: Arc<ToolResult>,
        until: Instant,
        bytes: usize,
    },
}

/// The first of its calls: it runs, and tells its repeats how it ended.
#[derive(Debug)]
pub(super) struct First {
    window: DedupeWindow,
    id: u64,
    keep_for: Duration,
    tell: watch::Sender<Sent>,
}

/// A repeat: it gets the first call's result (which names the first call).
#[derive(Debug)]
pub(super) struct Repeat {
    result: watch::Receiver<Sent>,
    /// The first call waits for a person's approval: the repeat is answered as awaiting it too.
    pub(super) approving: bool,
}

/// What a call is, for its window.
#[derive(Debug)]
pub(super) enum Seen {
    First(First),
    Repeat(Repeat),
}

impl DedupeWindow {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn recent(&self) -> MutexGuard<'_, Recent> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `call` of `tool`, whose repeats within `keep_for` after it ends get its result: a repeat
    /// of a call this window remembers, or the first of its kind (remembered from now).
    /// `approving`: the call waits for a person's approval first.
    pub(super) fn see(
        &self,
        tool: &SharedTool,
        call: &ToolCall,
        keep_for: Duration,
        approving: bool,
    ) -> Seen {
        let key = key_of(tool, call);
        let now = Instant::now();
        let mut recent = self.recent();
        recent.forget_ended(now);
        if let Some(seen) = recent.calls.iter().find(|c| c.key == key) {
            let (result, approving) = match &seen.state {
                State::Running { result, approving } => (result.clone(), *approving),
                State::Ended { result, .. } => (watch::channel(Some(result.clone())).1, false),
            };
            return Seen::Repeat(Repeat { result, approving });
        }
        if recent.calls.len() >= MAX_REMEMBERED_CALLS {
            recent.make_room();
        }
        recent.next_id += 1;
        let id = recent.next_id;
        let (tell, result) = watch::channel(None);
        recent.calls.push_back(Remembered {
            id,
            key,
            state: State::Running { result, approving },
        });
        Seen::First(First {
            window: self.clone(),
            id,
            keep_for,
            tell,
        })
    }
}

/// What makes two calls the same: the registration (its number) and the arguments' canonical
/// text, hashed (a session's memory of a call is 32 bytes of key, whatever its arguments).
fn key_of(tool: &SharedTool, call: &ToolCall) -> [u8; 32] {
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    digest.update(&tool.generation.to_le_bytes());
    digest.update(canonical_json(&call.arguments).as_bytes());
    let mut key = [0; 32];
    key.copy_from_slice(digest.finish().as_ref());
    key
}

/// Bytes a result holds, as a window counts them.
fn result_bytes(result: &ToolResult) -> usize {
    result.output.get().len()
        + result.error.as_ref().map_or(0, String::len)
        + result
            .images
            .iter()
            .map(|image| image.data_b64.len())
            .sum::<usize>()
        + result.call_id.len()
}

impl Recent {
    /// Forgets the ended calls whose time is over.
    fn forget_ended(&mut self, now: Instant) {
        let mut freed = 0;
        self.calls.retain(|c| match &c.state {
            State::Ended { until, bytes, .. } if *until <= now => {
                freed += bytes;
                false
            }
            _ => true,
        });
        self.bytes -= freed;
    }

    /// Forgets the oldest ended call, or else the oldest running one (its repeats made so far
    /// still get its result; later ones run).
    fn make_room(&mut self) {
        let at = self
            .calls
            .iter()
            .position(|c| matches!(c.state, State::Ended { .. }))
            .unwrap_or(0);
        if let Some(gone) = self.calls.remove(at) {
            self.forget(&gone);
        }
    }

    fn forget(&mut self, gone: &Remembered) {
        if let State::Ended { bytes, .. } = gone.state {
            self.bytes -= bytes;
        }
    }
}

impl First {
    /// The first call's person approved it: a repeat from now on waits for its result.
    pub(super) fn approved(&self) {
        let mut recent = self.window.recent();
        if let Some(seen) = recent.calls.iter_mut().find(|c| c.id == self.id)
            && let State::Running { approving, .. } = &mut seen.state
        {
            *approving = false;
        }
    }

    /// The first call ended with `result`: its repeats get it, and later ones until its time is
    /// over (when the window has room for it).
    pub(super) fn ended(self, result: &ToolResult) {
        let result = Arc::new(result.clone());
        self.tell.send_replace(Some(result.clone()));
        let bytes = result_bytes(&result);
        let mut recent = self.window.recent();
        let Some(at) = recent.calls.iter().position(|c| c.id == self.id) else {
            return;
        };
        if bytes > MAX_REMEMBERED_BYTES {
            recent.calls.remove(at);
            return;
        }
        recent.calls[at].state = State::Ended {
            result,
            until: Instant::now() + self.keep_for,
            bytes,
        };
        recent.bytes += bytes;
        while recent.bytes > MAX_REMEMBERED_BYTES {
            let Some(oldest) = recent
                .calls
                .iter()
                .position(|c| matches!(c.state, State::Ended { .. }))
            else {
                break;
            };
            if let Some(gone) = recent.calls.remove(oldest) {
                recent.forget(&gone);
            }
        }
    }
}

impl Drop for First {
    fn drop(&mut self) {
        // Dropped before it ended (cancelled): it is forgotten, so a later repeat runs; the
        // repeats waiting for it hear it was cancelled.
        let mut recent = self.window.recent();
        if let Some(at) = recent
            .calls
            .iter()
            .position(|c| c.id == self.id && matches!(c.state, State::Running { .. }))
        {
            recent.calls.remove(at);
        }
    }
}

impl Repeat {
    /// The first call's result, as this call's; a first call cancelled before it ended cancels
    /// its repeat too.
    pub(super) async fn result(mut self, call: ToolCall) -> ToolResult {
        let ended = self.result.wait_for(Option::is_some).await.ok();
        match ended.as_deref().and_then(Option::as_ref) {
            Some(first) => first.repeated_for(&call),
            None => call.failed(
                Outcome::Cancelled,
                format!(
                    "the call repeats an identical call of '{}' that was cancelled before it \
                         ended, so it was not run",
                    call.name
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::tool::test_tool;

    fn call(id: &str, arguments: &str) -> ToolCall {
        ToolCall::from_raw(id.into(), "lights".into(), arguments.into())
    }

    fn first(seen: Seen) -> First {
        match seen {
            Seen::First(first) => first,
            Seen::Repeat(_) => panic!("a repeat"),
        }
    }

    fn repeat(seen: Seen) -> Repeat {
        match seen {
            Seen::Repeat(repeat) => repeat,
            Seen::First(_) => panic!("a first call"),
        }
    }

    const FIVE: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn a_repeat_gets_the_first_result_under_its_own_id() {
        let window = DedupeWindow::new();
        let tool = test_tool("lights", "");
        let one = first(window.see(
            &tool,
            &call("c1", r#"{"on": true, "room": "k"}"#),
            FIVE,
            false,
        ));
        let two = repeat(window.see(&tool, &call("c2", r#"{"room":"k","on":true}"#), FIVE, false));
        // Other arguments, another registration: a call of its own.
        let _other = first(window.see(&tool, &call("c3", r#"{"on": false}"#), FIVE, false));
        let replaced = test_tool("lights", "");
        let _new = first(window.see(
            &replaced,
            &call("c4", r#"{"on": true, "room": "k"}"#),
            FIVE,
            false,
        ));
        let done = call("c1", "{}").error("switch jammed".into());
        one.ended(&done);
        let got = two.result(call("c2", "{}")).await;
        assert_eq!(got.call_id, "c2");
        assert_eq!(got.first_call_id.as_deref(), Some("c1"));
        assert_eq!(got.model_text(), done.model_text());
        assert_eq!(got.reported_outcome(), Outcome::Deduplicated);
        assert_eq!(got.outcome, Outcome::ToolError);
        // After it ended, within the window: the kept result.
        let three =
            repeat(window.see(&tool, &call("c5", r#"{"on":true,"room":"k"}"#), FIVE, false));
        assert_eq!(
            three
                .result(call("c5", "{}"))
                .await
                .first_call_id
                .as_deref(),
            Some("c1")
        );
        // Another window (another session) knows nothing of it.
        let _theirs = first(DedupeWindow::new().see(
            &tool,
            &call("c6", r#"{"on": true, "room": "k"}"#),
            FIVE,
            false,
        ));
    }

    #[tokio::test]
    async fn an_ended_call_is_forgotten_after_its_time_and_a_cancelled_one_at_once() {
        let window = DedupeWindow::new();
        let tool = test_tool("lights", "");
        // Kept for no time at all: over as soon as it ended.
        let one = first(window.see(&tool, &call("c1", "{}"), Duration::ZERO, false));
        one.ended(&call("c1", "{}").error("x".into()));
        let again = first(window.see(&tool, &call("c2", "{}"), FIVE, false));
        let waiting = repeat(window.see(&tool, &call("c3", "{}"), FIVE, false));
        drop(again);
        let got = waiting.result(call("c3", "{}")).await;
        assert_eq!(got.outcome, Outcome::Cancelled);
        let _runs = first(window.see(&tool, &call("c4", "{}"), FIVE, false));
    }

    #[test]
    fn a_window_is_bounded_by_count_and_bytes() {
        let window = DedupeWindow::new();
        let tool = test_tool("lights", "");
        for i in 0..MAX_REMEMBERED_CALLS + 10 {
            let c = call(&format!("c{i}"), &format!("{{\"n\": {i}}}"));
            first(window.see(&tool, &c, FIVE, false)).ended(&c.error("e".into()));
        }
        assert_eq!(window.recent().calls.len(), MAX_REMEMBERED_CALLS);
        let big = "x".repeat(MAX_REMEMBERED_BYTES / 3);
        for i in 0..4 {
            let c = call(&format!("b{i}"), &format!("{{\"big\": {i}}}"));
            first(window.see(&tool, &c, FIVE, false)).ended(&c.error(big.clone()));
        }
        let recent = window.recent();
        assert!(recent.bytes <= MAX_REMEMBERED_BYTES, "{}", recent.bytes);
        assert!(recent.calls.len() <= MAX_REMEMBERED_CALLS);
        drop(recent);
        // Too large to keep at all: not remembered once it ended.
        let c = call("huge", r#"{"huge": 1}"#);
        first(window.see(&tool, &c, FIVE, false))
            .ended(&c.error("x".repeat(MAX_REMEMBERED_BYTES + 1)));
        let _runs_again = first(window.see(&tool, &call("huge2", r#"{"huge": 1}"#), FIVE, false));
    }
}
