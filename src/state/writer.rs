//! The store's one thread: it owns the database, takes every change waiting in its queue into
//! one write transaction (changes that arrive together commit together, one `fsync` for all of
//! them), commits, and then answers each.
//!
//! A commit that fails (a full disk, an I/O error, a panic inside `redb`) leaves `redb` refusing
//! every later one ("Previous I/O error occurred"), so the writer closes the database, opens it
//! again and tries the batch again, [`MAX_COMMIT_ATTEMPTS`] times in all; then the batch is
//! answered with the failure, and nothing of it is stored (the router makes none of it). While
//! the store fails, each new batch tries again, and so does the writer every
//! [`RETRY_INTERVAL`] without one (a commit that only counts itself): once the disk takes writes
//! again the store says so with a warning and [`StoreStatus`] (`GET /api/health`) says `ok`.
//!
//! Whether a failed commit reached the file all the same (its writes went through, then its
//! `fsync` reported an error) is read from the file's commit counter once it is open again: a
//! commit that is there is answered as stored, never as refused.
//!
//! A change the router orders carries the number of store failures the router had learned of
//! when it decided the change (`seen`). One decided before a failure the router has not learned
//! of is refused without a try: it may rest on a change that failed (a binding, a removal the
//! ownership check counted on), and the router undoes its side of each in order.

use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use redb::Database;

use super::{Op, Request, StoreFailure, StoreStatus, open, tables};

/// The most changes one transaction takes: bounds the time the first of them waits.
pub(super) const MAX_BATCH: usize = 1024;

/// Tries of one batch, each after opening the database again: a passing fault (an interrupted
/// write) gets a second chance, a full disk is answered within a few milliseconds.
const MAX_COMMIT_ATTEMPTS: u32 = 3;

/// The wait before the second try of a batch, doubled before each further one.
const FIRST_RETRY_WAIT: Duration = Duration::from_millis(20);

/// How often a failing store tries again while no change comes: `GET /api/health` says `ok`
/// within this long of the disk taking writes again, and a try costs one small commit.
pub(super) const RETRY_INTERVAL: Duration = Duration::from_secs(5);

pub(super) struct Writer {
    path: PathBuf,
    /// The path, for messages.
    file: String,
    /// `None` after a failure, until it is opened again.
    db: Option<Database>,
    /// The file's commit counter: the commits it has had.
    commits: u64,
    /// Failed batches that held a change the router orders, so far.
    failures: u64,
    /// Why the store fails, while it does.
    failing: Option<String>,
    status: StoreStatus,
    /// Tests: every commit reports an error after it reached the file (an `fsync` that failed
    /// after the writes went through).
    #[cfg(test)]
    pub(super) fail_after_commit: bool,
}

impl Writer {
    pub(super) fn new(path: PathBuf, db: Database, status: StoreStatus) -> Self {
        let commits = tables::commits(&db).unwrap_or_default();
        Self {
            file: path.display().to_string(),
            path,
            db: Some(db),
            commits,
            failures: 0,
            failing: None,
            status,
            #[cfg(test)]
            fail_after_commit: false,
        }
    }

    /// Takes batches until every sender is gone.
    pub(super) fn run(mut self, requests: mpsc::Receiver<Request>) {
        loop {
            let first = if self.failing.is_some() {
                match requests.recv_timeout(RETRY_INTERVAL) {
                    Ok(request) => request,
                    Err(RecvTimeoutError::Timeout) => {
                        self.retry_idle();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match requests.recv() {
                    Ok(request) => request,
                    Err(_) => break,
                }
            };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match requests.try_recv() {
                    Ok(more) => batch.push(more),
                    Err(_) => break,
                }
            }
            self.take(batch);
        }
        self.close();
    }

    /// Commits one batch and answers each of its changes.
    pub(super) fn take(&mut self, batch: Vec<Request>) {
        let failures = self.failures;
        let (stale, fresh): (Vec<Request>, Vec<Request>) = batch
            .into_iter()
            .partition(|r| r.seen.is_some_and(|seen| seen < failures));
        for request in stale {
            let why = self.failing.as_deref().unwrap_or("a commit failed");
            request.answer(Err(StoreFailure {
                number: failures,
                text: format!(
                    "state file {}: a change before this one could not be stored, and this one \
                     may rest on it: {why}",
                    self.file
                ),
            }));
        }
        if fresh.is_empty() {
            return;
        }
        match self.commit(fresh.iter().flat_map(|r| r.ops.iter())) {
            Ok(()) => {
                for request in fresh {
                    request.answer(Ok(()));
                }
            }
            Err(why) => {
                if fresh.iter().any(|r| r.seen.is_some()) {
                    self.failures += 1;
                }
                let failure = StoreFailure {
                    number: self.failures,
                    text: format!("state file {}: {why}", self.file),
                };
                tracing::warn!(
                    changes = fresh.len(),
                    "changes could not be stored, so they were not made: {failure}"
                );
                for request in fresh {
                    request.answer(Err(failure.clone()));
                }
            }
        }
    }

    /// Commits `ops` as one transaction, trying again (the database opened again) after a
    /// failure, up to [`MAX_COMMIT_ATTEMPTS`] tries.
    fn commit<'a>(&mut self, ops: impl Iterator<Item = &'a Op> + Clone) -> Result<(), String> {
        let mut wait = FIRST_RETRY_WAIT;
        let mut why = String::new();
        for attempt in 1..=MAX_COMMIT_ATTEMPTS {
            if attempt > 1 {
                std::thread::sleep(wait);
                wait *= 2;
            }
            match self.try_commit(ops.clone()) {
                Ok(()) => {
                    self.works();
                    return Ok(());
                }
                Err(e) => why = e,
            }
        }
        self.fails(&why);
        Err(why)
    }

    /// One try of a commit. After a failure the database is closed and opened again, and the
    /// commit counter says whether the commit reached the file all the same.
    fn try_commit<'a>(&mut self, ops: impl Iterator<Item = &'a Op>) -> Result<(), String> {
        let db = self.database()?;
        let outcome = open::quietly(|| tables::commit(db, ops))
            .unwrap_or_else(|panic| Err(anyhow::anyhow!("the database library failed: {panic}")));
        #[cfg(test)]
        let outcome = outcome.and_then(|count| {
            if self.fail_after_commit {
                anyhow::bail!("I/O error: the fsync failed (injected after commit {count})")
            }
            Ok(count)
        });
        let why = match outcome {
            Ok(count) => {
                self.commits = count;
                return Ok(());
            }
            Err(e) => format!("{e:#}"),
        };
        let attempted = self.commits + 1;
        self.close();
        let db = self.database()?;
        match open::quietly(|| tables::commits(db)) {
            Ok(Ok(count)) if count == attempted => {
                tracing::warn!(
                    path = %self.file,
                    "a commit that reported an error ({why}) is in the file all the same: its \
                     changes count as stored"
                );
                Ok(())
            }
            _ => Err(why),
        }
    }

    /// The open database, opened again if a failure closed it.
    fn database(&mut self) -> Result<&Database, String> {
        if self.db.is_none() {
            let db = open::again(&self.path).map_err(|e| format!("cannot open it again: {e}"))?;
            self.commits = open::quietly(|| tables::commits(&db))
                .ok()
                .and_then(Result::ok)
                .unwrap_or(self.commits);
            self.db = Some(db);
        }
        Ok(self.db.as_ref().expect("opened above"))
    }

    /// Closes the database (it is opened again on the next try).
    fn close(&mut self) {
        if let Some(db) = self.db.take() {
            // Closing writes the file's clean-shutdown mark, which a failed disk may refuse.
            let _ = open::quietly(move || drop(db));
        }
    }

    /// A try while the store fails and no change comes: a commit that only counts itself.
    fn retry_idle(&mut self) {
        match self.try_commit(std::iter::empty()) {
            Ok(()) => self.works(),
            Err(why) => {
                tracing::debug!(path = %self.file, "the state store still cannot write: {why}");
                self.failing = Some(why);
            }
        }
    }

    fn works(&mut self) {
        if self.failing.take().is_some() {
            self.status.set_failing(false);
            tracing::warn!(
                path = %self.file,
                "the state store writes its file again: changes are stored, and made, again"
            );
        }
    }

    fn fails(&mut self, why: &str) {
        if self.failing.is_none() {
            self.status.set_failing(true);
            tracing::error!(
                path = %self.file,
                retry_seconds = RETRY_INTERVAL.as_secs(),
                "the state store cannot write its file: every change is refused (503) and none \
                 is made until it can; it tries again with each change and every few seconds: \
                 {why}"
            );
        }
        self.failing = Some(why.to_owned());
    }
}
