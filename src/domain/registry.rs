//! One character's tool registry: at most one definition per name, in registration order.
//!
//! Replacing a tool keeps its place in the order, like a Python dict; removing one keeps the
//! order of the rest. Plain data: the session manager actor owns one.

use indexmap::IndexMap;

use super::callback_url::CallbackOrigin;
use super::tool::SharedTool;

#[derive(Debug, Default, Clone)]
pub struct ToolRegistry {
    tools: IndexMap<String, SharedTool>,
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `tool`, replacing a tool of the same name. Returns the replaced one.
    pub fn insert(&mut self, tool: SharedTool) -> Option<SharedTool> {
        // A replacement (the common case: plugins re-register on every start) reuses the key
        // in place; only a new name pays for a copy of it. This runs once per character.
        if let Some(slot) = self.tools.get_mut(tool.name.as_str()) {
            return Some(std::mem::replace(slot, tool));
        }
        self.tools.insert(tool.name.clone(), tool)
    }

    /// Removes the tool called `name`.
    pub fn remove(&mut self, name: &str) -> Option<SharedTool> {
        self.tools.shift_remove(name)
    }

    /// Removes every tool of `source`; returns how many.
    pub fn remove_source(&mut self, source: &str) -> usize {
        self.remove_where(|t| t.source == source)
    }

    /// Removes the remote tools of `source` whose callback lives at `origin`; returns how many.
    pub fn remove_origin(&mut self, source: &str, origin: &CallbackOrigin) -> usize {
        self.remove_where(|t| t.is_served_by(source, origin))
    }

    /// Makes `tools` the tools of `source`: removes those of `source` whose name is not among
    /// them, then inserts each (replacing a tool of the same name, whatever its source). Returns
    /// how many were removed.
    pub fn replace_source(&mut self, source: &str, tools: &[SharedTool]) -> usize {
        let removed = self
            .remove_where(|t| t.source == source && !tools.iter().any(|new| new.name == t.name));
        for tool in tools {
            self.insert(tool.clone());
        }
        removed
    }

    fn remove_where(&mut self, doomed: impl Fn(&SharedTool) -> bool) -> usize {
        let before = self.tools.len();
        self.tools.retain(|_, t| !doomed(t));
        before - self.tools.len()
    }

    pub fn get(&self, name: &str) -> Option<&SharedTool> {
        self.tools.get(name)
    }

    /// The tools in registration order.
    pub fn tools(&self) -> impl ExactSizeIterator<Item = &SharedTool> {
        self.tools.values()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::domain::callback_url::CallbackUrl;
    use crate::domain::tool::{ToolSpec, empty_parameters};

    fn tool(name: &str, source: &str, url: &str) -> SharedTool {
        Arc::new(ToolSpec::remote(
            name,
            format!("{name} tool"),
            empty_parameters(),
            source,
            CallbackUrl::parse(url).unwrap(),
            Duration::from_secs(30),
        ))
    }

    fn names(r: &ToolRegistry) -> Vec<&str> {
        r.names().collect()
    }

    #[test]
    fn replace_keeps_one_definition_and_its_place() {
        let mut r = ToolRegistry::new();
        r.insert(tool("a", "s", "http://127.0.0.1:1/a"));
        r.insert(tool("b", "s", "http://127.0.0.1:1/b"));
        let old = r.insert(tool("a", "t", "http://127.0.0.1:2/a")).unwrap();
        assert_eq!(old.source, "s");
        assert_eq!(names(&r), ["a", "b"]);
        assert_eq!(r.get("a").unwrap().source, "t");
    }

    #[test]
    fn remove_keeps_the_order_of_the_rest() {
        let mut r = ToolRegistry::new();
        for n in ["a", "b", "c"] {
            r.insert(tool(n, "s", "http://127.0.0.1:1/x"));
        }
        assert!(r.remove("b").is_some());
        assert!(r.remove("b").is_none());
        assert_eq!(names(&r), ["a", "c"]);
    }

    #[test]
    fn remove_source_counts_only_that_source() {
        let mut r = ToolRegistry::new();
        r.insert(tool("a", "plugin:x", "http://127.0.0.1:1/a"));
        r.insert(tool("b", "plugin:y", "http://127.0.0.1:1/b"));
        r.insert(tool("c", "plugin:x", "http://127.0.0.1:1/c"));
        assert_eq!(r.remove_source("plugin:x"), 2);
        assert_eq!(r.remove_source("plugin:x"), 0);
        assert_eq!(names(&r), ["b"]);
    }

    #[test]
    fn replace_source_keeps_places_drops_the_missing_and_spares_other_sources() {
        let mut r = ToolRegistry::new();
        r.insert(tool("a", "mcp:x", "http://127.0.0.1:1/a"));
        r.insert(tool("p", "plugin:y", "http://127.0.0.1:1/p"));
        r.insert(tool("b", "mcp:x", "http://127.0.0.1:1/b"));
        let removed = r.replace_source(
            "mcp:x",
            &[
                tool("b", "mcp:x", "http://127.0.0.1:2/b"),
                tool("c", "mcp:x", "http://127.0.0.1:2/c"),
            ],
        );
        assert_eq!(removed, 1);
        assert_eq!(names(&r), ["p", "b", "c"]);
        assert_eq!(
            r.get("b").unwrap().callback_url(),
            Some("http://127.0.0.1:2/b")
        );
        assert_eq!(r.replace_source("mcp:x", &[]), 2);
        assert_eq!(names(&r), ["p"]);
    }

    #[test]
    fn remove_origin_spares_other_origins_and_sources() {
        let mut r = ToolRegistry::new();
        r.insert(tool("a", "plugin:x", "http://127.0.0.1:1/a"));
        r.insert(tool("b", "plugin:x", "http://127.0.0.1:1/b"));
        r.insert(tool("c", "plugin:x", "http://127.0.0.1:2/c"));
        r.insert(tool("d", "plugin:y", "http://127.0.0.1:1/d"));
        let origin = CallbackUrl::parse("http://127.0.0.1:1/").unwrap();
        assert_eq!(r.remove_origin("plugin:x", origin.origin()), 2);
        assert_eq!(names(&r), ["c", "d"]);
    }
}
