//! What a kept turn is found by again: [`HandBack`], what the app was handed of it (its calls'
//! ids, names and argument text, and the person's last message before it), compared as a whole
//! and found by its fingerprint, so a request's turns are each looked up once, whatever the
//! store holds. The person's message is compared as JSON, its keys in any order: it is kept as
//! its canonical text ([`canonical`]). Plain, no I/O.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

/// One of the app's calls of a turn: its id, name and argument text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct AppCall {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) arguments: String,
}

/// What a turn is matched on: the app's calls of it (in order of id) and the canonical text of
/// the person's last message before it. Equal hand-backs have equal fingerprints, which is all
/// a map of them hashes (computed once, where the hand-back is built, outside any lock).
#[derive(Debug, Clone)]
pub(crate) struct HandBack {
    fingerprint: u64,
    calls: Vec<AppCall>,
    prompt: Option<String>,
}

impl HandBack {
    pub(crate) fn new(mut calls: Vec<AppCall>, prompt: Option<String>) -> Self {
        calls.sort_unstable();
        // A fixed key: the fingerprints of a turn and of a later request must agree. A
        // collision costs one more comparison, never a wrong match.
        let mut hasher = DefaultHasher::new();
        calls.hash(&mut hasher);
        prompt.hash(&mut hasher);
        Self {
            fingerprint: hasher.finish(),
            calls,
            prompt,
        }
    }

    /// Whether it holds any of the app's calls (a turn without one is found only by its id).
    pub(crate) fn has_calls(&self) -> bool {
        !self.calls.is_empty()
    }
}

impl PartialEq for HandBack {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint
            && self.calls == other.calls
            && self.prompt == other.prompt
    }
}

impl Eq for HandBack {}

impl Hash for HandBack {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.fingerprint);
    }
}

/// The role of a chat message or a Responses input item.
#[derive(Debug, Default, Deserialize)]
struct RoleHead {
    #[serde(default)]
    role: Option<String>,
}

/// Whether an item (a chat message, a Responses input item) is the person's.
pub(crate) fn is_person(role: Option<&str>) -> bool {
    role == Some("user")
}

/// The canonical text of the person's last message before `index` of a request's messages (or
/// input items), as the app sent it: what a turn handed back in answer to it follows. Read from
/// the end, once per request.
pub(crate) fn prompt_before(items: &[Box<RawValue>], index: usize) -> Option<String> {
    let user = items[..index.min(items.len())].iter().rposition(|item| {
        serde_json::from_str::<RoleHead>(item.get())
            .is_ok_and(|head| is_person(head.role.as_deref()))
    })?;
    prompt_text(&items[user])
}

/// The canonical text of one of the person's messages.
pub(crate) fn prompt_text(item: &RawValue) -> Option<String> {
    serde_json::from_str::<Value>(item.get())
        .ok()
        .map(|value| canonical(&value))
}

/// A JSON value's text with every object's keys in order: the texts of two values are equal
/// exactly when the values are (as JSON: an object's keys in any order).
pub(crate) fn canonical(value: &Value) -> String {
    let mut text = String::new();
    write_canonical(value, &mut text);
    text
}

fn write_canonical(value: &Value, text: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            text.push('{');
            for (n, key) in keys.into_iter().enumerate() {
                if n > 0 {
                    text.push(',');
                }
                text.push_str(&Value::String(key.clone()).to_string());
                text.push(':');
                write_canonical(&map[key], text);
            }
            text.push('}');
        }
        Value::Array(items) => {
            text.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    text.push(',');
                }
                write_canonical(item, text);
            }
            text.push(']');
        }
        scalar => text.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(id: &str, arguments: &str) -> AppCall {
        AppCall {
            id: id.into(),
            name: "f".into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn hand_backs_are_equal_whatever_the_order_of_calls_and_keys() {
        let a = HandBack::new(
            vec![call("b", "{}"), call("a", "{}")],
            Some(canonical(
                &json!({"role": "user", "content": [1, {"x": 1, "y": 2}]}),
            )),
        );
        let prompt: Value =
            serde_json::from_str(r#"{"content": [1, {"y": 2, "x": 1}], "role": "user"}"#).unwrap();
        let b = HandBack::new(
            vec![call("a", "{}"), call("b", "{}")],
            Some(canonical(&prompt)),
        );
        assert_eq!(a, b);
        let other = HandBack::new(vec![call("a", "{ }"), call("b", "{}")], b.prompt.clone());
        assert_ne!(a, other, "argument text is compared as written");
        assert!(a.has_calls() && !HandBack::new(Vec::new(), None).has_calls());
    }

    #[test]
    fn the_prompt_is_the_persons_last_message_before_the_index() {
        let items: Vec<Box<RawValue>> = [
            json!({"role": "user", "content": "first"}),
            json!({"role": "assistant", "content": "hi"}),
            json!({"role": "user", "content": "second"}),
        ]
        .iter()
        .map(|v| serde_json::value::to_raw_value(v).unwrap())
        .collect();
        assert_eq!(
            prompt_before(&items, 2).as_deref(),
            Some(r#"{"content":"first","role":"user"}"#)
        );
        assert_eq!(prompt_before(&items, 0), None);
    }
}
