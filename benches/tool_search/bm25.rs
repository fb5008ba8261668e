//! Plain BM25, the baseline: what Anthropic's `bm25` tool search and LiteLLM's token scoring do.
//! Each tool is one document — its name, description, parameter names and descriptions and
//! source, one after the other — cut into lower-case runs of letters and digits (so `get_weather`
//! is `get`, `weather`; `getWeather` one word), no stemming, no stop words; Okapi BM25 with
//! k1 = 1.2, b = 0.75 and Lucene's IDF, summed over the query's words (a word said twice counts
//! twice); equal scores by name.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::data::Tool;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Lower-case runs of letters and digits.
fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
}

fn schema_text(schema: &Map<String, Value>, out: &mut String) {
    if let Some(Value::Object(properties)) = schema.get("properties") {
        for (name, property) in properties {
            out.push(' ');
            out.push_str(name);
            if let Value::Object(property) = property {
                if let Some(Value::String(text)) = property.get("description") {
                    out.push(' ');
                    out.push_str(text);
                }
                schema_text(property, out);
            }
        }
    }
    if let Some(Value::Object(items)) = schema.get("items") {
        schema_text(items, out);
    }
}

pub struct Bm25 {
    names: Vec<String>,
    /// Each document's term counts.
    docs: Vec<HashMap<String, u32>>,
    lengths: Vec<f64>,
    average: f64,
    df: HashMap<String, usize>,
}

impl Bm25 {
    pub fn new(tools: &[Tool]) -> Self {
        let mut docs = Vec::new();
        let mut lengths = Vec::new();
        let mut df: HashMap<String, usize> = HashMap::new();
        for tool in tools {
            let mut text = format!("{} {}", tool.name, tool.description);
            schema_text(&tool.parameters, &mut text);
            text.push(' ');
            text.push_str(&tool.source);
            let mut counts: HashMap<String, u32> = HashMap::new();
            let mut length = 0;
            for token in tokens(&text) {
                *counts.entry(token).or_default() += 1;
                length += 1;
            }
            for term in counts.keys() {
                *df.entry(term.clone()).or_default() += 1;
            }
            docs.push(counts);
            lengths.push(f64::from(length));
        }
        let average = lengths.iter().sum::<f64>() / lengths.len().max(1) as f64;
        Self {
            names: tools.iter().map(|t| t.name.clone()).collect(),
            docs,
            lengths,
            average,
            df,
        }
    }

    /// The `limit` best tools' names, best first.
    pub fn search(&self, query: &str, limit: usize) -> Vec<&str> {
        let n = self.docs.len() as f64;
        let words: Vec<String> = tokens(query).collect();
        let mut scored: Vec<(f64, &str)> = Vec::new();
        for (i, doc) in self.docs.iter().enumerate() {
            let mut score = 0.0;
            for word in &words {
                let Some(&tf) = doc.get(word) else { continue };
                let df = self.df[word] as f64;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                let tf = f64::from(tf);
                let norm = 1.0 - B + B * self.lengths[i] / self.average;
                score += idf * tf * (K1 + 1.0) / (tf + K1 * norm);
            }
            if score > 0.0 {
                scored.push((score, &self.names[i]));
            }
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
        scored
            .into_iter()
            .take(limit)
            .map(|(_, name)| name)
            .collect()
    }
}
