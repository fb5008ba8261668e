//! The realtime wire protocol, as plain functions: the client events we send (per dialect) and
//! the server events we act on. No I/O here; the session actor does the talking.
//!
//! The `openai` dialect speaks the GA OpenAI Realtime protocol (`session.type = "realtime"`).
//! Qwen-Omni and GLM realtime endpoints follow the older shape with small differences.

use std::borrow::Cow;

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value, json};

use crate::domain::call::ToolResult;
use crate::domain::images::ToolImage;
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
    serde_json::to_string(&SessionUpdate::new(dialect, tools, event_id))
        .expect("a session update always serialises")
}

#[derive(Serialize)]
struct SessionUpdate<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    event_id: &'a str,
    session: UpdatedSession<'a>,
}

impl<'a> SessionUpdate<'a> {
    fn new(dialect: Dialect, tools: &'a [SharedTool], event_id: &'a str) -> Self {
        Self {
            kind: "session.update",
            event_id,
            session: UpdatedSession { dialect, tools },
        }
    }
}

/// The `session` object of an update; its fields depend on the dialect.
struct UpdatedSession<'a> {
    dialect: Dialect,
    tools: &'a [SharedTool],
}

impl Serialize for UpdatedSession<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let flat = || self.tools.iter().map(FlatTool::new).collect::<Vec<_>>();
        let mut session = serializer.serialize_map(None)?;
        match self.dialect {
            Dialect::Openai => {
                session.serialize_entry("type", "realtime")?;
                session.serialize_entry("tools", &flat())?;
                if !self.tools.is_empty() {
                    session.serialize_entry("tool_choice", "auto")?;
                }
            }
            Dialect::Qwen => {
                let nested: Vec<_> = self
                    .tools
                    .iter()
                    .map(|t| NestedTool {
                        kind: "function",
                        function: FunctionBody::new(t),
                    })
                    .collect();
                session.serialize_entry("tools", &nested)?;
                if !self.tools.is_empty() {
                    session.serialize_entry("enable_search", &false)?;
                }
            }
            Dialect::Glm => {
                session.serialize_entry("tools", &flat())?;
                session.serialize_entry("turn_detection", &json!({"type": "server_vad"}))?;
            }
        }
        session.end()
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
    /// A `session.update` was applied. `tools` are the tool names the server echoed, when it
    /// echoed a tool list: they tell a late duplicate acknowledgement from the awaited one.
    SessionUpdated { tools: Option<Vec<String>> },
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

/// Just the tool names of a `session.updated`; every other field is skipped unparsed.
#[derive(Deserialize)]
struct EchoedUpdate {
    session: Option<EchoedSession>,
}

#[derive(Deserialize)]
struct EchoedSession {
    tools: Option<Vec<EchoedTool>>,
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

fn session_updated(text: &str) -> ServerEvent {
    let tools = serde_json::from_str::<EchoedUpdate>(text)
        .ok()
        .and_then(|u| u.session?.tools)
        .map(|tools| {
            tools
                .into_iter()
                .map(|t| t.name.or_else(|| t.function?.name).unwrap_or_default())
                .collect()
        });
    ServerEvent::SessionUpdated { tools }
}

pub fn parse_server_event(text: &str) -> Result<ServerEvent, EventError> {
    // Anything the quick look cannot read goes through the full parse below, which reports it.
    if text.trim_start().starts_with('{')
        && let Ok(EventKind { kind }) = serde_json::from_str::<EventKind>(text)
    {
        match &*kind {
            "error" | "response.function_call_arguments.done" | "response.done" => {}
            "session.updated" => return Ok(session_updated(text)),
            _ => return Ok(ServerEvent::Ignored),
        }
    }
    let event: Value =
        serde_json::from_str(text).map_err(|e| EventError::Malformed(e.to_string()))?;
    let Some(kind) = event.get("type").and_then(Value::as_str) else {
        return Err(EventError::Malformed("no \"type\" field".into()));
    };
    match kind {
        "session.updated" => Ok(session_updated(text)),
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
            Ok(ServerEvent::Error {
                message: match code {
                    Some(code) => format!("{message} ({code})"),
                    None => message,
                },
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::domain::callback_url::CallbackUrl;
    use crate::domain::tool::{ToolSpec, empty_parameters};

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

    #[test]
    fn session_updated_echoes_tool_names() {
        let flat = r#"{"type":"session.updated","session":{"type":"realtime","tools":[{"type":"function","name":"a","parameters":{"x":[1,{"y":2}]}},{"type":"function","name":"b"}]}}"#;
        assert_eq!(
            parse_server_event(flat),
            Ok(ServerEvent::SessionUpdated {
                tools: Some(vec!["a".into(), "b".into()])
            })
        );
        let nested = r#"{"type":"session.updated","session":{"tools":[{"type":"function","function":{"name":"q"}}]}}"#;
        assert_eq!(
            parse_server_event(nested),
            Ok(ServerEvent::SessionUpdated {
                tools: Some(vec!["q".into()])
            })
        );
    }

    #[test]
    fn server_events() {
        assert_eq!(
            parse_server_event(r#"{"type":"session.updated","session":{}}"#),
            Ok(ServerEvent::SessionUpdated { tools: None })
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
