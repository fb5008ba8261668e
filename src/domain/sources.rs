//! The sources a server knows, as `GET /api/sources` lists them: every source that holds a tool
//! (active or dormant, on any character) or a binding, with its counts, in source order.

use std::collections::BTreeMap;

use super::ownership::Binding;

/// One source of the listing. Never a token or its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourceEntry {
    pub source: String,
    /// Bound to a token: its changes need that token.
    pub bound: bool,
    /// Bound by `[[security.source]]` (and so for good).
    pub configured: bool,
    /// Its tools, counted per character (a tool every one of three characters holds counts
    /// three times, as `GET /api/health` counts), dormant ones included.
    pub tools: usize,
    /// How many of `tools` are dormant.
    pub dormant: usize,
}

/// The listing of `bindings` and the `tools` the characters hold, each as (source, whether it
/// is dormant): one entry per source, ordered by source (byte order).
pub(crate) fn summarize<'a>(
    bindings: Vec<Binding>,
    tools: impl IntoIterator<Item = (&'a str, bool)>,
) -> Vec<SourceEntry> {
    let mut by_source: BTreeMap<String, SourceEntry> = BTreeMap::new();
    let entry = |source: &str| SourceEntry {
        source: source.to_owned(),
        bound: false,
        configured: false,
        tools: 0,
        dormant: 0,
    };
    for binding in bindings {
        let row = by_source
            .entry(binding.source.clone())
            .or_insert_with(|| entry(&binding.source));
        row.bound = true;
        row.configured = binding.configured;
    }
    for (source, dormant) in tools {
        let row = match by_source.get_mut(source) {
            Some(row) => row,
            None => by_source.entry(source.to_owned()).or_insert(entry(source)),
        };
        row.tools += 1;
        row.dormant += usize::from(dormant);
    }
    by_source.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_with_tools_or_a_binding_once_in_order() {
        let bindings = vec![
            Binding {
                source: "plugin:notes".into(),
                configured: true,
            },
            Binding {
                source: "plugin:b".into(),
                configured: false,
            },
        ];
        let tools = [
            ("plugin:weather", false),
            ("plugin:b", true),
            ("plugin:weather", true),
            ("plugin:b", false),
            ("mcp:docs", false),
        ];
        let rows: Vec<_> = summarize(bindings, tools)
            .into_iter()
            .map(|r| (r.source, r.bound, r.configured, r.tools, r.dormant))
            .collect();
        assert_eq!(
            rows,
            [
                ("mcp:docs".into(), false, false, 1, 0),
                ("plugin:b".into(), true, false, 2, 1),
                ("plugin:notes".into(), true, true, 0, 0),
                ("plugin:weather".into(), false, false, 2, 1),
            ]
        );
        assert!(summarize(Vec::new(), []).is_empty());
    }
}
