//! Tool search: which of a character's tools a text asks for, ranked, locally and
//! deterministically (no model run, nothing fetched or loaded at run time).
//!
//! Each character has one [`SearchIndex`], shared by its snapshots and brought up to date by the
//! first search after a change (`domain::tool_index`): registering a tool does no search work.
//! `words` splits text into words, `text` stems the words of tools and queries, `lexicon` holds
//! what it knows of English beyond the stemmer (other forms of a word, words of asking, generic
//! API verbs), `meaning` turns a text and its words into vectors (the mean of their tokens'
//! vectors, a table compiled in), `index` keeps the postings, `rank` scores them (BM25F and three
//! bonuses, then what the query and each candidate are about; see [`Weights`]).

mod index;
mod lexicon;
mod meaning;
mod rank;
mod text;
mod words;

use serde_json::{Map, Value};

pub(crate) use index::SearchIndex;
pub use rank::{Hit, Weights};
pub(crate) use text::{Query, ToolTerms};

/// Tools by name with their definitions, searchable: the ranking the server uses, over
/// definitions that need not be registrable (the evaluation's tool sets come from other
/// benchmarks' files). For benchmarks; the server searches snapshots.
#[derive(Debug, Default)]
pub struct Catalog {
    index: SearchIndex<Box<str>>,
}

impl Catalog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool's definition.
    pub fn add(
        &mut self,
        name: &str,
        description: &str,
        parameters: &Map<String, Value>,
        source: &str,
    ) {
        let terms = std::sync::Arc::new(ToolTerms::new(name, description, parameters, source));
        self.index.insert(name.into(), terms);
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.len() == 0
    }

    /// The `limit` best tools' names for `query`, with their scores, best first.
    pub fn search(&self, query: &str, limit: usize, weights: &Weights) -> Vec<(&str, f64)> {
        self.index
            .rank(&Query::new(query), limit, weights)
            .into_iter()
            .map(|hit| (&**hit.item, hit.score))
            .collect()
    }
}
