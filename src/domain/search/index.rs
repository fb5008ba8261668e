//! One character's search index: for every term, the tools that have it (its postings), kept up
//! to date with each tool added, replaced and removed — in time proportional to that tool's
//! terms, whatever the number of tools.
//!
//! Each tool lives in a numbered slot; a posting names the slot, the term's place among the
//! tool's terms and its count in each field, and each tool remembers where its postings are, so
//! removing one takes it out of each of its terms' lists in one step (the last posting moves
//! into its place). A replacement whose definition is unchanged (the same [`ToolTerms`]) only
//! swaps the item.

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::fast::RandomState;

use super::text::{FIELDS, ToolTerms};

/// One tool's entry in a term's list.
#[derive(Debug, Clone, Copy)]
pub(super) struct Posting {
    pub slot: u32,
    /// The term's index among the tool's terms.
    pub term: u16,
    /// How often each field has the term (at most 255 counted).
    pub counts: [u8; FIELDS],
}

/// A tool in its slot.
#[derive(Debug, Clone)]
pub(super) struct Doc<T> {
    pub item: T,
    pub terms: Arc<ToolTerms>,
    /// Each field's length in terms, at most `u16::MAX` (kept here: every posting reads it).
    pub lengths: [u16; FIELDS],
    /// Where each of its terms' postings is in that term's list.
    at: Box<[u32]>,
}

/// The index; `T` is what a hit hands back (the registry's shared tool).
#[derive(Debug, Clone)]
pub(crate) struct SearchIndex<T> {
    pub(super) slots: Vec<Option<Doc<T>>>,
    free: Vec<u32>,
    pub(super) postings: HashMap<Arc<str>, Vec<Posting>, RandomState>,
    /// Each field's length summed over the tools.
    pub(super) lengths: [u64; FIELDS],
    pub(super) live: usize,
}

impl<T> Default for SearchIndex<T> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            postings: HashMap::default(),
            lengths: [0; FIELDS],
            live: 0,
        }
    }
}

impl<T> SearchIndex<T> {
    /// Adds `item` with its terms; returns its slot.
    pub(crate) fn insert(&mut self, item: T, terms: Arc<ToolTerms>) -> u32 {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        self.fill(slot, item, terms);
        slot
    }

    /// The item in `slot`, with `terms` (the same ones: only the item changes) or new terms.
    pub(crate) fn replace(&mut self, slot: u32, item: T, terms: Arc<ToolTerms>) {
        if let Some(doc) = self.slots[slot as usize].as_mut()
            && Arc::ptr_eq(&doc.terms, &terms)
        {
            doc.item = item;
            return;
        }
        self.clear(slot);
        self.fill(slot, item, terms);
    }

    /// Whether `slot` holds an item with `terms` (the same `Arc`).
    pub(crate) fn holds(&self, slot: u32, terms: &Arc<ToolTerms>) -> bool {
        self.doc(slot)
            .is_some_and(|doc| Arc::ptr_eq(&doc.terms, terms))
    }

    /// Takes the item in `slot` out.
    pub(crate) fn remove(&mut self, slot: u32) {
        self.clear(slot);
        self.free.push(slot);
    }

    /// How many items the index holds.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    fn fill(&mut self, slot: u32, item: T, terms: Arc<ToolTerms>) {
        let mut at = Vec::with_capacity(terms.terms.len());
        for (index, counted) in terms.terms.iter().enumerate() {
            let list = match self.postings.get_mut(&counted.term) {
                Some(list) => list,
                None => self.postings.entry(counted.term.clone()).or_default(),
            };
            at.push(list.len() as u32);
            list.push(Posting {
                slot,
                term: index as u16,
                counts: counted.counts.map(|c| c.min(u16::from(u8::MAX)) as u8),
            });
        }
        let lengths = terms.lengths.map(|l| l.min(u32::from(u16::MAX)) as u16);
        for (sum, length) in self.lengths.iter_mut().zip(lengths) {
            *sum += u64::from(length);
        }
        self.live += 1;
        self.slots[slot as usize] = Some(Doc {
            item,
            terms,
            lengths,
            at: at.into_boxed_slice(),
        });
    }

    /// Empties `slot`: each of its postings is swapped out of its list.
    fn clear(&mut self, slot: u32) {
        let Some(doc) = self.slots[slot as usize].take() else {
            return;
        };
        for (counted, &position) in doc.terms.terms.iter().zip(doc.at.iter()) {
            let Some(list) = self.postings.get_mut(&counted.term) else {
                continue;
            };
            list.swap_remove(position as usize);
            if let Some(moved) = list.get(position as usize).copied() {
                // The last posting took this one's place: its tool must know.
                if let Some(other) = self.slots[moved.slot as usize].as_mut() {
                    other.at[moved.term as usize] = position;
                }
            } else if list.is_empty() {
                self.postings.remove(&counted.term);
            }
        }
        for (sum, length) in self.lengths.iter_mut().zip(doc.lengths) {
            *sum -= u64::from(length);
        }
        self.live -= 1;
    }

    /// The item in `slot`.
    pub(super) fn doc(&self, slot: u32) -> Option<&Doc<T>> {
        self.slots.get(slot as usize)?.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;

    fn terms(name: &str, description: &str) -> Arc<ToolTerms> {
        Arc::new(ToolTerms::new(name, description, &Map::new(), "s"))
    }

    /// Every posting points at a tool that has the term, and every tool's terms are posted
    /// exactly once, where it says.
    fn check(index: &SearchIndex<&'static str>) {
        let mut postings = 0;
        for (term, list) in &index.postings {
            assert!(!list.is_empty(), "{term} has an empty list");
            for (position, posting) in list.iter().enumerate() {
                let doc = index.doc(posting.slot).expect("a live slot");
                assert_eq!(doc.terms.terms[posting.term as usize].term, *term);
                assert_eq!(doc.at[posting.term as usize] as usize, position);
                postings += 1;
            }
        }
        let live: Vec<_> = index.slots.iter().flatten().collect();
        assert_eq!(live.len(), index.live);
        assert_eq!(
            postings,
            live.iter().map(|d| d.terms.terms.len()).sum::<usize>()
        );
        for field in 0..FIELDS {
            let sum: u64 = live.iter().map(|d| u64::from(d.lengths[field])).sum();
            assert_eq!(index.lengths[field], sum);
        }
    }

    #[test]
    fn postings_follow_every_insert_replace_and_remove() {
        let mut index = SearchIndex::default();
        let a = index.insert("a", terms("get_weather", "Weather now."));
        let b = index.insert("b", terms("get_time", "The time now."));
        let c = index.insert("c", terms("set_alarm", "An alarm at a time."));
        check(&index);
        assert_eq!(index.postings["get"].len(), 2);
        index.remove(a);
        check(&index);
        assert_eq!(index.postings["get"].len(), 1);
        assert!(!index.postings.contains_key("weather"));
        index.replace(b, "b2", terms("get_date", "Today's date."));
        check(&index);
        assert!(!index.postings.contains_key("time") || index.postings["time"].len() == 1);
        // A freed slot is used again.
        let d = index.insert("d", terms("get_weather", "Weather tomorrow."));
        assert_eq!(d, a);
        index.remove(c);
        check(&index);
        assert_eq!(index.len(), 2);
    }

    #[test]
    fn an_unchanged_definition_only_swaps_the_item() {
        let mut index = SearchIndex::default();
        let shared = terms("get_weather", "Weather now.");
        let slot = index.insert("old", shared.clone());
        let before = index.postings.clone();
        index.replace(slot, "new", shared);
        assert_eq!(index.doc(slot).unwrap().item, "new");
        assert_eq!(before.len(), index.postings.len());
        check(&index);
    }
}
