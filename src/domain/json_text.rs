//! JSON text kept exactly as it was written: a number with more digits than an `f64` holds
//! travels as written. A JSON string read without a copy when it has no escapes, and JSON text
//! written again with a few of its bytes replaced.

use serde_json::value::RawValue;

/// JSON text kept exactly as it was written.
pub(crate) type JsonText = Box<RawValue>;

/// The JSON text `null`.
pub(crate) fn null_text() -> JsonText {
    RawValue::NULL.to_owned()
}

/// Exact JSON text of text known to be JSON.
pub(crate) fn text_of(json: String) -> JsonText {
    RawValue::from_string(json).unwrap_or_else(|_| null_text())
}

/// A JSON string, borrowed from the text it is read from when it has no escapes (serde's own
/// `Cow<str>` always copies).
pub(crate) struct JsonStr<'a>(pub std::borrow::Cow<'a, str>);

impl<'de> serde::Deserialize<'de> for JsonStr<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(JsonStrVisitor)
    }
}

struct JsonStrVisitor;

impl<'de> serde::de::Visitor<'de> for JsonStrVisitor {
    type Value = JsonStr<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, text: &'de str) -> Result<Self::Value, E> {
        Ok(JsonStr(std::borrow::Cow::Borrowed(text)))
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok(JsonStr(std::borrow::Cow::Owned(text.to_owned())))
    }
}

/// Appends `text` to `into` with each range of `edits` replaced by its text (ranges in `text`,
/// at character boundaries, not overlapping; in any order).
pub(crate) fn splice(into: &mut String, text: &str, edits: &mut [(std::ops::Range<usize>, &str)]) {
    edits.sort_unstable_by_key(|(range, _)| range.start);
    let mut from = 0;
    for (range, put) in edits.iter() {
        into.push_str(&text[from..range.start]);
        into.push_str(put);
        from = range.end;
    }
    into.push_str(&text[from..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_are_made_in_the_order_of_the_text() {
        let mut out = String::from("> ");
        splice(
            &mut out,
            r#"{"a":1,"b":2}"#,
            &mut [(11..12, "9"), (1..1, r#""z":0,"#), (5..6, "")],
        );
        assert_eq!(out, r#"> {"z":0,"a":,"b":9}"#);
    }
}
