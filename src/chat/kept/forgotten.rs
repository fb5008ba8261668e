//! What a store remembers of the turns it forgot (by age, count or size): their ids, so a
//! request that still names one is logged as a miss, and for a turn whose calls the upstream
//! holds unanswered, which of its calls were the server's, so a continuation from it gets an
//! output for each (the result was lost) instead of the upstream's refusal. Bounded by count
//! and bytes: ids are the upstream's and the model's text. Plain, no I/O.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Ids of forgotten turns remembered...
pub const MAX_FORGOTTEN_IDS: usize = 1024;

/// ...and at most this many bytes of them (ids, and the calls of the turns they name): an
/// upstream's ids are usually tens of bytes, so the count is the bound that holds; this one
/// holds against ids of any length.
pub const MAX_FORGOTTEN_BYTES: usize = 1024 * 1024;

/// What a continuation from a forgotten turn still needs: the upstream's response it goes on
/// from (a stream's id named the first round's; the turn is the last's), and the turn's calls
/// in the model's order, each with whether it was the server's (those must be answered).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Lost {
    pub(crate) response: Option<String>,
    pub(crate) calls: Vec<(String, bool)>,
}

impl Lost {
    /// The server's calls, whose results are gone.
    pub(crate) fn servers(&self) -> usize {
        self.calls.iter().filter(|(_, server)| *server).count()
    }

    fn bytes(&self) -> usize {
        let calls: usize = self.calls.iter().map(|(id, _)| id.len() + 1).sum();
        calls + self.response.as_ref().map_or(0, String::len)
    }
}

/// The ids of forgotten turns, the oldest first.
#[derive(Debug, Default)]
pub(crate) struct Forgotten {
    order: VecDeque<String>,
    records: HashMap<String, Option<Arc<Lost>>>,
    bytes: usize,
}

impl Forgotten {
    /// Remembers that `key` named a forgotten turn (with what it left unanswered, if anything).
    pub(crate) fn remember(&mut self, key: &str, lost: Option<Arc<Lost>>) {
        let size = |lost: &Option<Arc<Lost>>| key.len() + lost.as_ref().map_or(0, |l| l.bytes());
        if key.len() + lost.as_ref().map_or(0, |l| l.bytes()) > MAX_FORGOTTEN_BYTES {
            return;
        }
        match self.records.get_mut(key) {
            Some(record) => {
                self.bytes = self.bytes - size(record) + size(&lost);
                *record = lost;
            }
            None => {
                self.bytes += size(&lost);
                self.records.insert(key.to_owned(), lost);
                self.order.push_back(key.to_owned());
            }
        }
        while self.order.len() > MAX_FORGOTTEN_IDS || self.bytes > MAX_FORGOTTEN_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(record) = self.records.remove(&old) {
                self.bytes -= old.len() + record.as_ref().map_or(0, |l| l.bytes());
            }
        }
    }

    /// Whether `key` named a forgotten turn: `Some`, with what that turn left unanswered.
    pub(crate) fn get(&self, key: &str) -> Option<Option<&Arc<Lost>>> {
        self.records.get(key).map(Option::as_ref)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_go_first_by_count_and_by_bytes() {
        let mut forgotten = Forgotten::default();
        let lost = Arc::new(Lost {
            response: None,
            calls: vec![("s".into(), true), ("a".into(), false)],
        });
        forgotten.remember("resp_1", Some(lost.clone()));
        assert_eq!(forgotten.get("resp_1"), Some(Some(&lost)));
        for n in 0..MAX_FORGOTTEN_IDS {
            forgotten.remember(&format!("call_{n}"), None);
        }
        assert_eq!(forgotten.get("resp_1"), None, "the oldest went first");
        assert_eq!(forgotten.get("call_1"), Some(None));
        let long = "x".repeat(MAX_FORGOTTEN_BYTES / 2);
        forgotten.remember(&format!("{long}1"), None);
        forgotten.remember(&format!("{long}2"), None);
        assert!(forgotten.bytes <= MAX_FORGOTTEN_BYTES);
        assert_eq!(forgotten.get("call_1"), None);
        assert_eq!(forgotten.get(&format!("{long}2")), Some(None));
        forgotten.remember(&"y".repeat(MAX_FORGOTTEN_BYTES + 1), None);
        assert_eq!(
            forgotten.get(&format!("{long}2")),
            Some(None),
            "too long: not kept"
        );
        assert_eq!(lost.servers(), 1);
    }
}
