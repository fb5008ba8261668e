//! `Directory`: every character's ledger, in configuration order, shared for reading.
//!
//! The router is its only writer (every change goes through the router's mailbox, so changes stay
//! ordered); HTTP workers read it directly to resolve a tool for an invoke, without a round trip
//! to the router's thread. Reads see the state between two router messages.

use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::router::{ResolvedTool, RoleTools, RouterError};
use crate::domain::registry::ToolRegistry;

/// One character's ledger: every tool that applies to it, last writer wins.
#[derive(Debug, Clone)]
pub struct Ledger {
    pub character: String,
    pub tools: ToolRegistry,
}

/// A shared handle on the ledgers; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Directory(Arc<RwLock<Vec<Ledger>>>);

impl Directory {
    pub fn new() -> Self {
        Self::default()
    }

    /// For the router only: the ledgers to change.
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, Vec<Ledger>> {
        // A panic while holding the lock cannot leave a ledger half-changed in a way that matters
        // more than losing every tool: keep serving.
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Vec<Ledger>> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tool `name` of `role`, or (for `None` / `""`) of the first character, in
    /// configuration order, that has it.
    pub fn resolve(&self, role: Option<&str>, name: &str) -> Result<ResolvedTool, RouterError> {
        let role = role.filter(|r| !r.is_empty());
        let ledgers = self.read();
        let mut available: Vec<String> = Vec::new();
        let mut found_role = false;
        for ledger in ledgers.iter() {
            if role.is_some_and(|r| r != ledger.character) {
                continue;
            }
            found_role = true;
            if let Some(tool) = ledger.tools.get(name) {
                return Ok(ResolvedTool {
                    role: ledger.character.clone(),
                    tool: tool.clone(),
                });
            }
            for n in ledger.tools.names() {
                if !available.iter().any(|a| a == n) {
                    available.push(n.to_owned());
                }
            }
        }
        if let Some(role) = role
            && !found_role
        {
            return Err(RouterError::UnknownRole(role.to_owned()));
        }
        Err(RouterError::ToolNotFound {
            name: name.to_owned(),
            role: role.map(str::to_owned),
            available,
        })
    }

    /// The tools of `role`, or of every character, in configuration order.
    pub fn list(&self, role: Option<&str>) -> Result<Vec<RoleTools>, RouterError> {
        let role = role.filter(|r| !r.is_empty());
        let ledgers = self.read();
        let listed: Vec<RoleTools> = ledgers
            .iter()
            .filter(|l| role.is_none_or(|r| r == l.character))
            .map(|l| RoleTools {
                role: l.character.clone(),
                tools: l.tools.tools().cloned().collect(),
            })
            .collect();
        match role {
            Some(role) if listed.is_empty() => Err(RouterError::UnknownRole(role.to_owned())),
            _ => Ok(listed),
        }
    }
}
