//! What a text is about, as a vector: the mean of its tokens' vectors from WordLlama's
//! `l2_supercat` model (static token embeddings trained for sentence similarity; Llama 2's
//! 32,000-token vocabulary, 256 dimensions), compiled in (`meaning/`, made by `meaning/make.py`
//! from the model's PyPI wheel). Two texts that say the same thing in other words — "100 euro in
//! USD" and "convert between currencies" — have vectors that point the same way, which the words
//! alone cannot tell.
//!
//! Deterministic and local: a tokenizer and a table lookup per token, no model run, nothing
//! fetched or loaded from disk.

use std::sync::{LazyLock, OnceLock};

use serde_json::{Map, Value};
use tokenizers::Tokenizer;

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
        let mut sum = vec![0.0f32; DIMENSIONS];
        for &id in encoding.get_ids() {
            let Some(row) = VECTORS.get(id as usize * ROW..(id as usize + 1) * ROW) else {
                continue;
            };
            let scale = f32::from_le_bytes([row[0], row[1], row[2], row[3]]);
            for (total, &byte) in sum.iter_mut().zip(&row[4..]) {
                *total += f32::from(byte as i8) * scale;
            }
        }
        let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm == 0.0 || !norm.is_finite() {
            return None;
        }
        sum.iter_mut().for_each(|x| *x /= norm);
        Some(Self(sum.into_boxed_slice()))
    }

    /// How alike two texts are: the cosine of their vectors, from −1 to 1.
    pub(crate) fn similarity(&self, other: &Self) -> f64 {
        let dot: f32 = self.0.iter().zip(other.0.iter()).map(|(a, b)| a * b).sum();
        f64::from(dot)
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
        }
    }

    /// The tool's vector; `None` for a tool whose text has no tokens.
    pub(crate) fn get(&self) -> Option<&Meaning> {
        self.meaning
            .get_or_init(|| Meaning::of(&self.text))
            .as_ref()
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
