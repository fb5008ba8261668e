//! One character's tool registry: at most one definition per name, in registration order, and
//! the one place a [`Change`] is applied to it.
//!
//! Replacing a tool keeps its place in the order, like a Python dict; removing one keeps the
//! order of the rest. The index is keyed by each tool's own name (no copy of the key), so a
//! registry is cheap to clone. Plain data: the session manager actor owns one and publishes it
//! as a [`ToolSnapshot`](super::snapshot::ToolSnapshot).

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use foldhash::fast::RandomState;
use indexmap::IndexSet;
use indexmap::set::MutableValues;

use super::call::LocalToolHandler;
use super::callback_url::CallbackOrigin;
use super::tool::SharedTool;

/// A change to one character's tools.
#[derive(Debug, Clone)]
pub enum Change {
    /// Add a tool, or replace the tool of the same name.
    Register(SharedTool),
    /// Remove the tool of this name.
    Unregister(String),
    /// Remove every tool of this source.
    ClearSource(String),
    /// Auto-removal: the tools of a plugin `source` served from a dead callback `origin`.
    RemoveOrigin {
        source: String,
        origin: CallbackOrigin,
    },
    /// The tools of `source` become `tools` (an MCP server's listing; none when it goes away):
    /// those of `source` not among them are removed, each of them is added or replaces the tool
    /// of the same name in its place, whatever that tool's source. With an `owner`, only the
    /// tools of `source` that handler runs are candidates for removal: an MCP server registered
    /// at run time replaces its own tools, never the HTTP tools a plugin registered under the
    /// same source.
    ReplaceSource {
        source: String,
        tools: Arc<[SharedTool]>,
        owner: Option<LocalToolHandler>,
    },
}

impl Change {
    /// Whether the change adds tools, and so changes every registry it reaches (what it removes
    /// aside).
    pub fn adds(&self) -> bool {
        match self {
            Change::Register(_) => true,
            Change::ReplaceSource { tools, .. } => !tools.is_empty(),
            Change::Unregister(_) | Change::ClearSource(_) | Change::RemoveOrigin { .. } => false,
        }
    }
}

/// What applying a [`Change`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effect {
    /// Tools removed (a register removes none, even when it replaces one).
    pub removed: usize,
    /// Whether the tool list changed at all: a register always does.
    pub changed: bool,
}

#[derive(Debug, Default, Clone)]
pub struct ToolRegistry {
    tools: IndexSet<ByName, RandomState>,
}

/// A tool hashed and compared by its name, so the index needs no key of its own.
#[derive(Debug, Clone)]
struct ByName(SharedTool);

impl Hash for ByName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The same hash as the `str` it is looked up by (`Borrow<str>` requires it).
        self.0.name.as_str().hash(state);
    }
}

impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for ByName {}

impl Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        &self.0.name
    }
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies `change`: the only code that changes a registry.
    pub fn apply(&mut self, change: &Change) -> Effect {
        let removed = match change {
            Change::Register(tool) => {
                self.insert(tool.clone());
                0
            }
            Change::Unregister(name) => usize::from(self.tools.shift_remove(name.as_str())),
            Change::ClearSource(source) => self.remove_where(|t| t.source == *source),
            Change::RemoveOrigin { source, origin } => {
                self.remove_where(|t| t.is_served_by(source, origin))
            }
            Change::ReplaceSource {
                source,
                tools,
                owner,
            } => {
                let removed = self.remove_where(|t| {
                    t.source == *source
                        && owner.as_ref().is_none_or(|owner| t.is_handled_by(owner))
                        && !tools.iter().any(|new| new.name == t.name)
                });
                for tool in tools.iter() {
                    self.insert(tool.clone());
                }
                removed
            }
        };
        Effect {
            removed,
            changed: change.adds() || removed > 0,
        }
    }

    /// Adds `tool`, replacing a tool of the same name in its place. A replacement with the
    /// same definition (a plugin registering again) takes the search terms the old one has,
    /// if a search worked them out: the next search then has nothing to redo for it.
    fn insert(&mut self, tool: SharedTool) {
        match self.tools.get_full_mut2(tool.name.as_str()) {
            Some((_, old)) => {
                if old.0.worked_out_search_terms().is_some() && old.0.same_definition(&tool) {
                    tool.adopt_search_terms(&old.0);
                }
                *old = ByName(tool);
            }
            None => {
                self.tools.insert(ByName(tool));
            }
        }
    }

    fn remove_where(&mut self, doomed: impl Fn(&SharedTool) -> bool) -> usize {
        let before = self.tools.len();
        self.tools.retain(|t| !doomed(&t.0));
        before - self.tools.len()
    }

    pub fn get(&self, name: &str) -> Option<&SharedTool> {
        self.tools.get(name).map(|t| &t.0)
    }

    /// The tools in registration order.
    pub fn tools(&self) -> impl ExactSizeIterator<Item = &SharedTool> {
        self.tools.iter().map(|t| &t.0)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools().map(|t| t.name.as_str())
    }

    /// Whether a remote tool of `source` whose callback lives at `origin` is registered.
    pub fn serves(&self, source: &str, origin: &CallbackOrigin) -> bool {
        self.tools().any(|t| t.is_served_by(source, origin))
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// The error of a call or a lookup that names a tool not registered (for `role`, when a role was
/// given): it lists the tools that are, so the model or the caller can correct itself.
pub(crate) fn not_registered_text<'a>(
    name: &str,
    role: Option<&str>,
    available: impl IntoIterator<Item = &'a str>,
) -> String {
    let scope = role
        .map(|role| format!(" for role {role}"))
        .unwrap_or_default();
    let names: Vec<&str> = available.into_iter().collect();
    let names = if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    };
    format!("tool '{name}' is not registered{scope}; available tools: {names}")
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

    fn register(r: &mut ToolRegistry, name: &str, source: &str, url: &str) -> Effect {
        r.apply(&Change::Register(tool(name, source, url)))
    }

    fn names(r: &ToolRegistry) -> Vec<&str> {
        r.names().collect()
    }

    #[test]
    fn replace_keeps_one_definition_and_its_place() {
        let mut r = ToolRegistry::new();
        register(&mut r, "a", "s", "http://127.0.0.1:1/a");
        register(&mut r, "b", "s", "http://127.0.0.1:1/b");
        let effect = register(&mut r, "a", "t", "http://127.0.0.1:2/a");
        assert_eq!(
            effect,
            Effect {
                removed: 0,
                changed: true
            }
        );
        assert_eq!(names(&r), ["a", "b"]);
        assert_eq!(r.get("a").unwrap().source, "t");
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn unregister_keeps_the_order_of_the_rest_and_counts() {
        let mut r = ToolRegistry::new();
        for n in ["a", "b", "c"] {
            register(&mut r, n, "s", "http://127.0.0.1:1/x");
        }
        let unregister = Change::Unregister("b".into());
        assert_eq!(
            r.apply(&unregister),
            Effect {
                removed: 1,
                changed: true
            }
        );
        assert_eq!(
            r.apply(&unregister),
            Effect {
                removed: 0,
                changed: false
            }
        );
        assert_eq!(names(&r), ["a", "c"]);
        assert!(r.get("b").is_none());
    }

    #[test]
    fn clear_counts_only_that_source() {
        let mut r = ToolRegistry::new();
        register(&mut r, "a", "plugin:x", "http://127.0.0.1:1/a");
        register(&mut r, "b", "plugin:y", "http://127.0.0.1:1/b");
        register(&mut r, "c", "plugin:x", "http://127.0.0.1:1/c");
        let clear = Change::ClearSource("plugin:x".into());
        assert_eq!(r.apply(&clear).removed, 2);
        assert_eq!(r.apply(&clear).removed, 0);
        assert_eq!(names(&r), ["b"]);
    }

    #[test]
    fn not_registered_lists_what_is() {
        assert_eq!(
            not_registered_text("x", None, ["a", "b"]),
            "tool 'x' is not registered; available tools: a, b"
        );
        assert_eq!(
            not_registered_text("x", Some("Mio"), []),
            "tool 'x' is not registered for role Mio; available tools: none"
        );
    }

    #[test]
    fn replace_source_keeps_places_drops_the_missing_and_spares_other_sources() {
        let mut r = ToolRegistry::new();
        register(&mut r, "a", "mcp:x", "http://127.0.0.1:1/a");
        register(&mut r, "p", "plugin:y", "http://127.0.0.1:1/p");
        register(&mut r, "b", "mcp:x", "http://127.0.0.1:1/b");
        let replace = |tools: Vec<SharedTool>| Change::ReplaceSource {
            source: "mcp:x".into(),
            tools: tools.into(),
            owner: None,
        };
        let effect = r.apply(&replace(vec![
            tool("b", "mcp:x", "http://127.0.0.1:2/b"),
            tool("c", "mcp:x", "http://127.0.0.1:2/c"),
        ]));
        assert_eq!(
            effect,
            Effect {
                removed: 1,
                changed: true
            }
        );
        assert_eq!(names(&r), ["p", "b", "c"]);
        assert_eq!(
            r.get("b").unwrap().callback_url(),
            Some("http://127.0.0.1:2/b")
        );
        assert_eq!(r.apply(&replace(vec![])).removed, 2);
        assert_eq!(names(&r), ["p"]);
        assert_eq!(
            r.apply(&replace(vec![])),
            Effect {
                removed: 0,
                changed: false
            }
        );
    }

    #[test]
    fn an_owned_replacement_removes_only_what_its_handler_runs() {
        struct Nothing;
        impl crate::domain::call::LocalHandler for Nothing {
            fn call(
                &self,
                _: crate::domain::call::ToolCall,
            ) -> futures_util::future::BoxFuture<'static, crate::domain::call::ToolOutcome>
            {
                Box::pin(async { Ok(serde_json::Value::Null) })
            }
        }
        let local = |name: &str, handler: &LocalToolHandler| -> SharedTool {
            Arc::new(ToolSpec::local(
                name,
                "",
                empty_parameters(),
                "plugin:w",
                handler.clone(),
            ))
        };
        let mine = LocalToolHandler(Arc::new(Nothing));
        let theirs = LocalToolHandler(Arc::new(Nothing));
        let mut r = ToolRegistry::new();
        r.apply(&Change::Register(local("a", &mine)));
        r.apply(&Change::Register(local("b", &theirs)));
        register(&mut r, "http", "plugin:w", "http://127.0.0.1:1/h");
        r.apply(&Change::Register(local("c", &mine)));
        let replace = |tools: Vec<SharedTool>| Change::ReplaceSource {
            source: "plugin:w".into(),
            tools: tools.into(),
            owner: Some(mine.clone()),
        };
        // `c` is gone from the listing: only it goes; `b` (another handler) and the HTTP tool of
        // the same source stay.
        assert_eq!(r.apply(&replace(vec![local("a", &mine)])).removed, 1);
        assert_eq!(names(&r), ["a", "b", "http"]);
        assert_eq!(r.apply(&replace(vec![])).removed, 1);
        assert_eq!(names(&r), ["b", "http"]);
        assert!(r.get("b").unwrap().is_handled_by(&theirs));
        assert!(!r.get("b").unwrap().is_handled_by(&mine));
    }

    #[test]
    fn remove_origin_spares_other_origins_and_sources() {
        let mut r = ToolRegistry::new();
        register(&mut r, "a", "plugin:x", "http://127.0.0.1:1/a");
        register(&mut r, "b", "plugin:x", "http://127.0.0.1:1/b");
        register(&mut r, "c", "plugin:x", "http://127.0.0.1:2/c");
        register(&mut r, "d", "plugin:y", "http://127.0.0.1:1/d");
        let origin = CallbackUrl::parse("http://127.0.0.1:1/").unwrap();
        assert!(r.serves("plugin:x", origin.origin()));
        let change = Change::RemoveOrigin {
            source: "plugin:x".into(),
            origin: origin.origin().clone(),
        };
        assert_eq!(r.apply(&change).removed, 2);
        assert_eq!(names(&r), ["c", "d"]);
        assert!(!r.serves("plugin:x", origin.origin()));
        assert!(r.serves("plugin:y", origin.origin()));
    }
}
