//! The state file's tables, and what the writer and the opening do with them: apply a batch of
//! [`Op`]s in one transaction, count commits, read everything back, and bring an older layout up
//! to this one.

use anyhow::{Context, bail};
use redb::{Database, ReadableTable, ReadableTableMetadata, TableDefinition, WriteTransaction};

use super::{FORMAT_VERSION, Op, READS_VERSIONS, Restored, StoredMcpServer, StoredTool};
use crate::domain::ownership::{SaltedHash, TokenHash};

/// `"format"` → the format version; `"commits"` → how many commits this server made to the file
/// (since version 3), so that a store that went back to an earlier commit can be told.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// (character, tool name) → [`StoredTool`] as JSON.
const TOOLS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("tools");
/// Source → the salted hash of the token it is bound to ([`SaltedHash::to_bytes`]; until
/// version 2, the token's plain SHA-256).
const OWNERS: TableDefinition<&str, &[u8]> = TableDefinition::new("owners");
/// MCP server name → [`StoredMcpServer`] as JSON (since version 2).
const MCP_SERVERS: TableDefinition<&str, &[u8]> = TableDefinition::new("mcp_servers");

const FORMAT_KEY: &str = "format";
const COMMITS_KEY: &str = "commits";

/// Checks (or writes, in a new file) the format version, upgrading an older layout this server
/// reads; counts the commit. `file` names the file in errors.
pub(super) fn check_format(db: &Database, file: &str) -> anyhow::Result<()> {
    let txn = db.begin_write()?;
    {
        let mut meta = txn.open_table(META)?;
        let version = meta.get(FORMAT_KEY)?.map(|v| v.value());
        match version {
            None if is_empty(&txn)? => {
                meta.insert(FORMAT_KEY, FORMAT_VERSION)?;
            }
            None => bail!(
                "state file {file} has tables but no format version: it was not written by this \
                 server"
            ),
            Some(FORMAT_VERSION) => {}
            Some(older) if READS_VERSIONS.contains(&older) => {
                meta.insert(FORMAT_KEY, FORMAT_VERSION)?;
                if older < 3 {
                    salt_owners(&txn)?;
                }
                tracing::info!(
                    path = file,
                    from = older,
                    to = FORMAT_VERSION,
                    "state file upgraded to this server's format"
                );
            }
            Some(other) => bail!(
                "state file {file} has format version {other}, and this server reads versions \
                 {READS_VERSIONS:?} and {FORMAT_VERSION} only: run the server version that wrote \
                 it"
            ),
        }
        // Created when missing, so that readers find every table.
        txn.open_table(TOOLS)?;
        txn.open_table(OWNERS)?;
        txn.open_table(MCP_SERVERS)?;
    }
    count_commit(&txn)?;
    txn.commit()?;
    Ok(())
}

/// Whether the data tables are empty (a new file).
fn is_empty(txn: &WriteTransaction) -> anyhow::Result<bool> {
    Ok(txn.open_table(TOOLS)?.len()? == 0
        && txn.open_table(OWNERS)?.len()? == 0
        && txn.open_table(MCP_SERVERS)?.len()? == 0)
}

/// Replaces each binding's plain token hash (versions 1 and 2) by a salted one: the salted hash
/// is made of the plain one, so every binding still admits its token.
fn salt_owners(txn: &WriteTransaction) -> anyhow::Result<()> {
    let mut owners = txn.open_table(OWNERS)?;
    let mut plain = Vec::new();
    for row in owners.iter()? {
        let (source, hash) = row?;
        if let Ok(hash) = <[u8; 32]>::try_from(hash.value()) {
            plain.push((source.value().to_owned(), TokenHash::from_bytes(hash)));
        }
    }
    for (source, token) in plain {
        owners.insert(source.as_str(), &SaltedHash::new(&token).to_bytes()[..])?;
    }
    Ok(())
}

/// Counts one more commit in `txn` (see [`META`]).
fn count_commit(txn: &WriteTransaction) -> anyhow::Result<u64> {
    let mut meta = txn.open_table(META)?;
    let next = meta.get(COMMITS_KEY)?.map_or(0, |v| v.value()) + 1;
    meta.insert(COMMITS_KEY, next)?;
    Ok(next)
}

/// How many commits the file has had (0 for a file older than version 3).
pub(super) fn commits(db: &Database) -> anyhow::Result<u64> {
    let txn = db.begin_read()?;
    let meta = match txn.open_table(META) {
        Ok(meta) => meta,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    Ok(meta.get(COMMITS_KEY)?.map_or(0, |v| v.value()))
}

/// Everything the file holds.
pub(super) fn read_all(db: &Database) -> anyhow::Result<Restored> {
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
        let salted = SaltedHash::from_bytes(hash.value())
            .with_context(|| format!("the token hash of source {:?}", source.value()))?;
        restored.owners.push((source.value().to_owned(), salted));
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

/// Applies `ops` in one transaction, counted as the file's next commit; returns that count
/// once the commit is durable.
pub(super) fn commit<'a>(db: &Database, ops: impl Iterator<Item = &'a Op>) -> anyhow::Result<u64> {
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
    let count = count_commit(&txn)?;
    txn.commit()?;
    Ok(count)
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
            // A salt of its own for each binding, made as it is stored.
            let salted = SaltedHash::new(&TokenHash::from_bytes(*hash));
            tables
                .owners
                .insert(source.as_str(), &salted.to_bytes()[..])?;
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

/// Test helpers that write files of other versions and layouts.
#[cfg(test)]
pub(super) mod older {
    use super::*;

    /// A file of format `version` holding one binding of `source` to `hash` as that version
    /// stored it (plain).
    pub(in crate::state) fn write(
        path: &std::path::Path,
        version: u64,
        bind: Option<(&str, [u8; 32])>,
    ) {
        let db = Database::create(path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert(FORMAT_KEY, version)
            .unwrap();
        if let Some((source, hash)) = bind {
            txn.open_table(OWNERS)
                .unwrap()
                .insert(source, &hash[..])
                .unwrap();
        }
        txn.commit().unwrap();
    }
}
