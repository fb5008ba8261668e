//! Tool search, measured: how often the server's ranking puts the tool a real request needs
//! first and in the top 5 (recall@1, recall@5), beside plain BM25 on the same data; and how long
//! one search takes over 10,000 tools through a character's published snapshot.
//!
//! The data (`tool_search/data.rs`): BFCL v4, NESTFUL and ComplexFuncBench, real tool
//! definitions and real user requests from their PyPI packages, fetched with pip at the first
//! run (pinned versions, SHA-256 checked) into `target/tool-search-data/`. Each set's tools are
//! pooled: every request searches all of them. Requests are split by a fixed hash of their set
//! and id: 3 in 10 to tune the ranking's weights on (`--tune`), the other 7 held out, and the
//! figures are the held-out part's unless `--split tuning` or `--split all` says otherwise.
//!
//! A request's recall@k is the share of the tools it needs found in the top k, out of at most
//! k (`|needed ∩ top k| / min(|needed|, k)`): for the requests that need one tool (most of
//! BFCL), whether it is there.
//!
//! Run: `cargo bench --bench tool_search` (figures), `-- --tune` (a coordinate search of the
//! weights on the tuning part, from the defaults), `-- --speed-only`, `-- --quality-only`.
//! Figures and method: docs/benchmarks.md ("Tool search").

#[path = "tool_search/bm25.rs"]
mod bm25;
#[path = "tool_search/data.rs"]
mod data;

use std::time::{Duration, Instant};

use actix::prelude::*;
use runtime_tools::search::{Catalog, Weights};
use runtime_tools::{
    CallbackUrl, CharacterSettings, DispatchSettings, EventHub, EventSettings, ListTools,
    Parameters, RegisterTool, Router, ToolSpec,
};
use serde_json::{Map, Value, json};

use data::{Request, Set};

/// How many tools the speed figure searches over.
const SPEED_TOOLS: usize = 10_000;
/// What a search asks for in the speed figure (the route's default).
const SPEED_LIMIT: usize = 10;
/// Rounds of every held-out request in the speed figure.
const SPEED_ROUNDS: usize = 3;

/// Which requests a figure is over.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Split {
    Tuning,
    HeldOut,
    All,
}

impl Split {
    fn takes(self, set: &Set, request: &Request) -> bool {
        let tuning = data::is_tuning(set.name, &request.id);
        match self {
            Split::Tuning => tuning,
            Split::HeldOut => !tuning,
            Split::All => true,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Split::Tuning => "tuning part",
            Split::HeldOut => "held-out part",
            Split::All => "all requests",
        }
    }
}

/// recall@1 and recall@5 summed over requests, and how many.
#[derive(Default, Clone, Copy)]
struct Recall {
    at1: f64,
    at5: f64,
    requests: usize,
}

impl Recall {
    fn add(&mut self, targets: &[String], ranked: &[&str]) {
        let found = |k: usize| {
            let top = &ranked[..ranked.len().min(k)];
            let hits = targets.iter().filter(|t| top.contains(&t.as_str())).count();
            hits as f64 / targets.len().min(k) as f64
        };
        self.at1 += found(1);
        self.at5 += found(5);
        self.requests += 1;
    }

    fn at1(&self) -> f64 {
        self.at1 / self.requests.max(1) as f64
    }

    fn at5(&self) -> f64 {
        self.at5 / self.requests.max(1) as f64
    }
}

/// A set with its tools indexed both ways.
struct Indexed {
    set: Set,
    catalog: Catalog,
    bm25: bm25::Bm25,
}

fn index(set: Set) -> Indexed {
    let mut catalog = Catalog::new();
    for tool in &set.tools {
        catalog.add(
            &tool.name,
            &tool.description,
            &tool.parameters,
            &tool.source,
        );
    }
    let bm25 = bm25::Bm25::new(&set.tools);
    Indexed { set, catalog, bm25 }
}

fn ours(indexed: &Indexed, split: Split, weights: &Weights) -> Recall {
    let mut recall = Recall::default();
    for request in indexed
        .set
        .requests
        .iter()
        .filter(|r| split.takes(&indexed.set, r))
    {
        let ranked: Vec<&str> = indexed
            .catalog
            .search(&request.text, 5, weights)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        recall.add(&request.targets, &ranked);
    }
    recall
}

fn baseline(indexed: &Indexed, split: Split) -> Recall {
    let mut recall = Recall::default();
    for request in indexed
        .set
        .requests
        .iter()
        .filter(|r| split.takes(&indexed.set, r))
    {
        recall.add(&request.targets, &indexed.bm25.search(&request.text, 5));
    }
    recall
}

/// What tuning maximises: recall@1 plus recall@5, averaged over the sets, BFCL counted twice:
/// its single requests over a thousand tools are the kind of search the issue sets the targets
/// on; the others keep the weights from fitting BFCL alone.
fn objective(sets: &[Indexed], weights: &Weights) -> f64 {
    let (mut total, mut counted) = (0.0, 0.0);
    for s in sets {
        let r = ours(s, Split::Tuning, weights);
        let weight = if s.set.name.starts_with("BFCL") {
            2.0
        } else {
            1.0
        };
        total += weight * (r.at1() + r.at5());
        counted += weight;
    }
    total / counted
}

/// A knob of [`Weights`] the tuning turns: its name, and where it is.
type Knob = (&'static str, fn(&mut Weights) -> &mut f64);

/// A coordinate search from the defaults: each knob scaled up and down in turn, a change kept
/// when it raises the objective, until a round changes nothing.
fn tune(sets: &[Indexed]) -> Weights {
    let mut best = Weights::default();
    let mut score = objective(sets, &best);
    println!("tuning from the defaults: objective {score:.4}");
    let knobs: Vec<Knob> = vec![
        ("field.name", |w| &mut w.field[0]),
        ("field.description", |w| &mut w.field[1]),
        ("field.parameter_name", |w| &mut w.field[2]),
        ("field.parameter_description", |w| &mut w.field[3]),
        ("field.source", |w| &mut w.field[4]),
        ("b.name", |w| &mut w.b[0]),
        ("b.description", |w| &mut w.b[1]),
        ("b.parameter_name", |w| &mut w.b[2]),
        ("b.parameter_description", |w| &mut w.b[3]),
        ("k1", |w| &mut w.k1),
        ("name_coverage", |w| &mut w.name_coverage),
        ("adjacent", |w| &mut w.adjacent),
        ("related", |w| &mut w.related),
    ];
    for round in 1..=3 {
        let mut changed = false;
        for (name, knob) in &knobs {
            for factor in [0.0, 0.5, 0.8, 1.25, 2.0] {
                let mut trial = best.clone();
                let value = knob(&mut trial);
                let was = *value;
                *value = if was == 0.0 && factor > 1.0 {
                    0.25 * factor
                } else {
                    was * factor
                };
                if name.starts_with("b.") && *value > 1.0 {
                    continue;
                }
                let trial_score = objective(sets, &trial);
                if trial_score > score + 1e-9 {
                    println!(
                        "round {round}: {name} {was} -> {} : {trial_score:.4}",
                        knob(&mut trial)
                    );
                    score = trial_score;
                    best = trial;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    println!("best: {best:?}");
    best
}

fn quality(sets: &[Indexed], split: Split) {
    let weights = Weights::default();
    println!(
        "recall on the {} (recall@1 / recall@5; requests):",
        split.name()
    );
    println!("| set | tools | requests | plain BM25 | this ranking | BM25F alone (bonuses off) |");
    println!("| --- | ---: | ---: | --- | --- | --- |");
    let plain_only = Weights {
        name_coverage: 0.0,
        adjacent: 0.0,
        ..Weights::default()
    };
    let (mut macro_base, mut macro_ours, mut macro_f) = ([0.0; 2], [0.0; 2], [0.0; 2]);
    for s in sets {
        let b = baseline(s, split);
        let o = ours(s, split, &weights);
        let f = ours(s, split, &plain_only);
        println!(
            "| {} | {} | {} | {:.3} / {:.3} | {:.3} / {:.3} | {:.3} / {:.3} |",
            s.set.name,
            s.set.tools.len(),
            o.requests,
            b.at1(),
            b.at5(),
            o.at1(),
            o.at5(),
            f.at1(),
            f.at5()
        );
        for (sum, r) in [
            (&mut macro_base, b),
            (&mut macro_ours, o),
            (&mut macro_f, f),
        ] {
            sum[0] += r.at1() / sets.len() as f64;
            sum[1] += r.at5() / sets.len() as f64;
        }
    }
    println!(
        "| mean of the sets | | | {:.3} / {:.3} | {:.3} / {:.3} | {:.3} / {:.3} |",
        macro_base[0], macro_base[1], macro_ours[0], macro_ours[1], macro_f[0], macro_f[1]
    );
}

/// A dataset's parameters as a schema the server registers: only names and descriptions (the
/// sets' own type words, such as BFCL's `dict`, are not JSON Schema).
fn registrable(parameters: &Map<String, Value>) -> Map<String, Value> {
    let mut schema = parameters.clone();
    schema.insert("type".into(), json!("object"));
    schema
}

/// p50 and p99 of one search over [`SPEED_TOOLS`] tools registered on one character, through
/// the snapshot a reader loads (what the route and `find_tools` do).
fn speed(sets: &[Indexed]) {
    let system = System::new();
    let router = system.block_on(async {
        Router::launch(
            vec![CharacterSettings::new("Lanlan")],
            &DispatchSettings::default(),
            EventHub::new(&EventSettings::default()),
        )
        .0
    });
    let tools: Vec<&data::Tool> = sets.iter().flat_map(|s| s.set.tools.iter()).collect();
    let started = Instant::now();
    system.block_on(async {
        for k in 0..SPEED_TOOLS {
            let tool = tools[k % tools.len()];
            let copy = k / tools.len();
            let name = if copy == 0 {
                tool.name.clone()
            } else {
                format!("{}_{copy}", tool.name)
            };
            // Names over the register route's 64 characters are cut; a clash just replaces.
            let name: String = name.chars().take(64).collect();
            let parameters = Parameters::new(registrable(&tool.parameters)).expect("a schema");
            let spec = ToolSpec::remote(
                name,
                tool.description.clone(),
                parameters,
                "plugin:bench",
                CallbackUrl::parse("http://127.0.0.1:9/cb").expect("a URL"),
                Duration::from_secs(30),
            );
            router
                .send(RegisterTool {
                    tool: spec,
                    role: None,
                })
                .await
                .expect("router answers")
                .expect("registered");
        }
    });
    let registered = started.elapsed();
    let snapshot = system.block_on(async {
        router
            .send(ListTools { role: None })
            .await
            .expect("router answers")
            .expect("listed")
            .remove(0)
            .tools
    });
    let queries: Vec<&str> = sets
        .iter()
        .flat_map(|s| {
            s.set
                .requests
                .iter()
                .filter(|r| Split::HeldOut.takes(&s.set, r))
                .map(|r| r.text.as_str())
        })
        .collect();
    let mut times = Vec::with_capacity(queries.len() * SPEED_ROUNDS);
    let mut found = 0usize;
    for _ in 0..SPEED_ROUNDS {
        for query in &queries {
            let start = Instant::now();
            let hits = snapshot.search(query, SPEED_LIMIT);
            times.push(start.elapsed());
            found += hits.len();
        }
    }
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    println!(
        "search over {} tools ({} registered in {:.1} s), limit {SPEED_LIMIT}, {} searches: \
         p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({:.1} hits each)",
        snapshot.registry().len(),
        SPEED_TOOLS,
        registered.as_secs_f64(),
        times.len(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.9).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3,
        found as f64 / times.len() as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let split = match args
        .iter()
        .position(|a| a == "--split")
        .map(|i| args[i + 1].as_str())
    {
        Some("tuning") => Split::Tuning,
        Some("all") => Split::All,
        _ => Split::HeldOut,
    };
    let sets: Vec<Indexed> = [data::bfcl(), data::nestful(), data::complex_func_bench()]
        .into_iter()
        .map(index)
        .collect();
    if let Some(i) = args.iter().position(|a| a == "--misses") {
        // Requests of the tuning part whose first tool is wrong: what tuning looks at.
        let count: usize = args.get(i + 1).and_then(|n| n.parse().ok()).unwrap_or(20);
        for s in &sets {
            let mut shown = 0;
            for r in s
                .set
                .requests
                .iter()
                .filter(|r| Split::Tuning.takes(&s.set, r))
            {
                let ranked = s.catalog.search(&r.text, 3, &Weights::default());
                if ranked
                    .first()
                    .is_some_and(|(n, _)| r.targets.iter().any(|t| t == n))
                {
                    continue;
                }
                println!(
                    "[{}] {:?}\n  needs {:?}\n  got {:?}",
                    s.set.name,
                    r.text.chars().take(300).collect::<String>(),
                    r.targets,
                    ranked
                );
                shown += 1;
                if shown == count {
                    break;
                }
            }
        }
        return;
    }
    if has("--tune") {
        tune(&sets);
        return;
    }
    if !has("--speed-only") {
        quality(&sets, split);
    }
    if !has("--quality-only") {
        speed(&sets);
    }
}
