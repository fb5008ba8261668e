//! The chat-completions wire format, as plain types and functions: the app's request with every
//! field kept as its exact JSON text, the body sent upstream each round (a round's answer is read
//! in [`super::answer`]), the messages the server adds to the conversation, usage summed over
//! rounds, the completion the app gets without a stream (its stream is [`super::stream`]), and
//! errors in OpenAI's shape. No I/O.

use indexmap::IndexMap;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::answer::ModelCall;
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
    /// OpenAI's code for it, when it has one.
    pub code: Option<&'static str>,
}

impl RequestError {
    pub(crate) fn new(param: &'static str, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            param: Some(param),
            code: None,
        }
    }
}

/// Items one request may carry (chat's `messages`, the Responses API's `input`): far more than
/// any model's context holds (a million tokens are some 50,000 of the shortest messages), and
/// few enough that reading and putting a request together again stays a matter of
/// milliseconds. A request with more is a 400, as OpenAI answers an array over its bound.
pub const MAX_REQUEST_ITEMS: usize = 65_536;

/// An array of JSON values (`param`: `messages`, `input`), each kept as written, at most
/// [`MAX_REQUEST_ITEMS`] of them: past the bound the rest is only counted, never kept.
pub(crate) fn request_items(
    text: &str,
    param: &'static str,
) -> Result<Option<Vec<Raw>>, RequestError> {
    struct Items;
    impl<'de> serde::de::Visitor<'de> for Items {
        type Value = Result<Vec<Raw>, usize>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an array")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut items = Vec::new();
            while let Some(item) = seq.next_element::<Raw>()? {
                if items.len() == MAX_REQUEST_ITEMS {
                    let mut count = items.len() + 1;
                    while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                        count += 1;
                    }
                    return Ok(Err(count));
                }
                items.push(item);
            }
            Ok(Ok(items))
        }
    }
    let mut reader = serde_json::Deserializer::from_str(text);
    let read = serde::Deserializer::deserialize_seq(&mut reader, Items).and_then(|items| {
        reader.end()?;
        Ok(items)
    });
    match read {
        Err(_) => Ok(None),
        Ok(Ok(items)) => Ok(Some(items)),
        Ok(Err(count)) => Err(RequestError {
            message: format!(
                "Invalid '{param}': array too long. Expected an array with maximum length \
                 {MAX_REQUEST_ITEMS}, but got an array with length {count} instead."
            ),
            param: Some(param),
            code: Some("array_above_max_length"),
        }),
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
                code: None,
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
            Some(raw) => request_items(raw.get(), "messages")?.ok_or_else(|| {
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
/// The registered `tools` of a chat completions request (`responses`: of a Responses API
/// request) with no app tools, as the text on the wire: what a budget saves each round
/// (benches/budget.rs).
pub fn tools_text(tools: &[SharedTool], responses: bool) -> String {
    let shape = if responses {
        ToolShape::FlatLoose
    } else {
        ToolShape::Nested
    };
    let list = ToolList {
        app: &[],
        registered: tools,
        shape,
    };
    serde_json::to_string(&list).expect("a tool list always serialises")
}

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
        // The model's own id: its answer is matched to its call by it.
        "tool_call_id": result.model_call_id(),
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

/// Words of an error that says the model or server cannot take tools at all (`does not support
/// tools`, `tools param requires --jinja`, `function calling is not enabled`), as opposed to one
/// about the request's own calls (`No tool output found for function call ...`), which is the
/// request's fault and no reason to withhold tools from the model.
const REFUSAL_WORDS: [&str; 5] = [
    "support",
    "requires",
    "not enabled",
    "not available",
    "jinja",
];

/// Whether an upstream's error answer refuses the request's tools (it names tools or functions,
/// and says they cannot be taken): the request is then sent again without them.
pub(crate) fn refuses_tools(status: u16, body: &[u8]) -> bool {
    if status < 400 {
        return false;
    }
    let text = error_text(body).to_lowercase();
    (text.contains("tool") || text.contains("function"))
        && REFUSAL_WORDS.iter().any(|word| text.contains(word))
}

/// A fresh completion id in OpenAI's style, for a stream whose upstream sent none.
pub(crate) fn new_completion_id() -> String {
    format!("chatcmpl-{}", uuid::Uuid::new_v4().simple())
}

pub(crate) fn unix_now() -> u64 {
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

    #[test]
    fn a_request_carries_at_most_its_bound_of_items() {
        let items = |n: usize| format!("[{}]", vec!["{}"; n].join(","));
        let taken = request_items(&items(MAX_REQUEST_ITEMS), "input").unwrap();
        assert_eq!(taken.map(|t| t.len()), Some(MAX_REQUEST_ITEMS));
        let refused = request_items(&items(MAX_REQUEST_ITEMS + 2), "input").unwrap_err();
        assert_eq!(
            (refused.param, refused.code),
            (Some("input"), Some("array_above_max_length"))
        );
        assert!(
            refused.message.ends_with(&format!(
                "but got an array with length {} instead.",
                MAX_REQUEST_ITEMS + 2
            )),
            "{}",
            refused.message
        );
        assert!(request_items("{}", "input").unwrap().is_none());
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
        assert!(refuses_tools(
            400,
            b"Function calling is not enabled for this model"
        ));
        for about_the_request in [
            "No tool output found for function call call_a.",
            "An assistant message with 'tool_calls' must be followed by tool messages responding \
             to each 'tool_call_id'. The following tool_call_ids did not have response messages: x",
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding \
             message with 'tool_calls'.",
        ] {
            assert!(
                !refuses_tools(400, about_the_request.as_bytes()),
                "{about_the_request}"
            );
        }
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
