//! What a character's chat keeps between an app's requests: the turns it answered partly itself
//! (handed-back turns of chat completions, kept responses of the Responses API), found again by
//! what the app's next request carries. Plain and bounded, the same for every wire format: at
//! most [`MAX_KEPT_TURNS`] turns and [`MAX_KEPT_BYTES`] per store, each kept [`KEPT_TURN_TTL`]
//! after it was last used (a conversation that goes on finds its turn with every request, and
//! keeps it). What the store remembers of the turns it forgot is in [`forgotten`].
//!
//! A turn belongs to the conversation that made it. Call ids say little about that (many
//! OpenAI-compatible servers number their calls `call_0`, `call_1` in every answer), so a turn
//! is put back only into a request that sends back what the app was handed of it, exactly
//! ([`back::HandBack`]: the ids, names and argument text of the app's calls, after the same last
//! message of the person), found by that hand-back as a whole: one lookup per turn the request
//! sends back, whatever the store holds. Any other request passes as the app wrote it. What a
//! turn is, and how a request is put together again with it, is each wire format's
//! (`turns.rs`, `responses/kept.rs`): they read the request outside the endpoint's lock, look
//! its turns up under it, and put the request together outside it again.
//!
//! The room is shared: when the store is full, the turn that goes is the least recently used of
//! whoever holds the most — the client (the app's connection) or the conversation with the
//! most turns (or bytes, when bytes are what ran out) — so one app's burst, or one long
//! conversation, makes room with its own turns before anyone else's.

pub(crate) mod back;
pub(crate) mod forgotten;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indexmap::IndexMap;

pub(crate) use self::back::{AppCall, HandBack, prompt_before, prompt_text};
use self::forgotten::Forgotten;
pub(crate) use self::forgotten::Lost;

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

/// What the model is told in place of a server's call result the store no longer holds, when
/// the upstream must see the call answered: the conversation goes on, and the model may call
/// the tool again.
pub const LOST_RESULT_TEXT: &str = "the result of this call was lost: the server no longer \
    holds it (it keeps a bounded number of turns for a bounded time); call the tool again if \
    the result is still needed";

/// A kept turn.
pub(crate) trait KeptTurn {
    /// The ids a later request finds it by, or names it by.
    fn keys(&self) -> Vec<&str>;
    /// What the app was handed of it, as its next request must send it back.
    fn hand_back(&self) -> HandBack;
    /// What it holds, in bytes of JSON text.
    fn bytes(&self) -> usize;
    /// Its calls, when the upstream holds them and a continuation must answer them all: what
    /// is remembered once the turn is forgotten.
    fn lost(&self) -> Option<Lost> {
        None
    }
}

/// Who a kept turn is charged to: the app's connection, and the conversation it goes on (the
/// conversation of the kept turn its request continued; `None`, a new one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Owner {
    pub(crate) client: Option<SocketAddr>,
    pub(crate) conversation: Option<u64>,
}

/// A holder of kept turns, whose share of the store is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Holder {
    Client(SocketAddr),
    Conversation(u64),
}

#[derive(Debug, Default, Clone, Copy)]
struct Share {
    turns: usize,
    bytes: usize,
}

/// Why a turn was not kept: it alone is larger than the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    pub bytes: usize,
}

/// Where a kept turn is in its store, for the request that found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Slot(u64);

/// A kept turn a request found: taken out of the lock as a shared handle.
#[derive(Debug)]
pub(crate) struct Found<T> {
    pub(crate) slot: Slot,
    pub(crate) turn: Arc<T>,
    pub(crate) conversation: u64,
}

impl<T> Clone for Found<T> {
    fn clone(&self) -> Self {
        Self {
            slot: self.slot,
            turn: self.turn.clone(),
            conversation: self.conversation,
        }
    }
}

#[derive(Debug)]
struct Entry<T> {
    turn: Arc<T>,
    back: Arc<HandBack>,
    bytes: usize,
    used: Instant,
    client: Option<SocketAddr>,
    conversation: u64,
}

impl<T> Entry<T> {
    fn holders(&self) -> impl Iterator<Item = Holder> {
        let client = self.client.map(Holder::Client);
        client
            .into_iter()
            .chain([Holder::Conversation(self.conversation)])
    }
}

/// The bounded store of one wire format's kept turns.
#[derive(Debug)]
pub(crate) struct KeptTurns<T> {
    /// By slot, the least recently used first.
    turns: IndexMap<u64, Entry<T>>,
    /// Slots by key: several conversations may hand back turns with the same call ids.
    by_key: HashMap<String, Vec<u64>>,
    /// Slots by what the app was handed (turns with calls only).
    by_back: HashMap<Arc<HandBack>, Vec<u64>>,
    /// What each client and conversation holds.
    shares: HashMap<Holder, Share>,
    bytes: usize,
    forgotten: Forgotten,
    next: u64,
    next_conversation: u64,
}

impl<T> Default for KeptTurns<T> {
    fn default() -> Self {
        Self {
            turns: IndexMap::new(),
            by_key: HashMap::new(),
            by_back: HashMap::new(),
            shares: HashMap::new(),
            bytes: 0,
            forgotten: Forgotten::default(),
            next: 0,
            next_conversation: 0,
        }
    }
}

impl<T: KeptTurn> KeptTurns<T> {
    /// Keeps a turn for `owner`, found from now on by each of its keys and its hand-back; a turn
    /// larger than the whole store is not kept (its ids are remembered as forgotten).
    pub(crate) fn keep(&mut self, turn: T, owner: Owner, now: Instant) -> Result<(), TooLarge> {
        self.expire(now);
        let back = Arc::new(turn.hand_back());
        let bytes = turn.bytes();
        if bytes > MAX_KEPT_BYTES {
            self.remember_forgotten(&turn);
            return Err(TooLarge { bytes });
        }
        while self.turns.len() >= MAX_KEPT_TURNS || self.bytes + bytes > MAX_KEPT_BYTES {
            let by_bytes = self.bytes + bytes > MAX_KEPT_BYTES;
            self.make_room(by_bytes);
        }
        let slot = self.next;
        self.next += 1;
        for key in turn.keys() {
            self.by_key.entry(key.to_owned()).or_default().push(slot);
        }
        if back.has_calls() {
            self.by_back.entry(back.clone()).or_default().push(slot);
        }
        let conversation = owner.conversation.unwrap_or_else(|| {
            self.next_conversation += 1;
            self.next_conversation
        });
        let entry = Entry {
            turn: Arc::new(turn),
            back,
            bytes,
            used: now,
            client: owner.client,
            conversation,
        };
        for holder in entry.holders() {
            let share = self.shares.entry(holder).or_default();
            share.turns += 1;
            share.bytes += bytes;
        }
        self.bytes += bytes;
        self.turns.insert(slot, entry);
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

    /// The most recently used turn whose hand-back a request sends back exactly.
    pub(crate) fn find_handed(&self, back: &HandBack) -> Option<Found<T>> {
        let slots = self.by_back.get(back)?;
        self.most_recent(slots)
    }

    /// The most recently used turn an id names that the upstream gave it alone (a response's
    /// id: the request that names it sends nothing of the turn back to match).
    pub(crate) fn find(&self, key: &str) -> Option<Found<T>> {
        self.most_recent(self.by_key.get(key)?)
    }

    fn most_recent(&self, slots: &[u64]) -> Option<Found<T>> {
        let (slot, entry) = slots
            .iter()
            .filter_map(|slot| Some((*slot, self.turns.get_full(slot)?)))
            .max_by_key(|(_, (index, _, _))| *index)
            .map(|(slot, (_, _, entry))| (slot, entry))?;
        Some(Found {
            slot: Slot(slot),
            turn: entry.turn.clone(),
            conversation: entry.conversation,
        })
    }

    /// Requests used these turns: each is kept another [`KEPT_TURN_TTL`], as the newest (a
    /// turn forgotten meanwhile stays forgotten).
    pub(crate) fn used(&mut self, slots: &[Slot], now: Instant) {
        for slot in slots {
            if let Some(mut entry) = self.turns.shift_remove(&slot.0) {
                entry.used = now;
                self.turns.insert(slot.0, entry);
            }
        }
    }

    /// Whether the key named a turn that was forgotten (by age, count or size): `Some`, with
    /// the calls that turn left for a continuation to answer, if any.
    pub(crate) fn forgotten(&self, key: &str) -> Option<Option<Arc<Lost>>> {
        self.forgotten.get(key).map(|lost| lost.cloned())
    }

    /// Forgets the turns not used for [`KEPT_TURN_TTL`].
    pub(crate) fn expire(&mut self, now: Instant) {
        while let Some((_, entry)) = self.turns.first() {
            if now.duration_since(entry.used) < KEPT_TURN_TTL {
                break;
            }
            self.forget(0);
        }
    }

    /// Forgets one turn to make room: the least recently used of the holders (a client or a
    /// conversation) with the largest share — of turns, or of bytes when `by_bytes` — and
    /// among equal shares the one whose turn is the oldest. When every holder has one turn,
    /// that is the least recently used turn of all.
    fn make_room(&mut self, by_bytes: bool) {
        let measure = |share: &Share| if by_bytes { share.bytes } else { share.turns };
        let Some(largest) = self.shares.values().map(measure).max() else {
            return;
        };
        let victim = self.turns.values().position(|entry| {
            entry
                .holders()
                .any(|h| self.shares.get(&h).is_some_and(|s| measure(s) == largest))
        });
        self.forget(victim.unwrap_or(0));
    }

    fn forget(&mut self, index: usize) {
        let Some((slot, entry)) = self.turns.shift_remove_index(index) else {
            return;
        };
        self.bytes -= entry.bytes;
        for holder in entry.holders() {
            if let Some(share) = self.shares.get_mut(&holder) {
                share.turns -= 1;
                share.bytes -= entry.bytes;
                if share.turns == 0 {
                    self.shares.remove(&holder);
                }
            }
        }
        let unindex = |map_slots: &mut Vec<u64>| map_slots.retain(|s| *s != slot);
        if let Some(slots) = self.by_back.get_mut(&entry.back) {
            unindex(slots);
            if slots.is_empty() {
                self.by_back.remove(&entry.back);
            }
        }
        for key in entry.turn.keys() {
            if let Some(slots) = self.by_key.get_mut(key) {
                unindex(slots);
                if slots.is_empty() {
                    self.by_key.remove(key);
                }
            }
        }
        self.remember_forgotten(&entry.turn);
    }

    fn remember_forgotten(&mut self, turn: &T) {
        let lost = turn.lost().map(Arc::new);
        for key in turn.keys() {
            self.forgotten.remember(key, lost.clone());
        }
    }
}

/// What the log says of a store's bounds when a request names a forgotten turn.
pub(crate) fn bounds_text() -> String {
    format!(
        "kept at most {} h, {MAX_KEPT_TURNS} turns and {} MiB per character",
        KEPT_TURN_TTL.as_secs() / 3600,
        MAX_KEPT_BYTES >> 20
    )
}

/// The length of a value's JSON text.
pub(crate) fn json_len(value: &serde_json::Value) -> usize {
    serde_json::to_string(value).map_or(0, |text| text.len())
}

/// What putting a request together again with the kept turns did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Restored {
    /// Turns completed with the server's calls and results.
    pub(crate) completed: usize,
    /// Turns sent back whose server calls the store no longer has (forgotten by age, count or
    /// size): the request goes with the app's calls of them only.
    pub(crate) missed: usize,
    /// The response the request goes on from was forgotten.
    pub(crate) previous_forgotten: bool,
    /// Outputs of the server's calls the store no longer has, answered with
    /// [`LOST_RESULT_TEXT`] so the upstream takes the request.
    pub(crate) lost: usize,
    /// The conversation the request goes on (of the last kept turn it continued).
    pub(crate) conversation: Option<u64>,
    /// The kept turns it used, to be marked as used under the lock: each at most once (a
    /// turn sent back twice in one request is put back once, so a request never grows by more
    /// than the store holds).
    pub(crate) used: Vec<Slot>,
}

impl Restored {
    /// Takes the turn at `slot` for the request: false when the request used it already.
    pub(crate) fn take(&mut self, slot: Slot) -> bool {
        if self.used.contains(&slot) {
            return false;
        }
        self.used.push(slot);
        true
    }
}

#[cfg(test)]
mod tests;
