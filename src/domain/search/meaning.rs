//! What a text is about, as a vector: the mean of its tokens' vectors from WordLlama's
//! `l2_supercat` model (static token embeddings trained for sentence similarity; Llama 2's
//! 32,000-token vocabulary, 256 dimensions), compiled in (`meaning/`, made by `meaning/make.py`
//! from the model's PyPI wheel). Two texts that say the same thing in other words — "100 euro in
//! USD" and "convert between currencies" — have vectors that point the same way, which the words
//! alone cannot tell.
//!
//! The same vectors, word by word, tell how much of a query a tool speaks of
//! ([`WordMatcher`]): each of the query's words against the tool's word most like it, so that
//! "Family Therapist in Mountain View" finds a therapists' tool before one of mountains.
//!
//! Deterministic and local: a tokenizer and a table lookup per token, no model run, nothing
//! fetched or loaded from disk.

use std::sync::{LazyLock, OnceLock};

use serde_json::{Map, Value};
use tokenizers::Tokenizer;

use super::words::{is_content_word, words};

/// The vectors' dimensions.
const DIMENSIONS: usize = 256;

/// A token's row in [`VECTORS`]: a little-endian `f32` scale, then one signed byte per
/// dimension (the value is the byte times the scale).
const ROW: usize = 4 + DIMENSIONS;

static VECTORS: &[u8] = include_bytes!("meaning/vectors.i8");

static TOKENIZER: LazyLock<Option<Tokenizer>> =
    LazyLock::new(|| Tokenizer::from_bytes(include_bytes!("meaning/tokenizer.json")).ok());

/// How much of a text is read: a tool's description can be long, and its first few hundred
/// words say what it is about.
const MAX_CHARS: usize = 2_000;

/// A query's words whose vectors are compared with a tool's, at most: the first 64 distinct
/// words of a request say what it wants.
const MAX_QUERY_WORDS: usize = 64;

/// A tool's words whose vectors a query's are compared with, at most (its name's, its
/// description's, its parameters' names, in that order).
const MAX_TOOL_WORDS: usize = 128;

/// The row of token `id` in [`VECTORS`], as numbers; `None` past the table.
fn row(id: u32, into: &mut [f32; DIMENSIONS]) -> Option<()> {
    let row = VECTORS.get(id as usize * ROW..(id as usize + 1) * ROW)?;
    let scale = f32::from_le_bytes([row[0], row[1], row[2], row[3]]);
    for (value, &byte) in into.iter_mut().zip(&row[4..]) {
        *value = f32::from(byte as i8) * scale;
    }
    Some(())
}

/// The dot product of two vectors, summed in eight lanes (so the compiler can use vector
/// instructions: a sum in one lane's order cannot be reordered).
fn dot(a: &[f32; DIMENSIONS], b: &[f32; DIMENSIONS]) -> f32 {
    let mut lanes = [0.0f32; 8];
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for ((lane, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *lane += x * y;
        }
    }
    lanes.iter().sum()
}

/// A text's unit vector.
#[derive(Clone, PartialEq)]
pub(crate) struct Meaning(Box<[f32]>);

impl std::fmt::Debug for Meaning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Meaning({:.3}, {:.3}, …)", self.0[0], self.0[1])
    }
}

impl Meaning {
    /// The vector of `text`; `None` for a text with no tokens.
    pub(crate) fn of(text: &str) -> Option<Self> {
        let tokenizer = TOKENIZER.as_ref()?;
        let text = match text.char_indices().nth(MAX_CHARS) {
            Some((end, _)) => &text[..end],
            None => text,
        };
        let encoding = tokenizer.encode(text, false).ok()?;
        let mut sum = [0.0f32; DIMENSIONS];
        add_rows(encoding.get_ids().iter().copied(), &mut sum);
        let norm = norm(&sum)?;
        sum.iter_mut().for_each(|x| *x /= norm);
        Some(Self(Box::new(sum)))
    }

    /// How alike two texts are: the cosine of their vectors, from −1 to 1.
    pub(crate) fn similarity(&self, other: &Self) -> f64 {
        let dot: f32 = self.0.iter().zip(other.0.iter()).map(|(a, b)| a * b).sum();
        f64::from(dot)
    }
}

/// Adds the rows of `ids` to `sum`.
fn add_rows(ids: impl Iterator<Item = u32>, sum: &mut [f32; DIMENSIONS]) {
    let mut values = [0.0f32; DIMENSIONS];
    for id in ids {
        if row(id, &mut values).is_some() {
            sum.iter_mut().zip(&values).for_each(|(s, v)| *s += v);
        }
    }
}

/// The length of `vector`; `None` for a zero (or not finite) one.
fn norm(vector: &[f32]) -> Option<f32> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    (norm > 0.0 && norm.is_finite()).then_some(norm)
}

/// A word longer than this is no word a vector is known for (an identifier, a hash, a run of
/// letters), and is left out of the comparisons of words.
const MAX_WORD_CHARS: usize = 32;

/// The distinct words of `text` that say what it is about (`words::is_content_word`, at most
/// [`MAX_WORD_CHARS`] long), in order, at most `limit`, and each word's tokens: the words are
/// tokenised together, joined by single spaces, so each begins at a token that begins with the
/// tokenizer's `▁`.
fn tokens_of_words(text: &str, limit: usize) -> Vec<Vec<u32>> {
    let Some(tokenizer) = TOKENIZER.as_ref() else {
        return Vec::new();
    };
    let mut distinct: Vec<String> = Vec::new();
    words(text, |word| {
        let short = word.chars().nth(MAX_WORD_CHARS).is_none();
        if short && is_content_word(word) && !distinct.iter().any(|w| w == word) {
            distinct.push(word.to_owned());
        }
        distinct.len() < limit
    });
    let Ok(encoding) = tokenizer.encode(distinct.join(" "), false) else {
        return Vec::new();
    };
    let mut out: Vec<Vec<u32>> = Vec::with_capacity(distinct.len());
    for (id, token) in encoding.get_ids().iter().zip(encoding.get_tokens()) {
        match out.last_mut() {
            Some(word) if !token.starts_with('\u{2581}') => word.push(*id),
            _ => out.push(vec![*id]),
        }
    }
    out
}

/// A query's distinct words (at most [`MAX_QUERY_WORDS`]), each as a unit vector: the mean of
/// its tokens' vectors.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueryWords {
    vectors: Vec<[f32; DIMENSIONS]>,
}

impl QueryWords {
    pub(crate) fn of(text: &str) -> Self {
        let vectors = tokens_of_words(text, MAX_QUERY_WORDS)
            .into_iter()
            .filter_map(|ids| {
                let mut sum = [0.0f32; DIMENSIONS];
                add_rows(ids.into_iter(), &mut sum);
                let norm = norm(&sum)?;
                sum.iter_mut().for_each(|x| *x /= norm);
                Some(sum)
            })
            .collect();
        Self { vectors }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.vectors.is_empty()
    }
}

/// A tool's distinct words (at most [`MAX_TOOL_WORDS`]) as their tokens, and for each word the
/// inverse of the length of its tokens' summed vector: a word's cosine with a query's word is
/// the sum of its tokens' dot products with it times that, so a search works out each token's
/// dot products once for all the candidates that have it.
#[derive(Debug, Clone)]
pub(crate) struct ToolWords {
    tokens: Box<[u16]>,
    /// Where each word's tokens end in `tokens`.
    ends: Box<[u32]>,
    inverse_norms: Box<[f32]>,
}

impl ToolWords {
    fn of(text: &str) -> Self {
        let (mut tokens, mut ends, mut inverse_norms) = (Vec::new(), Vec::new(), Vec::new());
        for ids in tokens_of_words(text, MAX_TOOL_WORDS) {
            let mut sum = [0.0f32; DIMENSIONS];
            add_rows(ids.iter().copied(), &mut sum);
            let Some(norm) = norm(&sum) else {
                continue;
            };
            // The vocabulary has 32,000 tokens: each id fits 16 bits.
            tokens.extend(ids.iter().filter_map(|&id| u16::try_from(id).ok()));
            ends.push(tokens.len() as u32);
            inverse_norms.push(1.0 / norm);
        }
        Self {
            tokens: tokens.into(),
            ends: ends.into(),
            inverse_norms: inverse_norms.into(),
        }
    }
}

/// One search's comparisons of its query's words with its candidates' words: each token's
/// dot products with the query's words are worked out once and kept for the other candidates.
pub(crate) struct WordMatcher<'q> {
    query: &'q QueryWords,
    /// For each token of the vocabulary, where its dot products are in `dots`.
    at: Vec<u32>,
    dots: Vec<f32>,
}

impl<'q> WordMatcher<'q> {
    pub(crate) fn new(query: &'q QueryWords) -> Self {
        let vocabulary = VECTORS.len() / ROW;
        Self {
            query,
            at: vec![u32::MAX; vocabulary],
            dots: Vec::new(),
        }
    }

    /// How much of the query the tool speaks of: for each of the query's words, the cosine of
    /// the tool's word most like it, averaged over the query's words. `None` for a tool without
    /// words or a query without any.
    pub(crate) fn coverage(&mut self, tool: &ToolWords) -> Option<f64> {
        let n = self.query.vectors.len();
        if n == 0 || tool.ends.is_empty() {
            return None;
        }
        let mut best = vec![f32::NEG_INFINITY; n];
        let mut word = vec![0.0f32; n];
        let mut start = 0usize;
        for (&end, &inverse) in tool.ends.iter().zip(tool.inverse_norms.iter()) {
            word.iter_mut().for_each(|w| *w = 0.0);
            for &token in &tool.tokens[start..end as usize] {
                let at = self.dots_of(u32::from(token));
                word.iter_mut()
                    .zip(&self.dots[at..at + n])
                    .for_each(|(w, d)| *w += d);
            }
            for (b, w) in best.iter_mut().zip(&word) {
                *b = b.max(w * inverse);
            }
            start = end as usize;
        }
        Some(f64::from(best.iter().sum::<f32>()) / n as f64)
    }

    /// Where `token`'s dot products with the query's words are in `dots`, worked out the first
    /// time.
    fn dots_of(&mut self, token: u32) -> usize {
        let slot = &mut self.at[token as usize];
        if *slot != u32::MAX {
            return *slot as usize;
        }
        let at = self.dots.len();
        *slot = at as u32;
        let mut values = [0.0f32; DIMENSIONS];
        let known = row(token, &mut values).is_some();
        for vector in &self.query.vectors {
            self.dots
                .push(if known { dot(vector, &values) } else { 0.0 });
        }
        at
    }
}

/// A tool's vector, worked out when a search first wants it (a tool among a query's
/// candidates): indexing a character's tools does not tokenise every description.
#[derive(Debug, Clone)]
pub(crate) struct ToolMeaning {
    /// What the vector is of: the tool's name in words, its description and its parameters'
    /// names.
    text: Box<str>,
    meaning: OnceLock<Option<Meaning>>,
    words: OnceLock<ToolWords>,
}

impl ToolMeaning {
    pub(crate) fn new(name: &str, description: &str, parameters: &Map<String, Value>) -> Self {
        let mut text = words_of_name(name);
        text.push_str(". ");
        text.extend(description.chars().take(MAX_CHARS));
        if let Some(Value::Object(properties)) = parameters.get("properties") {
            for parameter in properties.keys() {
                text.push(' ');
                text.push_str(&words_of_name(parameter));
            }
        }
        Self {
            text: text.into(),
            meaning: OnceLock::new(),
            words: OnceLock::new(),
        }
    }

    /// The tool's vector; `None` for a tool whose text has no tokens.
    pub(crate) fn get(&self) -> Option<&Meaning> {
        self.meaning
            .get_or_init(|| Meaning::of(&self.text))
            .as_ref()
    }

    /// The tool's words, for comparing with a query's.
    pub(crate) fn words(&self) -> &ToolWords {
        self.words.get_or_init(|| ToolWords::of(&self.text))
    }
}

/// A name as words: `getWeather.v2_now` is `get Weather v2 now`.
fn words_of_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    let mut last_lower = false;
    for c in name.chars() {
        if matches!(c, '_' | '.' | '-' | '/' | ':') {
            out.push(' ');
            last_lower = false;
            continue;
        }
        if c.is_uppercase() && last_lower {
            out.push(' ');
        }
        out.push(c);
        last_lower = c.is_lowercase() || c.is_ascii_digit();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meaning(text: &str) -> Meaning {
        Meaning::of(text).expect("a vector")
    }

    #[test]
    fn the_compiled_in_model_loads_and_covers_its_vocabulary() {
        assert!(TOKENIZER.is_some(), "the tokenizer parses");
        let vocabulary = TOKENIZER.as_ref().unwrap().get_vocab_size(true);
        assert_eq!(VECTORS.len(), vocabulary * ROW);
    }

    #[test]
    fn texts_that_say_the_same_thing_in_other_words_are_alike() {
        let money = meaning("How much is 100 euro in USD?");
        let currency = meaning("Convert an amount from one currency to another.");
        let area = meaning("Calculate the area of a circle from its radius.");
        assert!(
            money.similarity(&currency) > money.similarity(&area),
            "{} against {}",
            money.similarity(&currency),
            money.similarity(&area)
        );
        // A text is most like itself, and its vector is a unit vector.
        assert!((money.similarity(&money) - 1.0).abs() < 1e-5);
    }

    #[test]
    fn a_tools_vector_is_worked_out_once_when_first_wanted() {
        let parameters = serde_json::json!({"properties": {"fromCurrency": {}, "amount": {}}});
        let tool = ToolMeaning::new(
            "money.convert",
            "Convert an amount between currencies.",
            parameters.as_object().unwrap(),
        );
        assert_eq!(
            &*tool.text,
            "money convert. Convert an amount between currencies. from Currency amount"
        );
        assert!(tool.meaning.get().is_none(), "nothing worked out yet");
        let first = tool.get().expect("a vector").clone();
        assert_eq!(Some(&first), tool.get());
        assert_eq!(Some(&first), Meaning::of(&tool.text).as_ref());
    }

    #[test]
    fn each_content_word_has_its_own_tokens() {
        // `in` is a function word, `a` a single letter; `2022` is tokenised digit by digit.
        let words = tokens_of_words("getWeather in a city in 2022 getWeather", 10);
        assert_eq!(words.len(), 4, "{words:?}");
        assert!(words[3].len() >= 4, "{words:?}");
        assert_eq!(tokens_of_words("one two three", 2).len(), 2);
        let long = "x".repeat(MAX_WORD_CHARS + 1);
        assert!(tokens_of_words(&long, 10).is_empty());
    }

    #[test]
    fn a_querys_words_find_the_tools_words_like_them() {
        let query = QueryWords::of("85 kilograms and 180 centimetres tall");
        let body = ToolWords::of("bmi. Body mass index. weight height");
        let money = ToolWords::of("convert. Convert currencies. amount currency");
        let mut matcher = WordMatcher::new(&query);
        let (body, money) = (matcher.coverage(&body), matcher.coverage(&money));
        assert!(body > money, "{body:?} against {money:?}");
        // A word the tool says itself is found whole.
        let said = matcher.coverage(&ToolWords::of("kilograms centimetres tall 85 180"));
        assert!((said.expect("words") - 1.0).abs() < 1e-4, "{said:?}");
        assert_eq!(matcher.coverage(&ToolWords::of("the of")), None);
    }

    #[test]
    fn a_tokens_dot_products_are_worked_out_once_per_search() {
        let query = QueryWords::of("weather forecast tomorrow");
        let mut matcher = WordMatcher::new(&query);
        let tool = ToolWords::of("weather forecast");
        matcher.coverage(&tool);
        let worked_out = matcher.dots.len();
        assert_eq!(worked_out, tool.tokens.len() * 3);
        matcher.coverage(&ToolWords::of("forecast weather"));
        assert_eq!(matcher.dots.len(), worked_out);
    }

    #[test]
    fn a_text_without_tokens_has_no_vector() {
        assert!(Meaning::of("").is_none());
    }

    #[test]
    fn names_are_read_as_words() {
        assert_eq!(words_of_name("getWeather.v2_now"), "get Weather v2 now");
        assert_eq!(words_of_name("HTTPServer-status"), "HTTPServer status");
    }

    #[test]
    fn a_long_text_is_read_in_part() {
        let long = "weather ".repeat(10_000);
        assert!(Meaning::of(&long).is_some());
    }
}
