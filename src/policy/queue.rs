//! A tool's `max_concurrent`: at most so many of its calls run at once, and the others wait for
//! their turn in the order they arrived. A place is taken when the call is admitted (so the
//! order is the order the calls reached the policy, whoever made them) and given up at once
//! when its call is dropped (cancelled): a cancelled call never holds the queue. Each turn is
//! handed to the next waiter under the queue's lock, so a call's turn and its time running out
//! settle once: a call whose turn came at the moment its wait ended runs.
//!
//! Bounded: at most [`MAX_WAITING`] calls wait per tool; a call beyond it is told the tool is
//! busy at once.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::domain::limits::MAX_CONCURRENT;

/// Calls that may wait for a turn of one tool at once: four times the largest `max_concurrent`.
/// Each waiting call is held by a live session, a chat request, an `/mcp` request or an invoke,
/// so this only bounds a caller that makes calls faster than the tool takes them.
pub const MAX_WAITING: usize = 4 * MAX_CONCURRENT as usize;

/// One tool's turns (its registration's: a replacing registration has a queue of its own).
#[derive(Debug)]
pub(super) struct Queue {
    max: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    running: usize,
    /// Who waits, oldest first, each told through its channel when its turn comes.
    waiting: VecDeque<(u64, oneshot::Sender<()>)>,
    next_place: u64,
}

/// A turn: the call runs while it is held.
#[derive(Debug)]
pub(super) struct Turn {
    queue: Arc<Queue>,
}

/// A place in the queue.
#[derive(Debug)]
pub(super) struct Place {
    queue: Arc<Queue>,
    id: u64,
    told: oneshot::Receiver<()>,
    /// Its turn was taken or its place left: nothing to give back when it is dropped.
    settled: bool,
}

/// What a call gets when it arrives.
#[derive(Debug)]
pub(super) enum Arrival {
    /// Its turn, at once.
    Now(Turn),
    /// A place behind others.
    Wait(Place),
    /// No place: [`MAX_WAITING`] calls wait already.
    Full,
}

impl Queue {
    /// A queue of `max` turns at once (at least one).
    pub(super) fn new(max: u32) -> Arc<Self> {
        Arc::new(Self {
            max: (max as usize).clamp(1, MAX_CONCURRENT as usize),
            state: Mutex::default(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A call arrives: its turn when one is free and nobody waits, else a place at the end.
    pub(super) fn arrive(self: &Arc<Self>) -> Arrival {
        let mut state = self.state();
        if state.running < self.max && state.waiting.is_empty() {
            state.running += 1;
            return Arrival::Now(Turn {
                queue: self.clone(),
            });
        }
        if state.waiting.len() >= MAX_WAITING {
            return Arrival::Full;
        }
        let (tell, told) = oneshot::channel();
        state.next_place += 1;
        let id = state.next_place;
        state.waiting.push_back((id, tell));
        Arrival::Wait(Place {
            queue: self.clone(),
            id,
            told,
            settled: false,
        })
    }

    /// The calls running and waiting now.
    pub(super) fn load(&self) -> (usize, usize) {
        let state = self.state();
        (state.running, state.waiting.len())
    }

    /// A turn ends: the first waiter gets it, or it is free.
    fn hand_on(&self) {
        let mut state = self.state();
        while let Some((_, tell)) = state.waiting.pop_front() {
            // A waiter that is being dropped still holds its receiver (its `Drop` runs first),
            // so a send fails only for one that is gone: the turn goes to the next.
            if tell.send(()).is_ok() {
                return;
            }
        }
        state.running = state.running.saturating_sub(1);
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.queue.hand_on();
    }
}

impl Place {
    /// Waits at most `within` for the turn; `None`: it did not come, and the place is left.
    pub(super) async fn turn(mut self, within: Duration) -> Option<Turn> {
        let told = tokio::time::timeout(within, &mut self.told).await;
        self.settled = true;
        let queue = self.queue.clone();
        if let Ok(Ok(())) = told {
            return Some(Turn { queue });
        }
        let mut state = queue.state();
        match state.waiting.iter().position(|(id, _)| *id == self.id) {
            Some(at) => {
                state.waiting.remove(at);
                None
            }
            // Handed the turn at the moment the wait ended (under the lock, so it is ours).
            None => {
                drop(state);
                Some(Turn { queue })
            }
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        // Cancelled while it waited: the place is left at once, or, when the turn was handed
        // over meanwhile, the turn goes on to the next.
        let mut state = self.queue.state();
        match state.waiting.iter().position(|(id, _)| *id == self.id) {
            Some(at) => {
                state.waiting.remove(at);
            }
            None => {
                drop(state);
                self.queue.hand_on();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(arrival: Arrival) -> Turn {
        match arrival {
            Arrival::Now(turn) => turn,
            other => panic!("not at once: {other:?}"),
        }
    }

    fn place(arrival: Arrival) -> Place {
        match arrival {
            Arrival::Wait(place) => place,
            other => panic!("no place: {other:?}"),
        }
    }

    #[tokio::test]
    async fn turns_go_in_arrival_order_and_a_dropped_place_leaves_at_once() {
        let queue = Queue::new(1);
        let first = now(queue.arrive());
        let second = place(queue.arrive());
        let third = place(queue.arrive());
        let fourth = place(queue.arrive());
        assert_eq!(queue.load(), (1, 3));
        drop(third);
        assert_eq!(queue.load(), (1, 2));
        drop(first);
        let second = second.turn(Duration::from_secs(5)).await.expect("its turn");
        assert_eq!(queue.load(), (1, 1));
        drop(second);
        let fourth = fourth.turn(Duration::from_secs(5)).await.expect("its turn");
        drop(fourth);
        assert_eq!(queue.load(), (0, 0));
        let _again = now(queue.arrive());
    }

    #[tokio::test]
    async fn a_wait_that_runs_out_leaves_the_queue() {
        let queue = Queue::new(2);
        let _a = now(queue.arrive());
        let _b = now(queue.arrive());
        let waiting = place(queue.arrive());
        assert!(waiting.turn(Duration::from_millis(20)).await.is_none());
        assert_eq!(queue.load(), (2, 0));
    }

    #[tokio::test]
    async fn a_turn_handed_to_a_dropped_place_goes_on() {
        let queue = Queue::new(1);
        let first = now(queue.arrive());
        let second = place(queue.arrive());
        let third = place(queue.arrive());
        // The turn reaches `second` before it is dropped (as a cancel racing the hand-over).
        drop(first);
        drop(second);
        let third = third.turn(Duration::from_secs(5)).await.expect("its turn");
        assert_eq!(queue.load(), (1, 0));
        drop(third);
        assert_eq!(queue.load(), (0, 0));
    }

    #[test]
    fn the_waiting_line_is_bounded() {
        let queue = Queue::new(1);
        let _running = now(queue.arrive());
        let places: Vec<Place> = (0..MAX_WAITING).map(|_| place(queue.arrive())).collect();
        assert!(matches!(queue.arrive(), Arrival::Full));
        drop(places);
        assert_eq!(queue.load(), (1, 0));
    }
}
