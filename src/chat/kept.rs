//! What a character's chat keeps between an app's requests: the turns it answered partly itself
//! (handed-back turns of chat completions, kept responses of the Responses API), found again by
//! the ids the app's next request carries. Plain and bounded, the same for every wire format: at
//! most [`MAX_KEPT_TURNS`] turns per store, each kept [`KEPT_TURN_TTL`] after it was last used (a
//! conversation that goes on finds its turn with every request, and keeps it). The ids of
//! forgotten turns are remembered a while longer, so a request that still names one is logged as
//! a miss. What a turn is, and how a request is put together again with it, is each wire
//! format's (`turns.rs`, `responses/kept.rs`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use indexmap::IndexMap;

/// Turns kept per character and wire format: far more than the conversations one person has
/// going at once.
pub(crate) const MAX_KEPT_TURNS: usize = 256;

/// How long a turn is kept after it was last used: an app that answers its own tool a day
/// later has a different conversation.
pub(crate) const KEPT_TURN_TTL: Duration = Duration::from_secs(3600);

/// Ids of forgotten turns remembered, so a request that carries one is logged as a miss.
const MAX_FORGOTTEN_IDS: usize = 4 * MAX_KEPT_TURNS;

/// A kept turn: the ids a later request finds it by.
pub(crate) trait KeptTurn {
    fn keys(&self) -> Vec<&str>;
}

/// Where a kept turn is in its store, for the request that found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot(u64);

/// The bounded store of one wire format's kept turns.
#[derive(Debug)]
pub(crate) struct KeptTurns<T> {
    turns: IndexMap<u64, (T, Instant)>,
    by_key: HashMap<String, u64>,
    forgotten: VecDeque<String>,
    forgotten_set: HashSet<String>,
    next: u64,
}

impl<T> Default for KeptTurns<T> {
    fn default() -> Self {
        Self {
            turns: IndexMap::new(),
            by_key: HashMap::new(),
            forgotten: VecDeque::new(),
            forgotten_set: HashSet::new(),
            next: 0,
        }
    }
}

impl<T: KeptTurn> KeptTurns<T> {
    /// Keeps a turn, found from now on by each of its keys.
    pub(crate) fn keep(&mut self, turn: T, now: Instant) {
        self.expire(now);
        while self.turns.len() >= MAX_KEPT_TURNS {
            self.forget_oldest();
        }
        let slot = self.next;
        self.next += 1;
        for key in turn.keys() {
            self.by_key.insert(key.to_owned(), slot);
        }
        self.turns.insert(slot, (turn, now));
    }

    pub(crate) fn len(&self) -> usize {
        self.turns.len()
    }

    /// Nothing kept and nothing forgotten: a request has nothing to look up.
    pub(crate) fn is_idle(&self) -> bool {
        self.turns.is_empty() && self.forgotten.is_empty()
    }

    /// The turn a key names, if it is still kept.
    pub(crate) fn find(&self, key: &str) -> Option<(Slot, &T)> {
        let slot = *self.by_key.get(key)?;
        self.turns.get(&slot).map(|(turn, _)| (Slot(slot), turn))
    }

    /// A request used the turn: it is kept another [`KEPT_TURN_TTL`], as the newest.
    pub(crate) fn used(&mut self, slot: Slot, now: Instant) {
        if let Some((turn, _)) = self.turns.shift_remove(&slot.0) {
            self.turns.insert(slot.0, (turn, now));
        }
    }

    /// Whether the key named a turn that was forgotten (by age or count).
    pub(crate) fn was_forgotten(&self, key: &str) -> bool {
        self.forgotten_set.contains(key)
    }

    /// Forgets the turns not used for [`KEPT_TURN_TTL`].
    pub(crate) fn expire(&mut self, now: Instant) {
        while let Some((_, (_, used))) = self.turns.first() {
            if now.duration_since(*used) < KEPT_TURN_TTL {
                break;
            }
            self.forget_oldest();
        }
    }

    fn forget_oldest(&mut self) {
        let Some((_, (turn, _))) = self.turns.shift_remove_index(0) else {
            return;
        };
        for key in turn.keys() {
            self.by_key.remove(key);
            if self.forgotten_set.insert(key.to_owned()) {
                self.forgotten.push_back(key.to_owned());
            }
        }
        while self.forgotten.len() > MAX_FORGOTTEN_IDS {
            if let Some(key) = self.forgotten.pop_front() {
                self.forgotten_set.remove(&key);
            }
        }
    }
}

/// What putting a request together again with the kept turns did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Restored {
    /// Turns completed with the server's calls and results.
    pub(crate) completed: usize,
    /// Turns that held server calls the store no longer has (forgotten by age or count).
    pub(crate) missed: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Turn(Vec<String>);

    impl KeptTurn for Turn {
        fn keys(&self) -> Vec<&str> {
            self.0.iter().map(String::as_str).collect()
        }
    }

    #[test]
    fn turns_are_found_by_each_key_and_the_least_recently_used_forgotten() {
        let mut store = KeptTurns::default();
        let now = Instant::now();
        for n in 0..MAX_KEPT_TURNS {
            store.keep(Turn(vec![format!("a{n}"), format!("b{n}")]), now);
        }
        let (first, turn) = store.find("b0").unwrap();
        assert_eq!(turn.0[0], "a0");
        store.used(first, now);
        store.keep(Turn(vec!["new".into()]), now);
        assert_eq!(store.len(), MAX_KEPT_TURNS);
        assert!(store.find("a0").is_some(), "used again: kept");
        assert!(store.find("a1").is_none() && store.was_forgotten("b1"));
        let later = now + KEPT_TURN_TTL;
        store.expire(later);
        assert_eq!(store.len(), 0);
        assert!(store.was_forgotten("new") && !store.is_idle());
    }
}
