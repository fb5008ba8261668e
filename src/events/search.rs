//! `tool.search`: a search of a character's tools was made (the search route, or a model's
//! `find_tools` in any kind of session). One call announces it and counts it in
//! `runtime_tools_tool_searches_total` (and a model's found tools in
//! `runtime_tools_tools_revealed_total`), so the event and the metrics never disagree. Never the
//! query's text: it may carry the user's words; only its length.

use serde::Serialize;

use super::{EventHub, EventKind, Scope};
use crate::domain::budget::{FindTools, found_output};
use crate::domain::connection::ConnectionKind;
use crate::domain::snapshot::ToolSnapshot;
use crate::domain::tool::SharedTool;

/// Who searched: the `kind` of `tool.search` and of the metric's label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(into = "&'static str")]
pub enum SearchKind {
    /// `GET /api/tools/search`.
    Api,
    /// A model session of this kind (its `find_tools`).
    Session(ConnectionKind),
    /// A Gemini Live session (its `find_tools`).
    Gemini,
    /// An MCP client of a character on `/mcp` (its `find_tools`).
    Mcp,
}

impl SearchKind {
    /// The kind as events and metrics spell it: `api`, or the session's kind.
    pub fn name(self) -> &'static str {
        match self {
            SearchKind::Api => "api",
            SearchKind::Session(kind) => kind.name(),
            SearchKind::Gemini => "gemini",
            SearchKind::Mcp => "mcp",
        }
    }
}

impl From<SearchKind> for &'static str {
    fn from(kind: SearchKind) -> Self {
        kind.name()
    }
}

/// The data of `tool.search`.
#[derive(Debug, Serialize)]
pub struct ToolSearched<'a> {
    pub role: &'a str,
    /// The query's length in characters (never its text).
    pub query_length: usize,
    /// The tools found, best first.
    pub found: &'a [&'a str],
    pub kind: SearchKind,
}

impl EventHub {
    /// Announces a search (`tool.search`, to the role's subscribers) and counts it.
    pub fn tool_searched(&self, search: &ToolSearched<'_>) {
        self.observer().metrics().tool_searched(search.kind.name());
        self.publish(
            EventKind::ToolSearch,
            Scope::Roles(vec![search.role.into()]),
            search,
        );
    }

    /// A model's `find_tools` call, answered from the character's `snapshot`: the tools found,
    /// best first, and the call's output (with each tool's parameters when `with_parameters`).
    /// Announced (`tool.search`) and counted (searches and tools revealed) here, so every kind
    /// of session is seen alike.
    #[allow(dead_code)] // the sessions answering find_tools, coming
    pub(crate) fn find_tools(
        &self,
        role: &str,
        snapshot: &ToolSnapshot,
        ask: &FindTools,
        kind: SearchKind,
        with_parameters: bool,
    ) -> Found {
        let hits = snapshot.search(&ask.query, ask.limit);
        let names: Vec<&str> = hits.iter().map(|hit| hit.item.name.as_str()).collect();
        self.tool_searched(&ToolSearched {
            role,
            query_length: ask.query.chars().count(),
            found: &names,
            kind,
        });
        self.observer()
            .metrics()
            .tools_revealed(kind.name(), hits.len());
        Found {
            output: found_output(&hits, with_parameters),
            tools: hits.iter().map(|hit| hit.item.clone()).collect(),
        }
    }
}

/// What a model's `find_tools` found.
#[derive(Debug, Clone)]
#[allow(dead_code)] // the sessions answering find_tools, coming
pub(crate) struct Found {
    /// Best first.
    pub(crate) tools: Vec<SharedTool>,
    /// The call's output, as the model is given it.
    pub(crate) output: String,
}
