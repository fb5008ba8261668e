//! The realtime wire protocol, as plain functions: the client events we send (per dialect), the
//! server events we act on, and the one client event of an app we rewrite (its `session.update`,
//! whose `tools` get the character's registered tools merged in). No I/O here.
//!
//! The `openai` dialect speaks the GA OpenAI Realtime protocol (`session.type = "realtime"`).
//! Qwen-Omni and GLM realtime endpoints follow the older shape with small differences.

use std::borrow::Cow;

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::domain::call::ToolResult;
use crate::domain::images::ToolImage;
use crate::domain::peer_text;
use crate::domain::tool::SharedTool;

/// Which flavour of the OpenAI Realtime protocol the endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// OpenAI Realtime, GA protocol.
    Openai,
    /// Qwen-Omni realtime: nested function tools, `enable_search: false`.
    Qwen,
    /// GLM realtime: flat tools, explicit server VAD.
    Glm,
}

/// A tool the session has that the server did not register: the app's own, kept byte for byte
/// as the app (or the session's own events) wrote it.
#[derive(Debug, Clone)]
pub struct ForeignTool {
    pub name: String,
    pub json: Box<RawValue>,
}

impl PartialEq for ForeignTool {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.json.get() == other.json.get()
    }
}

impl ForeignTool {
    /// Reads one entry of a `tools` array; flat (`name`) or nested (`function.name`).
    pub fn from_raw(json: Box<RawValue>) -> Self {
        let name = serde_json::from_str::<EchoedTool>(json.get())
            .ok()
            .and_then(|t| t.name.or_else(|| t.function?.name))
            .unwrap_or_default();
        Self { name, json }
    }

    fn from_value(value: &Value) -> Self {
        let json = serde_json::value::to_raw_value(value).expect("a JSON value serialises");
        Self::from_raw(json)
    }
}

/// What a server-built `session.update` carries besides the registered tools: the tools the
/// session already has of its own, and the app's last session settings, whose values win over
/// the dialect's defaults for the keys a tool update touches.
#[derive(Debug, Clone, Copy, Default)]
pub struct Keep<'a> {
    pub tools: &'a [ForeignTool],
    pub settings: Option<&'a Map<String, Value>>,
}

impl Dialect {
    /// Whether the session takes images in the conversation (`input_image` content).
    pub fn takes_images(self) -> bool {
        matches!(self, Dialect::Openai)
    }

    fn name(self) -> &'static str {
        match self {
            Dialect::Openai => "openai",
            Dialect::Qwen => "qwen",
            Dialect::Glm => "glm",
        }
    }
}

/// Drops the images of a result for a session that takes none; returns what the model is told
/// instead, so it never answers as if it had seen them.
pub fn images_not_taken(dialect: Dialect, images: &mut Vec<ToolImage>) -> Option<String> {
    let dropped = std::mem::take(images).len();
    (dropped > 0).then(|| {
        format!(
            "{dropped} image(s) not shown: this model session ({} dialect) takes no images",
            dialect.name()
        )
    })
}

/// The user message that shows the model a call's images, sent right after the call's output:
/// for each image a line naming the call and what to look for, then the image as a `data:` URL.
pub fn image_message(result: &ToolResult, event_id: &str) -> String {
    let mut content = Vec::with_capacity(result.images.len() * 2);
    for image in &result.images {
        let mut caption = format!(
            "Image from tool {} (call_id {})",
            result.name, result.call_id
        );
        if !image.vision_prompt.is_empty() {
            caption.push_str(": ");
            caption.push_str(&image.vision_prompt);
        }
        content.push(json!({"type": "input_text", "text": caption}));
        content.push(json!({"type": "input_image", "image_url": image.data_url()}));
    }
    json!({
        "type": "conversation.item.create",
        "event_id": event_id,
        "item": {"type": "message", "role": "user", "content": content},
    })
    .to_string()
}

/// `session.update` carrying the full tool list, shaped for `dialect`, as the text sent on the
/// wire, serialised straight from the shared tools. Every sync carries the whole list, and
/// building a JSON tree of it first (copying each schema) was most of a sync's cost with many
/// tools.
pub fn session_update_text(dialect: Dialect, tools: &[SharedTool], event_id: &str) -> String {
    merged_update_text(dialect, tools, Keep::default(), event_id)
}

/// `session.update` carrying the session's own tools (`keep.tools`, first, unchanged) and the
/// registered `tools`, shaped for `dialect`; the dialect's other keys take the app's values from
/// `keep.settings` where it set them.
pub fn merged_update_text(
    dialect: Dialect,
    tools: &[SharedTool],
    keep: Keep<'_>,
    event_id: &str,
) -> String {
    let update = SessionUpdate {
        kind: "session.update",
        event_id,
        session: UpdatedSession {
            dialect,
            tools,
            keep,
        },
    };
    serde_json::to_string(&update).expect("a session update always serialises")
}

#[derive(Serialize)]
struct SessionUpdate<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    event_id: &'a str,
    session: UpdatedSession<'a>,
}

/// The `session` object of an update; its fields depend on the dialect.
struct UpdatedSession<'a> {
    dialect: Dialect,
    tools: &'a [SharedTool],
    keep: Keep<'a>,
}

impl UpdatedSession<'_> {
    /// The app's value of `key` if it set one, else the dialect's default.
    fn setting(&self, key: &str, default: Value) -> Value {
        self.keep
            .settings
            .and_then(|s| s.get(key))
            .cloned()
            .unwrap_or(default)
    }
}

impl Serialize for UpdatedSession<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let tools = ToolList {
            dialect: self.dialect,
            foreign: self.keep.tools,
            tools: self.tools,
        };
        let any = !self.tools.is_empty() || !self.keep.tools.is_empty();
        let mut session = serializer.serialize_map(None)?;
        match self.dialect {
            Dialect::Openai => {
                session.serialize_entry("type", &self.setting("type", json!("realtime")))?;
                session.serialize_entry("tools", &tools)?;
                if any {
                    session.serialize_entry(
                        "tool_choice",
                        &self.setting("tool_choice", json!("auto")),
                    )?;
                }
            }
            Dialect::Qwen => {
                session.serialize_entry("tools", &tools)?;
                if any {
                    session.serialize_entry(
                        "enable_search",
                        &self.setting("enable_search", json!(false)),
                    )?;
                }
            }
            Dialect::Glm => {
                session.serialize_entry("tools", &tools)?;
                session.serialize_entry(
                    "turn_detection",
                    &self.setting("turn_detection", json!({"type": "server_vad"})),
                )?;
            }
        }
        session.end()
    }
}

/// A `tools` array: the session's own tools as written, then the registered ones in the dialect's
/// shape, serialised straight from the shared tools.
struct ToolList<'a> {
    dialect: Dialect,
    foreign: &'a [ForeignTool],
    tools: &'a [SharedTool],
}

impl Serialize for ToolList<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut list = serializer.serialize_seq(Some(self.foreign.len() + self.tools.len()))?;
        for tool in self.foreign {
            list.serialize_element(&tool.json)?;
        }
        for tool in self.tools {
            match self.dialect {
                Dialect::Qwen => list.serialize_element(&NestedTool::new(tool))?,
                Dialect::Openai | Dialect::Glm => list.serialize_element(&FlatTool::new(tool))?,
            }
        }
        list.end()
    }
}

#[derive(Serialize)]
struct FunctionBody<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Map<String, Value>,
}

impl<'a> FunctionBody<'a> {
    fn new(tool: &'a SharedTool) -> Self {
        Self {
            name: &tool.name,
            description: &tool.description,
            parameters: tool.parameters.schema(),
        }
    }
}

#[derive(Serialize)]
struct NestedTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionBody<'a>,
}

impl<'a> NestedTool<'a> {
    fn new(tool: &'a SharedTool) -> Self {
        Self {
            kind: "function",
            function: FunctionBody::new(tool),
        }
    }
}

#[derive(Serialize)]
struct FlatTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    body: FunctionBody<'a>,
}

impl<'a> FlatTool<'a> {
    fn new(tool: &'a SharedTool) -> Self {
        Self {
            kind: "function",
            body: FunctionBody::new(tool),
        }
    }
}

/// Answers one function call with the text the model will read.
pub fn function_call_output(call_id: &str, output: &str, event_id: &str) -> Value {
    json!({
        "type": "conversation.item.create",
        "event_id": event_id,
        "item": {"type": "function_call_output", "call_id": call_id, "output": output},
    })
}

/// Asks the model to go on once every call of a response has been answered.
pub fn response_create(event_id: &str) -> Value {
    json!({"type": "response.create", "event_id": event_id})
}

/// A server event the session acts on; everything else is [`ServerEvent::Ignored`].
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// The session describes itself as it starts. `tools` are its tools, when it lists them.
    SessionCreated { tools: Option<Vec<ForeignTool>> },
    /// A `session.update` was applied. `tools` are the tools the server echoed, when it echoed
    /// a tool list: they tell whose update this acknowledges, and a late duplicate from the
    /// awaited one.
    SessionUpdated { tools: Option<Vec<ForeignTool>> },
    /// The server refused something; `event_id` names the client event when it says.
    Error {
        message: String,
        event_id: Option<String>,
    },
    /// The model finished the arguments of a function call.
    FunctionCall(FunctionCall),
    /// A response finished; `calls` are its function calls (from its output items).
    ResponseDone {
        response_id: Option<String>,
        calls: Vec<FunctionCall>,
    },
    /// Audio, transcripts, `session.created`, …: not ours to handle.
    Ignored,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FunctionCall {
    pub response_id: Option<String>,
    pub call_id: String,
    pub name: String,
    /// The exact argument text the model produced.
    pub arguments: String,
}

/// Why a text frame could not be read as a server event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    #[error("server event is not a JSON object with a \"type\": {0}")]
    Malformed(String),
    #[error("{kind} event lacks {field}")]
    MissingField {
        kind: &'static str,
        field: &'static str,
    },
}

/// Only the `type` of a server event, read without building the rest: `session.updated` echoes
/// the whole tool list back (tens of KB with many tools) and audio deltas carry the audio, yet
/// neither needs more than its type.
#[derive(Deserialize)]
struct EventKind<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
}

/// The `type` of an event whose first member it is, read without scanning the rest: audio
/// deltas and appends carry kilobytes of base64 after it, and nearly every event is written
/// type first. `None` when the event does not start that way (or the type has an escape): the
/// caller then parses the whole event.
fn leading_type(text: &str) -> Option<&str> {
    let rest = text.trim_start().strip_prefix('{')?.trim_start();
    let rest = rest.strip_prefix("\"type\"")?.trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    let end = rest.find(['"', '\\'])?;
    (rest.as_bytes()[end] == b'"').then(|| &rest[..end])
}

/// The event's `type`: the quick look, else a parse of the whole event.
fn event_type(text: &str) -> Option<Cow<'_, str>> {
    if let Some(kind) = leading_type(text) {
        return Some(Cow::Borrowed(kind));
    }
    serde_json::from_str::<EventKind>(text).ok().map(|k| k.kind)
}

/// Just the tools of a `session.created` / `session.updated`, each kept as written; every other
/// field is skipped unparsed.
#[derive(Deserialize)]
struct EchoedUpdate {
    session: Option<EchoedSession>,
}

#[derive(Deserialize)]
struct EchoedSession {
    tools: Option<Vec<Box<RawValue>>>,
}

/// Flat (`name`) or nested (`function.name`, the qwen dialect).
#[derive(Deserialize)]
struct EchoedTool {
    name: Option<String>,
    function: Option<EchoedFunction>,
}

#[derive(Deserialize)]
struct EchoedFunction {
    name: Option<String>,
}

/// The `session` object of a session event, whole.
pub fn session_object(text: &str) -> Option<Map<String, Value>> {
    #[derive(Deserialize)]
    struct Event {
        session: Map<String, Value>,
    }
    serde_json::from_str::<Event>(text).ok().map(|e| e.session)
}

/// The tools a session event lists, if it lists them.
fn echoed_tools(text: &str) -> Option<Vec<ForeignTool>> {
    serde_json::from_str::<EchoedUpdate>(text)
        .ok()
        .and_then(|u| u.session?.tools)
        .map(|tools| tools.into_iter().map(ForeignTool::from_raw).collect())
}

pub fn parse_server_event(text: &str) -> Result<ServerEvent, EventError> {
    // Anything the quick look cannot read goes through the full parse below, which reports it.
    if text.trim_start().starts_with('{')
        && let Some(kind) = event_type(text)
    {
        match &*kind {
            "error" => {}
            // A call, every turn: read into borrowed fields instead of a JSON tree. An event
            // these shapes do not fit (a field of another type, a repeated key) goes through
            // the full parse below, which reads it leniently.
            "response.function_call_arguments.done" => {
                if let Ok(event) = serde_json::from_str::<CallEvent>(text) {
                    return event.into_call().map(ServerEvent::FunctionCall).ok_or(
                        EventError::MissingField {
                            kind: "response.function_call_arguments.done",
                            field: "call_id",
                        },
                    );
                }
            }
            "response.done" => {
                if let Ok(event) = serde_json::from_str::<DoneEvent>(text) {
                    return Ok(event.into_event());
                }
            }
            "session.updated" => {
                return Ok(ServerEvent::SessionUpdated {
                    tools: echoed_tools(text),
                });
            }
            "session.created" => {
                return Ok(ServerEvent::SessionCreated {
                    tools: echoed_tools(text),
                });
            }
            _ => return Ok(ServerEvent::Ignored),
        }
    }
    parse_whole_event(text)
}

/// Reads a server event from its whole JSON tree, leniently: a field of an unexpected type is
/// taken as absent.
fn parse_whole_event(text: &str) -> Result<ServerEvent, EventError> {
    let event: Value =
        serde_json::from_str(text).map_err(|e| EventError::Malformed(e.to_string()))?;
    let Some(kind) = event.get("type").and_then(Value::as_str) else {
        return Err(EventError::Malformed("no \"type\" field".into()));
    };
    match kind {
        "session.updated" => Ok(ServerEvent::SessionUpdated {
            tools: echoed_tools(text),
        }),
        "session.created" => Ok(ServerEvent::SessionCreated {
            tools: echoed_tools(text),
        }),
        "error" => {
            // Without its `error` object an error event names nothing: a malformed event,
            // ignored, rather than a refusal of whatever update happens to be in flight.
            let Some(error) = event.get("error").filter(|e| e.is_object()) else {
                return Err(EventError::Malformed(
                    "error event without an \"error\" object".into(),
                ));
            };
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| error.to_string());
            let code = error.get("code").and_then(Value::as_str);
            // Kept in the session's report, and quoted by change answers and events.
            Ok(ServerEvent::Error {
                message: peer_text::bounded(match code {
                    Some(code) => format!("{message} ({code})"),
                    None => message,
                }),
                event_id: error
                    .get("event_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            })
        }
        "response.function_call_arguments.done" => {
            let call = function_call(&event, str_field(&event, "response_id")).ok_or(
                EventError::MissingField {
                    kind: "response.function_call_arguments.done",
                    field: "call_id",
                },
            )?;
            Ok(ServerEvent::FunctionCall(call))
        }
        "response.done" => {
            let response = event.get("response").unwrap_or(&Value::Null);
            let response_id = str_field(response, "id");
            let calls = response
                .get("output")
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .filter(|i| i.get("type").and_then(Value::as_str) == Some("function_call"))
                        .filter_map(|i| function_call(i, response_id.clone()))
                        .collect()
                })
                .unwrap_or_default();
            Ok(ServerEvent::ResponseDone { response_id, calls })
        }
        _ => Ok(ServerEvent::Ignored),
    }
}

/// `response.function_call_arguments.done`, or a `function_call` output item: the fields a call
/// needs, borrowed where the text has no escapes; every other field is skipped unparsed.
#[derive(Deserialize)]
struct CallEvent<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    response_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    call_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    arguments: Option<Cow<'a, str>>,
}

impl CallEvent<'_> {
    fn into_call(mut self) -> Option<FunctionCall> {
        let response_id = self.response_id.take().map(Cow::into_owned);
        self.into_call_of(response_id)
    }

    fn into_call_of(self, response_id: Option<String>) -> Option<FunctionCall> {
        Some(FunctionCall {
            response_id,
            call_id: self.call_id?.into_owned(),
            name: self.name.map(Cow::into_owned).unwrap_or_default(),
            arguments: self.arguments.map(Cow::into_owned).unwrap_or_default(),
        })
    }
}

/// `response.done`: the response's id and its output items; the rest is skipped unparsed.
#[derive(Deserialize)]
struct DoneEvent<'a> {
    #[serde(borrow)]
    response: Option<DoneResponse<'a>>,
}

#[derive(Deserialize)]
struct DoneResponse<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    output: Option<Vec<CallEvent<'a>>>,
}

impl DoneEvent<'_> {
    fn into_event(self) -> ServerEvent {
        let Some(response) = self.response else {
            return ServerEvent::ResponseDone {
                response_id: None,
                calls: Vec::new(),
            };
        };
        let response_id = response.id.map(Cow::into_owned);
        let calls = response
            .output
            .unwrap_or_default()
            .into_iter()
            .filter(|item| item.kind.as_deref() == Some("function_call"))
            .filter_map(|item| item.into_call_of(response_id.clone()))
            .collect();
        ServerEvent::ResponseDone { response_id, calls }
    }
}

fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn function_call(v: &Value, response_id: Option<String>) -> Option<FunctionCall> {
    Some(FunctionCall {
        response_id,
        call_id: str_field(v, "call_id")?,
        name: str_field(v, "name").unwrap_or_default(),
        arguments: str_field(v, "arguments").unwrap_or_default(),
    })
}

/// An app's `session.update`, its `tools` merged with the registered ones.
#[derive(Debug)]
pub struct AppUpdate {
    /// The event as it goes upstream, when it differs from what the app sent.
    pub rewritten: Option<String>,
    pub event_id: Option<String>,
    /// The app's own tools, when its update sets `tools`.
    pub tools: Option<Vec<ForeignTool>>,
    /// The app's `session` settings (its `tools` left out): what later server-built updates
    /// keep.
    pub settings: Map<String, Value>,
    /// Registered tools left out because the app has a tool of the same name.
    pub clashes: Vec<String>,
    /// The tool names the update carries upstream, when it sets `tools`.
    pub names: Option<Vec<String>>,
}

/// Reads an app's client event: `Some` for a `session.update`, rewritten so that its `tools`
/// (when it sets them) also hold every registered tool whose name none of the app's tools
/// has; `None` for every other event (and for text that is not a JSON object), which passes
/// unchanged.
pub fn app_session_update(dialect: Dialect, tools: &[SharedTool], text: &str) -> Option<AppUpdate> {
    // The cheap look first: audio appends are most of what an app sends.
    if event_type(text)? != "session.update" {
        return None;
    }
    let Ok(Value::Object(mut event)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    let event_id = event
        .get("event_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let Some(Value::Object(session)) = event.get_mut("session") else {
        // No settings to merge into: it goes as written.
        return Some(AppUpdate {
            rewritten: None,
            event_id,
            tools: None,
            settings: Map::new(),
            clashes: Vec::new(),
            names: None,
        });
    };
    let mut settings = session.clone();
    let own = match settings.shift_remove("tools") {
        Some(Value::Array(own)) => own,
        // Without a list of tools (or with something else, which upstream refuses in the app's
        // words) the update leaves the session's tools alone: it goes as written.
        _ => {
            return Some(AppUpdate {
                rewritten: None,
                event_id,
                tools: None,
                settings,
                clashes: Vec::new(),
                names: None,
            });
        }
    };
    let own_tools: Vec<ForeignTool> = own.iter().map(ForeignTool::from_value).collect();
    let (kept, clashes) = without_clashes(tools, &own_tools);
    let names: Vec<String> = own_tools
        .iter()
        .map(|t| t.name.clone())
        .chain(kept.iter().map(|t| t.name.clone()))
        .collect();
    if let Some(Value::Array(merged)) = session.get_mut("tools") {
        merged.extend(kept.iter().map(|t| registered_tool_value(dialect, t)));
    }
    Some(AppUpdate {
        rewritten: Some(Value::Object(event).to_string()),
        event_id,
        tools: Some(own_tools),
        settings,
        clashes,
        names: Some(names),
    })
}

/// The registered tools whose names none of `own` has, and the names of those left out.
pub fn without_clashes(
    tools: &[SharedTool],
    own: &[ForeignTool],
) -> (Vec<SharedTool>, Vec<String>) {
    let mut clashes = Vec::new();
    let kept = tools
        .iter()
        .filter(|t| {
            let clash = own.iter().any(|o| o.name == t.name);
            if clash {
                clashes.push(t.name.clone());
            }
            !clash
        })
        .cloned()
        .collect();
    (kept, clashes)
}

/// One registered tool as an entry of a `tools` array in `dialect`'s shape.
fn registered_tool_value(dialect: Dialect, tool: &SharedTool) -> Value {
    let value = match dialect {
        Dialect::Qwen => serde_json::to_value(NestedTool::new(tool)),
        Dialect::Openai | Dialect::Glm => serde_json::to_value(FlatTool::new(tool)),
    };
    value.expect("a tool serialises")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::domain::callback_url::CallbackUrl;
    use crate::domain::tool::{ToolSpec, empty_parameters, test_tools};

    fn session_update(dialect: Dialect, tools: &[SharedTool], event_id: &str) -> Value {
        serde_json::from_str(&session_update_text(dialect, tools, event_id)).unwrap()
    }

    fn tools() -> Vec<SharedTool> {
        vec![Arc::new(ToolSpec::remote(
            "get_weather",
            "Get weather.",
            empty_parameters(),
            "plugin:w",
            CallbackUrl::parse("http://127.0.0.1:9/cb").unwrap(),
            Duration::from_secs(5),
        ))]
    }

    #[test]
    fn openai_shape() {
        let update = session_update(Dialect::Openai, &tools(), "e1");
        assert_eq!(
            update,
            json!({"type": "session.update", "event_id": "e1", "session": {
                "type": "realtime",
                "tools": [{"type": "function", "name": "get_weather", "description": "Get weather.",
                           "parameters": {"type": "object", "properties": {}}}],
                "tool_choice": "auto"
            }})
        );
        let empty = session_update(Dialect::Openai, &[], "e2");
        assert_eq!(empty["session"], json!({"type": "realtime", "tools": []}));
    }

    #[test]
    fn qwen_shape() {
        let update = session_update(Dialect::Qwen, &tools(), "e");
        assert_eq!(
            update["session"]["tools"][0]["function"]["name"],
            "get_weather"
        );
        assert_eq!(update["session"]["tools"][0]["type"], "function");
        assert_eq!(update["session"]["enable_search"], false);
        let empty = session_update(Dialect::Qwen, &[], "e");
        assert_eq!(empty["session"], json!({"tools": []}));
    }

    #[test]
    fn images_go_in_one_user_message_after_the_output() {
        use crate::domain::call::ToolCall;
        let image = |prompt: &str| ToolImage {
            mime: "image/png",
            width: 1,
            height: 1,
            data_b64: "iVBO".into(),
            vision_prompt: prompt.into(),
        };
        let call = ToolCall::from_raw("c9".into(), "cam".into(), "{}".into());
        let mut result = call.error("x".into());
        result.images = vec![image("look"), image("")];
        let event: Value = serde_json::from_str(&image_message(&result, "e1")).unwrap();
        assert_eq!(
            event,
            json!({"type": "conversation.item.create", "event_id": "e1", "item": {
            "type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Image from tool cam (call_id c9): look"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBO"},
                {"type": "input_text", "text": "Image from tool cam (call_id c9)"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBO"},
            ]}})
        );
        let mut images = result.images.clone();
        assert_eq!(
            images_not_taken(Dialect::Glm, &mut images).as_deref(),
            Some("2 image(s) not shown: this model session (glm dialect) takes no images")
        );
        assert!(images.is_empty());
        assert_eq!(images_not_taken(Dialect::Qwen, &mut images), None);
        assert!(Dialect::Openai.takes_images() && !Dialect::Qwen.takes_images());
    }

    #[test]
    fn glm_shape() {
        let update = session_update(Dialect::Glm, &tools(), "e");
        assert_eq!(update["session"]["tools"][0]["name"], "get_weather");
        assert_eq!(
            update["session"]["turn_detection"],
            json!({"type": "server_vad"})
        );
    }

    fn echoed_names(event: &str) -> Option<Vec<String>> {
        match parse_server_event(event) {
            Ok(ServerEvent::SessionUpdated { tools } | ServerEvent::SessionCreated { tools }) => {
                tools.map(|t| t.into_iter().map(|t| t.name).collect())
            }
            other => panic!("not a session event: {other:?}"),
        }
    }

    #[test]
    fn session_events_echo_their_tools() {
        let flat = r#"{"type":"session.updated","session":{"type":"realtime","tools":[{"type":"function","name":"a","parameters":{"x":[1,{"y":2}]}},{"type":"function","name":"b"}]}}"#;
        assert_eq!(echoed_names(flat), Some(vec!["a".into(), "b".into()]));
        let nested = r#"{"type":"session.created","session":{"tools":[{"type":"function","function":{"name":"q"}}]}}"#;
        assert_eq!(echoed_names(nested), Some(vec!["q".into()]));
        let Ok(ServerEvent::SessionUpdated { tools: Some(tools) }) = parse_server_event(flat)
        else {
            panic!("session.updated")
        };
        assert_eq!(
            tools[0].json.get(),
            r#"{"type":"function","name":"a","parameters":{"x":[1,{"y":2}]}}"#,
            "kept byte for byte"
        );
    }

    fn own_tool(json: &str) -> ForeignTool {
        ForeignTool::from_raw(RawValue::from_string(json.to_owned()).unwrap())
    }

    #[test]
    fn merged_updates_keep_the_sessions_own_tools_and_settings() {
        let own = [own_tool(
            r#"{"type":"function","name":"mine","parameters":{}}"#,
        )];
        let mut settings = Map::new();
        settings.insert("tool_choice".into(), json!("required"));
        settings.insert("voice".into(), json!("marin"));
        let keep = Keep {
            tools: &own,
            settings: Some(&settings),
        };
        let update: Value =
            serde_json::from_str(&merged_update_text(Dialect::Openai, &tools(), keep, "e"))
                .unwrap();
        assert_eq!(
            update["session"],
            json!({"type": "realtime", "tools": [
                {"type": "function", "name": "mine", "parameters": {}},
                {"type": "function", "name": "get_weather", "description": "Get weather.",
                 "parameters": {"type": "object", "properties": {}}}],
                "tool_choice": "required"}),
            "the app's tool first, its tool_choice kept, nothing else it set resent"
        );
        let glm: Value =
            serde_json::from_str(&merged_update_text(Dialect::Glm, &[], keep, "e")).unwrap();
        assert_eq!(
            glm["session"]["turn_detection"],
            json!({"type": "server_vad"})
        );
    }

    #[test]
    fn an_apps_update_gets_the_registered_tools_merged() {
        let text = r#"{"type":"session.update","event_id":"app_1","session":{"type":"realtime","instructions":"be brief","tools":[{"type":"function","name":"get_weather","parameters":{}},{"type":"function","name":"own","parameters":{}}]}}"#;
        let update = app_session_update(
            Dialect::Openai,
            &test_tools(&["get_weather", "lookup"]),
            text,
        )
        .unwrap();
        assert_eq!(update.event_id.as_deref(), Some("app_1"));
        assert_eq!(update.clashes, ["get_weather"]);
        assert_eq!(
            update.names,
            Some(vec!["get_weather".into(), "own".into(), "lookup".into()])
        );
        let sent: Value = serde_json::from_str(update.rewritten.as_deref().unwrap()).unwrap();
        assert_eq!(
            sent,
            json!({"type": "session.update", "event_id": "app_1", "session": {
                "type": "realtime", "instructions": "be brief", "tools": [
                    {"type": "function", "name": "get_weather", "parameters": {}},
                    {"type": "function", "name": "own", "parameters": {}},
                    {"type": "function", "name": "lookup", "description": "",
                     "parameters": {"type": "object", "properties": {}}}]}})
        );
        assert_eq!(
            Value::Object(update.settings),
            json!({"type": "realtime", "instructions": "be brief"})
        );

        let qwen = app_session_update(
            Dialect::Qwen,
            &test_tools(&["lookup"]),
            r#"{"type":"session.update","session":{"tools":[]}}"#,
        )
        .unwrap();
        let sent: Value = serde_json::from_str(qwen.rewritten.as_deref().unwrap()).unwrap();
        assert_eq!(sent["session"]["tools"][0]["function"]["name"], "lookup");
    }

    #[test]
    fn other_app_events_and_updates_without_tools_pass_as_written() {
        let tools = test_tools(&["lookup"]);
        assert!(
            app_session_update(
                Dialect::Openai,
                &tools,
                r#"{"type":"input_audio_buffer.append","audio":"AAAA"}"#
            )
            .is_none()
        );
        assert!(app_session_update(Dialect::Openai, &tools, "not json").is_none());
        let update = app_session_update(
            Dialect::Openai,
            &tools,
            r#"{"type":"session.update","session":{"type":"realtime","instructions":"x"}}"#,
        )
        .unwrap();
        assert_eq!(update.rewritten, None);
        assert_eq!(update.names, None);
    }

    #[test]
    fn the_type_is_read_without_the_rest_when_it_comes_first() {
        assert_eq!(leading_type(r#"{"type":"a.b","x":1}"#), Some("a.b"));
        assert_eq!(leading_type(" {\n \"type\" : \"a\" }"), Some("a"));
        assert_eq!(leading_type(r#"{"event_id":"e","type":"a"}"#), None);
        assert_eq!(
            leading_type(r#"{"type":"a\u002eb"}"#),
            None,
            "escapes take the long way"
        );
        assert_eq!(
            event_type(r#"{"event_id":"e","type":"a"}"#).as_deref(),
            Some("a")
        );
        assert_eq!(event_type(r#"{"type":"a\u002eb"}"#).as_deref(), Some("a.b"));
        assert_eq!(
            parse_server_event(r#"{"event_id":"e","type":"session.updated","session":{}}"#),
            Ok(ServerEvent::SessionUpdated { tools: None })
        );
    }

    #[test]
    fn calls_read_field_by_field_read_as_the_whole_tree_does() {
        let events = [
            r#"{"type":"response.function_call_arguments.done","response_id":"r1","item_id":"i","output_index":0,"call_id":"c1","name":"get_weather","arguments":"{\"city\": \"T\u00f6kyo\"}"}"#,
            r#"{"type":"response.function_call_arguments.done","call_id":"c1"}"#,
            r#"{"type":"response.function_call_arguments.done","name":"n","arguments":"{}"}"#,
            r#"{"type":"response.function_call_arguments.done","call_id":"c1","name":7,"arguments":{"a":1}}"#,
            r#"{"type":"response.function_call_arguments.done","call_id":"c1","call_id":"c2"}"#,
            r#"{"type":"response.function_call_arguments.done","response_id":null,"call_id":"c\n1"}"#,
            r#"{"type":"response.done","response":{"id":"r1","status":"completed","usage":{"total_tokens":12345678901234567890123},"output":[{"type":"message","content":[{"type":"audio","transcript":"hi"}]},{"type":"function_call","call_id":"c1","name":"n","arguments":"{}"},{"type":"function_call","name":"no_id"},{"type":"mcp_call","call_id":"m1","name":"other"}]}}"#,
            r#"{"type":"response.done","response":null}"#,
            r#"{"type":"response.done"}"#,
            r#"{"type":"response.done","response":{"id":"r1","output":"not a list"}}"#,
            r#"{"type":"response.done","response":{"id":5,"output":[{"type":"function_call","call_id":"c1"}]}}"#,
            r#"{"type":"response.done","response":[1,2]}"#,
        ];
        for text in events {
            assert_eq!(parse_server_event(text), parse_whole_event(text), "{text}");
        }
    }

    #[test]
    fn server_events() {
        assert_eq!(
            parse_server_event(r#"{"type":"session.updated","session":{}}"#),
            Ok(ServerEvent::SessionUpdated { tools: None })
        );
        assert_eq!(
            parse_server_event(r#"{"type":"session.created","session":{"type":"realtime"}}"#),
            Ok(ServerEvent::SessionCreated { tools: None })
        );
        assert_eq!(
            parse_server_event(r#"{"type":"response.audio.delta","delta":"AAA"}"#),
            Ok(ServerEvent::Ignored)
        );
        assert_eq!(
            parse_server_event(
                r#"{"type":"error","error":{"type":"invalid_request_error","code":"bad_tool","message":"Invalid tool","event_id":"e7"}}"#
            ),
            Ok(ServerEvent::Error {
                message: "Invalid tool (bad_tool)".into(),
                event_id: Some("e7".into())
            })
        );
        let call = parse_server_event(
            r#"{"type":"response.function_call_arguments.done","response_id":"r1","item_id":"i","output_index":0,"call_id":"c1","name":"get_weather","arguments":"{\"city\": \"Tokyo\"}"}"#,
        )
        .unwrap();
        assert_eq!(
            call,
            ServerEvent::FunctionCall(FunctionCall {
                response_id: Some("r1".into()),
                call_id: "c1".into(),
                name: "get_weather".into(),
                arguments: "{\"city\": \"Tokyo\"}".into()
            })
        );
        let done = parse_server_event(
            r#"{"type":"response.done","response":{"id":"r1","output":[{"type":"function_call","call_id":"c1","name":"n","arguments":"{}"},{"type":"message"}]}}"#,
        )
        .unwrap();
        let ServerEvent::ResponseDone { response_id, calls } = done else {
            panic!("response.done")
        };
        assert_eq!(response_id.as_deref(), Some("r1"));
        assert_eq!(calls.len(), 1);
        assert!(parse_server_event("not json").is_err());
        assert!(parse_server_event("[1]").is_err());
    }
}
