//! A tool's limits on its calls, as the policy applies them: `dedupe_seconds` (a repeat gets the
//! first call's result, `dedupe`), `rate` (a call beyond it is answered at once) and
//! `max_concurrent` (a call beyond it waits for its turn, `queue`), in that order, on the one
//! path every call takes ([`Policy::admit`], [`Admission::run`](super::Admission::run)).
//!
//! Their state is kept per registration (by its number, so a replacing registration starts
//! fresh) and only for tools that have a rate or a `max_concurrent`: a tool without limits costs
//! one test of its registration. The state of a registration nobody holds any more (no
//! character has it, no call of it runs) is dropped when the table has doubled since it was
//! last swept, so the table holds at most twice the live registrations with limits (and a few).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use super::dedupe::{First, Repeat, Seen};
use super::queue::{Arrival, Place, Queue, Turn};
use super::{Admission, Asker, Policy};
use crate::domain::call::{Outcome, ToolCall, ToolResult};
use crate::domain::connection::{Caller, ConnectionKind};
use crate::domain::limits::{Rate, busy_text, queue_full_text, rate_limited_text};
use crate::domain::tool::{MAX_TIMEOUT, SharedTool, ToolSpec};

/// The table is swept when it has grown past twice this, or twice its size after the last
/// sweep.
const SWEEP_FLOOR: usize = 16;

/// The limits' state of every registration with a rate or a `max_concurrent`.
#[derive(Debug, Default)]
pub(super) struct Registrations {
    by_generation: HashMap<u64, Arc<ToolState>>,
    /// The table's size after its last sweep.
    swept_to: usize,
}

/// One registration's state.
#[derive(Debug)]
struct ToolState {
    /// The registration: its state goes once nobody holds it.
    tool: Weak<ToolSpec>,
    queue: Option<Arc<Queue>>,
    rate: Option<(Rate, Mutex<RateLog>)>,
}

/// The instants of the calls in the rate's window, oldest first (at most `rate.calls`).
#[derive(Debug, Default)]
struct RateLog {
    calls: VecDeque<Instant>,
}

impl RateLog {
    /// Counts a call at `now`, or says how long until one may be made.
    fn take(&mut self, rate: Rate, now: Instant) -> Result<(), Duration> {
        let window = rate.window();
        while self
            .calls
            .front()
            .is_some_and(|at| now.duration_since(*at) >= window)
        {
            self.calls.pop_front();
        }
        if self.calls.len() < rate.calls.max(1) as usize {
            self.calls.push_back(now);
            return Ok(());
        }
        let oldest = self.calls.front().copied().unwrap_or(now);
        Err(window.saturating_sub(now.duration_since(oldest)))
    }
}

impl Registrations {
    fn state_of(&mut self, tool: &SharedTool) -> Arc<ToolState> {
        if let Some(state) = self.by_generation.get(&tool.generation) {
            return state.clone();
        }
        if self.by_generation.len() >= 2 * self.swept_to.max(SWEEP_FLOOR) {
            self.by_generation
                .retain(|_, state| state.tool.strong_count() > 0);
            self.swept_to = self.by_generation.len();
        }
        let limits = &tool.limits;
        let state = Arc::new(ToolState {
            tool: Arc::downgrade(tool),
            queue: limits.max_concurrent.map(Queue::new),
            rate: limits.rate.map(|rate| (rate, Mutex::default())),
        });
        self.by_generation.insert(tool.generation, state.clone());
        state
    }
}

/// What a call of a tool with limits holds from its admission to its end.
#[derive(Debug)]
pub(super) struct Limited {
    policy: Policy,
    /// A repeat: it only waits for the first call's result.
    repeat: Option<Repeat>,
    /// The first call of its kind in a window: it tells its repeats how it ended.
    first: Option<First>,
    turn: TurnAt,
    /// How long the call may wait for its turn: its timeout.
    timeout: Duration,
    max_concurrent: u32,
    /// Who made it, for the wait's histogram.
    who: Who,
}

#[derive(Debug)]
struct Who {
    role: String,
    tool: String,
    caller: Caller,
    kind: Option<ConnectionKind>,
}

/// Where a call stands with its tool's `max_concurrent`.
#[derive(Debug)]
enum TurnAt {
    /// The tool has none.
    Free,
    /// It has its turn (taken when it was admitted).
    Taken(Turn),
    /// It waits, since then.
    Waiting(Place, Instant),
    /// It waits for a person's approval first, and arrives in the queue once approved.
    AfterApproval(Arc<Queue>),
}

impl Policy {
    fn registrations(&self) -> MutexGuard<'_, Registrations> {
        self.inner
            .limits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The calls of `tool` running and waiting for their turn now, for a tool with a
    /// `max_concurrent` (`None` for one without).
    pub(crate) fn calls_at_once(&self, tool: &SharedTool) -> Option<(usize, usize)> {
        tool.limits.max_concurrent?;
        let registrations = self.registrations();
        Some(
            registrations
                .by_generation
                .get(&tool.generation)
                .and_then(|state| state.queue.as_ref())
                .map_or((0, 0), |queue| queue.load()),
        )
    }

    /// [`Policy::admit`] of a call of a tool with limits: a repeat is answered with its first
    /// call's result; otherwise the rate counts it (or refuses it), a person may be asked, and
    /// it takes its place for a turn (once approved, when a person is asked).
    pub(super) fn admit_limited(
        &self,
        asker: Asker<'_>,
        tool: &SharedTool,
        call: &mut ToolCall,
    ) -> Result<Admission, Box<ToolResult>> {
        let limits = tool.limits;
        let who = Who {
            role: asker.role.to_owned(),
            tool: tool.name.clone(),
            caller: asker.caller,
            kind: asker.kind,
        };
        let timeout = tool.timeout().unwrap_or(MAX_TIMEOUT);
        let mut first = None;
        // Only a model's calls repeat themselves: the person trying a tool means each call.
        if let (Some(keep_for), Some(window), Caller::Model | Caller::Mcp) =
            (limits.dedupe(), asker.dedupe, asker.caller)
        {
            let approving = self.approval_required(asker.role, tool).is_some();
            match window.see(tool, call, keep_for, approving) {
                Seen::Repeat(repeat) => {
                    return Ok(Admission {
                        approval: None,
                        limited: Some(Box::new(Limited {
                            policy: self.clone(),
                            repeat: Some(repeat),
                            first: None,
                            turn: TurnAt::Free,
                            timeout,
                            max_concurrent: 0,
                            who,
                        })),
                    });
                }
                Seen::First(seen) => first = Some(seen),
            }
        }
        let state = limits
            .counts_calls()
            .then(|| self.registrations().state_of(tool));
        if let Some((rate, log)) = state.as_ref().and_then(|s| s.rate.as_ref()) {
            let taken = log
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(*rate, Instant::now());
            if let Err(next) = taken {
                return Err(Box::new(call.failed(
                    Outcome::RateLimited,
                    rate_limited_text(&tool.name, *rate, next),
                )));
            }
        }
        let approval = match asker.caller {
            Caller::Invoke => None,
            Caller::Model | Caller::Mcp => self.approval_for(asker, tool, call)?,
        };
        let max_concurrent = limits.max_concurrent.unwrap_or(0);
        let turn = match state.as_ref().and_then(|s| s.queue.clone()) {
            None => TurnAt::Free,
            Some(queue) if approval.is_some() => TurnAt::AfterApproval(queue),
            Some(queue) => match queue.arrive() {
                Arrival::Now(turn) => TurnAt::Taken(turn),
                Arrival::Wait(place) => TurnAt::Waiting(place, Instant::now()),
                Arrival::Full => {
                    return Err(Box::new(call.failed(
                        Outcome::Busy,
                        queue_full_text(&tool.name, max_concurrent),
                    )));
                }
            },
        };
        Ok(Admission {
            approval,
            limited: Some(Box::new(Limited {
                policy: self.clone(),
                repeat: None,
                first,
                turn,
                timeout,
                max_concurrent,
                who,
            })),
        })
    }
}

impl Limited {
    /// Whether the call is a repeat of one that waits for a person's approval (answered as
    /// awaiting it too).
    pub(super) fn repeats_one_approving(&self) -> bool {
        self.repeat.as_ref().is_some_and(|r| r.approving)
    }

    /// A repeat's result, when the call is one.
    pub(super) fn take_repeat(&mut self) -> Option<Repeat> {
        self.repeat.take()
    }

    /// The call was approved: a repeat from now on waits for its result.
    pub(super) fn approved(&self) {
        if let Some(first) = &self.first {
            first.approved();
        }
    }

    /// Waits for the call's turn (at most its timeout since it arrived); `Err` with the busy
    /// result when it did not come.
    pub(super) async fn turn(&mut self, call: &ToolCall) -> Result<Option<Turn>, ToolResult> {
        let (place, since) = match std::mem::replace(&mut self.turn, TurnAt::Free) {
            TurnAt::Free => return Ok(None),
            TurnAt::Taken(turn) => {
                self.waited(Duration::ZERO);
                return Ok(Some(turn));
            }
            TurnAt::Waiting(place, since) => (place, since),
            TurnAt::AfterApproval(queue) => match queue.arrive() {
                Arrival::Now(turn) => {
                    self.waited(Duration::ZERO);
                    return Ok(Some(turn));
                }
                Arrival::Wait(place) => (place, Instant::now()),
                Arrival::Full => {
                    return Err(call.failed(
                        Outcome::Busy,
                        queue_full_text(&call.name, self.max_concurrent),
                    ));
                }
            },
        };
        let turn = place
            .turn(self.timeout.saturating_sub(since.elapsed()))
            .await;
        let waited = since.elapsed();
        self.waited(waited);
        turn.map(Some).ok_or_else(|| {
            call.failed(
                Outcome::Busy,
                busy_text(&call.name, self.max_concurrent, self.timeout),
            )
        })
    }

    fn waited(&self, waited: Duration) {
        let who = &self.who;
        self.policy.inner.events.observer().metrics().call_waited(
            &who.role,
            &who.tool,
            who.caller.name(),
            who.kind,
            waited,
        );
    }

    /// The call ended with `result`: its repeats get it.
    pub(super) fn ended(&mut self, result: ToolResult) -> ToolResult {
        if let Some(first) = self.first.take() {
            first.ended(&result);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_counts_the_calls_of_its_window() {
        let rate = Rate {
            calls: 2,
            per_seconds: 60,
        };
        let mut log = RateLog::default();
        let t0 = Instant::now();
        assert_eq!(log.take(rate, t0), Ok(()));
        assert_eq!(log.take(rate, t0 + Duration::from_secs(10)), Ok(()));
        assert_eq!(
            log.take(rate, t0 + Duration::from_secs(20)),
            Err(Duration::from_secs(40))
        );
        // A refused call is not counted; the first leaves the window after 60 s.
        assert_eq!(log.take(rate, t0 + Duration::from_secs(60)), Ok(()));
        assert_eq!(
            log.take(rate, t0 + Duration::from_secs(61)),
            Err(Duration::from_secs(9))
        );
    }

    #[test]
    fn the_state_of_registrations_nobody_holds_is_swept() {
        use crate::domain::limits::CallLimits;
        let limited = |name: &str| -> SharedTool {
            let plain = crate::domain::tool::test_tool(name, "");
            let crate::domain::tool::ToolHandler::Remote(endpoint) = &plain.handler else {
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
                .with_limits(CallLimits {
                    max_concurrent: Some(1),
                    ..CallLimits::default()
                }),
            )
        };
        let mut registrations = Registrations::default();
        let kept = limited("kept");
        let state = registrations.state_of(&kept);
        assert!(Arc::ptr_eq(&state, &registrations.state_of(&kept)));
        for i in 0..1000 {
            registrations.state_of(&limited(&format!("t{i}")));
        }
        assert!(registrations.by_generation.len() <= 2 * SWEEP_FLOOR + 1);
        assert!(registrations.by_generation.contains_key(&kept.generation));
    }
}
