//! The ids of the responses a character's apps got (`POST /v1/responses`), so that a
//! `previous_response_id` one character returned is refused on another's (a 400, as the
//! upstream refuses an id it never stored), while an id the server never returned passes to
//! the upstream as the app wrote it. Each id is kept as 16 bytes of its SHA-256: an id is the
//! upstream's text, of any length. Bounded: the last [`MAX_ISSUED_IDS`]. Plain, no I/O.

use std::collections::{HashSet, VecDeque};

use sha2::{Digest, Sha256};

/// Response ids remembered per character: a day of an app asking every few seconds. An id
/// older than these goes to the upstream as any id the server does not know.
pub const MAX_ISSUED_IDS: usize = 16 * 1024;

type Digest16 = [u8; 16];

fn digest(id: &str) -> Digest16 {
    let full: [u8; 32] = Sha256::digest(id.as_bytes()).into();
    let mut short = [0u8; 16];
    short.copy_from_slice(&full[..16]);
    short
}

/// The last [`MAX_ISSUED_IDS`] response ids a character gave its apps.
#[derive(Debug, Default)]
pub(crate) struct IssuedIds {
    order: VecDeque<Digest16>,
    set: HashSet<Digest16>,
}

impl IssuedIds {
    pub(crate) fn add(&mut self, id: &str) {
        let digest = digest(id);
        if !self.set.insert(digest) {
            return;
        }
        self.order.push_back(digest);
        if self.order.len() > MAX_ISSUED_IDS
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.set.contains(&digest(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_ids_are_remembered() {
        let mut issued = IssuedIds::default();
        issued.add("resp_0");
        issued.add("resp_0");
        assert!(issued.contains("resp_0") && !issued.contains("resp_1"));
        for n in 1..=MAX_ISSUED_IDS {
            issued.add(&format!("resp_{n}"));
        }
        assert!(!issued.contains("resp_0"), "the oldest went");
        assert!(issued.contains("resp_1") && issued.contains(&format!("resp_{MAX_ISSUED_IDS}")));
        assert_eq!(issued.order.len(), MAX_ISSUED_IDS);
    }
}
