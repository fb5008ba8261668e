//! What a character's chat keeps between an app's requests: the turns it answered partly itself
//! (handed-back turns of chat completions, kept responses of the Responses API), found again by
//! the ids the app's next request carries. Plain and bounded, the same for every wire format: at
//! most [`MAX_KEPT_TURNS`] turns and [`MAX_KEPT_BYTES`] per store, each kept [`KEPT_TURN_TTL`]
//! after it was last used (a conversation that goes on finds its turn with every request, and
//! keeps it); the least recently used go first. The ids of forgotten turns are remembered a
//! while longer, so a request that still names one is logged as a miss.
//!
//! A turn belongs to the conversation that made it. Call ids say little about that (many
//! OpenAI-compatible servers number their calls `call_0`, `call_1` in every answer), so a turn
//! found by a call id is put back only into a request that sends back what the app was handed
//! of it, exactly ([`HandBack`]: the ids, names and argument text of the app's calls, after the
//! same last message of the person). Any other request passes as the app wrote it. What a turn
//! is, and how a request is put together again with it, is each wire format's (`turns.rs`,
//! `responses/kept.rs`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// Turns kept per character and wire format: far more than the conversations one person has
/// going at once.
pub const MAX_KEPT_TURNS: usize = 256;

/// Bytes of kept turns per character and wire format (the server's calls, their results and
/// images, the person's message they follow): a result may be megabytes, and a turn is kept for
/// an hour, so the count alone would let one character hold gigabytes.
pub const MAX_KEPT_BYTES: usize = 32 * 1024 * 1024;

/// How long a turn is kept after it was last used: an app that answers its own tool a day
/// later has a different conversation.
pub(crate) const KEPT_TURN_TTL: Duration = Duration::from_secs(3600);

/// Ids of forgotten turns remembered, so a request that carries one is logged as a miss.
const MAX_FORGOTTEN_IDS: usize = 4 * MAX_KEPT_TURNS;

/// A kept turn.
pub(crate) trait KeptTurn {
    /// The ids a later request finds it by.
    fn keys(&self) -> Vec<&str>;
    /// What the app was handed of it, as its next request must send it back.
    fn hand_back(&self) -> HandBack;
    /// What it holds, in bytes of JSON text.
    fn bytes(&self) -> usize;
}

/// One of the app's calls of a turn: its id, name and argument text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct AppCall {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) arguments: String,
}

/// What a turn is matched on: the app's calls of it (in order of id) and the person's last
/// message before it (compared as JSON: its keys may come in another order).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HandBack {
    calls: Vec<AppCall>,
    prompt: Option<Value>,
}

impl HandBack {
    pub(crate) fn new(mut calls: Vec<AppCall>, prompt: Option<Value>) -> Self {
        calls.sort_unstable();
        Self { calls, prompt }
    }
}

/// The role of a chat message or a Responses input item.
#[derive(Debug, Default, Deserialize)]
struct RoleHead {
    #[serde(default)]
    role: Option<String>,
}

/// The person's last message before `index` of a request's messages (or input items), as the
/// app sent it: what a turn handed back in answer to it follows.
pub(crate) fn prompt_before(items: &[Box<RawValue>], index: usize) -> Option<Value> {
    let user = items[..index.min(items.len())].iter().rposition(|item| {
        serde_json::from_str::<RoleHead>(item.get())
            .is_ok_and(|head| head.role.as_deref() == Some("user"))
    })?;
    serde_json::from_str(items[user].get()).ok()
}

/// What the log says of a store's bounds when a request names a forgotten turn.
pub(crate) fn bounds_text() -> String {
    format!(
        "kept at most {} h, {MAX_KEPT_TURNS} turns and {} MiB",
        KEPT_TURN_TTL.as_secs() / 3600,
        MAX_KEPT_BYTES >> 20
    )
}

/// The length of a value's JSON text.
pub(crate) fn json_len(value: &Value) -> usize {
    serde_json::to_string(value).map_or(0, |text| text.len())
}

/// Why a turn was not kept: it alone is larger than the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    pub bytes: usize,
}

/// Where a kept turn is in its store, for the request that found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot(u64);

#[derive(Debug)]
struct Entry<T> {
    turn: T,
    back: HandBack,
    bytes: usize,
    used: Instant,
}

/// The bounded store of one wire format's kept turns.
#[derive(Debug)]
pub(crate) struct KeptTurns<T> {
    /// By slot, the least recently used first.
    turns: IndexMap<u64, Entry<T>>,
    /// Slots by key: several conversations may hand back turns with the same call ids.
    by_key: HashMap<String, Vec<u64>>,
    bytes: usize,
    forgotten: VecDeque<String>,
    forgotten_set: HashSet<String>,
    next: u64,
}

impl<T> Default for KeptTurns<T> {
    fn default() -> Self {
        Self {
            turns: IndexMap::new(),
            by_key: HashMap::new(),
            bytes: 0,
            forgotten: VecDeque::new(),
            forgotten_set: HashSet::new(),
            next: 0,
        }
    }
}

impl<T: KeptTurn> KeptTurns<T> {
    /// Keeps a turn, found from now on by each of its keys; a turn larger than the whole store
    /// is not kept (a request that carries it is logged as a miss).
    pub(crate) fn keep(&mut self, turn: T, now: Instant) -> Result<(), TooLarge> {
        self.expire(now);
        let back = turn.hand_back();
        let bytes = turn.bytes();
        if bytes > MAX_KEPT_BYTES {
            for key in turn.keys() {
                self.remember_forgotten(key);
            }
            return Err(TooLarge { bytes });
        }
        while self.turns.len() >= MAX_KEPT_TURNS || self.bytes + bytes > MAX_KEPT_BYTES {
            self.forget_oldest();
        }
        let slot = self.next;
        self.next += 1;
        for key in turn.keys() {
            self.by_key.entry(key.to_owned()).or_default().push(slot);
        }
        self.bytes += bytes;
        self.turns.insert(
            slot,
            Entry {
                turn,
                back,
                bytes,
                used: now,
            },
        );
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        self.turns.len()
    }

    /// Bytes kept.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Nothing kept and nothing forgotten: a request has nothing to look up.
    pub(crate) fn is_idle(&self) -> bool {
        self.turns.is_empty() && self.forgotten.is_empty()
    }

    /// The most recently used of the turns `key` names whose hand-back the request sends:
    /// `sent` reads, for a turn, what the request sends back of it (`None`: nothing).
    pub(crate) fn find_handed(
        &self,
        key: &str,
        sent: impl Fn(&T) -> Option<HandBack>,
    ) -> Option<(Slot, &T)> {
        self.candidates(key)
            .filter(|(_, entry)| sent(&entry.turn).is_some_and(|back| back == entry.back))
            .max_by_key(|(slot, _)| self.turns.get_index_of(slot))
            .map(|(slot, entry)| (Slot(slot), &entry.turn))
    }

    /// The most recently used turn an id names that the upstream gave it alone (a response's
    /// id: the request that names it sends nothing of the turn back to match).
    pub(crate) fn find(&self, key: &str) -> Option<(Slot, &T)> {
        self.candidates(key)
            .max_by_key(|(slot, _)| self.turns.get_index_of(slot))
            .map(|(slot, entry)| (Slot(slot), &entry.turn))
    }

    fn candidates(&self, key: &str) -> impl Iterator<Item = (u64, &Entry<T>)> {
        self.by_key
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|slot| self.turns.get(slot).map(|entry| (*slot, entry)))
    }

    /// A request used the turn: it is kept another [`KEPT_TURN_TTL`], as the newest.
    pub(crate) fn used(&mut self, slot: Slot, now: Instant) {
        if let Some(mut entry) = self.turns.shift_remove(&slot.0) {
            entry.used = now;
            self.turns.insert(slot.0, entry);
        }
    }

    /// Whether the key named a turn that was forgotten (by age, count or size).
    pub(crate) fn was_forgotten(&self, key: &str) -> bool {
        self.forgotten_set.contains(key)
    }

    /// Forgets the turns not used for [`KEPT_TURN_TTL`].
    pub(crate) fn expire(&mut self, now: Instant) {
        while let Some((_, entry)) = self.turns.first() {
            if now.duration_since(entry.used) < KEPT_TURN_TTL {
                break;
            }
            self.forget_oldest();
        }
    }

    fn forget_oldest(&mut self) {
        let Some((slot, entry)) = self.turns.shift_remove_index(0) else {
            return;
        };
        self.bytes -= entry.bytes;
        for key in entry.turn.keys() {
            if let Some(slots) = self.by_key.get_mut(key) {
                slots.retain(|s| *s != slot);
                if slots.is_empty() {
                    self.by_key.remove(key);
                }
            }
            self.remember_forgotten(key);
        }
    }

    fn remember_forgotten(&mut self, key: &str) {
        if self.forgotten_set.insert(key.to_owned()) {
            self.forgotten.push_back(key.to_owned());
        }
        while self.forgotten.len() > MAX_FORGOTTEN_IDS {
            if let Some(old) = self.forgotten.pop_front() {
                self.forgotten_set.remove(&old);
            }
        }
    }
}

/// What putting a request together again with the kept turns did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Restored {
    /// Turns completed with the server's calls and results.
    pub(crate) completed: usize,
    /// Turns that held server calls the store no longer has (forgotten by age, count or size).
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

        fn hand_back(&self) -> HandBack {
            HandBack::new(Vec::new(), None)
        }

        fn bytes(&self) -> usize {
            self.0.iter().map(String::len).sum()
        }
    }

    #[test]
    fn turns_are_found_by_each_key_and_the_least_recently_used_forgotten() {
        let mut store = KeptTurns::default();
        let now = Instant::now();
        for n in 0..MAX_KEPT_TURNS {
            store
                .keep(Turn(vec![format!("a{n}"), format!("b{n}")]), now)
                .unwrap();
        }
        let (first, turn) = store.find("b0").unwrap();
        assert_eq!(turn.0[0], "a0");
        store.used(first, now);
        store.keep(Turn(vec!["new".into()]), now).unwrap();
        assert_eq!(store.len(), MAX_KEPT_TURNS);
        assert!(store.find("a0").is_some(), "used again: kept");
        assert!(store.find("a1").is_none() && store.was_forgotten("b1"));
        let later = now + KEPT_TURN_TTL;
        store.expire(later);
        assert_eq!(store.len(), 0);
        assert!(store.was_forgotten("new") && !store.is_idle());
    }
}
