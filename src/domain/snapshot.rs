//! One character's tools as its session manager publishes them: an immutable [`ToolSnapshot`]
//! in a [`ToolCell`] that any thread reads without a lock and without asking the manager.
//!
//! The manager is the cell's only writer, through a [`ToolWriter`]: after every change it
//! publishes a new snapshot, numbered with the change it includes last, so whoever restarts a
//! manager knows which changes the snapshot lacks. Publishing costs no copy of the registry in
//! the common case: the writer keeps the previous snapshot as a spare and, once no reader holds
//! it any more, brings it up to date by applying the change it missed and the new one, and
//! publishes it in turn (readers that still hold it make the writer copy the current one
//! instead).

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::registry::{Change, Effect, ToolRegistry};
use super::search::Hit;
use super::tool::SharedTool;
use super::tool_index::SharedIndex;

/// A character's tools after every change up to number `applied`.
#[derive(Debug, Default, Clone)]
pub struct ToolSnapshot {
    registry: ToolRegistry,
    applied: u64,
    /// The character's search index, the same for all its snapshots (`tool_index`).
    index: SharedIndex,
}

impl ToolSnapshot {
    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// The tools in registration order.
    pub fn tools(&self) -> impl ExactSizeIterator<Item = &SharedTool> {
        self.registry.tools()
    }

    /// The `limit` tools of this snapshot that best match `text`, best first (equal scores by
    /// name, ascending); only tools that share a term with it. On the caller's thread, without
    /// a message; the first search after a change brings the character's index up to date
    /// (`tool_index`).
    pub fn search(&self, text: &str, limit: usize) -> Vec<Hit<'_, SharedTool>> {
        self.index.search(&self.registry, self.applied, text, limit)
    }

    /// The number of the last change this snapshot includes (0: none yet).
    pub fn applied(&self) -> u64 {
        self.applied
    }
}

/// Where a character's current snapshot is published; shared by its manager (the writer) and
/// every reader.
pub(crate) type ToolCell = Arc<ArcSwap<ToolSnapshot>>;

/// A new cell holding no tools.
pub(crate) fn empty_cell() -> ToolCell {
    Arc::new(ArcSwap::from_pointee(ToolSnapshot::default()))
}

/// The cell was published to by someone else: a newer manager of the character took it over,
/// and this writer must not publish again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("session manager was replaced before answering")]
pub(crate) struct Superseded;

/// The only writer of one [`ToolCell`].
#[derive(Debug)]
pub(crate) struct ToolWriter {
    cell: ToolCell,
    /// What this writer published last (the cell holds it too, unless superseded).
    current: Arc<ToolSnapshot>,
    /// The snapshot published before `current`, to be reused, and the change it lacks.
    spare: Option<(Arc<ToolSnapshot>, Arc<Change>)>,
}

impl ToolWriter {
    /// Takes over `cell`: starts from what it holds, applies the `replay` changes it lacks
    /// (numbered, in order; those it already includes are skipped) and publishes the result,
    /// so a writer that published there before is superseded from now on.
    pub(crate) fn resume<'a>(
        cell: ToolCell,
        replay: impl IntoIterator<Item = (u64, &'a Arc<Change>)>,
    ) -> Self {
        let mut next = ToolSnapshot::clone(&cell.load());
        for (number, change) in replay {
            if number > next.applied {
                next.registry.apply(change);
                next.applied = number;
            }
        }
        let current = Arc::new(next);
        cell.store(current.clone());
        Self {
            cell,
            current,
            spare: None,
        }
    }

    /// What this writer published last.
    pub(crate) fn current(&self) -> &Arc<ToolSnapshot> {
        &self.current
    }

    /// Applies change number `number` and publishes the result. A change the current snapshot
    /// already includes is not applied again (`Effect` of nothing).
    pub(crate) fn apply(
        &mut self,
        number: u64,
        change: &Arc<Change>,
    ) -> Result<Effect, Superseded> {
        if number <= self.current.applied {
            return Ok(Effect {
                removed: 0,
                changed: false,
            });
        }
        let mut next = self.reusable_spare().unwrap_or_else(|| {
            // A reader still holds the spare (or there is none yet): copy the current one.
            Arc::new(ToolSnapshot::clone(&self.current))
        });
        let next_mut = Arc::get_mut(&mut next).expect("a fresh or unshared snapshot");
        let effect = next_mut.registry.apply(change);
        next_mut.applied = number;
        let previous = self.cell.compare_and_swap(&self.current, next.clone());
        if !Arc::ptr_eq(&previous, &self.current) {
            return Err(Superseded);
        }
        drop(previous);
        let published = std::mem::replace(&mut self.current, next);
        self.spare = Some((published, change.clone()));
        Ok(effect)
    }

    /// The spare, brought up to date with the change it lacks, if no reader holds it.
    fn reusable_spare(&mut self) -> Option<Arc<ToolSnapshot>> {
        let (mut spare, missed) = self.spare.take()?;
        let snapshot = Arc::get_mut(&mut spare)?;
        snapshot.registry.apply(&missed);
        snapshot.applied = self.current.applied;
        Some(spare)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::domain::callback_url::CallbackUrl;
    use crate::domain::tool::{ToolSpec, empty_parameters};

    fn register(name: &str) -> Arc<Change> {
        Arc::new(Change::Register(Arc::new(ToolSpec::remote(
            name,
            format!("{name} tool"),
            empty_parameters(),
            "plugin:x",
            CallbackUrl::parse("http://127.0.0.1:9/cb").unwrap(),
            Duration::from_secs(30),
        ))))
    }

    fn unregister(name: &str) -> Arc<Change> {
        Arc::new(Change::Unregister(name.into()))
    }

    fn names(cell: &ToolCell) -> Vec<String> {
        cell.load().registry().names().map(str::to_owned).collect()
    }

    #[test]
    fn every_change_is_published_with_its_number() {
        let cell = empty_cell();
        let mut writer = ToolWriter::resume(cell.clone(), []);
        for (i, change) in [register("a"), register("b"), unregister("a"), register("c")]
            .iter()
            .enumerate()
        {
            writer.apply(i as u64 + 1, change).unwrap();
            assert_eq!(cell.load().applied(), i as u64 + 1);
        }
        assert_eq!(names(&cell), ["b", "c"]);
        assert!(Arc::ptr_eq(&cell.load_full(), writer.current()));
    }

    #[test]
    fn a_held_snapshot_never_changes_and_the_next_one_is_still_right() {
        let cell = empty_cell();
        let mut writer = ToolWriter::resume(cell.clone(), []);
        writer.apply(1, &register("a")).unwrap();
        let held = cell.load_full();
        writer.apply(2, &register("b")).unwrap();
        // `held` is the spare now; a reader still has it, so it must be copied, not reused.
        writer.apply(3, &unregister("a")).unwrap();
        writer.apply(4, &register("c")).unwrap();
        assert_eq!(
            held.registry().names().collect::<Vec<_>>(),
            ["a"],
            "a published snapshot is immutable"
        );
        assert_eq!(held.applied(), 1);
        drop(held);
        for (n, change) in [(5, register("d")), (6, unregister("b")), (7, register("e"))] {
            writer.apply(n, &change).unwrap();
        }
        assert_eq!(names(&cell), ["c", "d", "e"]);
        assert_eq!(cell.load().applied(), 7);
    }

    #[test]
    fn resume_replays_only_what_the_cell_lacks_and_supersedes_the_old_writer() {
        let cell = empty_cell();
        let mut old = ToolWriter::resume(cell.clone(), []);
        let changes = [register("a"), register("b"), unregister("a")];
        old.apply(1, &changes[0]).unwrap();
        old.apply(2, &changes[1]).unwrap();
        // Change 3 was sent to the old writer but never applied; 1 and 2 are already in.
        let log = [(1, &changes[0]), (2, &changes[1]), (3, &changes[2])];
        let mut new = ToolWriter::resume(cell.clone(), log);
        assert_eq!(names(&cell), ["b"]);
        assert_eq!(cell.load().applied(), 3);
        assert_eq!(old.apply(3, &changes[2]), Err(Superseded));
        assert_eq!(names(&cell), ["b"]);
        // A repeat of an included change does nothing.
        assert_eq!(
            new.apply(3, &changes[2]),
            Ok(Effect {
                removed: 0,
                changed: false
            })
        );
        new.apply(4, &register("c")).unwrap();
        assert_eq!(names(&cell), ["b", "c"]);
    }
}
