//! The bound on text a peer writes that the server passes on: a model's error when it refuses a
//! tool update, an MCP server's message, a tool callback's error. Such text is copied into
//! change answers, the sessions listing, events and logs, so it is cut by [`bounded`] where it
//! enters, before it is stored, answered, listed or announced — and every key the server holds
//! is redacted from it first ([`crate::domain::secrets`]), so a peer that quotes one back has it
//! repeated nowhere.

use std::borrow::Cow;

use crate::domain::secrets;

/// Longest peer text kept, in bytes, the mark of a cut included. An error worth reading fits
/// (providers' messages are a sentence or two); a peer that sends megabytes cannot make the
/// server copy megabytes into every answer, listing and event that quotes it.
pub const MAX_PEER_TEXT_BYTES: usize = 2 * 1024;

/// `text` with the server's keys redacted, or when it is longer than [`MAX_PEER_TEXT_BYTES`],
/// its start (cut at a character boundary) followed by a mark that says it was cut and how long
/// it was.
pub(crate) fn bounded(text: String) -> String {
    let held = secrets::held();
    let text = match held.redact_str(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(redacted) => redacted,
    };
    cut(&text).unwrap_or(text)
}

/// [`bounded`], for borrowed text: copies at most the bound.
pub(crate) fn bounded_str(text: &str) -> String {
    let held = secrets::held();
    let text = held.redact_str(text);
    cut(&text).unwrap_or_else(|| text.into_owned())
}

/// `text` cut to the bound and marked; `None` when it is within it.
fn cut(text: &str) -> Option<String> {
    if text.len() <= MAX_PEER_TEXT_BYTES {
        return None;
    }
    let mark = format!("… (cut: {} bytes in all)", text.len());
    let mut end = MAX_PEER_TEXT_BYTES - mark.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = String::with_capacity(end + mark.len());
    cut.push_str(&text[..end]);
    cut.push_str(&mark);
    Some(cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_whole() {
        assert_eq!(bounded("invalid tool".to_owned()), "invalid tool");
        let exact = "x".repeat(MAX_PEER_TEXT_BYTES);
        assert_eq!(bounded(exact.clone()), exact);
        assert_eq!(bounded_str(&exact), exact);
    }

    #[test]
    fn long_text_is_cut_to_the_bound_and_marked() {
        let long = "y".repeat(4 * 1024 * 1024);
        let cut = bounded(long.clone());
        assert!(cut.len() <= MAX_PEER_TEXT_BYTES, "{}", cut.len());
        assert!(cut.starts_with("yyyy"));
        assert!(cut.ends_with("… (cut: 4194304 bytes in all)"), "{cut}");
        assert_eq!(bounded_str(&long), cut);
    }

    #[test]
    fn a_held_key_is_redacted_before_the_cut() {
        secrets::hold("peer-text-held-key-5e21");
        assert_eq!(
            bounded("refused: Bearer peer-text-held-key-5e21".to_owned()),
            "refused: Bearer [redacted]"
        );
        // A key that straddles the bound is redacted whole, never cut in two.
        let long = format!(
            "{}peer-text-held-key-5e21{}",
            "z".repeat(MAX_PEER_TEXT_BYTES - 40),
            "y".repeat(100)
        );
        for cut in [bounded_str(&long), bounded(long.clone())] {
            assert!(cut.ends_with("bytes in all)"), "{cut}");
            assert!(!cut.contains("peer-text"), "{cut}");
        }
    }

    #[test]
    fn cuts_fall_between_characters() {
        // Three bytes a character: the bound falls inside one.
        let wide = "雪".repeat(MAX_PEER_TEXT_BYTES);
        for cut in [bounded(wide.clone()), bounded_str(&wide)] {
            assert!(cut.len() <= MAX_PEER_TEXT_BYTES);
            assert!(cut.starts_with("雪雪"));
            assert!(cut.ends_with("bytes in all)"));
        }
    }
}
