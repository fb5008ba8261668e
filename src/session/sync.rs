//! Acknowledged tool sync, as a plain state machine.
//!
//! At most one `session.update` is in flight. Tool lists that arrive meanwhile are merged: only
//! the newest is sent next, once the one in flight is settled. Every waiter is tied to the
//! version that carried its change and settles with the first update at or past that version.

/// One update in flight and the waiters of the versions not yet settled.
#[derive(Debug)]
pub(crate) struct SyncState<W> {
    /// Version of the newest tool list.
    latest: u64,
    /// Version of the last update sent.
    sent: u64,
    /// Version of the update sent and not yet settled.
    in_flight: Option<u64>,
    waiters: Vec<(u64, W)>,
}

impl<W> Default for SyncState<W> {
    fn default() -> Self {
        Self {
            latest: 0,
            sent: 0,
            in_flight: None,
            waiters: Vec::new(),
        }
    }
}

impl<W> SyncState<W> {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A new tool list arrived (with whoever waits for it). Returns the version to send now, if
    /// nothing is in flight.
    pub(crate) fn changed(&mut self, waiter: Option<W>) -> Option<u64> {
        self.latest += 1;
        if let Some(w) = waiter {
            self.waiters.push((self.latest, w));
        }
        self.next_to_send()
    }

    /// The connection is (re)established: the current list must go out first.
    pub(crate) fn connected(&mut self) -> u64 {
        self.in_flight = Some(self.latest);
        self.sent = self.latest;
        self.latest
    }

    /// The update in flight carries the latest change too (it is built from the newest list
    /// as it goes): nothing is left to send after it.
    pub(crate) fn covers_latest(&mut self) {
        if self.in_flight.is_some() {
            self.in_flight = Some(self.latest);
            self.sent = self.latest;
        }
    }

    pub(crate) fn in_flight(&self) -> Option<u64> {
        self.in_flight
    }

    /// The version of the newest tool list: the update that carries it settles everything
    /// waiting for it.
    pub(crate) fn latest(&self) -> u64 {
        self.latest
    }

    /// The update in flight was acknowledged. Returns the waiters it satisfies and the version
    /// to send next, if newer changes are waiting.
    pub(crate) fn acknowledged(&mut self) -> Option<Settled<W>> {
        self.settle()
    }

    /// The update in flight was refused or timed out: its waiters fail; newer changes go next.
    pub(crate) fn failed(&mut self) -> Option<Settled<W>> {
        self.settle()
    }

    /// The connection is gone: every waiter fails, nothing is in flight.
    pub(crate) fn disconnected(&mut self) -> Vec<W> {
        self.in_flight = None;
        self.waiters.drain(..).map(|(_, w)| w).collect()
    }

    fn settle(&mut self) -> Option<Settled<W>> {
        let version = self.in_flight.take()?;
        let (settled, waiting): (Vec<_>, Vec<_>) =
            self.waiters.drain(..).partition(|(v, _)| *v <= version);
        self.waiters = waiting;
        Some(Settled {
            version,
            waiters: settled.into_iter().map(|(_, w)| w).collect(),
            send_next: self.next_to_send(),
        })
    }

    fn next_to_send(&mut self) -> Option<u64> {
        if self.in_flight.is_none() && self.latest > self.sent {
            self.in_flight = Some(self.latest);
            self.sent = self.latest;
            Some(self.latest)
        } else {
            None
        }
    }
}

/// What settling one update decided.
#[derive(Debug)]
pub(crate) struct Settled<W> {
    /// The version the settled update carried.
    pub version: u64,
    pub waiters: Vec<W>,
    pub send_next: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_in_flight_and_changes_merge() {
        let mut s = SyncState::new();
        assert_eq!(s.changed(Some("a")), Some(1));
        assert_eq!(s.changed(Some("b")), None);
        assert_eq!(s.changed(Some("c")), None);
        let settled = s.acknowledged().unwrap();
        assert_eq!(settled.waiters, ["a"]);
        // b and c are merged into one update, version 3.
        assert_eq!(settled.send_next, Some(3));
        let settled = s.acknowledged().unwrap();
        assert_eq!(settled.waiters, ["b", "c"]);
        assert_eq!(settled.send_next, None);
        assert!(s.acknowledged().is_none(), "a second ack settles nothing");
    }

    #[test]
    fn failure_settles_only_what_was_sent() {
        let mut s = SyncState::new();
        s.changed(Some(1));
        s.changed(Some(2));
        let settled = s.failed().unwrap();
        assert_eq!(settled.waiters, [1]);
        assert_eq!(settled.send_next, Some(2));
    }

    #[test]
    fn disconnect_fails_everyone() {
        let mut s = SyncState::new();
        s.changed(Some(1));
        s.changed(Some(2));
        assert_eq!(s.disconnected(), [1, 2]);
        assert_eq!(s.in_flight(), None);
        assert_eq!(s.connected(), 2);
    }
}
