//! What a tool and a query are made of for search: words split as identifiers are written
//! (`getWeather`, `get_weather`, `weather.get`, `get-weather` all give `get`, `weather`),
//! lower-cased, without a few function words, each reduced to its stem (Snowball English:
//! `forecasts` and `forecasting` are both `forecast`).
//!
//! A tool's [`ToolTerms`] are worked out once per definition (the tool keeps them) and shared by
//! every character's index; a query's [`Query`] once per search.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock};

use rust_stemmers::{Algorithm, Stemmer};
use serde_json::{Map, Value};

use super::meaning::{Meaning, QueryWords, ToolMeaning};
use super::words::{is_content_word, words};

/// The parts of a tool that are searched, each weighed on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Name = 0,
    Description = 1,
    ParameterName = 2,
    ParameterDescription = 3,
    Source = 4,
}

/// How many [`Field`]s there are.
pub(crate) const FIELDS: usize = 5;

/// Words read from each field of a tool, at most: a description can be a whole manual, and
/// what a search can tell from its first pages it can tell from all of them. Bounds the work of
/// indexing one definition (and the index's size) whatever a plugin registers.
const MAX_FIELD_WORDS: [usize; FIELDS] = [64, 512, 256, 1024, 16];

/// How deep the parameters schema is followed (`properties` of `properties`, `items`): the
/// names a model fills in are near the top.
const MAX_SCHEMA_DEPTH: usize = 4;

/// The English stemmer: a table of suffix rules, made once.
static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// The stem a word is searched by, or `None` for a word nothing is found by (a stop word, a
/// single letter).
pub(crate) fn term(word: &str) -> Option<Cow<'_, str>> {
    is_content_word(word).then(|| STEMMER.stem(word))
}

/// Calls `each` with the terms of `text`, in order, at most `limit` of them.
fn terms(text: &str, limit: usize, mut each: impl FnMut(&str)) {
    let mut left = limit;
    words(text, |word| {
        if let Some(term) = term(word) {
            each(&term);
            left -= 1;
        }
        left > 0
    });
}

/// One distinct term of a tool and how often each field has it.
#[derive(Debug, Clone)]
pub(crate) struct Counted {
    pub term: Arc<str>,
    pub counts: [u16; FIELDS],
}

/// A tool as search sees it: its distinct terms with their counts per field (sorted by term),
/// each field's length in terms, and the order of the terms of its name and description (for
/// the bonus of query words found side by side).
#[derive(Debug, Clone)]
pub(crate) struct ToolTerms {
    /// The tool's name, for ties (broken by name, ascending).
    pub(crate) name: Box<str>,
    pub(crate) terms: Box<[Counted]>,
    pub(crate) lengths: [u32; FIELDS],
    /// The name's terms in order, as indexes into `terms`.
    pub(crate) name_order: Box<[u32]>,
    /// The description's terms in order, as indexes into `terms`.
    pub(crate) description_order: Box<[u32]>,
    /// What the tool is about, as a vector (its name, description and parameters' names),
    /// worked out when a search first wants it.
    pub(crate) meaning: ToolMeaning,
}

/// Builds a [`ToolTerms`]: terms are added field by field.
struct Builder {
    terms: Vec<Counted>,
    /// Each term's index in `terms`.
    seen: std::collections::HashMap<Arc<str>, u32, foldhash::fast::RandomState>,
    lengths: [u32; FIELDS],
}

impl Builder {
    fn add(&mut self, field: Field, text: &str, order: Option<&mut Vec<u32>>) {
        let used = self.lengths[field as usize] as usize;
        let left = MAX_FIELD_WORDS[field as usize].saturating_sub(used);
        if left == 0 {
            return;
        }
        let mut order = order;
        let mut added = 0;
        terms(text, left, |term| {
            let index = match self.seen.get(term) {
                Some(&index) => index,
                None => {
                    let term: Arc<str> = Arc::from(term);
                    let index = self.terms.len() as u32;
                    self.terms.push(Counted {
                        term: term.clone(),
                        counts: [0; FIELDS],
                    });
                    self.seen.insert(term, index);
                    index
                }
            };
            let count = &mut self.terms[index as usize].counts[field as usize];
            *count = count.saturating_add(1);
            if let Some(order) = order.as_deref_mut() {
                order.push(index);
            }
            added += 1;
        });
        self.lengths[field as usize] += added;
    }

    /// The names and descriptions of a schema's properties, depth first.
    fn add_schema(&mut self, schema: &Map<String, Value>, depth: usize) {
        if depth > MAX_SCHEMA_DEPTH {
            return;
        }
        if let Some(Value::Object(properties)) = schema.get("properties") {
            for (name, property) in properties {
                self.add(Field::ParameterName, name, None);
                if let Value::Object(property) = property {
                    if let Some(Value::String(text)) = property.get("description") {
                        self.add(Field::ParameterDescription, text, None);
                    }
                    self.add_schema(property, depth + 1);
                }
            }
        }
        if let Some(Value::Object(items)) = schema.get("items") {
            self.add_schema(items, depth + 1);
        }
    }
}

impl ToolTerms {
    /// The terms of a tool's definition.
    pub(crate) fn new(
        name: &str,
        description: &str,
        parameters: &Map<String, Value>,
        source: &str,
    ) -> Self {
        let mut builder = Builder {
            terms: Vec::new(),
            seen: Default::default(),
            lengths: [0; FIELDS],
        };
        let mut name_order = Vec::new();
        let mut description_order = Vec::new();
        builder.add(Field::Name, name, Some(&mut name_order));
        builder.add(
            Field::Description,
            description,
            Some(&mut description_order),
        );
        builder.add_schema(parameters, 0);
        builder.add(Field::Source, source, None);
        // Sorted by term, so a term of the query is found by binary search; the orders follow.
        let mut sorted: Vec<u32> = (0..builder.terms.len() as u32).collect();
        sorted.sort_by(|&a, &b| {
            builder.terms[a as usize]
                .term
                .cmp(&builder.terms[b as usize].term)
        });
        let mut new_index = vec![0u32; sorted.len()];
        for (new, &old) in sorted.iter().enumerate() {
            new_index[old as usize] = new as u32;
        }
        let renumber = |order: Vec<u32>| -> Box<[u32]> {
            order.into_iter().map(|i| new_index[i as usize]).collect()
        };
        let terms: Box<[Counted]> = sorted
            .iter()
            .map(|&i| builder.terms[i as usize].clone())
            .collect();
        Self {
            name: name.into(),
            terms,
            lengths: builder.lengths,
            name_order: renumber(name_order),
            description_order: renumber(description_order),
            meaning: ToolMeaning::new(name, description, parameters),
        }
    }

    /// The index of `term` among the tool's terms.
    pub(crate) fn find(&self, term: &str) -> Option<usize> {
        self.terms.binary_search_by(|c| (*c.term).cmp(term)).ok()
    }
}

/// Words tools say the same thing with: a query saying one finds tools that say another, for
/// less (`Weights::related`). Verbs and nouns of tool names and APIs in general, no domain's.
const RELATED: &[&[&str]] = &[
    &["get", "fetch", "retrieve", "obtain"],
    &["find", "search", "lookup", "locate"],
    &["list", "show", "display", "view"],
    &["create", "add", "make", "new", "generate", "insert"],
    &["delete", "remove", "erase"],
    &["update", "modify", "change", "edit", "adjust"],
    &["calculate", "compute", "estimate", "determine"],
    &["send", "post", "mail"],
    &["buy", "purchase", "order"],
    &["book", "reserve", "reservation", "booking"],
    &["start", "begin", "launch"],
    &["stop", "end", "halt"],
    &["price", "cost", "fee", "fare"],
    &["picture", "image", "photo"],
    &["movie", "film"],
    &["car", "vehicle"],
    &["song", "music", "track"],
    &["hotel", "accommodation", "lodging"],
    &["check", "verify", "validate"],
    &["probability", "odds", "chance", "likelihood"],
    &["convert", "conversion", "exchange"],
    &["currency", "money", "dollar", "euro", "usd"],
    &["route", "direction", "navigate", "navigation"],
    &["info", "information", "detail"],
    &["statistic", "stats"],
    &["schedule", "calendar", "appointment", "meeting"],
    &["email", "inbox"],
    &["location", "place", "address"],
    &["city", "town"],
    &["flight", "airline", "fly"],
    &["doctor", "physician"],
    &["lawyer", "attorney"],
    &["house", "home", "property"],
    &["job", "vacancy", "employment"],
    &["recipe", "cook", "dish"],
    &["nearby", "near"],
    &["remind", "reminder", "alarm"],
    &["light", "lamp"],
    &["weight", "mass"],
    &["employee", "staff", "worker"],
    &["user", "account", "profile"],
];

/// Each stem of [`RELATED`] and the other stems of its groups.
static RELATED_STEMS: LazyLock<std::collections::HashMap<String, Vec<Arc<str>>>> =
    LazyLock::new(|| {
        let mut map: std::collections::HashMap<String, Vec<Arc<str>>> = Default::default();
        for group in RELATED {
            let stems: Vec<String> = group.iter().map(|w| STEMMER.stem(w).into_owned()).collect();
            for stem in &stems {
                let others = map.entry(stem.clone()).or_default();
                for other in &stems {
                    if other != stem && !others.iter().any(|o| **o == **other) {
                        others.push(Arc::from(other.as_str()));
                    }
                }
            }
        }
        map
    });

/// A search's text as terms: in order (for words side by side), each distinct one once, the
/// terms related to them that it does not say itself, and the stems of its words' other forms
/// (`lexicon::forms`) that it does not say either.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query {
    pub(crate) order: Vec<Arc<str>>,
    pub(crate) distinct: Vec<Arc<str>>,
    /// For each of `distinct`, whether it is a word of asking (`help`, `want`, `tell`) rather
    /// than of what is asked for (`lexicon::is_filler`).
    pub(crate) filler: Vec<bool>,
    /// For each of `distinct`, whether it is a generic verb of APIs (`get`, `calculate`,
    /// `find`: `lexicon::is_generic_verb`).
    pub(crate) verb: Vec<bool>,
    pub(crate) related: Vec<Arc<str>>,
    pub(crate) forms: Vec<Arc<str>>,
    /// What the query is about, as a vector.
    pub(crate) meaning: Option<Meaning>,
    /// Its words, each as a vector.
    pub(crate) words: QueryWords,
}

/// Terms read from a query at most: a query is at most 512 characters over HTTP, and no request
/// needs more words than this to say which tool it wants.
const MAX_QUERY_TERMS: usize = 256;

impl Query {
    pub(crate) fn new(text: &str) -> Self {
        let mut query = Query {
            meaning: Meaning::of(text),
            words: QueryWords::of(text),
            ..Query::default()
        };
        let mut forms: Vec<String> = Vec::new();
        let mut left = MAX_QUERY_TERMS;
        words(text, |word| {
            let Some(term) = term(word) else {
                return true;
            };
            let term = match query.distinct.iter().find(|t| ***t == *term) {
                Some(known) => known.clone(),
                None => {
                    let term: Arc<str> = Arc::from(&*term);
                    query.distinct.push(term.clone());
                    query.filler.push(super::lexicon::is_filler(word));
                    query.verb.push(super::lexicon::is_generic_verb(word));
                    super::lexicon::forms(word, |form| {
                        let stem = STEMMER.stem(form);
                        if *stem != *term && !forms.iter().any(|f| *f == *stem) {
                            forms.push(stem.into_owned());
                        }
                    });
                    term
                }
            };
            query.order.push(term);
            left -= 1;
            left > 0
        });
        for term in &query.distinct {
            for other in RELATED_STEMS.get(&**term).into_iter().flatten() {
                if !query.distinct.contains(other) && !query.related.contains(other) {
                    query.related.push(other.clone());
                }
            }
        }
        query.forms = forms
            .into_iter()
            .filter(|f| !query.distinct.iter().any(|t| **t == **f))
            .filter(|f| !query.related.iter().any(|t| **t == **f))
            .map(Arc::from)
            .collect();
        query
    }

    /// Whether the query has no term to search by (only stop words, or nothing).
    pub(crate) fn is_empty(&self) -> bool {
        self.distinct.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn all_words(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        words(text, |w| {
            out.push(w.to_owned());
            true
        });
        out
    }

    #[test]
    fn identifiers_split_where_their_parts_meet() {
        assert_eq!(all_words("getWeather"), ["get", "weather"]);
        assert_eq!(
            all_words("get_current_weather"),
            ["get", "current", "weather"]
        );
        assert_eq!(all_words("math.factorial"), ["math", "factorial"]);
        assert_eq!(all_words("kebab-case-name"), ["kebab", "case", "name"]);
        assert_eq!(all_words("HTTPServerError"), ["http", "server", "error"]);
        assert_eq!(all_words("top10Songs v2"), ["top", "10", "songs", "v", "2"]);
        assert_eq!(all_words("  Ünïcode  Straße "), ["ünïcode", "straße"]);
        assert_eq!(all_words(""), Vec::<String>::new());
    }

    #[test]
    fn terms_are_stems_without_function_words() {
        let query = Query::new("What is the forecast? Forecasts for forecasting, x");
        let distinct: Vec<&str> = query.distinct.iter().map(|t| &**t).collect();
        assert_eq!(distinct, ["forecast"]);
        assert_eq!(query.order.len(), 3);
        assert!(Query::new("the of a").is_empty());
        // Words naming what a tool does are kept.
        let kept = Query::new("turn off all lights");
        let kept: Vec<&str> = kept.distinct.iter().map(|t| &**t).collect();
        assert_eq!(kept, ["turn", "off", "all", "light"]);
    }

    #[test]
    fn a_tool_counts_each_term_per_field_and_keeps_the_order_of_its_name() {
        let schema = json!({"type": "object", "properties": {
            "city": {"type": "string", "description": "The city's name"},
            "date": {"type": "object", "properties": {"day": {"description": "Day of the forecast"}}}
        }});
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        let terms = ToolTerms::new(
            "getWeatherForecast",
            "Weather forecast for a city.",
            &schema,
            "plugin:weather",
        );
        let count = |term: &str| terms.terms[terms.find(term).unwrap()].counts;
        assert_eq!(count("weather"), [1, 1, 0, 0, 1]);
        assert_eq!(count("forecast"), [1, 1, 0, 1, 0]);
        assert_eq!(count("citi"), [0, 1, 1, 1, 0]);
        assert_eq!(count("day"), [0, 0, 1, 1, 0]);
        assert_eq!(terms.lengths, [3, 3, 3, 4, 2]);
        let name: Vec<&str> = terms
            .name_order
            .iter()
            .map(|&i| &*terms.terms[i as usize].term)
            .collect();
        assert_eq!(name, ["get", "weather", "forecast"]);
    }

    #[test]
    fn a_query_brings_the_words_tools_say_the_same_thing_with() {
        let query = Query::new("What are the odds of a heart from a deck?");
        let related: Vec<&str> = query.related.iter().map(|t| &**t).collect();
        assert_eq!(related, ["probabl", "chanc", "likelihood"]);
        let query = Query::new("convert 500 dollars");
        let related: Vec<&str> = query.related.iter().map(|t| &**t).collect();
        assert_eq!(
            related,
            ["convers", "exchang", "currenc", "money", "euro", "usd"]
        );
    }

    #[test]
    fn a_query_brings_the_stems_of_its_words_other_forms() {
        let forms = |text: &str| -> Vec<String> {
            Query::new(text)
                .forms
                .iter()
                .map(|t| t.to_string())
                .collect()
        };
        // Derivations the stemmer leaves apart, either way round.
        assert!(forms("a time extension").contains(&"extend".to_owned()));
        assert!(forms("extend").contains(&"extens".to_owned()));
        assert!(forms("analysis of the text").contains(&"analyz".to_owned()));
        assert!(forms("historical events").contains(&"histori".to_owned()));
        assert!(forms("top players").contains(&"play".to_owned()));
        assert!(forms("Canadian dollars").contains(&"canada".to_owned()));
        // Irregular forms and spellings.
        assert!(forms("who won the game").contains(&"win".to_owned()));
        assert!(forms("what I bought").contains(&"buy".to_owned()));
        assert!(forms("the colour").contains(&"color".to_owned()));
        // Never the query's own terms.
        let query = Query::new("convert the conversion");
        assert!(query.forms.iter().all(|f| !query.distinct.contains(f)));
    }

    #[test]
    fn words_of_asking_are_marked() {
        let query = Query::new("Could you help me find a hotel? I want one near the sea");
        let marked: Vec<(&str, bool)> = query
            .distinct
            .iter()
            .zip(&query.filler)
            .map(|(t, &f)| (&**t, f))
            .collect();
        assert_eq!(
            marked,
            [
                ("help", true),
                ("find", false),
                ("hotel", false),
                ("want", true),
                ("one", false),
                ("near", false),
                ("sea", false)
            ]
        );
    }

    #[test]
    fn each_field_is_read_up_to_its_bound() {
        let long = "word ".repeat(10_000);
        let terms = ToolTerms::new("t", &long, &Map::new(), "s");
        assert_eq!(terms.lengths[Field::Description as usize], 512);
        assert_eq!(terms.description_order.len(), 512);
    }
}
