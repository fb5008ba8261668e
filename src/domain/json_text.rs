//! JSON text kept exactly as it was written: a number with more digits than an `f64` holds
//! travels as written.

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
