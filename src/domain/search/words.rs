//! Words as search reads them: split as identifiers are written (`getWeather`, `get_weather`,
//! `weather.get`, `get-weather` all give `get`, `weather`), lower-cased; and the few function
//! words that find nothing.

/// Words a query of a text does not find tools by: function words that every request and every
/// description has. Short on purpose: general stop lists drop `on`, `off`, `up`, `down`, `all`,
/// which name what tools do (turn on, volume up, list all).
pub(crate) fn is_stop_word(word: &str) -> bool {
    matches!(
        word,
        "a" | "an"
            | "and"
            | "are"
            | "as"
            | "at"
            | "be"
            | "been"
            | "but"
            | "by"
            | "can"
            | "could"
            | "did"
            | "do"
            | "does"
            | "for"
            | "from"
            | "had"
            | "has"
            | "have"
            | "he"
            | "her"
            | "his"
            | "how"
            | "i"
            | "if"
            | "in"
            | "into"
            | "is"
            | "it"
            | "its"
            | "me"
            | "my"
            | "of"
            | "or"
            | "our"
            | "please"
            | "she"
            | "should"
            | "so"
            | "than"
            | "that"
            | "the"
            | "their"
            | "them"
            | "then"
            | "there"
            | "these"
            | "they"
            | "this"
            | "those"
            | "to"
            | "us"
            | "was"
            | "we"
            | "were"
            | "what"
            | "when"
            | "where"
            | "which"
            | "who"
            | "will"
            | "with"
            | "would"
            | "you"
            | "your"
    )
}

/// What kind of character a word is split by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Upper,
    /// Lower case, and letters without case.
    Lower,
    Digit,
    /// Everything else ends a word.
    Other,
}

fn class(c: char) -> Class {
    if c.is_uppercase() {
        Class::Upper
    } else if c.is_numeric() {
        Class::Digit
    } else if c.is_alphanumeric() {
        Class::Lower
    } else {
        Class::Other
    }
}

/// Calls `each` with every word of `text`, lower-cased: runs of letters and digits, split where
/// a lower-case letter meets an upper-case one (`getWeather`), before the last capital of a run
/// followed by a lower-case letter (`HTTPServer`: `http`, `server`), and between letters and
/// digits (`top10`). Stops early when `each` returns false.
pub(crate) fn words(text: &str, mut each: impl FnMut(&str) -> bool) {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut lower = String::new();
    let mut start: Option<usize> = None;
    let mut emit = |from: usize, to: usize, lower: &mut String| -> bool {
        lower.clear();
        for c in text[from..to].chars() {
            lower.extend(c.to_lowercase());
        }
        each(lower)
    };
    for (i, &(at, c)) in chars.iter().enumerate() {
        let here = class(c);
        if here == Class::Other {
            if let Some(from) = start.take()
                && !emit(from, at, &mut lower)
            {
                return;
            }
            continue;
        }
        let Some(from) = start else {
            start = Some(at);
            continue;
        };
        let before = class(chars[i - 1].1);
        let next = chars.get(i + 1).map(|&(_, c)| class(c));
        let boundary = match (before, here) {
            (Class::Lower, Class::Upper) => true,
            (Class::Upper, Class::Upper) => next == Some(Class::Lower),
            (Class::Digit, Class::Upper | Class::Lower)
            | (Class::Upper | Class::Lower, Class::Digit) => true,
            _ => false,
        };
        if boundary {
            if !emit(from, at, &mut lower) {
                return;
            }
            start = Some(at);
        }
    }
    if let Some(from) = start {
        emit(from, text.len(), &mut lower);
    }
}

/// Whether a word says what a text is about: not a function word, not a single letter.
pub(crate) fn is_content_word(word: &str) -> bool {
    let mut chars = word.chars();
    let single_letter =
        matches!((chars.next(), chars.next()), (Some(c), None) if c.is_alphabetic());
    !single_letter && !is_stop_word(word)
}
