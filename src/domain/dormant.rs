//! Restored tools that no model is given yet: `Dormant`, held by the router.
//!
//! A tool read back from the state store is dormant until it wakes (then it becomes a
//! registration like any other) or its plugin registers it again; a change that would have
//! removed it (unregister by name, clear of its source) removes it, and one that stays dormant
//! longer than the configured time — counted from when it first went dormant, across restarts
//! ([`DormantTool::since`]) — is removed as an auto-removal.
//!
//! Who may wake it: a tool of a source bound to a token waits for its owner first
//! ([`DormantTool::awaits_owner`]): a change carrying that token, or a wake with it, releases
//! the source's tools ([`Dormant::release`]), and only then does an HTTP answer from the
//! callback's origin wake them. A tool of an unbound source goes to whoever answers HTTP on its
//! callback's origin. The router probes only origins that some released tool waits for, one
//! probe per origin ([`Dormant::start_probing`]).
//!
//! The tools of an MCP server a plugin registered at run time are restored the same way, from
//! the server's last listing (`mcp`): they wake when the server answers again and its new
//! listing replaces them, which the MCP registry (`mcp::runtime`) sees to.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use super::callback_url::{CallbackOrigin, CallbackUrl};
use super::tool::{SharedTool, ToolHandler};

/// The first wait after a probe that found nothing answering (a callback's origin, or a
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

/// A time as the store keeps it: milliseconds since the Unix epoch.
pub(crate) fn epoch_millis(time: SystemTime) -> u64 {
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// A time the store kept ([`epoch_millis`]).
pub(crate) fn from_epoch_millis(millis: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(millis)
}

/// One restored tool of one character.
#[derive(Debug, Clone)]
pub(crate) struct DormantTool {
    pub character: String,
    pub tool: SharedTool,
    /// A tool of an MCP server registered at run time (not of an HTTP callback).
    pub mcp: bool,
    /// When it went dormant (in an earlier run, if it never came back since).
    pub since: SystemTime,
    /// Its source is bound to a token whose owner has not proved itself since the restart:
    /// nothing wakes it until then.
    pub awaits_owner: bool,
}

/// The dormant tools, in the order they were restored.
#[derive(Debug)]
pub(crate) struct Dormant {
    tools: Vec<DormantTool>,
    /// How long a tool stays dormant before it is removed.
    ttl: Duration,
    /// The origins a probe runs for.
    probing: HashSet<CallbackOrigin>,
}

impl Dormant {
    pub(crate) fn new(tools: Vec<DormantTool>, ttl: Duration) -> Self {
        Self {
            tools,
            ttl,
            probing: HashSet::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.tools.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// When the next tool's dormant time is up, if any is dormant.
    pub(crate) fn next_deadline(&self) -> Option<SystemTime> {
        self.tools.iter().map(|t| t.since + self.ttl).min()
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

    /// Takes every tool whose callback lives at `origin` that may wake (its origin answered
    /// HTTP): those still waiting for their owner stay.
    pub(crate) fn take_origin(&mut self, origin: &CallbackOrigin) -> Vec<DormantTool> {
        let (taken, kept) = std::mem::take(&mut self.tools)
            .into_iter()
            .partition(|t| !t.awaits_owner && t.tool.callback_origin() == Some(origin));
        self.tools = kept;
        taken
    }

    /// Takes every tool whose dormant time is up at `now`.
    pub(crate) fn take_expired(&mut self, now: SystemTime) -> Vec<DormantTool> {
        let ttl = self.ttl;
        let (taken, kept) = std::mem::take(&mut self.tools)
            .into_iter()
            .partition(|t| t.since + ttl <= now);
        self.tools = kept;
        taken
    }

    /// The owner of `source` proved itself (or its binding was freed): its tools may wake
    /// from now on. How many were released.
    pub(crate) fn release(&mut self, source: &str) -> usize {
        let mut released = 0;
        for t in &mut self.tools {
            if t.awaits_owner && t.tool.source == source {
                t.awaits_owner = false;
                released += 1;
            }
        }
        released
    }

    /// Puts back tools taken by a change that was then not made (the state store could not keep
    /// it), as they were: their time and whether they wait for their owner. Their origins are
    /// probed again once [`Dormant::start_probing`] is asked.
    pub(crate) fn give_back(&mut self, tools: Vec<DormantTool>) {
        self.tools.extend(tools);
    }

    /// Whether a tool that may wake waits for `origin`; when none does, its probe is over.
    pub(crate) fn waits_for(&mut self, origin: &CallbackOrigin) -> bool {
        let waits = self
            .tools
            .iter()
            .any(|t| !t.awaits_owner && t.tool.callback_origin() == Some(origin));
        if !waits {
            self.probing.remove(origin);
        }
        waits
    }

    /// One callback URL of each origin that a tool that may wake waits for and no probe runs
    /// for yet; each is counted as probed from now on.
    pub(crate) fn start_probing(&mut self) -> Vec<CallbackUrl> {
        let mut urls: Vec<CallbackUrl> = Vec::new();
        for t in self.tools.iter().filter(|t| !t.awaits_owner) {
            if let ToolHandler::Remote(remote) = &t.tool.handler
                && self.probing.insert(remote.callback_url.origin().clone())
            {
                urls.push(remote.callback_url.clone());
            }
        }
        urls
    }

    /// The probe of `origin` ended (the origin answered).
    pub(crate) fn stop_probing(&mut self, origin: &CallbackOrigin) {
        self.probing.remove(origin);
    }

    /// Whether a tool of `source` is dormant.
    pub(crate) fn holds_source(&self, source: &str) -> bool {
        self.tools.iter().any(|t| t.tool.source == source)
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
        let since = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
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
            since,
            awaits_owner: false,
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
        assert_eq!(d.start_probing().len(), 3);
        assert!(d.start_probing().is_empty(), "one probe per origin");
        assert_eq!(names(&d.take_named(&["B"], "a")), ["B/a"]);
        assert_eq!(names(&d.take_source(&["A", "B"], "plugin:y")), ["A/b"]);
        let origin = CallbackUrl::parse("http://127.0.0.1:1/")
            .unwrap()
            .origin()
            .clone();
        assert!(d.waits_for(&origin));
        assert_eq!(names(&d.take_origin(&origin)), ["A/a"]);
        assert!(!d.waits_for(&origin));
        let deadline = SystemTime::UNIX_EPOCH + Duration::from_secs(1060);
        assert_eq!(d.next_deadline(), Some(deadline));
        assert!(
            d.take_expired(deadline - Duration::from_millis(1))
                .is_empty()
        );
        assert_eq!(names(&d.take_expired(deadline)), ["A/c"]);
        assert!(d.is_empty());
        assert_eq!(d.next_deadline(), None);
    }

    #[test]
    fn a_tool_awaiting_its_owner_wakes_only_once_released() {
        let mut bound = dormant("A", "a", "plugin:x", 1);
        bound.awaits_owner = true;
        let mut later = dormant("B", "a", "plugin:x", 1);
        later.awaits_owner = true;
        later.since += Duration::from_secs(5);
        let mut d = Dormant::new(
            vec![bound, later, dormant("A", "b", "plugin:y", 1)],
            Duration::from_secs(60),
        );
        let origin = CallbackUrl::parse("http://127.0.0.1:1/")
            .unwrap()
            .origin()
            .clone();
        // Only plugin:y's tool has its origin probed, and only it wakes.
        assert_eq!(d.start_probing().len(), 1);
        assert_eq!(names(&d.take_origin(&origin)), ["A/b"]);
        assert!(
            !d.waits_for(&origin),
            "the probe ends: nothing here may wake"
        );
        assert_eq!(d.release("plugin:y"), 0);
        assert_eq!(d.release("plugin:x"), 2);
        assert_eq!(d.release("plugin:x"), 0);
        assert_eq!(d.start_probing().len(), 1);
        assert!(d.holds_source("plugin:x"));
        // Each tool's time counts from when it went dormant.
        let first = SystemTime::UNIX_EPOCH + Duration::from_secs(1060);
        assert_eq!(names(&d.take_expired(first)), ["A/a"]);
        assert_eq!(d.next_deadline(), Some(first + Duration::from_secs(5)));
        assert_eq!(names(&d.take_origin(&origin)), ["B/a"]);
    }

    #[test]
    fn times_survive_the_store() {
        let time = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(epoch_millis(time), 1_700_000_000_123);
        assert_eq!(from_epoch_millis(epoch_millis(time)), time);
    }
}
