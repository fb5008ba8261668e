//! `Directory`: the read side of every character's tools — the characters in configuration
//! order, each with the [`ToolCell`] its manager publishes to.
//!
//! The router writes the roster (on adding or removing a character); each manager writes its own
//! cell. Readers — the router's listing and lookup messages, the HTTP listing and the invoke
//! route on their worker threads — load both without a lock and without a message. A listing
//! reads each character's latest snapshot; it is not one instant across characters (while a
//! change is being applied, one character may already show it and the next not yet).

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::RouterError;
use crate::chat::ChatEndpoint;
use crate::domain::callback_url::CallbackOrigin;
use crate::domain::registry::not_registered_text;
use crate::domain::snapshot::{ToolCell, ToolSnapshot};
use crate::domain::tool::SharedTool;
use crate::observe::metrics::ToolRoster;

/// One character as readers see it.
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    pub character: String,
    pub tools: ToolCell,
    /// Its text chat endpoint, if it has one.
    pub chat: Option<Arc<ChatEndpoint>>,
    /// Its restored tools no model is given yet (listed as dormant).
    pub dormant: Arc<[SharedTool]>,
}

/// A shared handle on the roster; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Directory(Arc<ArcSwap<Vec<Listed>>>);

/// One character's tools, as its manager last published them.
#[derive(Debug, Clone)]
pub struct RoleTools {
    pub role: String,
    pub tools: Arc<ToolSnapshot>,
    /// Restored tools waiting for their callback: listed, not given to any model.
    pub dormant: Arc<[SharedTool]>,
}

/// The character a chat request is for: its name, chat endpoint and tools.
#[derive(Debug, Clone)]
pub struct ChatTarget {
    pub role: String,
    pub chat: Arc<ChatEndpoint>,
    pub tools: ToolCell,
}

/// The tool a call names, and the character it was found in.
#[derive(Debug, Clone)]
pub struct ResolvedTool {
    pub role: String,
    pub tool: SharedTool,
}

impl Directory {
    /// For the router only: the new roster, in configuration order.
    pub(super) fn publish(&self, roster: Vec<Listed>) {
        self.0.store(Arc::new(roster));
    }

    /// The tool `name` of `role`, or (for `None` / `""`) of the first character, in
    /// configuration order, that has it.
    pub fn resolve(&self, role: Option<&str>, name: &str) -> Result<ResolvedTool, RouterError> {
        let role = role.filter(|r| !r.is_empty());
        let roster = self.0.load();
        let mut found_role = false;
        let mut snapshots = Vec::new();
        for listed in roster
            .iter()
            .filter(|l| role.is_none_or(|r| r == l.character))
        {
            found_role = true;
            let tools = listed.tools.load_full();
            if let Some(tool) = tools.registry().get(name) {
                return Ok(ResolvedTool {
                    role: listed.character.clone(),
                    tool: tool.clone(),
                });
            }
            snapshots.push(tools);
        }
        if let Some(role) = role
            && !found_role
        {
            return Err(RouterError::UnknownRole(role.to_owned()));
        }
        // Every name available to the call, once each, in the order first met.
        let mut available: Vec<&str> = Vec::new();
        for name in snapshots.iter().flat_map(|s| s.registry().names()) {
            if !available.contains(&name) {
                available.push(name);
            }
        }
        Err(RouterError::ToolNotFound(not_registered_text(
            name, role, available,
        )))
    }

    /// The character a chat request names (`None` or `""`: the only character with a chat).
    pub fn chat(&self, character: Option<&str>) -> Result<ChatTarget, RouterError> {
        let roster = self.0.load();
        let target = |l: &Listed| {
            l.chat.as_ref().map(|chat| ChatTarget {
                role: l.character.clone(),
                chat: chat.clone(),
                tools: l.tools.clone(),
            })
        };
        match character.filter(|c| !c.is_empty()) {
            Some(name) => {
                let listed = roster
                    .iter()
                    .find(|l| l.character == name)
                    .ok_or_else(|| RouterError::UnknownRole(name.to_owned()))?;
                target(listed).ok_or_else(|| {
                    RouterError::NoChat(format!(
                        "character {name} has no [character.chat]: configure its chat model to \
                         chat with it"
                    ))
                })
            }
            None => {
                let mut chats = roster.iter().filter_map(target);
                match (chats.next(), chats.next()) {
                    (Some(only), None) => Ok(only),
                    (None, _) => Err(RouterError::NoChat(
                        "no character has a [character.chat]: configure one's chat model".into(),
                    )),
                    (Some(_), Some(_)) => {
                        let names: Vec<String> = roster
                            .iter()
                            .filter(|l| l.chat.is_some())
                            .map(|l| l.character.clone())
                            .collect();
                        Err(RouterError::NoChat(format!(
                            "more than one character has a chat ({}): name one with \
                             ?character=NAME or the X-Character header",
                            names.join(", ")
                        )))
                    }
                }
            }
        }
    }

    /// Every character's chat endpoint, in configuration order.
    pub fn chat_endpoints(&self) -> Vec<(String, Arc<ChatEndpoint>)> {
        self.0
            .load()
            .iter()
            .filter_map(|l| Some((l.character.clone(), l.chat.clone()?)))
            .collect()
    }

    /// The tools of `role`, or of every character, in configuration order.
    pub fn list(&self, role: Option<&str>) -> Result<Vec<RoleTools>, RouterError> {
        let role = role.filter(|r| !r.is_empty());
        let listed: Vec<RoleTools> = self
            .0
            .load()
            .iter()
            .filter(|l| role.is_none_or(|r| r == l.character))
            .map(|l| RoleTools {
                role: l.character.clone(),
                tools: l.tools.load_full(),
                dormant: l.dormant.clone(),
            })
            .collect();
        match role {
            Some(role) if listed.is_empty() => Err(RouterError::UnknownRole(role.to_owned())),
            _ => Ok(listed),
        }
    }

    /// How many restored tools wait for their callback, over every character.
    pub fn dormant(&self) -> usize {
        self.0.load().iter().map(|l| l.dormant.len()).sum()
    }

    /// Whether any character holds a remote tool of `source` whose callback lives at `origin`.
    pub fn serves(&self, source: &str, origin: &CallbackOrigin) -> bool {
        self.0
            .load()
            .iter()
            .any(|l| l.tools.load().registry().serves(source, origin))
    }
}

/// The metrics ask the roster which labelled tool names are gone.
impl ToolRoster for Directory {
    fn has_tool(&self, name: &str) -> bool {
        self.0
            .load()
            .iter()
            .any(|l| l.tools.load().registry().get(name).is_some())
    }

    /// The characters' count and the numbers of the changes their snapshots include: every
    /// change a manager publishes raises its snapshot's number.
    fn version(&self) -> u64 {
        let roster = self.0.load();
        roster.iter().fold(roster.len() as u64, |version, l| {
            version.wrapping_add(l.tools.load().applied())
        })
    }
}
