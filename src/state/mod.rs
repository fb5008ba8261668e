//! The durable registrations of `--state FILE`: what survives a restart, in a `redb` file.
//!
//! Kept: every tool a plugin registered over HTTP, per character, as the registration's own
//! body (so a restored tool is read by the same parser as a new one), with its source and
//! callback origin; every MCP server a plugin registered at run time, as its registration's
//! body, with the tools of its last listing that were registered (so they can be listed while
//! the server is not back); each source's bound token hash (until the operator frees it); and,
//! for a restored tool or server not back yet, when it went dormant (so its dormant time counts
//! across restarts). Not kept: in-process tools, the configured MCP servers' tools (their
//! servers list them again), the configured sources' bindings, sessions, calls.
//!
//! The router hands each change to [`StateStore::submit`] in the order it routes them, and
//! answers the change only once the returned receiver says its commit is durable. One thread
//! owns the database: it takes every change waiting in its queue into one write transaction
//! (changes that arrive together commit together, one `fsync` for all of them), commits, and
//! then answers each. A change is one unit: after a crash it is there whole or not at all.
//!
//! The file carries a format version ([`FORMAT_VERSION`]); a file of another version is refused
//! at start with an error that says so, never read as if it were this one.

pub(crate) mod settings;

use std::path::{Path, PathBuf};
use std::sync::mpsc;

use anyhow::{Context, bail};
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::domain::registry::Change;

/// The layout this server writes: the tables below, their keys and values.
pub(crate) const FORMAT_VERSION: u64 = 2;

/// The older layouts this server reads, and upgrades when it opens them: version 1 had no
/// table of MCP servers (an empty one is added).
const READS_VERSIONS: [u64; 1] = [1];

/// The most changes one transaction takes: bounds the time the first of them waits.
const MAX_BATCH: usize = 1024;

/// `"format"` → the format version.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// (character, tool name) → [`StoredTool`] as JSON.
const TOOLS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("tools");
/// Source → the SHA-256 hash of the token it is bound to.
const OWNERS: TableDefinition<&str, &[u8]> = TableDefinition::new("owners");
/// MCP server name → [`StoredMcpServer`] as JSON (since version 2).
const MCP_SERVERS: TableDefinition<&str, &[u8]> = TableDefinition::new("mcp_servers");

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
    /// (source, token hash).
    pub owners: Vec<(String, [u8; 32])>,
    /// (MCP server name, record), in name order.
    pub mcp_servers: Vec<(String, StoredMcpServer)>,
}

/// Whether a change is durable: `Ok` once its transaction committed.
pub(crate) type Durable = oneshot::Receiver<Result<(), String>>;

type Request = (Op, oneshot::Sender<Result<(), String>>);

/// The store's queue; its one thread owns the database. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct StateStore {
    queue: mpsc::Sender<Request>,
}

impl StateStore {
    /// Opens (or creates) the store at `path`, reads what it holds, and starts its writer.
    pub(crate) fn open(path: &Path) -> anyhow::Result<(Self, Restored)> {
        let db = open_database(path)?;
        let restored = read_all(&db).with_context(|| format!("state file {}", path.display()))?;
        let (queue, requests) = mpsc::channel();
        let name = path.to_owned();
        std::thread::Builder::new()
            .name("state-store".into())
            .spawn(move || write_loop(db, name, requests))
            .context("cannot start the state store's thread")?;
        Ok((Self { queue }, restored))
    }

    /// Queues `op` after every op submitted before it; the receiver says when it is durable.
    pub(crate) fn submit(&self, op: Op) -> Durable {
        let (done, durable) = oneshot::channel();
        if self.queue.send((op, done)).is_err() {
            // The writer has stopped; the dropped sender answers the receiver with an error.
            tracing::error!("the state store has stopped: a change was not stored");
        }
        durable
    }
}

/// Opens or creates the database and checks (or writes) its format version.
fn open_database(path: &Path) -> anyhow::Result<Database> {
    let db = Database::create(path).map_err(|e| {
        anyhow::anyhow!(
            "cannot open state file {}: {e} (is it a runtime-tools state file, not in use by \
             another server?)",
            path.display()
        )
    })?;
    let txn = db.begin_write()?;
    {
        let mut meta = txn.open_table(META)?;
        let version = meta.get("format")?.map(|v| v.value());
        match version {
            None if is_empty(&txn)? => {
                meta.insert("format", FORMAT_VERSION)?;
            }
            None => bail!(
                "state file {} has tables but no format version: it was not written by this \
                 server; move it aside",
                path.display()
            ),
            Some(FORMAT_VERSION) => {}
            Some(older) if READS_VERSIONS.contains(&older) => {
                meta.insert("format", FORMAT_VERSION)?;
                tracing::info!(
                    path = %path.display(),
                    from = older,
                    to = FORMAT_VERSION,
                    "state file upgraded to this server's format"
                );
            }
            Some(other) => bail!(
                "state file {} has format version {other}, and this server reads versions \
                 {READS_VERSIONS:?} and {FORMAT_VERSION} only: run the server version that wrote \
                 it, or move the file aside to start empty",
                path.display()
            ),
        }
        // Created when missing, so that readers find every table.
        txn.open_table(TOOLS)?;
        txn.open_table(OWNERS)?;
        txn.open_table(MCP_SERVERS)?;
    }
    txn.commit()?;
    Ok(db)
}

/// Whether the data tables are empty (a new file).
fn is_empty(txn: &redb::WriteTransaction) -> anyhow::Result<bool> {
    Ok(txn.open_table(TOOLS)?.len()? == 0
        && txn.open_table(OWNERS)?.len()? == 0
        && txn.open_table(MCP_SERVERS)?.len()? == 0)
}

fn read_all(db: &Database) -> anyhow::Result<Restored> {
    let txn = db.begin_read()?;
    let mut restored = Restored::default();
    let tools = txn.open_table(TOOLS)?;
    for row in tools.iter()? {
        let (key, value) = row?;
        let (character, name) = key.value();
        let stored: StoredTool = serde_json::from_slice(value.value())
            .with_context(|| format!("the stored tool {name:?} of {character:?}"))?;
        restored
            .tools
            .push((character.to_owned(), name.to_owned(), stored));
    }
    let owners = txn.open_table(OWNERS)?;
    for row in owners.iter()? {
        let (source, hash) = row?;
        let hash: [u8; 32] = hash
            .value()
            .try_into()
            .with_context(|| format!("the token hash of source {:?}", source.value()))?;
        restored.owners.push((source.value().to_owned(), hash));
    }
    let servers = txn.open_table(MCP_SERVERS)?;
    for row in servers.iter()? {
        let (name, value) = row?;
        let stored: StoredMcpServer = serde_json::from_slice(value.value())
            .with_context(|| format!("the stored MCP server {:?}", name.value()))?;
        restored.mcp_servers.push((name.value().to_owned(), stored));
    }
    Ok(restored)
}

/// The writer: every op waiting goes into one transaction, committed (durably) before any of
/// them is answered.
fn write_loop(db: Database, path: PathBuf, requests: mpsc::Receiver<Request>) {
    while let Ok(first) = requests.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match requests.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        let outcome = commit(&db, batch.iter().map(|(op, _)| op)).map_err(|e| {
            let text = format!("state file {}: {e:#}", path.display());
            tracing::error!(changes = batch.len(), "changes could not be stored: {text}");
            text
        });
        for (_, done) in batch {
            let _ = done.send(outcome.clone());
        }
    }
}

fn commit<'a>(db: &Database, ops: impl Iterator<Item = &'a Op>) -> anyhow::Result<()> {
    let txn = db.begin_write()?;
    {
        let mut tables = Tables {
            tools: txn.open_table(TOOLS)?,
            owners: txn.open_table(OWNERS)?,
            servers: txn.open_table(MCP_SERVERS)?,
        };
        for op in ops {
            apply(&mut tables, op)?;
        }
    }
    txn.commit()?;
    Ok(())
}

type Tools<'t> = redb::Table<'t, (&'static str, &'static str), &'static [u8]>;
type ByName<'t> = redb::Table<'t, &'static str, &'static [u8]>;

/// The tables one transaction writes.
struct Tables<'t> {
    tools: Tools<'t>,
    owners: ByName<'t>,
    servers: ByName<'t>,
}

fn apply(tables: &mut Tables<'_>, op: &Op) -> anyhow::Result<()> {
    let tools = &mut tables.tools;
    match op {
        Op::Register {
            characters,
            name,
            stored,
        } => {
            let value = stored.as_ref().map(serde_json::to_vec).transpose()?;
            for character in characters {
                match &value {
                    Some(value) => tools.insert((character.as_str(), name.as_str()), &value[..])?,
                    None => tools.remove((character.as_str(), name.as_str()))?,
                };
            }
        }
        Op::Unregister { characters, name } => {
            for character in characters {
                tools.remove((character.as_str(), name.as_str()))?;
            }
        }
        Op::Replace { characters, names } => {
            for character in characters {
                for name in names {
                    tools.remove((character.as_str(), name.as_str()))?;
                }
            }
        }
        Op::Clear { characters, source } => {
            remove_where(tools, characters, |t| t.source == *source)?;
        }
        Op::RemoveOrigin {
            characters,
            source,
            origin,
        } => {
            remove_where(tools, characters, |t| {
                t.source == *source && t.origin == *origin
            })?;
        }
        Op::Bind { source, hash } => {
            tables.owners.insert(source.as_str(), &hash[..])?;
        }
        Op::McpRegister { name, stored } => {
            let value = serde_json::to_vec(stored)?;
            tables.servers.insert(name.as_str(), &value[..])?;
        }
        Op::McpUnregister { name } => {
            tables.servers.remove(name.as_str())?;
        }
        Op::Unbind { source } => {
            tables.owners.remove(source.as_str())?;
        }
        Op::Dormant {
            tools: dormant,
            servers,
            since,
        } => {
            for (character, name) in dormant {
                mark_tool(tools, character, name, |t| {
                    t.dormant_since.get_or_insert(*since);
                })?;
            }
            for name in servers {
                let Some(value) = tables
                    .servers
                    .get(name.as_str())?
                    .map(|v| v.value().to_vec())
                else {
                    continue;
                };
                let mut stored: StoredMcpServer = serde_json::from_slice(&value)?;
                stored.dormant_since.get_or_insert(*since);
                let value = serde_json::to_vec(&stored)?;
                tables.servers.insert(name.as_str(), &value[..])?;
            }
        }
        Op::Awake { tools: awake } => {
            for (character, name) in awake {
                mark_tool(tools, character, name, |t| t.dormant_since = None)?;
            }
        }
    }
    Ok(())
}

/// Rewrites the stored tool (`character`, `name`) with `change` applied, if it is stored.
fn mark_tool(
    tools: &mut Tools<'_>,
    character: &str,
    name: &str,
    change: impl FnOnce(&mut StoredTool),
) -> anyhow::Result<()> {
    let Some(value) = tools.get((character, name))?.map(|v| v.value().to_vec()) else {
        return Ok(());
    };
    let mut stored: StoredTool = serde_json::from_slice(&value)?;
    change(&mut stored);
    let value = serde_json::to_vec(&stored)?;
    tools.insert((character, name), &value[..])?;
    Ok(())
}

/// Removes the rows of `characters` whose record matches `doomed`.
fn remove_where(
    tools: &mut Tools<'_>,
    characters: &[String],
    doomed: impl Fn(&StoredTool) -> bool,
) -> anyhow::Result<()> {
    tools.retain(|(character, _), value| {
        !(characters.iter().any(|c| c == character)
            && serde_json::from_slice::<StoredTool>(value).is_ok_and(|t| doomed(&t)))
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(source: &str, origin: &str) -> Option<StoredTool> {
        Some(StoredTool {
            source: source.into(),
            origin: origin.into(),
            body: "{}".into(),
            dormant_since: None,
        })
    }

    fn register(name: &str, source: &str, origin: &str) -> Op {
        Op::Register {
            characters: vec!["A".into(), "B".into()],
            name: name.into(),
            stored: stored(source, origin),
        }
    }

    async fn run(store: &StateStore, op: Op) {
        store.submit(op).await.unwrap().unwrap();
    }

    fn names(restored: &Restored) -> Vec<String> {
        restored
            .tools
            .iter()
            .map(|(c, n, _)| format!("{c}/{n}"))
            .collect()
    }

    #[test]
    fn changes_survive_reopening_and_a_foreign_version_is_refused() {
        let dir = std::env::temp_dir().join(format!("state-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.redb");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        {
            let (store, restored) = StateStore::open(&path).unwrap();
            assert!(restored.tools.is_empty());
            rt.block_on(async {
                run(&store, register("a", "plugin:x", "http://127.0.0.1:1")).await;
                run(&store, register("b", "plugin:x", "http://127.0.0.1:2")).await;
                run(&store, register("c", "plugin:y", "http://127.0.0.1:1")).await;
                run(
                    &store,
                    Op::Unregister {
                        characters: vec!["B".into()],
                        name: "c".into(),
                    },
                )
                .await;
                run(
                    &store,
                    Op::RemoveOrigin {
                        characters: vec!["A".into(), "B".into()],
                        source: "plugin:x".into(),
                        origin: "http://127.0.0.1:2".into(),
                    },
                )
                .await;
                run(
                    &store,
                    Op::Bind {
                        source: "plugin:x".into(),
                        hash: [7; 32],
                    },
                )
                .await;
                for name in ["m1", "m2"] {
                    let stored = StoredMcpServer {
                        source: format!("mcp:{name}"),
                        body: "{}".into(),
                        tools: "[]".into(),
                        dormant_since: None,
                    };
                    let name = name.into();
                    run(&store, Op::McpRegister { name, stored }).await;
                }
                run(&store, Op::McpUnregister { name: "m1".into() }).await;
                let bind = |source: &str| Op::Bind {
                    source: source.into(),
                    hash: [8; 32],
                };
                run(&store, bind("plugin:y")).await;
                let unbind = Op::Unbind {
                    source: "plugin:y".into(),
                };
                run(&store, unbind).await;
                // A tool already dormant keeps its time; an awake one loses it.
                for since in [5, 9] {
                    let dormant = Op::Dormant {
                        tools: vec![("A".into(), "a".into()), ("B".into(), "a".into())],
                        servers: vec!["m2".into(), "gone".into()],
                        since,
                    };
                    run(&store, dormant).await;
                }
                let awake = Op::Awake {
                    tools: vec![("B".into(), "a".into()), ("B".into(), "gone".into())],
                };
                run(&store, awake).await;
            });
        }
        // The writer thread ends with its queue; the file is closed once it has.
        let reopened = loop {
            match StateStore::open(&path) {
                Ok(opened) => break opened,
                Err(e) if e.to_string().contains("already open") => std::thread::yield_now(),
                Err(e) => panic!("{e:#}"),
            }
        };
        let (store, restored) = reopened;
        assert_eq!(names(&restored), ["A/a", "A/c", "B/a"]);
        let since: Vec<_> = restored
            .tools
            .iter()
            .map(|(_, _, t)| t.dormant_since)
            .collect();
        assert_eq!(since, [Some(5), None, None]);
        assert_eq!(restored.owners, [("plugin:x".to_owned(), [7; 32])]);
        let servers: Vec<_> = restored
            .mcp_servers
            .iter()
            .map(|(n, s)| (n.as_str(), s.source.as_str(), s.dormant_since))
            .collect();
        assert_eq!(servers, [("m2", "mcp:m2", Some(5))]);
        rt.block_on(run(
            &store,
            Op::Clear {
                characters: vec!["A".into()],
                source: "plugin:x".into(),
            },
        ));
        drop(store);

        // A file of another format version is refused, naming both versions.
        let other = dir.join("other.redb");
        {
            let db = Database::create(&other).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(META).unwrap().insert("format", 99).unwrap();
            txn.commit().unwrap();
        }
        let refused = StateStore::open(&other).unwrap_err().to_string();
        assert!(refused.contains("format version 99"), "{refused}");
        assert!(
            refused.contains("reads versions [1] and 2 only"),
            "{refused}"
        );

        // A file of version 1 (no table of MCP servers) is read, and upgraded.
        let older = dir.join("older.redb");
        {
            let db = Database::create(&older).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(META).unwrap().insert("format", 1).unwrap();
            txn.open_table(OWNERS)
                .unwrap()
                .insert("plugin:x", &[7u8; 32][..])
                .unwrap();
            txn.commit().unwrap();
        }
        let (_, restored) = StateStore::open(&older).unwrap();
        assert_eq!(restored.owners.len(), 1);
        assert!(restored.mcp_servers.is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }
}
