//! Consecutive connection-failure counting for plugin callback origins: the rule behind the
//! automatic removal of dead plugins.
//!
//! Only sources starting with `plugin:` are counted, per `(source, origin)`. A connection-level
//! failure adds one; any completed exchange (and a read timeout) resets the count to zero. The
//! failure that reaches [`REMOVAL_THRESHOLD`] reports the pair for removal, once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::future::BoxFuture;

use super::callback_url::CallbackOrigin;
use super::tool::PLUGIN_SOURCE_PREFIX;

/// Consecutive connection failures after which a plugin origin's tools are removed.
pub(crate) const REMOVAL_THRESHOLD: u32 = 3;

/// What one exchange with a callback taught us about its origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The TCP (or TLS) connection could not be made.
    ConnectFailed,
    /// Something answered (any status), or the connection was made and then went quiet.
    Reachable,
}

/// A `(source, origin)` pair whose failures reached [`REMOVAL_THRESHOLD`]: its tools are to be
/// removed from every character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadOrigin {
    pub source: String,
    pub origin: CallbackOrigin,
    /// Consecutive connection failures that led here, for the log.
    pub failures: u32,
}

/// Whoever removes a dead origin's tools (the router). A trait, implemented for the router's
/// recipient in `actors`, so that the dispatcher, which finds dead origins, depends on no actor.
pub trait DeadOriginRemover: Send + Sync {
    /// Removes the tools; resolves once they are gone, with `false` when the remover has
    /// stopped.
    fn remove(&self, dead: DeadOrigin) -> BoxFuture<'static, bool>;
}

/// The failure counts, shared by the dispatches of every thread and by the router, which forgets
/// the pairs that no character holds any more.
#[derive(Debug, Clone, Default)]
pub struct SharedFailures(Arc<Mutex<FailureTracker>>);

impl SharedFailures {
    pub fn lock(&self) -> MutexGuard<'_, FailureTracker> {
        // Counting cannot be left half-done in a way that matters more than stopping to count.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Debug, Default)]
pub struct FailureTracker {
    counts: HashMap<(String, CallbackOrigin), u32>,
}

impl FailureTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one exchange. Returns the failure count when this failure reaches the removal
    /// threshold; the pair then starts again from zero.
    pub fn record(
        &mut self,
        source: &str,
        origin: &CallbackOrigin,
        liveness: Liveness,
    ) -> Option<u32> {
        if !source.starts_with(PLUGIN_SOURCE_PREFIX) {
            return None;
        }
        match liveness {
            Liveness::Reachable => {
                // Avoid allocating a key on the hot, healthy path.
                if !self.counts.is_empty() {
                    self.counts.remove(&(source.to_owned(), origin.clone()));
                }
                None
            }
            Liveness::ConnectFailed => {
                let key = (source.to_owned(), origin.clone());
                let count = self.counts.entry(key.clone()).or_insert(0);
                *count += 1;
                let reached = *count;
                if reached >= REMOVAL_THRESHOLD {
                    self.counts.remove(&key);
                    Some(reached)
                } else {
                    None
                }
            }
        }
    }

    /// Whether no pair has a failure counted: the usual state, checked before anything costlier.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Forgets the count of every pair for which `held` says no tool is registered any more: a
    /// pair unregistered or cleared after a failure or two must not keep its count (memory that
    /// would grow with every such plugin, and a head start towards removal for a later
    /// registration of the same source and origin).
    pub fn forget_unheld(&mut self, held: impl Fn(&str, &CallbackOrigin) -> bool) {
        self.counts
            .retain(|(source, origin), _| held(source, origin));
    }

    /// Current count for a pair (zero when unknown).
    #[cfg(test)]
    fn count(&self, source: &str, origin: &CallbackOrigin) -> u32 {
        self.counts
            .get(&(source.to_owned(), origin.clone()))
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::Liveness::*;
    use super::*;
    use crate::domain::callback_url::CallbackUrl;

    fn origin(url: &str) -> CallbackOrigin {
        CallbackUrl::parse(url).unwrap().origin().clone()
    }

    #[test]
    fn third_consecutive_failure_reports_removal_once() {
        let mut t = FailureTracker::new();
        let o = origin("http://127.0.0.1:9/a");
        assert_eq!(t.record("plugin:x", &o, ConnectFailed), None);
        assert_eq!(t.record("plugin:x", &o, ConnectFailed), None);
        assert_eq!(t.record("plugin:x", &o, ConnectFailed), Some(3));
        assert_eq!(t.count("plugin:x", &o), 0);
    }

    #[test]
    fn a_success_resets_the_count() {
        let mut t = FailureTracker::new();
        let o = origin("http://127.0.0.1:9/a");
        for l in [
            ConnectFailed,
            ConnectFailed,
            Reachable,
            ConnectFailed,
            ConnectFailed,
        ] {
            assert_eq!(t.record("plugin:x", &o, l), None);
        }
        assert_eq!(t.count("plugin:x", &o), 2);
    }

    #[test]
    fn only_plugin_sources_count() {
        let mut t = FailureTracker::new();
        let o = origin("http://127.0.0.1:9/a");
        for _ in 0..6 {
            assert_eq!(t.record("external", &o, ConnectFailed), None);
            assert_eq!(t.record("Plugin:x", &o, ConnectFailed), None);
        }
    }

    #[test]
    fn unheld_pairs_are_forgotten() {
        let mut t = FailureTracker::new();
        let kept = origin("http://127.0.0.1:9/a");
        let gone = origin("http://127.0.0.1:10/a");
        t.record("plugin:x", &kept, ConnectFailed);
        t.record("plugin:x", &gone, ConnectFailed);
        t.record("plugin:x", &gone, ConnectFailed);
        t.forget_unheld(|_, o| *o == kept);
        assert_eq!(t.count("plugin:x", &kept), 1);
        assert_eq!(t.count("plugin:x", &gone), 0);
        // A new registration of the forgotten pair starts from zero: three more to go.
        assert_eq!(t.record("plugin:x", &gone, ConnectFailed), None);
        assert_eq!(t.record("plugin:x", &gone, ConnectFailed), None);
        assert_eq!(t.record("plugin:x", &gone, ConnectFailed), Some(3));
        t.forget_unheld(|_, _| false);
        assert!(t.is_empty());
    }

    #[test]
    fn origins_and_sources_count_apart() {
        let mut t = FailureTracker::new();
        let a = origin("http://127.0.0.1:9/a");
        let b = origin("http://127.0.0.1:10/a");
        t.record("plugin:x", &a, ConnectFailed);
        t.record("plugin:x", &b, ConnectFailed);
        t.record("plugin:y", &a, ConnectFailed);
        assert_eq!(t.count("plugin:x", &a), 1);
        assert_eq!(t.count("plugin:x", &origin("http://127.0.0.1:9/other")), 1);
    }
}
