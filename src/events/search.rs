//! `tool.search`: a search of a character's tools was made (the search route; later, a model
//! session's `find_tools`). One call announces it and counts it in
//! `runtime_tools_tool_searches_total`, so the event and the metric never disagree. Never the
//! query's text: it may carry the user's words; only its length.

use serde::Serialize;

use super::{EventHub, EventKind, Scope};
use crate::domain::connection::ConnectionKind;

/// Who searched: the `kind` of `tool.search` and of the metric's label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(into = "&'static str")]
pub enum SearchKind {
    /// `GET /api/tools/search`.
    Api,
    /// A model session of this kind (its `find_tools`).
    Session(ConnectionKind),
}

impl SearchKind {
    /// The kind as events and metrics spell it: `api`, or the session's kind.
    pub fn name(self) -> &'static str {
        match self {
            SearchKind::Api => "api",
            SearchKind::Session(kind) => kind.name(),
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
}
