//! JSON text kept exactly as it was written: a number with more digits than an `f64` holds
//! travels as written. And a JSON string read without a copy when it has no escapes.

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
