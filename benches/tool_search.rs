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
//! A request's recall@k is the share of the tools it needs that are in the top k
//! (`|needed ∩ top k| / |needed|`), the same rule for every k: for a request that needs one
//! tool (most of BFCL), whether it is there; for one that needs three, recall@1 is at most 1/3.
//! It never falls as k grows. `all@5` beside it counts the requests with every tool they need in
//! the top 5.
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
/// Registrations followed by a search, in the speed figure's cost of a search after a change.
const AFTER_CHANGE_ROUNDS: usize = 200;
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

/// recall@1 and recall@5 summed over requests, the requests with every needed tool in the top
/// 5, and how many requests.
#[derive(Default, Clone, Copy)]
struct Tally {
    at1: f64,
    at5: f64,
    all5: usize,
    requests: usize,
}

impl Tally {
    fn at1(&self) -> f64 {
        self.at1 / self.requests.max(1) as f64
    }

    fn at5(&self) -> f64 {
        self.at5 / self.requests.max(1) as f64
    }

    fn all5(&self) -> f64 {
        self.all5 as f64 / self.requests.max(1) as f64
    }
}

/// A ranking's recall over a set's requests, and over those that need one tool alone; and of
/// the latter whose first tool is wrong, how many have a twin of the needed tool first.
#[derive(Default, Clone, Copy)]
struct Recall {
    all: Tally,
    one: Tally,
    twin_first: usize,
    /// Of those, how many have the needed tool second, and in the top 5.
    second: usize,
    in_top5: usize,
    /// Of those, how many have a tool first whose name shares at least half its words with
    /// the needed tool's ([`namesakes`]).
    namesake_first: usize,
}

impl Recall {
    /// One request: `targets` it needs (at least one), `ranked` best first.
    fn add(&mut self, set: &Set, targets: &[String], ranked: &[&str]) {
        let hits = |k: usize| {
            let top = &ranked[..ranked.len().min(k)];
            targets.iter().filter(|t| top.contains(&t.as_str())).count()
        };
        let needed = targets.len().max(1);
        let mut tallies = vec![&mut self.all];
        if targets.len() == 1 {
            tallies.push(&mut self.one);
        }
        for tally in tallies {
            tally.at1 += hits(1) as f64 / needed as f64;
            tally.at5 += hits(5) as f64 / needed as f64;
            tally.all5 += usize::from(hits(5) == targets.len());
            tally.requests += 1;
        }
        if targets.len() == 1
            && hits(1) == 0
            && let Some(first) = ranked.first()
        {
            self.twin_first += usize::from(twins(set, &targets[0], first));
            self.namesake_first += usize::from(namesakes(&targets[0], first));
            self.second += usize::from(ranked.get(1) == Some(&targets[0].as_str()));
            self.in_top5 += usize::from(hits(5) == 1);
        }
    }
}

/// Whether two tools of a set are twins: the same name but for case and separators
/// (`calculate_bmi`, `calculate_BMI`), or descriptions of mostly the same words (a Jaccard
/// index of their words of three letters or more of at least [`TWIN_JACCARD`]).
fn twins(set: &Set, a: &str, b: &str) -> bool {
    let squash = |name: &str| -> String {
        name.chars()
            .filter(|c| c.is_alphanumeric())
            .flat_map(char::to_lowercase)
            .collect()
    };
    if squash(a) == squash(b) {
        return true;
    }
    let words = |name: &str| -> std::collections::HashSet<String> {
        let tool = set.tools.iter().find(|t| t.name == name);
        tool.map(|t| {
            t.description
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| w.len() >= 3)
                .map(str::to_lowercase)
                .collect()
        })
        .unwrap_or_default()
    };
    let (x, y) = (words(a), words(b));
    let union = x.union(&y).count();
    union > 0 && x.intersection(&y).count() as f64 / union as f64 >= TWIN_JACCARD
}

/// Whether two tools' names share at least half their words (a Jaccard index of their
/// lower-cased words, a final `s` dropped, of at least 0.5): `circle.area` and
/// `geometry.area_circle`, `get_stock_price` and `stock_price.get`. Looser than [`twins`].
fn namesakes(a: &str, b: &str) -> bool {
    let words = |name: &str| -> std::collections::HashSet<String> {
        let mut out = std::collections::HashSet::new();
        let mut word = String::new();
        let mut last_lower = false;
        for c in name.chars().chain(std::iter::once(' ')) {
            let boundary = !c.is_alphanumeric() || (c.is_uppercase() && last_lower);
            if boundary && !word.is_empty() {
                let w = std::mem::take(&mut word);
                let w = match w.strip_suffix('s') {
                    Some(stem) if stem.len() >= 3 => stem.to_owned(),
                    _ => w,
                };
                out.insert(w);
            }
            if c.is_alphanumeric() {
                word.extend(c.to_lowercase());
            }
            last_lower = c.is_lowercase();
        }
        out
    };
    let (x, y) = (words(a), words(b));
    let union = x.union(&y).count();
    union > 0 && 2 * x.intersection(&y).count() >= union
}

/// How alike two descriptions' words must be for their tools to count as twins.
const TWIN_JACCARD: f64 = 0.5;

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
        recall.add(&indexed.set, &request.targets, &ranked);
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
        recall.add(
            &indexed.set,
            &request.targets,
            &indexed.bm25.search(&request.text, 5),
        );
    }
    recall
}

/// What tuning maximises: recall@1 plus recall@5, averaged over the sets, BFCL counted twice:
/// its single requests over a thousand tools are the kind of search the issue sets the targets
/// on; the others keep the weights from fitting BFCL alone.
fn objective(sets: &[Indexed], weights: &Weights) -> f64 {
    let (mut total, mut counted) = (0.0, 0.0);
    for s in sets {
        let r = ours(s, Split::Tuning, weights).all;
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

/// The knobs of [`Weights`] the tuning turns and `--with NAME=VALUE` sets.
fn knobs() -> Vec<Knob> {
    vec![
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
        ("coverage", |w| &mut w.coverage),
        ("related", |w| &mut w.related),
        ("forms", |w| &mut w.forms),
        ("filler", |w| &mut w.filler),
        ("verb", |w| &mut w.verb),
        ("meaning", |w| &mut w.meaning),
        ("word_meaning", |w| &mut w.word_meaning),
    ]
}

/// A coordinate search from the defaults: each knob scaled up and down in turn, a change kept
/// when it raises the objective, until a round changes nothing.
fn tune(sets: &[Indexed], start: Weights) -> Weights {
    let mut best = start;
    let mut score = objective(sets, &best);
    println!("tuning from {best:?}: objective {score:.4}");
    let knobs = knobs();
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

fn quality(sets: &[Indexed], split: Split, weights: &Weights) {
    println!(
        "recall on the {} (recall@1 / recall@5 / all@5):",
        split.name()
    );
    println!(
        "| set | tools | requests | tools needed (mean) | plain BM25 | this ranking | \
         without the comparison of words | words alone (vectors off) | BM25F alone (bonuses \
         and vectors off) |"
    );
    println!("| --- | ---: | ---: | ---: | --- | --- | --- | --- | --- |");
    let cosine_only = Weights {
        word_meaning: 0.0,
        ..weights.clone()
    };
    let words_only = Weights {
        meaning: 0.0,
        word_meaning: 0.0,
        ..weights.clone()
    };
    let plain_only = Weights {
        name_coverage: 0.0,
        adjacent: 0.0,
        coverage: 0.0,
        ..words_only.clone()
    };
    let show = |r: &Tally| format!("{:.3} / {:.3} / {:.3}", r.at1(), r.at5(), r.all5());
    let mut means = [[0.0; 3]; 5];
    let mut notes = Vec::new();
    for s in sets {
        let b = baseline(s, split);
        let o = ours(s, split, weights);
        let c = ours(s, split, &cosine_only);
        let w = ours(s, split, &words_only);
        let f = ours(s, split, &plain_only);
        let taken: Vec<&Request> = s
            .set
            .requests
            .iter()
            .filter(|r| split.takes(&s.set, r))
            .collect();
        let needed =
            taken.iter().map(|r| r.targets.len()).sum::<usize>() as f64 / taken.len().max(1) as f64;
        println!(
            "| {} | {} | {} | {needed:.2} | {} | {} | {} | {} | {} |",
            s.set.name,
            s.set.tools.len(),
            o.all.requests,
            show(&b.all),
            show(&o.all),
            show(&c.all),
            show(&w.all),
            show(&f.all)
        );
        // The row of one-tool requests, where most need one (BFCL): the kind of request the
        // issue's figures are for.
        let mostly_one = 2 * o.one.requests > o.all.requests;
        if mostly_one && o.one.requests < o.all.requests {
            println!(
                "| {}, one tool needed | {} | {} | 1 | {} | {} | {} | {} | {} |",
                s.set.name,
                s.set.tools.len(),
                o.one.requests,
                show(&b.one),
                show(&o.one),
                show(&c.one),
                show(&w.one),
                show(&f.one)
            );
        }
        for (mean, r) in means.iter_mut().zip([b.all, o.all, c.all, w.all, f.all]) {
            let n = sets.len() as f64;
            mean[0] += r.at1() / n;
            mean[1] += r.at5() / n;
            mean[2] += r.all5() / n;
        }
        let missed = |r: &Recall| r.one.requests - (r.one.at1.round() as usize);
        if !mostly_one {
            continue;
        }
        notes.push(format!(
            "{}: of the requests needing one tool whose first tool is wrong, a twin of the \
             needed tool is first for {} of {} (plain BM25: {} of {}); counting a twin as \
             found, this ranking's recall@1 there is {:.3} (plain BM25 {:.3}). Of this \
             ranking's {}, the needed tool is second for {} and in the top 5 for {}; a tool \
             whose name shares at least half its words with the needed tool's is first for {}",
            s.set.name,
            o.twin_first,
            missed(&o),
            b.twin_first,
            missed(&b),
            (o.one.at1 + o.twin_first as f64) / o.one.requests.max(1) as f64,
            (b.one.at1 + b.twin_first as f64) / b.one.requests.max(1) as f64,
            missed(&o),
            o.second,
            o.in_top5,
            o.namesake_first,
        ));
    }
    let show = |m: &[f64; 3]| format!("{:.3} / {:.3} / {:.3}", m[0], m[1], m[2]);
    println!(
        "| mean of the sets | | | | {} | {} | {} | {} | {} |",
        show(&means[0]),
        show(&means[1]),
        show(&means[2]),
        show(&means[3]),
        show(&means[4])
    );
    for note in notes {
        println!("{note}");
    }
}

/// A dataset's parameters as a schema the server registers: only names and descriptions (the
/// sets' own type words, such as BFCL's `dict`, are not JSON Schema).
fn registrable(parameters: &Map<String, Value>) -> Map<String, Value> {
    let mut schema = parameters.clone();
    schema.insert("type".into(), json!("object"));
    schema
}

/// Registers `tool` as `name` with `description` on the one character, as a plugin would.
/// Names over the register route's 64 characters are cut; a clash just replaces.
async fn register(router: &Addr<Router>, name: &str, description: String, tool: &data::Tool) {
    let spec = ToolSpec::remote(
        name.chars().take(64).collect::<String>(),
        description,
        Parameters::new(registrable(&tool.parameters)).expect("a schema"),
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
            let (name, tool) = speed_tool(&tools, k);
            register(&router, &name, tool.description.clone(), tool).await;
        }
    });
    let registered = started.elapsed();
    let current = || {
        system.block_on(async {
            router
                .send(ListTools { role: None })
                .await
                .expect("router answers")
                .expect("listed")
                .remove(0)
                .tools
        })
    };
    let snapshot = current();
    // The first search indexes every tool (registering did no search work).
    let start = Instant::now();
    snapshot.search("weather", SPEED_LIMIT);
    let first = start.elapsed();
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
    // A search right after a registration that brings a new description: it brings the index
    // up to date first (a walk over the tools, the new one's terms).
    let mut after_change = Vec::with_capacity(AFTER_CHANGE_ROUNDS);
    for (round, query) in queries.iter().take(AFTER_CHANGE_ROUNDS).enumerate() {
        let tool = tools[round % tools.len()];
        let description = format!("{} (revision {round})", tool.description);
        system.block_on(register(&router, &tool.name, description, tool));
        let snapshot = current();
        let start = Instant::now();
        snapshot.search(query, SPEED_LIMIT);
        after_change.push(start.elapsed());
    }
    after_change.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
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
    println!(
        "the first search (indexing every tool): {:.1} ms; a search right after a \
         registration of a new description, {} searches: p50 {:.3} ms, max {:.3} ms",
        ms(first),
        after_change.len(),
        ms(after_change[after_change.len() / 2]),
        ms(after_change[after_change.len() - 1]),
    );
    vectors_cost(&tools, &queries);
}

/// The `k`th of the speed figure's tools: the sets' tools over and over, each copy's names
/// numbered.
fn speed_tool<'t>(tools: &[&'t data::Tool], k: usize) -> (String, &'t data::Tool) {
    let tool = tools[k % tools.len()];
    let copy = k / tools.len();
    let name = if copy == 0 {
        tool.name.clone()
    } else {
        format!("{}_{copy}", tool.name)
    };
    (name, tool)
}

/// What the vectors cost a search: the same tools in a [`Catalog`] (the same ranking, without
/// the snapshot), each query searched three times — with the server's weights, without the
/// comparison of words (`word_meaning` 0), and with the words alone — one after the other,
/// which first rotating query by query (after a first round that works out the candidates'
/// vectors and words).
fn vectors_cost(tools: &[&data::Tool], queries: &[&str]) {
    // As registered: names cut to the route's 64 characters (the later of a clash left out),
    // the source the registrations give.
    let mut catalog = Catalog::new();
    let mut names = std::collections::HashSet::new();
    for k in 0..SPEED_TOOLS {
        let (name, tool) = speed_tool(tools, k);
        let name: String = name.chars().take(64).collect();
        if names.insert(name.clone()) {
            let parameters = registrable(&tool.parameters);
            catalog.add(&name, &tool.description, &parameters, "plugin:bench");
        }
    }
    let weights = [
        Weights::default(),
        Weights {
            word_meaning: 0.0,
            ..Weights::default()
        },
        Weights {
            meaning: 0.0,
            word_meaning: 0.0,
            ..Weights::default()
        },
    ];
    for query in queries {
        catalog.search(query, SPEED_LIMIT, &weights[0]);
    }
    let mut times: [Vec<Duration>; 3] = Default::default();
    for _ in 0..SPEED_ROUNDS {
        for (i, query) in queries.iter().enumerate() {
            // Each first a third of the time: the second search of a query finds its postings
            // in the cache.
            for k in 0..3 {
                let which = (i + k) % 3;
                let start = Instant::now();
                catalog.search(query, SPEED_LIMIT, &weights[which]);
                times[which].push(start.elapsed());
            }
        }
    }
    let p50 = |t: &mut Vec<Duration>| {
        t.sort();
        t[t.len() / 2].as_secs_f64() * 1e3
    };
    let [all, cosine, words] = &mut times;
    println!(
        "the same searches in a catalog of the same tools, rotated: p50 {:.3} ms with the \
         vectors and the comparison of words, {:.3} ms with the vectors alone, {:.3} ms with \
         the words alone",
        p50(all),
        p50(cosine),
        p50(words)
    );
}

/// Writes every set's tools and requests, with each request's part and the ranking's 100 best
/// and their scores, as JSON lines: for studying the ranking outside this harness.
fn dump(sets: &[Indexed], weights: &Weights, path: &str) {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("a dump file"));
    for s in sets {
        for t in &s.set.tools {
            let line = json!({"set": s.set.name, "tool": t.name, "description": t.description,
                "parameters": t.parameters, "source": t.source});
            writeln!(out, "{line}").expect("written");
        }
        for r in &s.set.requests {
            let ranked: Vec<Value> = s
                .catalog
                .search(&r.text, 100, weights)
                .into_iter()
                .map(|(name, score)| json!([name, score]))
                .collect();
            let line = json!({"set": s.set.name, "request": r.id, "text": r.text,
                "targets": r.targets, "tuning": data::is_tuning(s.set.name, &r.id),
                "ranked": ranked});
            writeln!(out, "{line}").expect("written");
        }
    }
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
    // `--with NAME=VALUE` (repeatable): the defaults with a knob set otherwise.
    let mut weights = Weights::default();
    for pair in args.windows(2).filter(|p| p[0] == "--with") {
        let (name, value) = pair[1].split_once('=').expect("--with NAME=VALUE");
        let value: f64 = value.parse().expect("a number");
        let knobs = knobs();
        let (_, knob) = knobs
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no knob {name}"));
        *knob(&mut weights) = value;
    }
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
                let ranked = s.catalog.search(&r.text, 5, &weights);
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
    if let Some(i) = args.iter().position(|a| a == "--dump") {
        dump(&sets, &weights, &args[i + 1]);
        return;
    }
    if has("--tune") {
        tune(&sets, weights);
        return;
    }
    if !has("--speed-only") {
        quality(&sets, split, &weights);
    }
    if !has("--quality-only") {
        speed(&sets);
    }
}
