//! Restored tools that no model is given yet: `Dormant`, held by the router.
//!
//! A tool read back from the state store is dormant until its callback's origin accepts a
//! connection (then it becomes a registration like any other) or its plugin registers it again;
//! a change that would have removed it (unregister by name, clear of its source) removes it,
//! and one that stays dormant longer than the configured time is removed as an auto-removal.
//! The tools of an MCP server a plugin registered at run time are restored the same way, from
//! the server's last listing (`mcp`): they wake when the server answers again and its new
//! listing replaces them, which the MCP registry (`mcp::runtime`) sees to.

use std::time::{Duration, Instant};

use super::callback_url::{CallbackOrigin, CallbackUrl};
use super::tool::{SharedTool, ToolHandler};

/// The first wait after a probe that found nothing listening (a callback's origin, or a
/// restored MCP server): a plugin restarted with the server is usually back within a second.
pub(crate) const FIRST_PROBE_BACKOFF: Duration = Duration::from_millis(250);

/// The longest wait between two probes of one origin: a plugin that comes back is in use
/// within half a minute, and a probe a minute per origin costs nothing.
pub(crate) const MAX_PROBE_BACKOFF: Duration = Duration::from_secs(30);

/// The wait after `backoff` when the probe found nothing again: doubled, up to
/// [`MAX_PROBE_BACKOFF`].
pub(crate) fn next_backoff(backoff: Duration) -> Duration {
    (backoff * 2).min(MAX_PROBE_BACKOFF)
}

/// One restored tool of one character.
#[derive(Debug, Clone)]
pub(crate) struct DormantTool {
    pub character: String,
    pub tool: SharedTool,
    /// A tool of an MCP server registered at run time (not of an HTTP callback).
    pub mcp: bool,
}

/// The dormant tools, in the order they were restored.
#[derive(Debug)]
pub(crate) struct Dormant {
    tools: Vec<DormantTool>,
    /// When they were restored: each is removed `ttl` after it.
    since: Instant,
    ttl: Duration,
}

impl Dormant {
    pub(crate) fn new(tools: Vec<DormantTool>, ttl: Duration) -> Self {
        Self {
            tools,
            since: Instant::now(),
            ttl,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.tools.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// When the tools still dormant are to be removed.
    pub(crate) fn deadline(&self) -> Instant {
        self.since + self.ttl
    }

    /// Takes the tools of `characters` that `doomed` picks.
    fn take_where(
        &mut self,
        characters: &[&str],
        doomed: impl Fn(&DormantTool) -> bool,
    ) -> Vec<DormantTool> {
        let (taken, kept) = std::mem::take(&mut self.tools)
            .into_iter()
            .partition(|t| characters.contains(&t.character.as_str()) && doomed(t));
        self.tools = kept;
        taken
    }

    /// Takes the tools named `name` of `characters` (a registration or an unregistration of
    /// that name).
    pub(crate) fn take_named(&mut self, characters: &[&str], name: &str) -> Vec<DormantTool> {
        self.take_where(characters, |t| t.tool.name == name)
    }

    /// Takes the tools of `source` of `characters` (a clear).
    pub(crate) fn take_source(&mut self, characters: &[&str], source: &str) -> Vec<DormantTool> {
        self.take_where(characters, |t| t.tool.source == source)
    }

    /// Takes the tools of `characters` restored from the listing of the MCP server of `source`
    /// (its new listing replaces them, or the server went).
    pub(crate) fn take_mcp(&mut self, characters: &[&str], source: &str) -> Vec<DormantTool> {
        self.take_where(characters, |t| t.mcp && t.tool.source == source)
    }

    /// Takes every tool whose callback lives at `origin` (it accepted a connection).
    pub(crate) fn take_origin(&mut self, origin: &CallbackOrigin) -> Vec<DormantTool> {
        let (taken, kept) = std::mem::take(&mut self.tools)
            .into_iter()
            .partition(|t| t.tool.callback_origin() == Some(origin));
        self.tools = kept;
        taken
    }

    /// Takes every tool, once their time is up.
    pub(crate) fn take_expired(&mut self, now: Instant) -> Vec<DormantTool> {
        if now < self.deadline() {
            return Vec::new();
        }
        std::mem::take(&mut self.tools)
    }

    /// Puts back tools taken by a change that was then not made (the state store could not keep
    /// it); returns one callback URL of each of their origins, to probe again.
    pub(crate) fn give_back(&mut self, tools: Vec<DormantTool>) -> Vec<CallbackUrl> {
        let back = Self {
            tools,
            since: self.since,
            ttl: self.ttl,
        };
        let origins = back.origins();
        self.tools.extend(back.tools);
        origins
    }

    /// Whether a tool whose callback lives at `origin` is still dormant.
    pub(crate) fn waits_for(&self, origin: &CallbackOrigin) -> bool {
        self.tools
            .iter()
            .any(|t| t.tool.callback_origin() == Some(origin))
    }

    /// One callback URL of each origin the tools wait for.
    pub(crate) fn origins(&self) -> Vec<CallbackUrl> {
        let mut urls: Vec<CallbackUrl> = Vec::new();
        for t in &self.tools {
            if let ToolHandler::Remote(remote) = &t.tool.handler
                && !urls
                    .iter()
                    .any(|u| u.origin() == remote.callback_url.origin())
            {
                urls.push(remote.callback_url.clone());
            }
        }
        urls
    }

    /// The dormant tools of `character`.
    pub(crate) fn of(&self, character: &str) -> Vec<SharedTool> {
        self.tools
            .iter()
            .filter(|t| t.character == character)
            .map(|t| t.tool.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::domain::tool::{ToolSpec, empty_parameters};

    fn dormant(character: &str, name: &str, source: &str, port: u16) -> DormantTool {
        DormantTool {
            character: character.into(),
            tool: Arc::new(ToolSpec::remote(
                name,
                "",
                empty_parameters(),
                source,
                CallbackUrl::parse(&format!("http://127.0.0.1:{port}/{name}")).unwrap(),
                Duration::from_secs(30),
            )),
            mcp: false,
        }
    }

    fn names(tools: &[DormantTool]) -> Vec<String> {
        tools
            .iter()
            .map(|t| format!("{}/{}", t.character, t.tool.name))
            .collect()
    }

    #[test]
    fn taken_by_name_source_origin_and_time() {
        let mut d = Dormant::new(
            vec![
                dormant("A", "a", "plugin:x", 1),
                dormant("B", "a", "plugin:x", 1),
                dormant("A", "b", "plugin:y", 2),
                dormant("A", "c", "plugin:x", 3),
            ],
            Duration::from_secs(60),
        );
        assert_eq!(d.origins().len(), 3);
        assert_eq!(names(&d.take_named(&["B"], "a")), ["B/a"]);
        assert_eq!(names(&d.take_source(&["A", "B"], "plugin:y")), ["A/b"]);
        let origin = CallbackUrl::parse("http://127.0.0.1:1/")
            .unwrap()
            .origin()
            .clone();
        assert!(d.waits_for(&origin));
        assert_eq!(names(&d.take_origin(&origin)), ["A/a"]);
        assert!(!d.waits_for(&origin));
        assert!(d.take_expired(Instant::now()).is_empty());
        let later = Instant::now() + Duration::from_secs(61);
        assert_eq!(names(&d.take_expired(later)), ["A/c"]);
        assert!(d.is_empty());
    }
}
