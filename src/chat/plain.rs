//! A streamed chat chunk that carries nothing but text, read without building it into a map:
//! most chunks of any stream are such, and the app gets them as the upstream wrote them when
//! nothing in them changes ([`super::stream::AppStream::pass_text`]). Anything else a chunk
//! carries (a role, calls, a refusal, a finish reason, usage, an error, several choices) makes
//! it not plain: it is read and written again in full. No I/O.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::domain::json_text::JsonStr;

/// A chunk's fields the loop looks at; the others pass as written.
#[derive(Deserialize)]
pub(crate) struct PlainChunk<'a> {
    #[serde(borrow)]
    pub id: Option<&'a RawValue>,
    #[serde(borrow)]
    pub created: Option<&'a RawValue>,
    #[serde(borrow)]
    pub model: Option<&'a RawValue>,
    #[serde(borrow)]
    pub system_fingerprint: Option<&'a RawValue>,
    #[serde(borrow, default)]
    usage: Stated<'a>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    #[serde(borrow, default)]
    choices: Vec<PlainChoice<'a>>,
}

#[derive(Deserialize)]
struct PlainChoice<'a> {
    #[serde(default)]
    index: u64,
    #[serde(borrow)]
    delta: Option<&'a RawValue>,
    /// Present, and `null`.
    #[serde(default, deserialize_with = "present_null")]
    finish_reason: bool,
}

/// A field's value as written, `null` included; absent: none.
#[derive(Default)]
struct Stated<'a>(Option<&'a RawValue>);

impl<'de: 'a, 'a> Deserialize<'de> for Stated<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <&RawValue>::deserialize(deserializer).map(|raw| Self(Some(raw)))
    }
}

/// What a plain chunk's delta holds: its text (maybe none), whether it states the role, and
/// where its object begins in the chunk's data.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PlainDelta<'a> {
    pub text: Cow<'a, str>,
    pub role: bool,
    /// The byte offset of the delta's `{`.
    pub delta_at: usize,
    /// The chunk's `"usage": null` (the key, the value and a comma beside them), when it has
    /// one: the bytes to leave out for it to have none.
    pub usage: Option<std::ops::Range<usize>>,
}

impl<'a> PlainChunk<'a> {
    /// Reads `data` (a chunk's JSON); `None` when it is not a JSON object.
    pub(crate) fn read(data: &'a str) -> Option<Self> {
        if !data.trim_start().starts_with('{') {
            return None;
        }
        serde_json::from_str(data).ok()
    }

    /// The chunk's delta, when the chunk carries nothing but text or the role: no usage, no
    /// error, one choice (the first), whose finish reason is `null` and whose delta has only
    /// `content` (a string or `null`) and `role` (a string). `data` is the text the chunk was
    /// read from.
    pub(crate) fn delta(&self, data: &'a str) -> Option<PlainDelta<'a>> {
        let [choice] = self.choices.as_slice() else {
            return None;
        };
        if choice.index != 0 || !choice.finish_reason {
            return None;
        }
        let usage = match self.usage.0 {
            None => None,
            Some(raw) if raw.get() == "null" => Some(member(data, "usage", raw.get())?),
            Some(_) => return None,
        };
        if self.error.is_some() {
            return None;
        }
        let delta = choice.delta?.get();
        let delta_at = (delta.as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
        if !delta.starts_with('{') || data.get(delta_at..delta_at + 1) != Some("{") {
            return None;
        }
        let Fields { content, role } = serde_json::from_str::<PlainFields>(delta).ok()?.0?;
        Some(PlainDelta {
            text: content.unwrap_or_default(),
            role,
            delta_at,
            usage,
        })
    }
}

/// Where the member `key` whose value is `value` (a slice of `data`, an object's text) lies,
/// with the comma that sets it apart from the one before or after it.
fn member(data: &str, key: &str, value: &str) -> Option<std::ops::Range<usize>> {
    let value_at = (value.as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
    let value_end = value_at + value.len();
    let before = data
        .get(..value_at)?
        .trim_end()
        .strip_suffix(':')?
        .trim_end();
    let key_at = before
        .strip_suffix('"')?
        .strip_suffix(key)?
        .strip_suffix('"')?
        .len();
    let lead = data[..key_at].trim_end();
    if lead.ends_with(',') {
        return Some(lead.len() - 1..value_end);
    }
    // The first member: the comma after it goes.
    let after = data.get(value_end..)?;
    let comma = after.len() - after.trim_start().len();
    (lead.ends_with('{') && after.trim_start().starts_with(','))
        .then_some(key_at..value_end + comma + 1)
}

fn present_null<'de, D: Deserializer<'de>>(value: D) -> Result<bool, D::Error> {
    Ok(Option::<IgnoredAny>::deserialize(value)?.is_none())
}

/// A delta's `content` and whether it has a `role`.
struct Fields<'a> {
    content: Option<Cow<'a, str>>,
    role: bool,
}

/// A delta's fields, when it has no others (and none twice).
struct PlainFields<'a>(Option<Fields<'a>>);

impl<'de> Deserialize<'de> for PlainFields<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(PlainFieldsVisitor)
    }
}

struct PlainFieldsVisitor;

impl<'de> Visitor<'de> for PlainFieldsVisitor {
    type Value = PlainFields<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a delta object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut content, mut role, mut other) = (None, false, false);
        let mut seen_content = false;
        while let Some(key) = map.next_key::<JsonStr<'de>>()? {
            match key.0.as_ref() {
                "content" if !seen_content => {
                    seen_content = true;
                    content = map.next_value::<Option<JsonStr<'de>>>()?.map(|t| t.0);
                }
                "role" if !role => {
                    map.next_value::<JsonStr<'de>>()?;
                    role = true;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    other = true;
                }
            }
        }
        Ok(PlainFields((!other).then_some(Fields { content, role })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_usage_is_found_with_its_comma() {
        for (data, left) in [
            (r#"{"a":1,"usage":null}"#, r#"{"a":1}"#),
            (r#"{"usage" : null , "a":1}"#, r#"{ "a":1}"#),
            (r#"{"a":1 , "usage": null,"b":2}"#, r#"{"a":1 ,"b":2}"#),
        ] {
            let value = data.find("null").unwrap();
            let range = member(data, "usage", &data[value..value + 4]).unwrap();
            let mut kept = data.to_owned();
            kept.replace_range(range, "");
            assert_eq!(kept, left, "{data}");
        }
        let data = r#"{"usages":null}"#;
        let value = data.find("null").unwrap();
        assert_eq!(member(data, "usage", &data[value..value + 4]), None);
    }

    /// `(text, role)` of a plain chunk.
    fn delta(data: &str) -> Option<(String, bool)> {
        let chunk = PlainChunk::read(data)?;
        chunk.delta(data).map(|d| {
            assert_eq!(&data[d.delta_at..d.delta_at + 1], "{");
            (d.text.into_owned(), d.role)
        })
    }

    #[test]
    fn a_chunk_of_text_or_the_role_alone_is_plain() {
        let data = r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hi \"there\""},"logprobs":null,"finish_reason":null}],"usage":null}"#;
        let usage = PlainChunk::read(data).unwrap().delta(data).unwrap().usage;
        assert_eq!(&data[usage.unwrap()], r#","usage":null"#);
        assert_eq!(delta(data), Some(("Hi \"there\"".into(), false)));
        let spaced =
            r#"{ "choices" : [ { "delta" : { "content" : "Hi" } , "finish_reason" : null } ] }"#;
        assert_eq!(delta(spaced), Some(("Hi".into(), false)));
        let role = r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
        assert_eq!(delta(role), Some((String::new(), true)));
        let null = r#"{"choices":[{"index":0,"delta":{"content":null},"finish_reason":null}]}"#;
        assert_eq!(delta(null), Some((String::new(), false)));
    }

    #[test]
    fn a_chunk_with_anything_else_is_not_plain() {
        for data in [
            // Calls, a refusal, a role that is not a string.
            r#"{"choices":[{"index":0,"delta":{"content":"Hi","tool_calls":[]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hi","refusal":null},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"role":null,"content":"Hi"},"finish_reason":null}]}"#,
            // The same key twice.
            r#"{"choices":[{"index":0,"delta":{"content":"a","content":"b"},"finish_reason":null}]}"#,
            // A finish reason, or none stated; another choice; two choices.
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#,
            r#"{"choices":[{"index":1,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{"content":"a"},"finish_reason":null},{"index":1,"delta":{"content":"b"},"finish_reason":null}]}"#,
            // Usage, an error, no delta, no choices, not an object.
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}],"usage":{"total_tokens":1}}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}],"error":{"message":"x"}}"#,
            r#"{"choices":[{"index":0,"finish_reason":null}]}"#,
            r#"{"choices":[]}"#,
            r#"[1]"#,
        ] {
            assert_eq!(delta(data), None, "{data}");
        }
    }
}
