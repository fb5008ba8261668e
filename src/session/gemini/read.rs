//! The server messages of Gemini Live: what the session acts on ([`server_message`]: the
//! setup's acknowledgement, calls, their cancellation) and what the connection's actor acts on
//! ([`signals`]: resumption handles, `goAway`). Unknown fields and messages (`serverContent`,
//! `usageMetadata`, ...) are passed over; keys are read in the API's camelCase and in
//! snake_case.

use std::time::Duration;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use crate::session::core::{Call, Interruption, ModelEvent, ReadError};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServerMessage {
    #[serde(alias = "setup_complete")]
    setup_complete: Option<IgnoredAny>,
    #[serde(alias = "tool_call")]
    tool_call: Option<ToolCallMessage>,
    #[serde(alias = "tool_call_cancellation")]
    tool_call_cancellation: Option<Cancellation>,
    #[serde(alias = "session_resumption_update")]
    session_resumption_update: Option<ResumptionUpdate>,
    #[serde(alias = "go_away")]
    go_away: Option<GoAway>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolCallMessage {
    #[serde(default, alias = "function_calls")]
    function_calls: Vec<FunctionCall>,
}

#[derive(Deserialize)]
struct FunctionCall {
    id: Option<String>,
    name: Option<String>,
    args: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct Cancellation {
    #[serde(default)]
    ids: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResumptionUpdate {
    #[serde(alias = "new_handle")]
    new_handle: Option<String>,
    #[serde(default)]
    resumable: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GoAway {
    #[serde(alias = "time_left")]
    time_left: Option<String>,
}

fn parse(text: &str) -> Result<ServerMessage, ReadError> {
    serde_json::from_str(text).map_err(|e| ReadError::NotJsonObject(e.to_string()))
}

/// What one server message means to the session: `setupComplete` acknowledges the setup, a
/// `toolCall` is one turn of calls (named by their ids), `toolCallCancellation` cancels calls.
pub(crate) fn server_message(text: &str) -> Result<ModelEvent, ReadError> {
    let message = parse(text)?;
    if message.setup_complete.is_some() {
        return Ok(ModelEvent::Updated { tools: None });
    }
    if let Some(tool_call) = message.tool_call {
        let mut calls = Vec::with_capacity(tool_call.function_calls.len());
        for call in tool_call.function_calls {
            let call_id = call.id.ok_or(ReadError::MissingField {
                kind: "toolCall",
                field: "functionCalls[].id",
            })?;
            let name = call.name.ok_or(ReadError::MissingField {
                kind: "toolCall",
                field: "functionCalls[].name",
            })?;
            let arguments = call
                .args
                .map_or_else(|| "{}".to_owned(), |a| a.get().to_owned());
            calls.push(Call {
                turn: None,
                call_id,
                name,
                arguments,
            });
        }
        // The calls of one message are one turn: answered together, named by their ids.
        let turn = format!(
            "toolCall:{}",
            calls
                .iter()
                .map(|c| c.call_id.as_str())
                .collect::<Vec<_>>()
                .join(",")
        );
        for call in &mut calls {
            call.turn = Some(turn.clone());
        }
        return Ok(ModelEvent::TurnDone {
            turn: Some(turn),
            calls,
            cancelled: false,
        });
    }
    if let Some(cancellation) = message.tool_call_cancellation {
        return Ok(ModelEvent::Interrupted(Interruption::Calls(
            cancellation.ids,
        )));
    }
    Ok(ModelEvent::Other)
}

/// What a server message tells the connection's actor.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Signals {
    /// A `sessionResumptionUpdate`: the new handle (when it brings one), and whether the
    /// session can be resumed at this point.
    pub resumption: Option<(Option<String>, bool)>,
    /// A `goAway`: the connection ends after this long.
    pub go_away: Option<Duration>,
}

/// The resumption update and `goAway` of a server message, if it has either.
pub(crate) fn signals(text: &str) -> Signals {
    // Most messages are audio: a look at the text spares parsing them twice.
    if !(text.contains("esumption") || text.contains("oAway") || text.contains("o_away")) {
        return Signals::default();
    }
    let Ok(message) = parse(text) else {
        return Signals::default();
    };
    Signals {
        resumption: message
            .session_resumption_update
            .map(|u| (u.new_handle.filter(|h| !h.is_empty()), u.resumable)),
        go_away: message.go_away.map(|g| {
            g.time_left
                .as_deref()
                .and_then(duration)
                .unwrap_or(Duration::ZERO)
        }),
    }
}

/// A protobuf `Duration` as JSON writes it: seconds with an `s`, e.g. `"10s"`, `"1.5s"`.
fn duration(text: &str) -> Option<Duration> {
    let seconds: f64 = text.strip_suffix('s')?.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}
