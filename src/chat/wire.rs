//! The chat-completions wire format, as plain types and functions: the app's request with every
//! field kept as its exact JSON text, the body sent upstream each round (a round's answer is read
//! in [`super::answer`]), the messages the server adds to the conversation, usage summed over
//! rounds, what the app gets (one stream that looks like one message, or one completion), and
//! errors in OpenAI's shape. No I/O.

use std::fmt::Write as _;

use bytes::Bytes;
use indexmap::IndexMap;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::answer::ModelCall;
use super::plain::{PlainChunk, PlainDelta};
use crate::domain::call::ToolResult;
use crate::domain::tool::SharedTool;
use crate::session::core::ForeignTool;

/// JSON text kept exactly as the app or the upstream wrote it.
pub(crate) type Raw = Box<RawValue>;

/// What is wrong with an app's request, for a 400 in OpenAI's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestError {
    pub message: String,
    /// The field at fault, when there is one.
    pub param: Option<&'static str>,
}

impl RequestError {
    pub(crate) fn new(param: &'static str, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            param: Some(param),
        }
    }
}

/// What every wire format's request has alike: the app's fields as written, its own tools, the
/// model it named and whether it asked for a stream.
#[derive(Debug)]
pub(crate) struct AppRequest {
    pub fields: IndexMap<String, Raw>,
    pub app_tools: Vec<ForeignTool>,
    pub model: Option<String>,
    pub stream: bool,
}

impl AppRequest {
    pub(crate) fn read(body: &[u8]) -> Result<Self, RequestError> {
        let fields: IndexMap<String, Raw> =
            serde_json::from_slice(body).map_err(|e| RequestError {
                message: format!("the request body must be a JSON object: {e}"),
                param: None,
            })?;
        let app_tools = match fields.get("tools").filter(|raw| raw.get() != "null") {
            None => Vec::new(),
            Some(raw) => serde_json::from_str::<Vec<Raw>>(raw.get())
                .map_err(|_| RequestError::new("tools", "tools must be an array of tools"))?
                .into_iter()
                .map(ForeignTool::from_raw)
                .collect(),
        };
        // No model, `null` or `""`: the configured one is used.
        let model = optional_string(&fields, "model")?;
        let stream = flag(&fields, "stream", false)?;
        Ok(Self {
            fields,
            app_tools,
            model,
            stream,
        })
    }
}

/// A string field; absent, `null` or `""` is none.
pub(crate) fn optional_string(
    fields: &IndexMap<String, Raw>,
    key: &'static str,
) -> Result<Option<String>, RequestError> {
    match fields.get(key).map(|raw| raw.get()) {
        None | Some("null") | Some("\"\"") => Ok(None),
        Some(text) => serde_json::from_str::<String>(text)
            .map(Some)
            .map_err(|_| RequestError::new(key, format!("{key} must be a string"))),
    }
}

/// A boolean field; absent or `null` is `default`.
pub(crate) fn flag(
    fields: &IndexMap<String, Raw>,
    key: &'static str,
    default: bool,
) -> Result<bool, RequestError> {
    match fields.get(key).map(|raw| raw.get()) {
        None | Some("null") => Ok(default),
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(_) => Err(RequestError::new(key, format!("{key} must be a boolean"))),
    }
}

/// An app's `POST /v1/chat/completions` body. Only what the loop needs is read; every field
/// passes upstream as the app wrote it, in its order.
#[derive(Debug)]
pub(crate) struct ChatRequest {
    fields: IndexMap<String, Raw>,
    /// The conversation, one entry per message, each as written.
    pub messages: Vec<Raw>,
    /// The app's own tools.
    pub app_tools: Vec<ForeignTool>,
    /// The model the app named.
    pub model: Option<String>,
    pub stream: bool,
    /// The app asked for the usage chunk at the end of its stream.
    pub include_usage: bool,
}

impl ChatRequest {
    pub(crate) fn parse(body: &[u8]) -> Result<Self, RequestError> {
        let AppRequest {
            fields,
            app_tools,
            model,
            stream,
        } = AppRequest::read(body)?;
        let messages = match fields.get("messages") {
            None => return Err(RequestError::new("messages", "messages is required")),
            Some(raw) => serde_json::from_str::<Vec<Raw>>(raw.get()).map_err(|_| {
                RequestError::new("messages", "messages must be an array of message objects")
            })?,
        };
        let include_usage = fields
            .get("stream_options")
            .and_then(|raw| serde_json::from_str::<StreamOptions>(raw.get()).ok())
            .is_some_and(|o| o.include_usage == Some(true));
        Ok(Self {
            fields,
            messages,
            app_tools,
            model,
            stream,
            include_usage,
        })
    }

    /// Whether the app declared a tool of this name (its calls are the app's to answer).
    pub(crate) fn is_app_tool(&self, name: &str) -> bool {
        self.app_tools.iter().any(|t| t.name == name)
    }

    /// The body of one round's upstream request: the app's fields in the app's order, with
    /// `messages` the conversation so far, `tools` the app's then `registered` (or, when
    /// `with_tools` is false, no `tools`, `tool_choice` or `parallel_tool_calls` at all),
    /// `model` the default when the app named none, and the usage always asked for.
    pub(crate) fn upstream_body(
        &self,
        messages: &[Raw],
        registered: &[SharedTool],
        with_tools: bool,
        default_model: Option<&str>,
    ) -> Vec<u8> {
        let body = UpstreamBody {
            request: self,
            messages,
            tools: ToolFields {
                app: &self.app_tools,
                registered,
                shape: ToolShape::Nested,
                with_tools,
                model: self.model.as_deref(),
                default_model,
            },
        };
        // Strings and JSON text kept as written: serialising cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

#[derive(Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

struct UpstreamBody<'a> {
    request: &'a ChatRequest,
    messages: &'a [Raw],
    tools: ToolFields<'a>,
}

impl Serialize for UpstreamBody<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = &self.request.fields;
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in fields {
            if self.tools.field(key, value, &mut map)? {
                continue;
            }
            match key.as_str() {
                "messages" => map.serialize_entry(key, self.messages)?,
                "stream_options" if self.request.stream => {
                    map.serialize_entry(key, &with_usage(value))?
                }
                _ => map.serialize_entry(key, value)?,
            }
        }
        self.tools.added(fields, &mut map)?;
        if self.request.stream && !fields.contains_key("stream_options") {
            map.serialize_entry("stream_options", &json!({"include_usage": true}))?;
        }
        map.end()
    }
}

/// The app's `stream_options` with `include_usage` set: the server sums usage over rounds.
fn with_usage(options: &RawValue) -> Value {
    let mut options = serde_json::from_str::<Map<String, Value>>(options.get()).unwrap_or_default();
    options.insert("include_usage".into(), Value::Bool(true));
    Value::Object(options)
}

/// How a wire format's `tools` array writes a registered tool.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ToolShape {
    /// Chat completions: `{"type": "function", "function": {...}}`.
    Nested,
    /// The Responses API: `{"type": "function", "name", ..., "strict": false}`.
    FlatLoose,
}

/// The fields of a round's body that say which tools and model it has, the same in every wire
/// format: `tools` the app's then the registered (or, when the round goes without tools, no
/// `tools`, `tool_choice` or `parallel_tool_calls` at all), and `model` the default when the
/// app named none.
pub(crate) struct ToolFields<'a> {
    pub app: &'a [ForeignTool],
    pub registered: &'a [SharedTool],
    pub shape: ToolShape,
    pub with_tools: bool,
    /// The model the app named, and the configured one.
    pub model: Option<&'a str>,
    pub default_model: Option<&'a str>,
}

impl ToolFields<'_> {
    fn list(&self) -> ToolList<'_> {
        ToolList {
            app: self.app,
            registered: self.registered,
            shape: self.shape,
        }
    }

    /// Writes the app's field `key` if it is one of these (true), maybe leaving it out.
    pub(crate) fn field<M: SerializeMap>(
        &self,
        key: &str,
        value: &RawValue,
        map: &mut M,
    ) -> Result<bool, M::Error> {
        let has_tools = !self.list().is_empty();
        match key {
            "tools" if self.with_tools && has_tools => map.serialize_entry(key, &self.list())?,
            "tools" | "tool_choice" | "parallel_tool_calls" if !self.with_tools => {}
            "model" if self.model.is_none() && self.default_model.is_some() => {}
            "tools" | "model" => map.serialize_entry(key, value)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Writes what the app did not send: the tools, the default model.
    pub(crate) fn added<M: SerializeMap>(
        &self,
        fields: &IndexMap<String, Raw>,
        map: &mut M,
    ) -> Result<(), M::Error> {
        let has = |key: &str| fields.get(key).is_some_and(|v| v.get() != "null");
        if self.with_tools && !self.list().is_empty() && !has("tools") {
            map.serialize_entry("tools", &self.list())?;
        }
        if let (None, Some(model)) = (self.model, self.default_model) {
            map.serialize_entry("model", model)?;
        }
        Ok(())
    }
}

/// A `tools` array: the app's tools as written, then the registered ones in the wire format's
/// shape.
struct ToolList<'a> {
    app: &'a [ForeignTool],
    registered: &'a [SharedTool],
    shape: ToolShape,
}

impl ToolList<'_> {
    fn is_empty(&self) -> bool {
        self.app.is_empty() && self.registered.is_empty()
    }
}

impl Serialize for ToolList<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut list = serializer.serialize_seq(Some(self.app.len() + self.registered.len()))?;
        for tool in self.app {
            list.serialize_element(&tool.json)?;
        }
        for tool in self.registered {
            match self.shape {
                ToolShape::Nested => list.serialize_element(tool.nested_json())?,
                ToolShape::FlatLoose => list.serialize_element(tool.flat_loose_json())?,
            }
        }
        list.end()
    }
}

/// The assistant turn the server adds for a round that called tools: its text (or `null`) and
/// every call, in the model's order.
pub(crate) fn assistant_turn(text: &str, calls: &[ModelCall]) -> Raw {
    let calls: Vec<Value> = calls.iter().map(call_value).collect();
    let content = if text.is_empty() {
        Value::Null
    } else {
        Value::String(text.to_owned())
    };
    raw(&json!({"role": "assistant", "content": content, "tool_calls": calls}))
}

/// One call as a non-streamed `tool_calls` entry.
pub(crate) fn call_value(call: &ModelCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    })
}

/// The `role: "tool"` message that answers one call with the text the model reads.
pub(crate) fn tool_message(result: &ToolResult) -> Raw {
    raw(&json!({
        "role": "tool",
        "tool_call_id": result.call_id,
        "name": result.name,
        "content": result.model_text(),
    }))
}

/// The user message that shows the model a round's result images: for each a line naming the
/// call and what to look for, then the image as a `data:` URL. `None` without images.
pub(crate) fn images_message(results: &[ToolResult]) -> Option<Raw> {
    let mut content = Vec::new();
    for result in results {
        for image in &result.images {
            content.push(json!({"type": "text", "text": result.image_caption(image)}));
            content.push(json!({"type": "image_url", "image_url": {"url": image.data_url()}}));
        }
    }
    (!content.is_empty()).then(|| raw(&json!({"role": "user", "content": content})))
}

fn raw(value: &Value) -> Raw {
    serde_json::value::to_raw_value(value).expect("a JSON value serialises")
}

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
        edits.sort_unstable_by_key(|(range, _)| range.start);
        let mut frame = String::with_capacity(data.len() + 48);
        frame.push_str("data: ");
        let mut from = 0;
        for (range, put) in edits {
            frame.push_str(&data[from..range.start]);
            frame.push_str(put);
            from = range.end;
        }
        frame.push_str(&data[from..]);
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

/// The completion the app gets without streaming: the last round's, with the first round's
/// `id` and `created`, the text of every round, only the app's own calls (or none), the final
/// finish reason, and usage summed over every round.
pub(crate) fn final_completion(
    mut last: Map<String, Value>,
    first: Option<&Map<String, Value>>,
    text: &str,
    app_calls: &[ModelCall],
    finish_reason: &str,
    usage: Option<Map<String, Value>>,
) -> Map<String, Value> {
    if let Some(first) = first {
        for key in ["id", "created"] {
            if let Some(value) = first.get(key) {
                last.insert(key.to_owned(), value.clone());
            }
        }
    }
    if let Some(choice) = last
        .get_mut("choices")
        .and_then(Value::as_array_mut)
        .and_then(|c| c.first_mut())
        .and_then(Value::as_object_mut)
    {
        choice.insert("finish_reason".into(), Value::String(finish_reason.into()));
        if let Some(message) = choice.get_mut("message").and_then(Value::as_object_mut) {
            if !text.is_empty() {
                message.insert("content".into(), Value::String(text.to_owned()));
            }
            if app_calls.is_empty() {
                message.remove("tool_calls");
            } else {
                let calls = app_calls.iter().map(call_value).collect();
                message.insert("tool_calls".into(), Value::Array(calls));
            }
        }
    }
    if let Some(usage) = usage {
        last.insert("usage".into(), Value::Object(usage));
    }
    last
}

/// An error body in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
pub(crate) fn error_body(
    message: &str,
    kind: &str,
    param: Option<&str>,
    code: Option<&str>,
) -> Value {
    json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
}

/// The error object of an upstream's error answer, for a stream that already began: its own
/// `error` object when it sent one, else one that quotes it.
pub(crate) fn upstream_error_object(status: u16, body: &[u8]) -> Value {
    if let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(body)
        && let Some(error) = object.remove("error")
        && error.is_object()
    {
        return error;
    }
    json!({
        "message": format!("the upstream answered HTTP {status}: {}", error_text(body)),
        "type": "upstream_error",
        "param": null,
        "code": null,
    })
}

/// Longest piece of an upstream's error body quoted in our own texts.
const ERROR_QUOTE_CHARS: usize = 500;

/// What an upstream's error answer says: its message when it is one of the usual JSON shapes
/// (`{"error": {"message"}}`, `{"error": "..."}`, `{"message"}`, `{"detail"}`), else its text;
/// cut to [`ERROR_QUOTE_CHARS`].
pub(crate) fn error_text(body: &[u8]) -> String {
    let value = serde_json::from_slice::<Value>(body).ok();
    let message = value.as_ref().and_then(|v| {
        let error = v.get("error");
        error
            .and_then(|e| e.get("message"))
            .or(error)
            .or_else(|| v.get("message"))
            .or_else(|| v.get("detail"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let text = message.unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_owned());
    match text.char_indices().nth(ERROR_QUOTE_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// Whether an upstream's error answer refuses the request's tools (it names tools or
/// functions): the request is then sent again without them.
pub(crate) fn refuses_tools(status: u16, body: &[u8]) -> bool {
    if status < 400 {
        return false;
    }
    let text = error_text(body).to_lowercase();
    text.contains("tool") || text.contains("function")
}

/// A fresh completion id in OpenAI's style, for a stream whose upstream sent none.
pub(crate) fn new_completion_id() -> String {
    format!("chatcmpl-{}", uuid::Uuid::new_v4().simple())
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The parts of a message the loop reads to put a handed-back turn together again.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct MessageHead {
    #[serde(default)]
    pub role: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<CallHead>>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct CallHead {
    #[serde(default)]
    pub id: Option<String>,
}

impl MessageHead {
    /// The head of one message; a message that is not an object has none of these parts.
    pub(crate) fn of(message: &RawValue) -> Self {
        serde_json::from_str(message.get()).unwrap_or_default()
    }

    /// The ids of an assistant turn's calls.
    pub(crate) fn call_ids(&self) -> Vec<&str> {
        if self.role.as_deref() != Some("assistant") {
            return Vec::new();
        }
        self.tool_calls
            .iter()
            .flatten()
            .filter_map(|c| c.id.as_deref())
            .collect()
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::chat::answer::{CallFragments, StreamRound, add_usage};

    fn tool(name: &str) -> SharedTool {
        crate::domain::tool::test_tool(name, "Get weather.")
    }

    fn body(request: &ChatRequest, tools: &[SharedTool], with_tools: bool) -> Value {
        let bytes = request.upstream_body(&request.messages, tools, with_tools, Some("dflt"));
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn the_upstream_body_keeps_the_apps_fields_and_order_and_adds_the_registered_tools() {
        let request = ChatRequest::parse(
            br#"{"model":"m","temperature":0.25,"messages":[{"role":"user","content":"hi"}],
                 "tools":[{"type":"function","function":{"name":"app_clock","parameters":{}}}],
                 "tool_choice":"auto","seed":123456789012345678901234567890}"#,
        )
        .unwrap();
        assert_eq!(request.app_tools[0].name, "app_clock");
        let text =
            String::from_utf8(request.upstream_body(&request.messages, &[tool("w")], true, None))
                .unwrap();
        assert_eq!(
            text,
            r#"{"model":"m","temperature":0.25,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"app_clock","parameters":{}}},{"type":"function","function":{"name":"w","description":"Get weather.","parameters":{"type":"object","properties":{}}}}],"tool_choice":"auto","seed":123456789012345678901234567890}"#
        );
        let bare = body(&request, &[tool("w")], false);
        assert_eq!(bare.get("tools"), None);
        assert_eq!(bare.get("tool_choice"), None);
        assert_eq!(bare["model"], "m");
    }

    #[test]
    fn the_upstream_body_fills_in_the_model_tools_and_usage() {
        let request = ChatRequest::parse(
            br#"{"messages":[],"stream":true,"stream_options":{"x":1},"parallel_tool_calls":true}"#,
        )
        .unwrap();
        assert!(request.stream && !request.include_usage);
        let sent = body(&request, &[tool("w")], true);
        assert_eq!(sent["model"], "dflt");
        assert_eq!(
            sent["stream_options"],
            json!({"x": 1, "include_usage": true})
        );
        assert_eq!(sent["tools"][0]["function"]["name"], "w");
        assert_eq!(sent["parallel_tool_calls"], true);
        let without = body(&request, &[tool("w")], false);
        assert_eq!(without.get("parallel_tool_calls"), None);
        assert_eq!(without.get("tools"), None);

        let unnamed = ChatRequest::parse(br#"{"model":"","messages":[]}"#).unwrap();
        assert_eq!(body(&unnamed, &[], true)["model"], "dflt");

        let plain = ChatRequest::parse(br#"{"messages":[],"stream":true}"#).unwrap();
        assert_eq!(
            body(&plain, &[], true)["stream_options"],
            json!({"include_usage": true})
        );
        assert_eq!(body(&plain, &[], true).get("tools"), None);
    }

    #[test]
    fn bad_requests_name_the_field() {
        let error = |text: &str| ChatRequest::parse(text.as_bytes()).unwrap_err();
        assert_eq!(error("[]").param, None);
        assert_eq!(error("{}").param, Some("messages"));
        assert_eq!(error(r#"{"messages":{}}"#).param, Some("messages"));
        assert_eq!(error(r#"{"messages":[],"tools":{}}"#).param, Some("tools"));
        assert_eq!(error(r#"{"messages":[],"model":1}"#).param, Some("model"));
        assert_eq!(
            error(r#"{"messages":[],"stream":"yes"}"#).param,
            Some("stream")
        );
    }

    fn calls_of(fragments: &[Value]) -> Vec<(String, String, String)> {
        let mut calls = CallFragments::default();
        for f in fragments {
            calls.fragment(f);
        }
        calls
            .finish()
            .into_iter()
            .map(|c| (c.id, c.name, c.arguments))
            .collect()
    }

    fn named(calls: &[(String, String, String)]) -> Vec<(&str, &str)> {
        calls
            .iter()
            .map(|(_, n, a)| (n.as_str(), a.as_str()))
            .collect()
    }

    #[test]
    fn fragments_of_the_usual_form_make_parallel_calls() {
        let calls = calls_of(&[
            json!({"index": 0, "id": "a", "type": "function", "function": {"name": "w", "arguments": ""}}),
            json!({"index": 1, "id": "b", "type": "function", "function": {"name": "t", "arguments": "{\"z\""}}),
            json!({"index": 0, "function": {"arguments": "{\"x\":"}}),
            json!({"index": 0, "function": {"arguments": "1}"}}),
            json!({"index": 1, "function": {"arguments": ":2}"}}),
        ]);
        assert_eq!(calls[0].0, "a");
        assert_eq!(calls[1].0, "b");
        assert_eq!(named(&calls), [("w", "{\"x\":1}"), ("t", "{\"z\":2}")]);
    }

    #[test]
    fn upstream_quirks_are_normalised() {
        // Ollama: every parallel call whole, each with index 0.
        let ollama = calls_of(&[
            json!({"index": 0, "id": "a", "function": {"name": "w", "arguments": "{\"x\":1}"}}),
            json!({"index": 0, "id": "b", "function": {"name": "t", "arguments": "{}"}}),
        ]);
        assert_eq!(named(&ollama), [("w", "{\"x\":1}"), ("t", "{}")]);
        // No ids at all, no index: whole calls one after another, and an object for arguments.
        let bare = calls_of(&[
            json!({"function": {"name": "w", "arguments": {"x": 1}}}),
            json!({"function": {"name": "w", "arguments": "{\"x\":2}"}}),
        ]);
        assert_eq!(named(&bare), [("w", "{\"x\":1}"), ("w", "{\"x\":2}")]);
        assert!(bare.iter().all(|(id, _, _)| id.starts_with("call_")));
        assert_ne!(bare[0].0, bare[1].0);
        // The name repeated in every fragment of one call.
        let repeated = calls_of(&[
            json!({"index": 0, "id": "a", "function": {"name": "w", "arguments": "{\"x\""}}),
            json!({"index": 0, "function": {"name": "w", "arguments": ":1}"}}),
        ]);
        assert_eq!(named(&repeated), [("w", "{\"x\":1}")]);
        // A first fragment without its id.
        let late_id = calls_of(&[
            json!({"index": 0, "function": {"name": "w", "arguments": ""}}),
            json!({"index": 0, "id": "a", "function": {"arguments": "{}"}}),
        ]);
        assert_eq!(late_id[0].0, "a");
        assert_eq!(named(&late_id), [("w", "{}")]);
    }

    #[test]
    fn a_stream_round_keeps_text_and_calls_apart() {
        let mut round = StreamRound::default();
        let mut chunk = |value: Value| {
            let mut chunk = value.as_object().unwrap().clone();
            let forward = round.take(&mut chunk);
            (forward, Value::Object(chunk))
        };
        let (forward, first) = chunk(json!({"id": "c1", "choices": [{"index": 0,
            "delta": {"role": "assistant", "content": ""}, "finish_reason": null}], "usage": null}));
        assert!(!forward, "{first}");
        let (forward, text) = chunk(json!({"id": "c1", "choices": [{"index": 0,
            "delta": {"content": "Let me look."}, "finish_reason": null}]}));
        assert!(forward);
        assert_eq!(
            text["choices"][0]["delta"],
            json!({"content": "Let me look."})
        );
        let (forward, _) = chunk(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "a", "type": "function", "function": {"name": "w", "arguments": "{}"}}]}}]}));
        assert!(!forward);
        let (forward, _) =
            chunk(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}));
        assert!(!forward);
        let (forward, _) = chunk(json!({"choices": [], "usage": {"prompt_tokens": 3}}));
        assert!(!forward);
        let answer = round.finish();
        assert_eq!(answer.text, "Let me look.");
        assert_eq!(answer.calls.len(), 1);
        assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            answer.usage,
            Some(json!({"prompt_tokens": 3}).as_object().unwrap().clone())
        );
    }

    #[test]
    fn usage_is_summed_over_rounds_with_its_details() {
        let mut total = Map::new();
        let round = |p: u64, c: u64, cached: u64| {
            json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c,
                   "prompt_tokens_details": {"cached_tokens": cached}, "cost": 0.5})
            .as_object()
            .unwrap()
            .clone()
        };
        add_usage(&mut total, &round(10, 2, 1));
        add_usage(&mut total, &round(20, 3, 4));
        assert_eq!(
            Value::Object(total),
            json!({"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35,
                   "prompt_tokens_details": {"cached_tokens": 5}, "cost": 1.0})
        );
    }

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

    #[test]
    fn tool_refusals_are_recognised_by_what_they_say() {
        assert!(refuses_tools(
            400,
            br#"{"error":{"message":"registry.ollama.ai/library/gemma does not support tools"}}"#
        ));
        assert!(refuses_tools(500, b"tools param requires --jinja flag"));
        assert!(!refuses_tools(
            401,
            br#"{"error":{"message":"invalid api key"}}"#
        ));
        assert!(!refuses_tools(200, b"tools"));
        assert_eq!(error_text(br#"{"error":"boom"}"#), "boom");
        assert_eq!(error_text(br#"{"detail":"nope"}"#), "nope");
    }

    #[test]
    fn the_final_completion_carries_every_rounds_text_and_only_the_apps_calls() {
        let last = json!({"id": "c2", "created": 9, "object": "chat.completion", "choices": [{"index": 0,
            "message": {"role": "assistant", "content": null, "tool_calls": [call_value(&ModelCall {
                id: "s".into(), name: "w".into(), arguments: "{}".into() })]},
            "finish_reason": "tool_calls"}]});
        let first = json!({"id": "c1", "created": 7})
            .as_object()
            .unwrap()
            .clone();
        let app = [ModelCall {
            id: "a".into(),
            name: "app_clock".into(),
            arguments: "{}".into(),
        }];
        let done = final_completion(
            last.as_object().unwrap().clone(),
            Some(&first),
            "Checking.",
            &app,
            "tool_calls",
            None,
        );
        assert_eq!((&done["id"], &done["created"]), (&json!("c1"), &json!(7)));
        let message = &done["choices"][0]["message"];
        assert_eq!(message["content"], "Checking.");
        assert_eq!(message["tool_calls"][0]["id"], "a");
        assert_eq!(message["tool_calls"].as_array().unwrap().len(), 1);
    }
}
