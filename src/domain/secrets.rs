//! Keys the server holds, kept out of every text it repeats. A peer that quotes a request back —
//! an upstream that echoes the `Authorization` header in an error, or in an answer it got wrong
//! — would otherwise have the server copy the key into the app's answer, the log, the sessions
//! listing and the events. [`Secrets::redact`] replaces each key (as written, and as JSON
//! writes it inside a string) with [`REDACTED`] where the text enters.

use std::borrow::Cow;

use memchr::memmem;

/// What a key is replaced with.
pub(crate) const REDACTED: &str = "[redacted]";

/// Shortest key redacted: a real key is tens of characters; replacing every occurrence of a
/// few letters would garble the text and hide nothing.
pub(crate) const MIN_REDACTED_KEY_BYTES: usize = 8;

/// The keys to keep out of a text; cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct Secrets {
    /// Each key's written forms (the key, and its JSON-escaped text when that differs).
    forms: Vec<Vec<u8>>,
}

impl Secrets {
    /// Adds `key` (a key too short to be one is ignored).
    pub(crate) fn add(&mut self, key: &str) {
        if key.len() < MIN_REDACTED_KEY_BYTES {
            return;
        }
        let escaped = serde_json::to_string(key).unwrap_or_default();
        let escaped = &escaped[1..escaped.len() - 1];
        for form in [key, escaped] {
            if !self.forms.iter().any(|f| f == form.as_bytes()) {
                self.forms.push(form.as_bytes().to_vec());
            }
        }
    }

    /// These keys, and `key` too.
    pub(crate) fn with(&self, key: Option<&str>) -> Cow<'_, Self> {
        match key {
            Some(key) if key.len() >= MIN_REDACTED_KEY_BYTES => {
                let mut more = self.clone();
                more.add(key);
                Cow::Owned(more)
            }
            _ => Cow::Borrowed(self),
        }
    }

    /// `text` with every key replaced by [`REDACTED`]; borrowed when there was none.
    pub(crate) fn redact<'a>(&self, text: &'a [u8]) -> Cow<'a, [u8]> {
        let mut text = Cow::Borrowed(text);
        for form in &self.forms {
            let finder = memmem::Finder::new(form);
            if finder.find(&text).is_none() {
                continue;
            }
            let mut out = Vec::with_capacity(text.len());
            let mut rest: &[u8] = &text;
            while let Some(at) = finder.find(rest) {
                out.extend_from_slice(&rest[..at]);
                out.extend_from_slice(REDACTED.as_bytes());
                rest = &rest[at + form.len()..];
            }
            out.extend_from_slice(rest);
            text = Cow::Owned(out);
        }
        text
    }

    /// [`redact`](Self::redact) for text.
    pub(crate) fn redact_str<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.redact(text.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            // Only whole (valid UTF-8) keys were replaced by ASCII.
            Cow::Owned(bytes) => Cow::Owned(String::from_utf8_lossy(&bytes).into_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_written_form_of_a_key_is_replaced() {
        let mut secrets = Secrets::default();
        secrets.add("sk-live-\"quoted\"/key");
        let text = r#"{"error": {"message": "bad header: Bearer sk-live-\"quoted\"/key"}} sk-live-"quoted"/key"#;
        assert_eq!(
            secrets.redact_str(text),
            r#"{"error": {"message": "bad header: Bearer [redacted]"}} [redacted]"#
        );
        assert!(matches!(
            secrets.redact_str("nothing here"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn keys_are_added_per_request_and_short_ones_ignored() {
        let mut secrets = Secrets::default();
        secrets.add("short");
        assert_eq!(secrets.redact_str("short"), "short");
        let both = secrets.with(Some("app-key-123456"));
        assert_eq!(both.redact_str("x app-key-123456 y"), "x [redacted] y");
        assert_eq!(secrets.redact_str("app-key-123456"), "app-key-123456");
    }
}
