//! The durable registrations of `--state FILE`: what survives a restart, in a `redb` file.
//!
//! Kept: every tool a plugin registered over HTTP, per character, as the registration's own
//! body (so a restored tool is read by the same parser as a new one), with its source and
//! callback origin; every MCP server a plugin registered at run time, as its registration's
//! body, with the tools of its last listing that were registered (so they can be listed while
//! the server is not back); each source's binding made at run time (until the operator frees
//! it), as a salted hash of its token (a salt of its own per binding: the file never holds a
//! token's plain SHA-256); and, for a restored tool or server not back yet, when it went dormant
//! (so its dormant time counts across restarts). Not kept: in-process tools, the configured MCP
//! servers' tools (their servers list them again), the configured sources' bindings, sessions,
//! calls.
//!
//! The router hands each change to [`StateStore::submit_ordered`] in the order it decides them,
//! and makes the change only once the store says its commit is durable: stored first, made
//! after, so a change the store could not keep is not made at all (and is answered 503). One
//! thread owns the database ([`writer`]): it commits what waits together, answers each change,
//! and after a failure opens the database again and tries again until the disk takes writes;
//! [`StoreStatus`] says whether it works. A change is one unit: after a crash it is there whole
//! or not at all.
//!
//! [`open`] opens the file: a new one with mode 0600; an empty one only when a new store is
//! asked for; one that cannot be opened, for any reason, refused with an error that names it
//! and says what to do, never a panic; and a store that opened on an earlier commit than the
//! last one written is reported.
//!
//! The file carries a format version ([`FORMAT_VERSION`]); a file of another version is refused
//! at start with an error that says so, never read as if it were this one; an older one this
//! server reads is upgraded as it is opened.

pub(crate) mod settings;

mod open;
mod tables;
mod writer;

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::domain::ownership::SaltedHash;
use crate::domain::registry::Change;

/// The layout this server writes: the tables of [`tables`], their keys and values.
pub(crate) const FORMAT_VERSION: u64 = 3;

/// The older layouts this server reads, and upgrades when it opens them: version 1 had no
/// table of MCP servers (an empty one is added); versions 1 and 2 kept each binding's plain
/// token hash (salted as the file is upgraded) and no commit counter.
const READS_VERSIONS: [u64; 2] = [1, 2];

/// A registered tool as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredTool {
    pub source: String,
    /// Its callback's origin (`scheme://host:port`), for auto-removal.
    pub origin: String,
    /// The registration's body (without `role`), as JSON text.
    pub body: String,
    /// When it went dormant (restored, and not back yet), in milliseconds since the Unix epoch:
    /// its dormant time counts from there across restarts. Absent for a tool that is active
    /// (a record written before this field was read as one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dormant_since: Option<u64>,
}

/// An MCP server registered at run time, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredMcpServer {
    pub source: String,
    /// The registration's body, as JSON text.
    pub body: String,
    /// The tools of its last listing that were registered (MCP `Tool`s), as JSON text.
    pub tools: String,
    /// When it went dormant, as [`StoredTool::dormant_since`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dormant_since: Option<u64>,
}

/// One change, as the store applies it: in one transaction, all or nothing.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// A tool registered for `characters`: stored when it can be (`stored`), otherwise (an
    /// in-process tool) what was stored under its name is removed.
    Register {
        characters: Vec<String>,
        name: String,
        stored: Option<StoredTool>,
    },
    Unregister {
        characters: Vec<String>,
        name: String,
    },
    Clear {
        characters: Vec<String>,
        source: String,
    },
    RemoveOrigin {
        characters: Vec<String>,
        source: String,
        origin: String,
    },
    /// An MCP server's listing: its tools replace those of the same names.
    Replace {
        characters: Vec<String>,
        names: Vec<String>,
    },
    /// A source bound to a token (its hash).
    Bind { source: String, hash: [u8; 32] },
    /// An MCP server registered (or registered again, or listed anew) under `name`.
    McpRegister {
        name: String,
        stored: StoredMcpServer,
    },
    /// The MCP server registered under `name` removed.
    McpUnregister { name: String },
    /// The binding of a source freed (by the operator).
    Unbind { source: String },
    /// Restored tools (character, name) and MCP servers went dormant at `since` (milliseconds
    /// since the Unix epoch); those already dormant keep their time.
    Dormant {
        tools: Vec<(String, String)>,
        servers: Vec<String>,
        since: u64,
    },
    /// Restored tools (character, name) are active again: their dormant time is over.
    Awake { tools: Vec<(String, String)> },
}

impl Op {
    /// The store's side of `change` on `characters`; `stored` is a registration's record.
    pub(crate) fn of(change: &Change, characters: Vec<String>, stored: Option<StoredTool>) -> Self {
        match change {
            Change::Register(tool) => Op::Register {
                characters,
                name: tool.name.clone(),
                stored,
            },
            Change::Unregister(name) => Op::Unregister {
                characters,
                name: name.clone(),
            },
            Change::ClearSource(source) => Op::Clear {
                characters,
                source: source.clone(),
            },
            Change::RemoveOrigin { source, origin } => Op::RemoveOrigin {
                characters,
                source: source.clone(),
                origin: origin.to_string(),
            },
            Change::ReplaceSource { tools, .. } => Op::Replace {
                characters,
                names: tools.iter().map(|t| t.name.clone()).collect(),
            },
        }
    }
}

/// What a store held when the server started.
#[derive(Debug, Default)]
pub(crate) struct Restored {
    /// (character, tool name, record), in key order.
    pub tools: Vec<(String, String, StoredTool)>,
    /// (source, its token's salted hash).
    pub owners: Vec<(String, SaltedHash)>,
    /// (MCP server name, record), in name order.
    pub mcp_servers: Vec<(String, StoredMcpServer)>,
}

/// Whether a change is durable: `Ok` once its transaction committed.
pub(crate) type Durable = oneshot::Receiver<Result<(), String>>;

/// Whether a change the router orders is durable: `Ok` once its transaction committed.
pub(crate) type Commit = oneshot::Receiver<Result<(), StoreFailure>>;

/// Why a change was not stored; nothing of it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreFailure {
    /// The store failure it comes of (numbered from 1; 0: none the router ordered): a change
    /// the router decided before it learned of this one is refused as well.
    pub number: u64,
    pub text: String,
}

impl StoreFailure {
    /// The store's thread is gone (the server is stopping).
    pub(crate) fn stopped() -> Self {
        Self {
            number: 0,
            text: "the state store stopped before the change was stored".to_owned(),
        }
    }
}

impl fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// One change in the store's queue.
struct Request {
    /// Applied in order, in one transaction with the rest of the batch.
    ops: Vec<Op>,
    /// For a change the router orders: the store failures it had learned of when it decided it.
    seen: Option<u64>,
    reply: Reply,
}

enum Reply {
    Durable(oneshot::Sender<Result<(), String>>),
    Commit(oneshot::Sender<Result<(), StoreFailure>>),
}

impl Request {
    fn answer(self, outcome: Result<(), StoreFailure>) {
        // A change whose requester stopped waiting stays stored; nobody is left to tell.
        match self.reply {
            Reply::Durable(done) => {
                let _ = done.send(outcome.map_err(|e| e.text));
            }
            Reply::Commit(done) => {
                let _ = done.send(outcome);
            }
        }
    }
}

/// Whether the store writes its file: `GET /api/health` shows it. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct StoreStatus(Arc<AtomicBool>);

impl StoreStatus {
    /// `"ok"`, or `"failing"` from a failed commit until one succeeds again.
    pub(crate) fn name(&self) -> &'static str {
        if self.0.load(Ordering::Acquire) {
            "failing"
        } else {
            "ok"
        }
    }

    fn set_failing(&self, failing: bool) {
        self.0.store(failing, Ordering::Release);
    }
}

/// The store's queue; its one thread owns the database. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct StateStore {
    queue: mpsc::Sender<Request>,
    status: StoreStatus,
}

impl StateStore {
    /// Opens (or creates) the store at `path`, reads what it holds, and starts its writer;
    /// `empty_is_new`: an empty file starts a new store, else it is refused (`--state-new`).
    pub(crate) fn open(path: &Path, empty_is_new: bool) -> anyhow::Result<(Self, Restored)> {
        let opened = open::at_start(path, empty_is_new)?;
        if let Some(went_back) = opened.went_back {
            open::warn_went_back(path, went_back);
        }
        let (queue, requests) = mpsc::channel();
        let status = StoreStatus::default();
        let writer = writer::Writer::new(path.to_owned(), opened.db, status.clone());
        std::thread::Builder::new()
            .name("state-store".into())
            .spawn(move || writer.run(requests))
            .context("cannot start the state store's thread")?;
        Ok((Self { queue, status }, opened.restored))
    }

    /// Queues `op` after every op submitted before it; the receiver says when it is durable.
    pub(crate) fn submit(&self, op: Op) -> Durable {
        let (done, durable) = oneshot::channel();
        self.send(vec![op], None, Reply::Durable(done));
        durable
    }

    /// Queues `ops`, one change the router ordered after every change before it, decided when
    /// the router had learned of `seen` store failures; the receiver says when it is durable.
    pub(crate) fn submit_ordered(&self, ops: Vec<Op>, seen: u64) -> Commit {
        let (done, commit) = oneshot::channel();
        self.send(ops, Some(seen), Reply::Commit(done));
        commit
    }

    fn send(&self, ops: Vec<Op>, seen: Option<u64>, reply: Reply) {
        let request = Request { ops, seen, reply };
        if self.queue.send(request).is_err() {
            // The writer has stopped; the dropped sender answers the receiver with an error.
            tracing::error!("the state store has stopped: a change was not stored");
        }
    }

    /// Whether the store writes its file.
    pub(crate) fn status(&self) -> StoreStatus {
        self.status.clone()
    }
}

#[cfg(test)]
mod tests;
