//! The bound on ids and names a peer invents: a model's call ids (a realtime session's, Gemini
//! Live's, a chat or Responses upstream's), the tool names a model calls that no tool has, the
//! turn ids a model gives its responses. The server keeps and shows such text — the recent
//! calls, events, logs, spans, the sessions listing, a callback's body, a pending approval — so
//! text longer than its bound is kept as its start and a mark ([`shown`]): the mark says how
//! long the text was and carries the start of its SHA-256, so two long ids that begin alike
//! stay two ids. Where a protocol needs the model's exact id back (a realtime
//! `function_call_output`, a Gemini function response, a chat `tool` message, a Responses
//! `function_call_output`), the call keeps that id beside the shown one, for as long as the
//! call runs ([`crate::domain::call::ToolCall::model_call_id`]).

use std::borrow::Cow;
use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// Longest call id kept and shown, in bytes. The ids providers make are a few dozen bytes
/// (`call_` and 24 characters; Gemini's 8 to 40); 256 holds any of them whole, many times over,
/// and keeps a recent call's record, a `tool.call` event and a span small whatever a model sends.
/// `POST /api/tools/invoke` refuses a longer `call_id`.
pub const MAX_CALL_ID_BYTES: usize = 256;

/// Longest tool name a model invents that is kept and shown, in bytes. A tool's name is 1 to 64
/// characters, so at most 256 bytes in UTF-8: every name a tool can have is shown whole, and a
/// name cut to this bound is certainly no tool's.
pub const MAX_INVENTED_NAME_BYTES: usize = 256;

/// Hex digits of the SHA-256 a cut text's mark carries: 64 bits, so ids that share their first
/// bytes stay apart.
const DIGEST_HEX: usize = 16;

/// `text` as it is kept and shown: itself within `max` bytes, or its start (cut at a character
/// boundary) and a mark `… (cut: N bytes in all, sha256 H)`, `max` bytes at most in all. The
/// same text always gives the same shown text, and shown text is its own shown text.
pub(crate) fn shown(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let digest = Sha256::digest(text.as_bytes());
    let mut mark = format!("… (cut: {} bytes in all, sha256 ", text.len());
    for byte in &digest[..DIGEST_HEX / 2] {
        let _ = write!(mark, "{byte:02x}");
    }
    mark.push(')');
    let mut end = max.saturating_sub(mark.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = String::with_capacity(end + mark.len());
    cut.push_str(&text[..end]);
    cut.push_str(&mark);
    Cow::Owned(cut)
}

/// A call id as it is kept and shown (at most [`MAX_CALL_ID_BYTES`]).
pub(crate) fn call_id(id: &str) -> Cow<'_, str> {
    shown(id, MAX_CALL_ID_BYTES)
}

/// A tool name (or another name or id a model invents) as it is kept and shown (at most
/// [`MAX_INVENTED_NAME_BYTES`]).
pub(crate) fn name(name: &str) -> Cow<'_, str> {
    shown(name, MAX_INVENTED_NAME_BYTES)
}

/// A call id the model sent, split into the id kept and shown, and the model's own when that is
/// not the same (it was longer than [`MAX_CALL_ID_BYTES`]).
pub(crate) fn split_call_id(id: String) -> (String, Option<std::sync::Arc<str>>) {
    match call_id(&id) {
        Cow::Borrowed(_) => (id, None),
        Cow::Owned(kept) => (kept, Some(id.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_within_the_bound_is_kept_whole() {
        assert!(matches!(call_id("call_abc"), Cow::Borrowed("call_abc")));
        let longest = "x".repeat(MAX_CALL_ID_BYTES);
        assert_eq!(call_id(&longest), longest.as_str());
        let (kept, sent) = split_call_id(longest.clone());
        assert_eq!((kept, sent), (longest, None));
    }

    #[test]
    fn a_longer_id_is_cut_marked_and_told_apart_from_another_that_begins_alike() {
        let long = format!("call_{}", "a".repeat(900_000));
        let other = format!("{long}b");
        let (a, b) = (call_id(&long), call_id(&other));
        assert!(a.len() <= MAX_CALL_ID_BYTES && b.len() <= MAX_CALL_ID_BYTES);
        assert!(a.starts_with("call_aaaa"), "{a}");
        assert!(a.contains("… (cut: 900005 bytes in all, sha256 "), "{a}");
        assert_ne!(a, b);
        // Stable, and already within the bound.
        assert_eq!(call_id(&long), a);
        assert_eq!(call_id(&a), a);
        let (kept, sent) = split_call_id(long.clone());
        assert_eq!(kept, a);
        assert_eq!(sent.as_deref(), Some(long.as_str()));
    }

    #[test]
    fn the_cut_keeps_whole_characters() {
        let long = "é".repeat(1000);
        let cut = name(&long);
        assert!(cut.len() <= MAX_INVENTED_NAME_BYTES, "{}", cut.len());
        assert!(cut.starts_with("éé"));
        // 64 characters of four bytes each: the longest name a tool can have, shown whole.
        let widest = "😀".repeat(64);
        assert_eq!(name(&widest), widest.as_str());
    }
}
