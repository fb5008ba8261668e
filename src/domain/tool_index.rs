//! A character's search index, shared by every snapshot of its tools and brought up to date by
//! the first search after a change, on the searching thread.
//!
//! Keeping the index with the registry would make every registration pay for search: working
//! out a new definition's terms (splitting, stemming) and moving its postings, twice (the
//! manager applies each change to both of its snapshot copies). Here a registration does no
//! search work at all, and a character nobody searches never has an index. The price is paid
//! once per search that follows changes: a walk over the snapshot's tools comparing each with
//! what was indexed by the identity of its terms (a pointer), and the terms of what is new.
//!
//! Invariant: after `sync`, the index holds exactly the tools of the snapshot numbered
//! `applied`, each with the terms its `ToolSpec` holds. A search on an older snapshot (a reader
//! that loaded it before the last change) reads the newer index and keeps only the tools its
//! snapshot has: snapshots only ever move forward.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock, RwLockWriteGuard};

use foldhash::fast::RandomState;

use super::registry::ToolRegistry;
use super::search::{Hit, Query, SearchIndex, Weights};
use super::tool::SharedTool;

/// The index of one character's tools; every snapshot of the character holds the same one.
#[derive(Default)]
pub(crate) struct ToolIndex {
    synced: RwLock<Synced>,
}

impl fmt::Debug for ToolIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never waits: a search may be bringing the index up to date.
        let synced = self.synced.try_read().ok();
        f.debug_struct("ToolIndex")
            .field("applied", &synced.as_ref().map(|s| s.applied))
            .field("tools", &synced.as_ref().map(|s| s.index.len()))
            .finish()
    }
}

/// The index as of one snapshot.
#[derive(Default)]
struct Synced {
    /// The number of the snapshot the index holds the tools of (0: none yet).
    applied: u64,
    /// Each tool's name in its slot.
    index: SearchIndex<Box<str>>,
    slots: HashMap<Box<str>, u32, RandomState>,
    /// The round of `sync` each slot's tool was last found in; a slot not found in the
    /// current round holds a tool the snapshot no longer has.
    seen: Vec<u64>,
    round: u64,
}

impl ToolIndex {
    /// The `limit` tools of `registry` (the snapshot numbered `applied`) that best match
    /// `text`, best first, equal scores by name.
    pub(crate) fn search<'r>(
        &self,
        registry: &'r ToolRegistry,
        applied: u64,
        text: &str,
        limit: usize,
    ) -> Vec<Hit<'r, SharedTool>> {
        let query = Query::new(text);
        if let Ok(synced) = self.synced.read()
            && synced.applied >= applied
        {
            return synced.hits(registry, &query, limit);
        }
        let mut synced = self.write();
        if synced.applied < applied {
            synced.sync(registry);
            synced.applied = applied;
        }
        synced.hits(registry, &query, limit)
    }

    /// The index for changing. A search that panicked while changing it may have left it half
    /// done: it is then started again from nothing (the next sync fills it).
    fn write(&self) -> RwLockWriteGuard<'_, Synced> {
        match self.synced.write() {
            Ok(synced) => synced,
            Err(poisoned) => {
                self.synced.clear_poison();
                let mut synced = poisoned.into_inner();
                *synced = Synced::default();
                synced
            }
        }
    }
}

impl Synced {
    /// Brings the index to `registry`'s tools: adds what is new, replaces what changed (a
    /// definition whose terms are the same `Arc` is unchanged), removes what is gone.
    fn sync(&mut self, registry: &ToolRegistry) {
        self.round += 1;
        for tool in registry.tools() {
            let terms = tool.search_terms();
            let slot = match self.slots.get(tool.name.as_str()) {
                Some(&slot) => {
                    if !self.index.holds(slot, terms) {
                        self.index
                            .replace(slot, tool.name.as_str().into(), terms.clone());
                    }
                    slot
                }
                None => {
                    let slot = self.index.insert(tool.name.as_str().into(), terms.clone());
                    self.slots.insert(tool.name.as_str().into(), slot);
                    slot
                }
            };
            let slot = slot as usize;
            if self.seen.len() <= slot {
                self.seen.resize(slot + 1, 0);
            }
            self.seen[slot] = self.round;
        }
        if self.index.len() > registry.len() {
            let round = self.round;
            let (index, seen) = (&mut self.index, &self.seen);
            self.slots.retain(|_, &mut slot| {
                let found = seen[slot as usize] == round;
                if !found {
                    index.remove(slot);
                }
                found
            });
        }
    }

    /// The ranked tools, as `registry` holds them (those it lacks left out).
    fn hits<'r>(
        &self,
        registry: &'r ToolRegistry,
        query: &Query,
        limit: usize,
    ) -> Vec<Hit<'r, SharedTool>> {
        self.index
            .rank(query, limit, &Weights::default())
            .into_iter()
            .filter_map(|hit| {
                registry.get(hit.item).map(|item| Hit {
                    item,
                    score: hit.score,
                })
            })
            .collect()
    }
}

/// Shared by a snapshot and the copies made of it.
pub(crate) type SharedIndex = Arc<ToolIndex>;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::callback_url::CallbackUrl;
    use crate::domain::registry::Change;
    use crate::domain::snapshot::{ToolWriter, empty_cell};
    use crate::domain::tool::{ToolSpec, empty_parameters};

    fn tool(name: &str, description: &str) -> SharedTool {
        Arc::new(ToolSpec::remote(
            name,
            description,
            empty_parameters(),
            "plugin:x",
            CallbackUrl::parse("http://127.0.0.1:9/cb").unwrap(),
            Duration::from_secs(30),
        ))
    }

    fn register(tool: &SharedTool) -> Arc<Change> {
        Arc::new(Change::Register(tool.clone()))
    }

    /// What a search finds, as (name, score).
    fn found(
        registry: &ToolRegistry,
        index: &ToolIndex,
        applied: u64,
        text: &str,
    ) -> Vec<(String, f64)> {
        index
            .search(registry, applied, text, 10)
            .into_iter()
            .map(|hit| (hit.item.name.clone(), hit.score))
            .collect()
    }

    /// The same search over an index built from nothing for these tools.
    fn from_scratch(registry: &ToolRegistry, text: &str) -> Vec<(String, f64)> {
        found(registry, &ToolIndex::default(), 1, text)
    }

    #[test]
    fn a_search_after_any_change_sees_exactly_the_snapshots_tools() {
        let cell = empty_cell();
        let mut writer = ToolWriter::resume(cell.clone(), []);
        let weather = tool("get_weather", "The weather forecast for a city.");
        let changes = [
            register(&weather),
            register(&tool("get_time", "The time now in a city.")),
            register(&tool("set_alarm", "An alarm at a time.")),
            register(&tool("get_time", "The current time zone of a city.")),
            Arc::new(Change::Unregister("set_alarm".into())),
            register(&tool("city_guide", "What to see in a city.")),
            Arc::new(Change::ClearSource("plugin:x".into())),
            register(&tool("get_time", "The time now.")),
        ];
        let mut number = 0;
        for change in &changes {
            number += 1;
            writer.apply(number, change).unwrap();
            let snapshot = cell.load_full();
            for text in ["city", "time in a city", "weather", "alarm"] {
                let expected = from_scratch(snapshot.registry(), text);
                let hits: Vec<_> = snapshot
                    .search(text, 10)
                    .into_iter()
                    .map(|hit| (hit.item.name.clone(), hit.score))
                    .collect();
                assert_eq!(hits, expected, "after change {number}, searching {text:?}");
            }
        }
    }

    #[test]
    fn registering_works_out_no_search_terms_and_an_unchanged_definition_keeps_its_own() {
        let cell = empty_cell();
        let mut writer = ToolWriter::resume(cell.clone(), []);
        let first = tool("get_weather", "The weather forecast for a city.");
        writer.apply(1, &register(&first)).unwrap();
        assert!(
            first.worked_out_search_terms().is_none(),
            "a registration must not pay for search"
        );
        assert_eq!(cell.load().search("weather", 5).len(), 1);
        let terms = first
            .worked_out_search_terms()
            .expect("the search worked them out")
            .clone();
        // The plugin registers the same definition again: the new tool takes the terms over.
        let again = tool("get_weather", "The weather forecast for a city.");
        writer.apply(2, &register(&again)).unwrap();
        assert!(Arc::ptr_eq(
            again.worked_out_search_terms().unwrap(),
            &terms
        ));
        // A new description is worked out again, by the next search.
        let changed = tool("get_weather", "Rain or shine, tomorrow.");
        writer.apply(3, &register(&changed)).unwrap();
        assert!(changed.worked_out_search_terms().is_none());
        assert!(cell.load().search("forecast", 5).is_empty());
        assert_eq!(cell.load().search("rain tomorrow", 5).len(), 1);
    }

    #[test]
    fn a_search_on_an_older_snapshot_finds_only_its_own_tools() {
        let cell = empty_cell();
        let mut writer = ToolWriter::resume(cell.clone(), []);
        writer
            .apply(1, &register(&tool("get_weather", "Weather now.")))
            .unwrap();
        let old = cell.load_full();
        writer
            .apply(2, &register(&tool("weather_alerts", "Weather warnings.")))
            .unwrap();
        // The newer snapshot's search brings the shared index forward first.
        assert_eq!(cell.load().search("weather", 5).len(), 2);
        let hits = old.search("weather", 5);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].item.name, "get_weather");
    }
}
