//! The one event of an app's (behind a relay) that the server rewrites: its `session.update`,
//! whose `tools` get every registered tool whose name none of the app's own tools has.

use serde_json::{Map, Value};

use super::read::event_type;
use super::{Dialect, registered_tool_value};
use crate::domain::tool::SharedTool;
use crate::session::core::{AppUpdate, ForeignTool, without_clashes};

/// Reads an app's client event: `Some` for a `session.update`, rewritten so that its `tools`
/// (when it sets them) also hold every registered tool whose name none of the app's tools
/// has; `None` for every other event (and for text that is not a JSON object), which passes
/// unchanged.
pub fn session_update(dialect: Dialect, tools: &[SharedTool], text: &str) -> Option<AppUpdate> {
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
