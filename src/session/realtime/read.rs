//! Reading the model's server events into the session's [`ModelEvent`]s: one reader, lenient
//! by construction. Every field the session reads is taken as its raw JSON text and then read
//! as what it should be; a field of an unexpected type is taken as absent. An event that is
//! not a JSON object the derive can take (a key written twice) is read again from its parsed
//! tree, by the same types.
//!
//! Most events are audio deltas and transcripts the session does not act on: their `type` is
//! read without scanning the rest.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::domain::peer_text;
use crate::session::core::{Call, ForeignTool, ModelEvent, ReadError};

/// The `type` of an event whose first member it is, read without scanning the rest: audio
/// deltas and appends carry kilobytes of base64 after it, and nearly every event is written
/// type first. `None` when the event does not start that way (or the type has an escape): the
/// caller then reads the whole event.
pub(super) fn leading_type(text: &str) -> Option<&str> {
    let rest = text.trim_start().strip_prefix('{')?.trim_start();
    let rest = rest.strip_prefix("\"type\"")?.trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    let end = rest.find(['"', '\\'])?;
    (rest.as_bytes()[end] == b'"').then(|| &rest[..end])
}

/// Only the `type` of an event, read without building the rest.
#[derive(Deserialize)]
struct EventType<'a> {
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
}

/// The event's `type`: the quick look, else a read of the whole event.
pub(super) fn event_type(text: &str) -> Option<Cow<'_, str>> {
    if let Some(kind) = leading_type(text) {
        return Some(Cow::Borrowed(kind));
    }
    serde_json::from_str::<EventType>(text).ok().map(|k| k.kind)
}

/// The types the session acts on.
const ACTED_ON: [&str; 8] = [
    "error",
    "response.function_call_arguments.done",
    "response.done",
    "session.updated",
    "session.created",
    SPEECH_STARTED,
    SPEECH_STOPPED,
    RESPONSE_CREATED,
];

/// The provider heard the person start speaking: a new user turn.
const SPEECH_STARTED: &str = "input_audio_buffer.speech_started";

/// The provider heard the person stop speaking.
const SPEECH_STOPPED: &str = "input_audio_buffer.speech_stopped";

/// A response began.
const RESPONSE_CREATED: &str = "response.created";

/// A response's `status` when it was cancelled before it was complete (the person spoke over
/// it, or a client cancelled it).
const CANCELLED: &str = "cancelled";

/// A server event, as far as the session reads it. Every member is taken as its raw text: see
/// the module's header.
#[derive(Deserialize, Default)]
struct Event<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow)]
    response_id: Option<&'a RawValue>,
    #[serde(borrow)]
    call_id: Option<&'a RawValue>,
    #[serde(borrow)]
    name: Option<&'a RawValue>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    #[serde(borrow)]
    response: Option<&'a RawValue>,
    #[serde(borrow)]
    session: Option<&'a RawValue>,
    /// A response's id.
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    /// A response's output items.
    #[serde(borrow)]
    output: Option<&'a RawValue>,
    /// A response's status.
    #[serde(borrow)]
    status: Option<&'a RawValue>,
    /// A session's tools.
    #[serde(borrow)]
    tools: Option<&'a RawValue>,
    /// An error's message and code.
    #[serde(borrow)]
    message: Option<&'a RawValue>,
    #[serde(borrow)]
    code: Option<&'a RawValue>,
    #[serde(borrow)]
    event_id: Option<&'a RawValue>,
}

impl<'a> Event<'a> {
    /// A JSON object's members as an event; `None` when the text is not an object.
    fn of(raw: Option<&'a RawValue>) -> Option<Self> {
        let raw = raw?;
        if !raw.get().trim_start().starts_with('{') {
            return None;
        }
        serde_json::from_str(raw.get()).ok()
    }
}

/// A member as a string; `None` when absent or not a string.
pub(super) fn text<'a>(raw: Option<&'a RawValue>) -> Option<Cow<'a, str>> {
    let raw = raw?;
    if !raw.get().starts_with('"') {
        return None;
    }
    serde_json::from_str::<Cow<'a, str>>(raw.get()).ok()
}

fn owned(raw: Option<&RawValue>) -> Option<String> {
    text(raw).map(Cow::into_owned)
}

/// Reads one server event.
pub(crate) fn server_event(text: &str) -> Result<ModelEvent, ReadError> {
    // The quick look: an event the session does not act on is not read further.
    if text.trim_start().starts_with('{')
        && let Some(kind) = event_type(text)
        && !ACTED_ON.contains(&&*kind)
    {
        return Ok(ModelEvent::Other);
    }
    match serde_json::from_str::<Event>(text) {
        Ok(event) => from_event(event),
        Err(_) => {
            // Not an object the derive takes (a member written twice, or not JSON at all): read
            // the parsed tree, in which each member appears once, with the same types.
            let tree: Value =
                serde_json::from_str(text).map_err(|e| ReadError::Malformed(e.to_string()))?;
            if !tree.is_object() {
                return Err(ReadError::Malformed("not a JSON object".into()));
            }
            let text = tree.to_string();
            let event = serde_json::from_str::<Event>(&text)
                .map_err(|e| ReadError::Malformed(e.to_string()))?;
            from_event(event)
        }
    }
}

fn from_event(event: Event<'_>) -> Result<ModelEvent, ReadError> {
    let Some(kind) = text(event.kind) else {
        return Err(ReadError::Malformed("no \"type\" field".into()));
    };
    match &*kind {
        "session.updated" => Ok(ModelEvent::Updated {
            tools: session_tools(event.session),
        }),
        "session.created" => Ok(ModelEvent::Started {
            tools: session_tools(event.session),
        }),
        "error" => {
            // Without its `error` object an error event names nothing: a malformed event,
            // ignored, rather than a refusal of whatever update happens to be in flight.
            let Some(error) = Event::of(event.error) else {
                return Err(ReadError::Malformed(
                    "error event without an \"error\" object".into(),
                ));
            };
            let message = owned(error.message).unwrap_or_else(|| {
                event
                    .error
                    .and_then(|e| serde_json::from_str::<Value>(e.get()).ok())
                    .map(|e| e.to_string())
                    .unwrap_or_default()
            });
            // Kept in the session's report, and quoted by change answers and events.
            let message = peer_text::bounded(match text(error.code) {
                Some(code) => format!("{message} ({code})"),
                None => message,
            });
            Ok(ModelEvent::Refused {
                message,
                event_id: owned(error.event_id),
            })
        }
        "response.function_call_arguments.done" => {
            let call =
                call_of(&event, owned(event.response_id)).ok_or(ReadError::MissingField {
                    kind: "response.function_call_arguments.done",
                    field: "call_id",
                })?;
            Ok(ModelEvent::Call(call))
        }
        "response.done" => {
            let response = Event::of(event.response).unwrap_or_default();
            let turn = owned(response.id);
            let calls = response
                .output
                .and_then(|output| serde_json::from_str::<Vec<&RawValue>>(output.get()).ok())
                .unwrap_or_default()
                .into_iter()
                .filter_map(|item| Event::of(Some(item)))
                .filter(|item| text(item.kind).as_deref() == Some("function_call"))
                .filter_map(|item| call_of(&item, turn.clone()))
                .collect();
            Ok(ModelEvent::TurnDone {
                turn,
                calls,
                cancelled: text(response.status).as_deref() == Some(CANCELLED),
            })
        }
        SPEECH_STARTED => Ok(ModelEvent::SpeechStarted),
        SPEECH_STOPPED => Ok(ModelEvent::SpeechStopped),
        RESPONSE_CREATED => Ok(ModelEvent::TurnStarted),
        _ => Ok(ModelEvent::Other),
    }
}

/// A call, from `response.function_call_arguments.done` or a `function_call` output item.
fn call_of(event: &Event<'_>, turn: Option<String>) -> Option<Call> {
    Some(Call {
        turn,
        call_id: owned(event.call_id)?,
        name: owned(event.name).unwrap_or_default(),
        arguments: owned(event.arguments).unwrap_or_default(),
    })
}

/// The tools a session event lists, if it lists them, each kept as written.
fn session_tools(session: Option<&RawValue>) -> Option<Vec<ForeignTool>> {
    let tools = Event::of(session)?.tools?;
    let tools = serde_json::from_str::<Vec<Box<RawValue>>>(tools.get()).ok()?;
    Some(tools.into_iter().map(ForeignTool::from_raw).collect())
}

/// Flat (`name`) or nested (`function.name`, the qwen dialect).
#[derive(Deserialize)]
struct ToolName {
    name: Option<String>,
    function: Option<FunctionName>,
}

#[derive(Deserialize)]
struct FunctionName {
    name: Option<String>,
}

impl ForeignTool {
    /// Reads one entry of a `tools` array; flat (`name`) or nested (`function.name`).
    pub(crate) fn from_raw(json: Box<RawValue>) -> Self {
        let name = serde_json::from_str::<ToolName>(json.get())
            .ok()
            .and_then(|t| t.name.or_else(|| t.function?.name))
            .unwrap_or_default();
        Self { name, json }
    }

    pub(super) fn from_value(value: &Value) -> Self {
        let json = serde_json::value::to_raw_value(value).expect("a JSON value serialises");
        Self::from_raw(json)
    }
}
