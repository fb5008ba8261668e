//! An app's client events behind a relay, as far as the session acts on them: the one event the
//! server rewrites — its `session.update`, whose `tools` get every registered tool whose name
//! none of the app's own tools has — and the two that begin a new user turn: a user message the
//! app adds (`conversation.item.create` of a `message` with `role: "user"`: typed text, or the
//! person's words) and a `response.cancel`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::read::{event_type, text};
use super::{Dialect, registered_tool_value};
use crate::domain::tool::SharedTool;
use crate::session::core::{AppUpdate, ForeignTool, Interruption, without_clashes};

/// What an app's client event is to the session.
#[derive(Debug)]
pub(crate) enum AppEvent {
    /// A `session.update` (see [`session_update`]).
    Update(AppUpdate),
    /// The app began a new user turn: it goes up after the calls it abandons are answered.
    Interrupts(Interruption),
    /// Everything else (and text that is not a JSON object): passes unchanged.
    Other,
}

/// Reads an app's client event: its type first, without scanning the rest (audio appends are
/// most of what an app sends), then only what the session acts on.
pub(crate) fn app_event(dialect: Dialect, tools: &[SharedTool], text: &str) -> AppEvent {
    let Some(kind) = event_type(text) else {
        return AppEvent::Other;
    };
    match &*kind {
        "session.update" => merged(dialect, tools, text).map_or(AppEvent::Other, AppEvent::Update),
        "conversation.item.create" if adds_user_message(text) => {
            AppEvent::Interrupts(Interruption::NewTurn)
        }
        "response.cancel" => AppEvent::Interrupts(match cancelled_response(text) {
            Some(response) => Interruption::Turn(response.into_owned()),
            None => Interruption::NewTurn,
        }),
        _ => AppEvent::Other,
    }
}

/// The members of a client event the session reads to tell a new user turn, each as its raw
/// text (a member of an unexpected type is taken as absent).
#[derive(Deserialize)]
struct ClientEvent<'a> {
    #[serde(borrow)]
    item: Option<&'a RawValue>,
    #[serde(borrow)]
    response_id: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow)]
    role: Option<&'a RawValue>,
}

/// Whether a `conversation.item.create` adds a message of the user's (a `message` item, or one
/// that names no type, with `role: "user"`).
fn adds_user_message(event: &str) -> bool {
    let Some(item) = serde_json::from_str::<ClientEvent>(event)
        .ok()
        .and_then(|e| e.item)
        .and_then(|item| serde_json::from_str::<Item>(item.get()).ok())
    else {
        return false;
    };
    let kind = text(item.kind);
    text(item.role).as_deref() == Some("user") && kind.as_deref().is_none_or(|k| k == "message")
}

/// The response a `response.cancel` names, if it names one.
fn cancelled_response(event: &str) -> Option<Cow<'_, str>> {
    let response = serde_json::from_str::<ClientEvent>(event).ok()?.response_id;
    text(response).filter(|r| !r.is_empty())
}

/// Reads an app's client event: `Some` for a `session.update`, rewritten so that its `tools`
/// (when it sets them) also hold every registered tool whose name none of the app's tools
/// has; `None` for every other event (and for text that is not a JSON object), which passes
/// unchanged.
#[cfg(test)]
pub(crate) fn session_update(
    dialect: Dialect,
    tools: &[SharedTool],
    text: &str,
) -> Option<AppUpdate> {
    // The cheap look first: audio appends are most of what an app sends.
    if event_type(text)? != "session.update" {
        return None;
    }
    merged(dialect, tools, text)
}

/// A `session.update`, rewritten (see [`session_update`]).
fn merged(dialect: Dialect, tools: &[SharedTool], text: &str) -> Option<AppUpdate> {
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
