//! The ids of the responses a character's apps got (`POST /v1/responses`), so that a
//! `previous_response_id` one character returned is refused on another's (a 400, as the
//! upstream refuses an id it never stored), while an id the server never returned passes to
//! the upstream as the app wrote it. Each id is kept as 16 bytes of its SHA-256: an id is the
//! upstream's text, of any length. Bounded: the last [`MAX_ISSUED_IDS`]. Plain, no I/O.
//!
//! Beside them, the tools each of the last [`MAX_FOUND_RESPONSES`] responses that found tools
//! (the model's `find_tools`) had found: the upstream keeps that conversation, so a request that
//! goes on from the response (`previous_response_id`) is offered them again, as the model was
//! told it could call them.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use indexmap::IndexMap;

use sha2::{Digest, Sha256};

/// Response ids remembered per character: a day of an app asking every few seconds. An id
/// older than these goes to the upstream as any id the server does not know.
pub const MAX_ISSUED_IDS: usize = 16 * 1024;

/// Responses whose found tools are kept for their continuations: as many as the kept turns
/// ([`crate::chat::kept::MAX_KEPT_TURNS`]), far more conversations than one person has going at
/// once; each holds at most the character's budget of names.
pub(crate) const MAX_FOUND_RESPONSES: usize = 256;

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
    /// The tools found by the responses that found any, the least recently issued first.
    found: IndexMap<Digest16, Arc<[String]>>,
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

    /// The response `id` had found the tools `names` (oldest first): its continuations are
    /// offered them. Nothing is kept for a response that found none.
    pub(crate) fn found(&mut self, id: &str, names: Vec<String>) {
        if names.is_empty() {
            return;
        }
        self.found.shift_remove(&digest(id));
        self.found.insert(digest(id), names.into());
        if self.found.len() > MAX_FOUND_RESPONSES {
            self.found.shift_remove_index(0);
        }
    }

    /// The tools the response `id` had found, if it found any (and is among the last kept).
    pub(crate) fn found_by(&self, id: &str) -> Option<Arc<[String]>> {
        self.found.get(&digest(id)).cloned()
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

    #[test]
    fn the_tools_found_are_kept_for_the_last_responses_that_found_any() {
        let mut issued = IssuedIds::default();
        issued.found("resp_none", Vec::new());
        assert!(issued.found_by("resp_none").is_none());
        issued.found("resp_0", vec!["lights_on".into()]);
        assert_eq!(
            issued.found_by("resp_0").as_deref(),
            Some(&["lights_on".into()][..])
        );
        for n in 1..=MAX_FOUND_RESPONSES {
            issued.found(&format!("resp_{n}"), vec![format!("t{n}")]);
        }
        assert!(issued.found_by("resp_0").is_none(), "the oldest went");
        assert_eq!(issued.found.len(), MAX_FOUND_RESPONSES);
    }
}
