//! The app's stream of a chat-completions request: one stream that reads as one message over
//! every round — the first round's header on every chunk, the role once, a later round's text
//! set apart from the text before it, the app's own calls as proper deltas, one finish reason,
//! the usage chunk when asked for, then `[DONE]`. Chunks of text alone pass as the upstream
//! wrote them ([`super::plain`]). No I/O.

use std::fmt::Write as _;

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::answer::ModelCall;
use super::plain::{PlainChunk, PlainDelta};
use super::wire::{new_completion_id, unix_now};
use crate::domain::json_text::splice;

/// What goes between the text the app has seen (ending in `before`) and a later round's text
/// (starting with `next`): a paragraph break between two rounds' words, so "Let me check." and
/// "It is sunny." do not run together; nothing where either side is empty or already spaced.
pub(crate) fn round_separator(before: Option<char>, next: Option<char>) -> &'static str {
    match (before, next) {
        (Some(b), Some(n)) if !b.is_whitespace() && !n.is_whitespace() => "\n\n",
        _ => "",
    }
}

/// The fields of a chunk's header, which every chunk of the app's stream has as in its first.
const HEADER: [&str; 4] = ["id", "created", "model", "system_fingerprint"];

/// The app's stream: every chunk with the first round's `id`, `created` and `model`, the role
/// once, the app's own calls as proper deltas, one finish reason, the usage chunk when asked
/// for, then `[DONE]`.
#[derive(Debug)]
pub(crate) struct AppStream {
    header: Option<Map<String, Value>>,
    /// The header's values as JSON text, in [`HEADER`]'s order (none: absent or `null`): what a
    /// chunk passed as written must carry.
    header_text: [Option<String>; 4],
    include_usage: bool,
    role_sent: bool,
    /// The last character of text the app got, and whether a round began since.
    last_char: Option<char>,
    fresh_round: bool,
}

impl AppStream {
    pub(crate) fn new(include_usage: bool) -> Self {
        Self {
            header: None,
            header_text: Default::default(),
            include_usage,
            role_sent: false,
            last_char: None,
            fresh_round: false,
        }
    }

    /// A new round begins: its first text is set apart from the last round's.
    pub(crate) fn new_round(&mut self) {
        self.fresh_round = true;
    }

    /// Takes the stream's `id`, `created`, `model` and `system_fingerprint` from the first
    /// chunk of the first round; later rounds' chunks carry them too.
    pub(crate) fn adopt_header(&mut self, chunk: &Map<String, Value>) {
        if self.header.is_none() {
            let header: Map<String, Value> = HEADER
                .into_iter()
                .filter_map(|k| chunk.get(k).map(|v| (k.to_owned(), v.clone())))
                .collect();
            self.header_text =
                HEADER.map(|k| header.get(k).filter(|v| !v.is_null()).map(Value::to_string));
            self.header = Some(header);
        }
    }

    /// [`Self::adopt_header`] for a chunk read as a [`PlainChunk`].
    pub(crate) fn adopt_plain_header(&mut self, chunk: &PlainChunk<'_>) {
        if self.header.is_some() {
            return;
        }
        let raw = [
            chunk.id,
            chunk.created,
            chunk.model,
            chunk.system_fingerprint,
        ];
        let mut header = Map::new();
        for (key, raw) in HEADER.into_iter().zip(raw) {
            if let Some(value) = raw.and_then(|r| serde_json::from_str(r.get()).ok()) {
                header.insert(key.to_owned(), value);
            }
        }
        self.header_text = raw.map(|r| r.map(|r| r.get().to_owned()));
        self.header = Some(header);
    }

    /// The frame of a chunk that carries only text (`plain`, read from `data`), when the app
    /// gets it as the upstream wrote it: its header is already the stream's and no round's
    /// first text needs setting apart; the role, if it is the first and the chunk has none, put
    /// in its delta, and `"usage": null` put in or left out as the app asked for usage. `None`:
    /// the chunk is written again in full ([`Self::forward`]).
    pub(crate) fn pass_text(
        &mut self,
        chunk: &PlainChunk<'_>,
        plain: &PlainDelta<'_>,
        data: &str,
    ) -> Option<Bytes> {
        if plain.text.is_empty() || (plain.role && self.role_sent) {
            return None;
        }
        let header = [
            chunk.id,
            chunk.created,
            chunk.model,
            chunk.system_fingerprint,
        ];
        let same_header = self.header.is_some()
            && header
                .iter()
                .zip(&self.header_text)
                .all(|(raw, kept)| raw.map(RawValue::get) == kept.as_deref());
        // A frame is one line: data spread over several is written again on one.
        if !same_header || data.contains(['\n', '\r']) {
            return None;
        }
        let text = &plain.text;
        if self.fresh_round {
            if !round_separator(self.last_char, text.chars().next()).is_empty() {
                return None;
            }
            self.fresh_round = false;
        }
        self.last_char = text.chars().next_back();
        // What is put in or left out: the role, once; `"usage": null` as the app asked.
        let mut edits: Vec<(std::ops::Range<usize>, &str)> = Vec::with_capacity(2);
        if !self.role_sent && !plain.role {
            edits.push((
                plain.delta_at + 1..plain.delta_at + 1,
                r#""role":"assistant","#,
            ));
        }
        self.role_sent = true;
        match (&plain.usage, self.include_usage) {
            (Some(usage), false) => edits.push((usage.clone(), "")),
            (None, true) => {
                let end = data.trim_end().len() - 1;
                edits.push((end..end, r#","usage":null"#));
            }
            _ => {}
        }
        let mut frame = String::with_capacity(data.len() + 48);
        frame.push_str("data: ");
        splice(&mut frame, data, &mut edits);
        frame.push_str("\n\n");
        Some(Bytes::from(frame))
    }

    /// A chunk of the upstream's (already stripped by [`StreamRound::take`]), as the app gets
    /// it: the stream's header, the role if it is the first, and the first text of a round set
    /// apart from the text before it.
    pub(crate) fn forward(&mut self, mut chunk: Map<String, Value>) -> Bytes {
        self.adopt_header(&chunk);
        if let Some(header) = &self.header {
            for (key, value) in header {
                chunk.insert(key.clone(), value.clone());
            }
        }
        if let Some(choices) = chunk.get_mut("choices").and_then(Value::as_array_mut) {
            for choice in choices.iter_mut() {
                let first = choice.get("index").and_then(Value::as_u64).unwrap_or(0) == 0;
                let Some(delta) = choice.get_mut("delta").and_then(Value::as_object_mut) else {
                    continue;
                };
                if first && let Some(Value::String(text)) = delta.get_mut("content") {
                    if self.fresh_round && !text.is_empty() {
                        self.fresh_round = false;
                        text.insert_str(0, round_separator(self.last_char, text.chars().next()));
                    }
                    if let Some(last) = text.chars().next_back() {
                        self.last_char = Some(last);
                    }
                }
                if first && !self.role_sent {
                    self.role_sent = true;
                    delta.shift_insert(0, "role".into(), Value::String("assistant".into()));
                }
            }
        }
        self.finish_chunk(chunk)
    }

    /// The app's own calls of a turn handed back to it: per call a first delta with `index`
    /// (renumbered from 0), `id`, `type` and `function.name`, then one with the arguments.
    pub(crate) fn app_calls(&mut self, calls: &[ModelCall]) -> Vec<Bytes> {
        let mut frames = Vec::with_capacity(calls.len() * 2);
        for (index, call) in calls.iter().enumerate() {
            let first = json!([{
                "index": index, "id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }]);
            frames.push(self.delta(json!({"tool_calls": first}), Value::Null));
            let arguments = json!([{"index": index, "function": {"arguments": call.arguments}}]);
            frames.push(self.delta(json!({"tool_calls": arguments}), Value::Null));
        }
        frames
    }

    /// The chunk that ends the message.
    pub(crate) fn finish(&mut self, reason: &str) -> Bytes {
        self.delta(json!({}), Value::String(reason.to_owned()))
    }

    /// The usage chunk (summed over every round), when the app asked for it.
    pub(crate) fn usage(&self, usage: Option<Map<String, Value>>) -> Option<Bytes> {
        if !self.include_usage {
            return None;
        }
        let mut chunk = self.header_object();
        chunk.insert("choices".into(), json!([]));
        chunk.insert("usage".into(), usage.map_or(Value::Null, Value::Object));
        Some(sse_data(&Value::Object(chunk).to_string()))
    }

    /// The end of the stream.
    pub(crate) fn done() -> Bytes {
        sse_data("[DONE]")
    }

    /// An error after the stream began (the SDKs raise it): the upstream's error object, or
    /// one of ours.
    pub(crate) fn error(error: &Value) -> Bytes {
        sse_data(&json!({"error": error}).to_string())
    }

    fn delta(&mut self, mut delta: Value, finish_reason: Value) -> Bytes {
        if !self.role_sent {
            self.role_sent = true;
            if let Some(delta) = delta.as_object_mut() {
                delta.shift_insert(0, "role".into(), Value::String("assistant".into()));
            }
        }
        let mut chunk = self.header_object();
        chunk.insert(
            "choices".into(),
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}]),
        );
        self.finish_chunk(chunk)
    }

    fn header_object(&self) -> Map<String, Value> {
        let mut chunk = Map::new();
        let header = self.header.clone().unwrap_or_default();
        chunk.insert(
            "id".into(),
            header
                .get("id")
                .cloned()
                .unwrap_or_else(|| Value::String(new_completion_id())),
        );
        chunk.insert("object".into(), json!("chat.completion.chunk"));
        for key in ["created", "model", "system_fingerprint"] {
            if let Some(value) = header.get(key) {
                chunk.insert(key.to_owned(), value.clone());
            }
        }
        if !chunk.contains_key("created") {
            chunk.insert("created".into(), json!(unix_now()));
        }
        chunk
    }

    fn finish_chunk(&self, mut chunk: Map<String, Value>) -> Bytes {
        if self.include_usage {
            chunk.insert("usage".into(), Value::Null);
        }
        sse_data(&Value::Object(chunk).to_string())
    }
}

/// One SSE `data:` frame. Compact JSON has no line breaks.
fn sse_data(data: &str) -> Bytes {
    let mut frame = String::with_capacity(data.len() + 8);
    let _ = write!(frame, "data: {data}\n\n");
    Bytes::from(frame)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_apps_stream_has_one_header_the_role_once_and_proper_call_deltas() {
        let data = |bytes: Bytes| -> Value {
            let text = String::from_utf8(bytes.to_vec()).unwrap();
            let json = text
                .strip_prefix("data: ")
                .unwrap()
                .strip_suffix("\n\n")
                .unwrap();
            serde_json::from_str(json).unwrap()
        };
        let mut stream = AppStream::new(true);
        let chunk = json!({"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "m",
            "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": null}]});
        let first = data(stream.forward(chunk.as_object().unwrap().clone()));
        assert_eq!(
            first["choices"][0]["delta"],
            json!({"role": "assistant", "content": "Hi"})
        );
        assert_eq!(first["usage"], Value::Null);
        let later = json!({"id": "c2", "created": 9, "model": "m",
            "choices": [{"index": 0, "delta": {"content": "there"}, "finish_reason": null}]});
        stream.new_round();
        let second = data(stream.forward(later.as_object().unwrap().clone()));
        assert_eq!(
            (&second["id"], &second["created"]),
            (&json!("c1"), &json!(7))
        );
        assert_eq!(
            second["choices"][0]["delta"],
            json!({"content": "\n\nthere"})
        );
        let calls = stream.app_calls(&[ModelCall {
            id: "x".into(),
            name: "app_clock".into(),
            arguments: "{}".into(),
        }]);
        assert_eq!(
            data(calls[0].clone())["choices"][0]["delta"],
            json!({"tool_calls": [{"index": 0, "id": "x", "type": "function",
                                   "function": {"name": "app_clock", "arguments": ""}}]})
        );
        assert_eq!(
            data(calls[1].clone())["choices"][0]["delta"],
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})
        );
        let end = data(stream.finish("tool_calls"));
        assert_eq!(end["choices"][0]["finish_reason"], "tool_calls");
        let usage = data(stream.usage(Some(Map::new())).unwrap());
        assert_eq!(
            (usage["choices"].clone(), usage["id"].clone()),
            (json!([]), json!("c1"))
        );
        assert_eq!(AppStream::done(), Bytes::from("data: [DONE]\n\n"));
    }
}
