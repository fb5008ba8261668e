//! The budget, measured: the bytes of tool definitions a model session is sent with every one of
//! a character's 1,000 tools, against what `[character.tools] budget = 32` offers it (no tool
//! pinned: `find_tools` at the start, then `find_tools` and the 31 tools it found most recently);
//! and the time one turn's offer takes.
//!
//! The tools are real definitions from public function-calling benchmarks, as
//! `benches/tool_search` loads them (fetched with pip at the first run into
//! `target/tool-search-data/`): every NESTFUL and ComplexFuncBench tool, then BFCL v4's in its
//! corpus order, 1,000 in all, each with its parameters as the JSON Schema a plugin registers
//! (types, descriptions, `enum`, `default`, `items`, `required`). The searches that fill the
//! found set are the sets' first requests, in turn, each `find_tools`' default 5 results through
//! the server's ranking.
//!
//! The bytes are the server's own text: [`runtime_tools::wire::session_update_text`] (the
//! `session.update` a realtime session sends its model, OpenAI's dialect) and
//! [`runtime_tools::wire::tools_text`] (a chat completions or Responses request's `tools`), of
//! the set [`Budget::offer`] gives. They do not depend on the machine; the times do.
//!
//! Run: `cargo bench --bench budget`. Figures: docs/benchmarks.md ("The budget").

#[allow(dead_code)]
#[path = "tool_search/data.rs"]
mod data;

use std::sync::Arc;
use std::time::{Duration, Instant};

use runtime_tools::search::{Catalog, Weights};
use runtime_tools::wire::{session_update_text, tools_text};
use runtime_tools::{
    Budget, CallbackUrl, Dialect, FIND_TOOLS, Found, Parameters, SearchMode, SharedTool, ToolSpec,
};

/// Tools the character holds (the figure).
const TOOLS: usize = 1_000;
/// Its budget (the figure).
const BUDGET: usize = 32;
/// What one `find_tools` call returns unless asked (its default).
const FIND_LIMIT: usize = 5;
/// Offers timed per sample, and samples.
const OFFERS_PER_SAMPLE: usize = 1_000;
const SAMPLES: usize = 101;

/// The 1,000 tools, in registration order; how many kept the set's reduced schema because
/// their full one was refused; and how many each set gave.
fn tools() -> (Vec<SharedTool>, Catalog, usize, String) {
    let sets = [data::nestful(), data::complex_func_bench(), data::bfcl()];
    let mut tools: Vec<SharedTool> = Vec::with_capacity(TOOLS);
    let mut catalog = Catalog::new();
    let mut names = std::collections::HashSet::new();
    let mut refused = 0;
    let mut taken: Vec<(&str, usize)> = Vec::new();
    for (set, tool) in sets
        .iter()
        .flat_map(|s| s.tools.iter().map(move |t| (s.name, t)))
    {
        if tools.len() == TOOLS {
            break;
        }
        // The register route's names are at most 64 characters; a name taken twice is one tool.
        if tool.name.chars().count() > 64 || !names.insert(tool.name.clone()) {
            continue;
        }
        match taken.last_mut() {
            Some((name, count)) if *name == set => *count += 1,
            _ => taken.push((set, 1)),
        }
        let parameters = Parameters::new(tool.schema.clone()).unwrap_or_else(|_| {
            refused += 1;
            let mut reduced = tool.parameters.clone();
            reduced.insert("type".into(), "object".into());
            Parameters::new(reduced).expect("a reduced schema")
        });
        catalog.add(
            &tool.name,
            &tool.description,
            &tool.parameters,
            &tool.source,
        );
        tools.push(Arc::new(ToolSpec::remote(
            tool.name.clone(),
            tool.description.clone(),
            parameters,
            "plugin:bench",
            CallbackUrl::parse("http://127.0.0.1:9/cb").expect("a URL"),
            Duration::from_secs(30),
        )));
    }
    assert_eq!(
        tools.len(),
        TOOLS,
        "the sets hold fewer tools than measured"
    );
    let taken = taken
        .iter()
        .map(|(set, count)| format!("{set} {count}"))
        .collect::<Vec<_>>()
        .join(", ");
    (tools, catalog, refused, taken)
}

/// The searches a session made until it had found `BUDGET - 1` distinct tools: the sets' first
/// requests in turn, each revealing `find_tools`' default number of results. Returns how many
/// searches it took.
fn search_until_full(catalog: &Catalog, found: &mut Found) -> usize {
    let sets = [data::bfcl(), data::nestful(), data::complex_func_bench()];
    let weights = Weights::default();
    let mut distinct = std::collections::HashSet::new();
    let mut searches = 0;
    for i in 0.. {
        for set in &sets {
            let Some(request) = set.requests.get(i) else {
                continue;
            };
            let hits = catalog.search(&request.text, FIND_LIMIT, &weights);
            found.reveal(hits.iter().map(|(name, _)| *name));
            distinct.extend(hits.iter().map(|(name, _)| name.to_string()));
            searches += 1;
            if distinct.len() >= BUDGET - 1 {
                return searches;
            }
        }
    }
    unreachable!("the requests run out before the set is full")
}

/// The bytes a set of tools takes on each wire: a realtime `session.update` whole and its
/// `tools` array alone, a chat completions request's `tools`, a Responses request's `tools`.
struct Bytes {
    update: usize,
    realtime_tools: usize,
    chat: usize,
    responses: usize,
}

fn bytes(tools: &[SharedTool]) -> Bytes {
    let update = session_update_text(Dialect::Openai, tools);
    Bytes {
        update: update.len(),
        realtime_tools: tools_array_len(&update),
        chat: tools_text(tools, false).len(),
        responses: tools_text(tools, true).len(),
    }
}

/// The length of the `tools` array's text inside a `session.update`'s text: from the `[` after
/// the first `"tools":` (the session's key; nothing before it is a tool's) to its `]`.
fn tools_array_len(update: &str) -> usize {
    const KEY: &str = "\"tools\":";
    let start = update.find(KEY).expect("an update carries tools") + KEY.len();
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, c) in update[start..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '[' | '{' if !in_string => depth += 1,
            ']' | '}' if !in_string => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    panic!("the tools array is not closed")
}

fn row(what: &str, count: usize, b: &Bytes) {
    println!(
        "| {what} | {count} | {} | {} | {} | {} |",
        group(b.realtime_tools),
        group(b.update),
        group(b.chat),
        group(b.responses)
    );
}

/// `1234567` as `1,234,567`.
fn group(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Median and 99th percentile of one offer, in microseconds.
fn time_offer(budget: &Budget, tools: &[SharedTool], found: &Found) -> (f64, f64) {
    let mut samples: Vec<f64> = (0..SAMPLES)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..OFFERS_PER_SAMPLE {
                std::hint::black_box(budget.offer(std::hint::black_box(tools), found));
            }
            started.elapsed().as_secs_f64() * 1e6 / OFFERS_PER_SAMPLE as f64
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    (samples[SAMPLES / 2], samples[SAMPLES * 99 / 100])
}

fn main() {
    let (tools, catalog, refused, taken) = tools();
    let every = Budget {
        budget: TOOLS,
        pinned: Vec::new(),
        search: SearchMode::Auto,
    };
    let budget = Budget {
        budget: BUDGET,
        pinned: Vec::new(),
        search: SearchMode::Auto,
    };
    let all = every.offer(&tools, &Found::default());
    assert_eq!(all.tools.len(), TOOLS);
    let start = budget.offer(&tools, &Found::default());
    assert_eq!(start.tools.len(), 1);
    assert_eq!(start.tools[0].name, FIND_TOOLS);
    let mut found = Found::default();
    let searches = search_until_full(&catalog, &mut found);
    let full = budget.offer(&tools, &found);
    assert_eq!(full.tools.len(), BUDGET);
    assert_eq!(full.tools[0].name, FIND_TOOLS);

    println!(
        "{TOOLS} tools ({taken}; {refused} with their set's reduced schema), budget {BUDGET}, no tool \
         pinned; the full set after {searches} searches of {FIND_LIMIT} results"
    );
    println!(
        "| tools sent | count | realtime session.update, tools array | session.update whole | \
         chat completions tools | Responses tools |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let b_all = bytes(&all.tools);
    let b_start = bytes(&start.tools);
    let b_full = bytes(&full.tools);
    row("every tool (no budget)", all.tools.len(), &b_all);
    row("budget 32, at the start", start.tools.len(), &b_start);
    row("budget 32, full after searches", full.tools.len(), &b_full);
    println!(
        "full set / every tool: {:.1} % (realtime tools), {:.1} % (chat tools)",
        100.0 * b_full.realtime_tools as f64 / b_all.realtime_tools as f64,
        100.0 * b_full.chat as f64 / b_all.chat as f64
    );

    let (p50, p99) = time_offer(&budget, &tools, &found);
    println!(
        "one offer (budget {BUDGET}, {} found): p50 {p50:.2} µs, p99 {p99:.2} µs",
        full.tools.len() - 1
    );
    let (p50, p99) = time_offer(&every, &tools, &Found::default());
    println!("one offer (every tool, no budget): p50 {p50:.2} µs, p99 {p99:.2} µs");
    let time_text = |tools: &[SharedTool]| {
        let mut samples: Vec<f64> = (0..SAMPLES)
            .map(|_| {
                let started = Instant::now();
                std::hint::black_box(session_update_text(Dialect::Openai, tools));
                started.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        samples.sort_by(f64::total_cmp);
        samples[SAMPLES / 2]
    };
    println!(
        "writing the session.update: p50 {:.1} µs with every tool, {:.1} µs with the budget's set",
        time_text(&all.tools),
        time_text(&full.tools)
    );
}
