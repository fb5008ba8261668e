//! How a search ranks tools: BM25F over the fields (each weighed and length-normalised on its
//! own before the term's count saturates), each query term weighed by what it is (the query's
//! own word 1; a word of asking or a generic API verb less; a related word or another form of
//! the word less again), then, among the best candidates, a bonus for the share of the tool's
//! name the query says, for the share of the query the tool says, and for query words found
//! side by side in the name or description; last, what the query and each candidate are about
//! (their vectors' cosine, and how much of the query's words the tool has words like).
//! Deterministic: the same tools and query always give the same scores, and
//! equal scores are ordered by name.

use std::cmp::Ordering;

use super::index::SearchIndex;
use super::meaning::WordMatcher;
use super::text::{FIELDS, Query, ToolTerms};

/// The knobs of the ranking. [`Weights::default`] is what the server uses, tuned on the tuning
/// part of the evaluation (3 requests in 10; docs/benchmarks.md, "Tool search"): a coordinate
/// search over every knob but `candidates`, `field.source` and `b.source`.
#[derive(Debug, Clone, PartialEq)]
pub struct Weights {
    /// Each field's weight: name, description, parameter names, parameter descriptions, source.
    pub field: [f64; FIELDS],
    /// Each field's length normalisation (BM25's `b`).
    pub b: [f64; FIELDS],
    /// How fast a term's weighted count saturates (BM25's `k1`).
    pub k1: f64,
    /// The bonus for the query saying all of the tool's name, in units of the name terms'
    /// IDF found; scaled by the share said, squared.
    pub name_coverage: f64,
    /// The bonus for two query terms side by side in the name or description, in units of
    /// their mean IDF.
    pub adjacent: f64,
    /// The bonus for the share of the query the tool says anywhere (its terms' IDF found over
    /// all of the query's), squared, in units of the IDF found: among tools that match the
    /// query's rarest word alike, the one that also has its other words.
    pub coverage: f64,
    /// What a term related to a query's term (a word tools say the same thing with) counts for,
    /// against the query's own terms' 1; 0 leaves them out.
    pub related: f64,
    /// What a stem of another form of a query's word (`conversion` for `convert`, `bought` for
    /// `buy`) counts for, against the query's own terms' 1; 0 leaves them out.
    pub forms: f64,
    /// What a query's word of asking (`help`, `want`, `tell`, `looking`) counts for, against
    /// its other terms' 1, in the score and in the bonuses: every kind of request has them.
    pub filler: f64,
    /// What a query's generic verb of APIs (`get`, `calculate`, `find`, `retrieve`) counts
    /// for, against its other terms' 1, in the score and in the bonuses: most tools' names
    /// start with one, and counted in full it picks among near-twins by their verb alone.
    pub verb: f64,
    /// How much what the query and a tool are about (the cosine of their vectors of WordLlama
    /// token embeddings) counts among the candidates, against the score from their words: the
    /// cosines are scaled to the candidates' spread of scores (both as z-scores), times this.
    pub meaning: f64,
    /// How much the share of the query the tool speaks of counts among the candidates, the
    /// same way as [`Weights::meaning`]: for each of the query's words, the cosine of the
    /// tool's word most like it (`kilograms` and `weight`, `Sydney` and `location`), averaged
    /// over the query's words.
    pub word_meaning: f64,
    /// Candidates (by BM25F) the bonuses are worked out for.
    pub candidates: usize,
}

impl Default for Weights {
    fn default() -> Self {
        Self {
            // The tuning search's result (field.source aside: 0 there, the evaluation's tools
            // having no telling source; a plugin's or MCP server's name says something).
            field: [1.171875, 0.1875, 0.32, 0.16, 0.1],
            b: [0.78125, 0.15, 0.6, 0.0, 0.0],
            k1: 2.4,
            name_coverage: 0.8,
            adjacent: 0.762939453125,
            coverage: 1.25,
            related: 0.375,
            forms: 0.78125,
            filler: 0.3125,
            verb: 0.625,
            meaning: 0.448,
            word_meaning: 0.8,
            candidates: 100,
        }
    }
}

/// Scores are rounded to this many decimal places before ties are broken, so two tools shown
/// with the same score are always in name order.
const SCORE_DECIMALS: i32 = 4;

/// A term's inverse document frequency: rarer terms say more (Lucene's BM25 form, never
/// negative).
fn idf(docs: usize, having: usize) -> f64 {
    let (n, df) = (docs as f64, having as f64);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// One ranked tool.
#[derive(Debug, Clone)]
pub struct Hit<'a, T> {
    pub item: &'a T,
    pub score: f64,
}

impl<T> SearchIndex<T> {
    /// The `limit` best tools for `query`, best first, equal scores by name; only tools that
    /// share a term with the query.
    pub(crate) fn rank(&self, query: &Query, limit: usize, weights: &Weights) -> Vec<Hit<'_, T>> {
        if self.live == 0 || query.is_empty() || limit == 0 {
            return Vec::new();
        }
        let docs = self.live;
        let average = self.lengths.map(|sum| (sum as f64 / docs as f64).max(1.0));
        let mut scores = vec![0.0f64; self.slots.len()];
        let mut touched: Vec<u32> = Vec::new();
        let related = query.related.iter().map(|t| (t, weights.related));
        let forms = query.forms.iter().map(|t| (t, weights.forms));
        let own = query.distinct.iter().enumerate();
        let terms = own
            .map(|(i, t)| (t, own_weight(query, i, weights)))
            .chain(related)
            .chain(forms);
        for (term, weight) in terms {
            self.accumulate(term, weight, &average, weights, &mut scores, &mut touched);
        }
        // The best candidates by BM25F (ties by slot, so the set is the same every time).
        let by_score = |a: &u32, b: &u32| {
            scores[*b as usize]
                .total_cmp(&scores[*a as usize])
                .then(a.cmp(b))
        };
        let keep = weights.candidates.max(limit);
        if touched.len() > keep {
            touched.select_nth_unstable_by(keep - 1, by_score);
            touched.truncate(keep);
        }
        let query_idf: Vec<f64> = query
            .distinct
            .iter()
            .enumerate()
            .map(|(i, t)| self.idf_of(t) * own_weight(query, i, weights))
            .collect();
        let mut ranked: Vec<(f64, u32)> = touched
            .iter()
            .map(|&slot| {
                let doc = self.doc(slot).expect("a touched slot is live");
                let bonus = self.bonus(&doc.terms, query, &query_idf, weights);
                (scores[slot as usize] + bonus, slot)
            })
            .collect();
        self.add_meaning(&mut ranked, query, weights);
        for (score, _) in &mut ranked {
            *score = round(*score);
        }
        ranked.sort_by(|a, b| {
            b.0.total_cmp(&a.0).then_with(|| {
                let (x, y) = (self.doc(a.1), self.doc(b.1));
                match (x, y) {
                    (Some(x), Some(y)) => x.terms.name.cmp(&y.terms.name),
                    _ => Ordering::Equal,
                }
            })
        });
        ranked.truncate(limit);
        ranked
            .into_iter()
            .filter_map(|(score, slot)| {
                self.doc(slot).map(|doc| Hit {
                    item: &doc.item,
                    score,
                })
            })
            .collect()
    }

    /// Adds to each candidate's score what the query and the tool are about, in two measures:
    /// the cosine of their vectors ([`Weights::meaning`]) and how much of the query's words the
    /// tool has words like ([`Weights::word_meaning`]). Each is added above the least among the
    /// candidates, in units of its spread, times its weight and the spread of the candidates'
    /// scores (the order is that of the sum of the z-scores). What they are about decides
    /// among tools the words rank alike, and counts in the same measure whatever the scale of
    /// the words' scores. Nothing is taken away: a score stays at least what the words gave. A
    /// tool without a vector or words gets nothing from that measure.
    fn add_meaning(&self, ranked: &mut [(f64, u32)], query: &Query, weights: &Weights) {
        if ranked.len() < 2 {
            return;
        }
        // Candidates the words rank all alike stay in name order: what tells them apart would
        // be differences of vectors with no scale to weigh them by (`note_01` … `note_12`).
        let score_spread = deviation(ranked.iter().map(|r| r.0));
        if score_spread == 0.0 {
            return;
        }
        let mut measures: Vec<(f64, Vec<Option<f64>>)> = Vec::with_capacity(2);
        if let Some(meaning) = query.meaning.as_ref().filter(|_| weights.meaning > 0.0) {
            let similarity = ranked
                .iter()
                .map(|&(_, slot)| Some(self.doc(slot)?.terms.meaning.get()?.similarity(meaning)))
                .collect();
            measures.push((weights.meaning, similarity));
        }
        if weights.word_meaning > 0.0 && !query.words.is_empty() {
            let mut matcher = WordMatcher::new(&query.words);
            let coverage = ranked
                .iter()
                .map(|&(_, slot)| matcher.coverage(self.doc(slot)?.terms.meaning.words()))
                .collect();
            measures.push((weights.word_meaning, coverage));
        }
        for (weight, values) in measures {
            let spread = deviation(values.iter().flatten().copied());
            if spread == 0.0 || !spread.is_finite() {
                continue;
            }
            let least = values
                .iter()
                .flatten()
                .copied()
                .fold(f64::INFINITY, f64::min);
            let scale = weight * score_spread / spread;
            for ((score, _), value) in ranked.iter_mut().zip(values) {
                *score += scale * (value.unwrap_or(least) - least);
            }
        }
    }

    /// Adds `term`'s BM25F score, times `weight`, to each tool that has it.
    fn accumulate(
        &self,
        term: &str,
        weight: f64,
        average: &[f64; FIELDS],
        weights: &Weights,
        scores: &mut [f64],
        touched: &mut Vec<u32>,
    ) {
        if weight <= 0.0 {
            return;
        }
        let Some(list) = self.postings.get(term) else {
            return;
        };
        let idf = weight * idf(self.live, list.len());
        for posting in list {
            let Some(doc) = self.doc(posting.slot) else {
                continue;
            };
            let mut weighted = 0.0;
            let fields = posting.counts.iter().zip(&doc.lengths).zip(average);
            for (field, ((&count, &length), &average)) in fields.enumerate() {
                if count > 0 {
                    let b = weights.b[field];
                    let norm = 1.0 - b + b * f64::from(length) / average;
                    weighted += weights.field[field] * f64::from(count) / norm;
                }
            }
            if weighted <= 0.0 {
                continue;
            }
            let score = &mut scores[posting.slot as usize];
            if *score == 0.0 {
                touched.push(posting.slot);
            }
            *score += idf * weighted * (weights.k1 + 1.0) / (weighted + weights.k1);
        }
    }

    /// The IDF of `term` in this index.
    fn idf_of(&self, term: &str) -> f64 {
        idf(self.live, self.postings.get(term).map_or(0, Vec::len))
    }

    /// The bonuses of one candidate: how much of its name the query says, how much of the query
    /// it says, and query terms side by side in its name or description. `query_idf` is the IDF
    /// of each of the query's distinct terms.
    fn bonus(&self, terms: &ToolTerms, query: &Query, query_idf: &[f64], weights: &Weights) -> f64 {
        let mut bonus = 0.0;
        if weights.coverage > 0.0 {
            let (mut said, mut all) = (0.0, 0.0);
            for (term, &idf) in query.distinct.iter().zip(query_idf) {
                all += idf;
                if terms.find(term).is_some() {
                    said += idf;
                }
            }
            if all > 0.0 {
                let share = said / all;
                bonus += weights.coverage * share * share * said;
            }
        }
        if weights.name_coverage > 0.0 && !terms.name_order.is_empty() {
            let (mut said, mut all) = (0.0, 0.0);
            let mut counted: Vec<u32> = Vec::with_capacity(terms.name_order.len());
            for &index in terms.name_order.iter() {
                if counted.contains(&index) {
                    continue;
                }
                counted.push(index);
                let term = &terms.terms[index as usize].term;
                let idf = self.idf_of(term);
                all += idf;
                if let Some(at) = query.distinct.iter().position(|t| t == term) {
                    said += own_weight(query, at, weights) * idf;
                } else if query.related.contains(term) {
                    said += weights.related * idf;
                } else if query.forms.contains(term) {
                    said += weights.forms * idf;
                }
            }
            if all > 0.0 {
                let share = said / all;
                bonus += weights.name_coverage * share * share * said;
            }
        }
        if weights.adjacent > 0.0 {
            for pair in query.order.windows(2) {
                let (Some(a), Some(b)) = (terms.find(&pair[0]), terms.find(&pair[1])) else {
                    continue;
                };
                let (a, b) = (a as u32, b as u32);
                let side_by_side = |order: &[u32]| order.windows(2).any(|w| w[0] == a && w[1] == b);
                if side_by_side(&terms.name_order) || side_by_side(&terms.description_order) {
                    let mean = (self.idf_of(&pair[0]) + self.idf_of(&pair[1])) / 2.0;
                    bonus += weights.adjacent * mean;
                }
            }
        }
        bonus
    }
}

/// What the query's `i`th distinct term counts for: 1, or less for a word of asking or a
/// generic verb.
fn own_weight(query: &Query, i: usize, weights: &Weights) -> f64 {
    if query.filler[i] {
        weights.filler
    } else if query.verb[i] {
        weights.verb
    } else {
        1.0
    }
}

/// The standard deviation of `values` (0 for none).
fn deviation(values: impl Iterator<Item = f64>) -> f64 {
    let (mut n, mut sum, mut squares) = (0.0, 0.0, 0.0);
    for v in values {
        n += 1.0;
        sum += v;
        squares += v * v;
    }
    if n == 0.0 {
        return 0.0;
    }
    let mean = sum / n;
    (squares / n - mean * mean).max(0.0).sqrt()
}

/// `score` rounded to [`SCORE_DECIMALS`] places.
fn round(score: f64) -> f64 {
    let scale = 10f64.powi(SCORE_DECIMALS);
    (score * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::Map;

    use super::*;

    fn index(tools: &[(&'static str, &str)]) -> SearchIndex<&'static str> {
        let mut index = SearchIndex::default();
        for &(name, description) in tools {
            let terms = ToolTerms::new(name, description, &Map::new(), "plugin:test");
            index.insert(name, Arc::new(terms));
        }
        index
    }

    fn names(index: &SearchIndex<&'static str>, query: &str) -> Vec<&'static str> {
        index
            .rank(&Query::new(query), 5, &Weights::default())
            .into_iter()
            .map(|hit| *hit.item)
            .collect()
    }

    #[test]
    fn a_word_finds_tools_that_say_another_of_its_forms() {
        let index = index(&[
            ("unit_conversion", "Conversion between units of length."),
            ("weather", "The weather in a city."),
        ]);
        assert_eq!(names(&index, "convert inches"), ["unit_conversion"]);
        assert_eq!(names(&index, "who won the match"), Vec::<&str>::new());
        let index = super::tests::index(&[("game_winner", "The team that wins a game.")]);
        assert_eq!(names(&index, "who won the match"), ["game_winner"]);
    }

    #[test]
    fn what_the_query_is_about_decides_among_tools_its_words_rank_alike() {
        let index = index(&[
            (
                "convert_units",
                "Convert a quantity from one unit to another.",
            ),
            (
                "convert_money",
                "Convert an amount from one currency to another.",
            ),
            ("convert_image", "Convert an image file to another format."),
            ("convert_case", "Convert text to upper or lower case."),
            (
                "convert_time",
                "Convert a time from one time zone to another.",
            ),
        ]);
        let query = "convert 30 pounds sterling into Japanese yen";
        let words_only = Weights {
            meaning: 0.0,
            word_meaning: 0.0,
            ..Weights::default()
        };
        // The words rank the four whose descriptions are as long alike: by name.
        let alike = index.rank(&Query::new(query), 5, &words_only);
        assert_eq!(*alike[0].item, "convert_case");
        assert_eq!(alike[0].score, alike[3].score);
        // What the query is about puts the currencies first.
        assert_eq!(names(&index, query)[0], "convert_money");
    }

    /// A tool's parameters: each one's name and description.
    type Parameters = &'static [(&'static str, &'static str)];

    /// Five tools from BFCL, with their parameters' names and descriptions: the needed one for
    /// "I need help looking for a Family Therapist in Mountain View." and the four whose words
    /// the place's name says.
    const THERAPIST: &[(&str, &str, Parameters)] = &[
        (
            "locate_tallest_mountains",
            "Find the tallest mountains within a specified radius of a location.",
            &[
                ("location", "The city from which to calculate distance."),
                (
                    "radius",
                    "The radius within which to find mountains, measured in kilometers.",
                ),
                (
                    "amount",
                    "The number of mountains to find, listed from tallest to smallest.",
                ),
            ],
        ),
        (
            "Services_4_FindProvider",
            "Discover a therapist based on the user's specific needs and location.",
            &[
                (
                    "city",
                    "The city where the user is looking for a therapist, in the format of \
                          'City, State', such as 'Berkeley, CA' or 'New York, NY'. State has to \
                          be abbrieviated.",
                ),
                (
                    "type",
                    "The specialization of the therapist the user is seeking.",
                ),
                (
                    "insurance_accepted",
                    "Indicates whether the therapist should accept \
                                        insurance, true for yes and false for no.",
                ),
            ],
        ),
        (
            "views_open",
            "This function opens a new view in the application using a trigger ID and returns \
             the server's response.",
            &[
                (
                    "token",
                    "Authentication token used to validate the request.",
                ),
                (
                    "trigger_id",
                    "An identifier that triggers the view to be opened.",
                ),
                ("view", "The encoded view data to be displayed."),
            ],
        ),
        (
            "views_publish",
            "Publish a view for a specific user using their user ID and a unique hash.",
            &[
                (
                    "token",
                    "Authentication token required to authorize the publishing action.",
                ),
                (
                    "user_id",
                    "The unique identifier of the user for whom the view is being \
                             published.",
                ),
                ("view", "The name of the view to be published."),
                (
                    "hash",
                    "A unique hash to ensure the request is not processed multiple times.",
                ),
            ],
        ),
        (
            "views_update",
            "Update an existing view in the system with new information based on a unique \
             identifier.",
            &[
                ("token", "Authentication token to verify the user."),
                ("view_id", "Unique identifier of the view to be updated."),
                (
                    "external_id",
                    "An optional external identifier for third-party integrations.",
                ),
                ("view", "Serialized string representation of the view data."),
                (
                    "hash",
                    "An optional hash for verifying the integrity of the view data.",
                ),
            ],
        ),
    ];

    #[test]
    fn the_tool_with_words_like_more_of_the_querys_comes_first() {
        let mut index = SearchIndex::default();
        for &(name, description, parameters) in THERAPIST {
            let properties: Map<String, serde_json::Value> = parameters
                .iter()
                .map(|(p, d)| (p.to_string(), serde_json::json!({"description": d})))
                .collect();
            let schema = serde_json::json!({"properties": properties});
            let schema = schema.as_object().expect("an object");
            let terms = ToolTerms::new(name, description, schema, "plugin:test");
            index.insert(name, Arc::new(terms));
        }
        let query = Query::new("I need help looking for a Family Therapist in Mountain View.");
        let first = |weights: &Weights| *index.rank(&query, 1, weights)[0].item;
        assert_eq!(first(&Weights::default()), "Services_4_FindProvider");
        // Without it, `mountain` finds the mountains first.
        let without = Weights {
            word_meaning: 0.0,
            ..Weights::default()
        };
        assert_eq!(first(&without), "locate_tallest_mountains");
    }

    #[test]
    fn words_of_asking_count_for_less_than_what_is_asked_for() {
        let index = index(&[
            ("help", "Help with using this assistant."),
            ("get_forecast", "The weather forecast for a city."),
        ]);
        assert_eq!(
            names(&index, "could you help me with the forecast")[0],
            "get_forecast"
        );
        // Counted in full, the word of asking would put `help` first.
        let full = Weights {
            filler: 1.0,
            ..Weights::default()
        };
        let first = index.rank(&Query::new("could you help me with the forecast"), 1, &full);
        assert_eq!(*first[0].item, "help");
    }
}
