//! Keys the server holds, kept out of every text it repeats. A peer that quotes a request back —
//! an upstream that echoes the `Authorization` header in an error, or in an answer it got wrong;
//! a model whose error event, or a Gemini Live API whose close reason, quotes the key; an MCP
//! server whose error quotes its environment — would otherwise have the server copy the key
//! into the app's answer, the log, the sessions listing and the events. [`Secrets::redact`]
//! replaces each key (as written, and as JSON writes it inside a string) with [`REDACTED`].
//!
//! The keys are held once for the whole server ([`hold`], [`held`]): each one as it is read
//! from the environment ([`key_from_env`]: a character's `[character.session] api_key_env` and
//! `attach_api_key_envs`, its `[character.chat] api_key_env`), which start-up does for every
//! configured key, and the values of a stdio MCP server's `env`. Like the environment they come
//! from, they are the process's, so every kind of session reads the same set: peer text is
//! redacted where it enters ([`crate::domain::peer_text::bounded`]), an upstream's chat answer
//! as it is read (with the app's own key of that request besides), and every log line as it is
//! written.

use std::borrow::Cow;
use std::sync::{Arc, LazyLock};

use arc_swap::ArcSwap;
use memchr::memmem;

/// The keys the server holds.
static HELD: LazyLock<ArcSwap<Secrets>> = LazyLock::new(ArcSwap::default);

/// Holds `key` for the whole server: from now on it is redacted from every text that enters.
pub(crate) fn hold(key: &str) {
    if key.len() < MIN_REDACTED_KEY_BYTES {
        return;
    }
    HELD.rcu(|held| {
        let mut more = Secrets::clone(held);
        more.add(key);
        more
    });
}

/// The keys the server holds.
pub(crate) fn held() -> Arc<Secrets> {
    HELD.load_full()
}

/// The key in the environment variable `name`, held ([`hold`]) once read.
pub(crate) fn key_from_env(name: &str) -> Result<String, std::env::VarError> {
    let key = std::env::var(name)?;
    hold(&key);
    Ok(key)
}

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

    #[test]
    fn a_held_key_is_redacted_everywhere_from_then_on() {
        hold("held-key-for-every-session-7f3a");
        hold("tiny");
        assert_eq!(
            held().redact_str("saw held-key-for-every-session-7f3a and tiny"),
            "saw [redacted] and tiny"
        );
        assert_eq!(
            held()
                .with(Some("request-key-0042"))
                .redact_str("held-key-for-every-session-7f3a request-key-0042"),
            "[redacted] [redacted]"
        );
    }
}
