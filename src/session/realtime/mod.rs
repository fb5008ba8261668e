//! The OpenAI Realtime protocol family, as a [`Protocol`] adapter: the client events the
//! session sends (per dialect), the server events it acts on ([`read`]), and the one client
//! event of an app it rewrites (its `session.update`, whose `tools` get the character's
//! registered tools merged in, [`app`]). No I/O here.
//!
//! The `openai` dialect speaks the GA OpenAI Realtime protocol (`session.type = "realtime"`).
//! Qwen-Omni and GLM realtime endpoints follow the older shape with small differences.

pub(crate) mod app;
pub(crate) mod read;

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value, json};

use super::core::{ForeignTool, Keep, ModelEvent, Protocol, ReadError};
use super::settings::Dialect;
use crate::domain::call::ToolResult;
use crate::domain::tool::{FlatTool, NestedTool, SharedTool};

/// The adapter of one dialect.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Realtime(pub Dialect);

impl Protocol for Realtime {
    fn read(&self, text: &str) -> Result<ModelEvent, ReadError> {
        read::server_event(text)
    }

    fn tool_update(&self, tools: &[SharedTool], keep: Keep<'_>, event_id: &str) -> String {
        merged_update_text(self.0, tools, keep, event_id)
    }

    fn call_output(&self, result: &ToolResult, event_id: &str) -> String {
        json!({
            "type": "conversation.item.create",
            "event_id": event_id,
            "item": {
                "type": "function_call_output",
                // The model's own id: its answer is matched to its call by it.
                "call_id": result.model_call_id(),
                "output": result.model_text(),
            },
        })
        .to_string()
    }

    fn takes_images(&self) -> bool {
        self.0.takes_images()
    }

    fn images(&self, result: &ToolResult, event_id: &str) -> String {
        image_message(result, event_id)
    }

    fn images_not_taken(&self, dropped: usize) -> String {
        format!(
            "{dropped} image(s) not shown: this model session ({} dialect) takes no images",
            self.0.name()
        )
    }

    fn continue_turn(&self, event_id: &str) -> Option<String> {
        Some(json!({"type": "response.create", "event_id": event_id}).to_string())
    }

    fn late_result(&self, result: &ToolResult, event_id: &str) -> String {
        system_message(&result.late_text(), event_id)
    }

    fn note(&self, text: &str, _respond: bool, event_id: &str) -> String {
        system_message(text, event_id)
    }

    fn cancel_response(&self, event_id: &str) -> Option<String> {
        Some(json!({"type": "response.cancel", "event_id": event_id}).to_string())
    }
}

/// A `system` message item carrying `text`: how the model is told what the server adds to the
/// conversation (a non-blocking call's result, a call's progress, a plugin's context).
fn system_message(text: &str, event_id: &str) -> String {
    json!({
        "type": "conversation.item.create",
        "event_id": event_id,
        "item": {
            "type": "message",
            "role": "system",
            "content": [{"type": "input_text", "text": text}],
        },
    })
    .to_string()
}

/// The user message that shows the model a call's images, sent right after the call's output:
/// for each image a line naming the call and what to look for, then the image as a `data:` URL.
pub fn image_message(result: &ToolResult, event_id: &str) -> String {
    let mut content = Vec::with_capacity(result.images.len() * 2);
    for image in &result.images {
        content.push(json!({"type": "input_text", "text": result.image_caption(image)}));
        content.push(json!({"type": "input_image", "image_url": image.data_url()}));
    }
    json!({
        "type": "conversation.item.create",
        "event_id": event_id,
        "item": {"type": "message", "role": "user", "content": content},
    })
    .to_string()
}

/// `session.update` carrying the session's own tools (`keep.tools`, first, unchanged) and the
/// registered `tools`, shaped for `dialect`, as the text sent on the wire, serialised straight
/// from the shared tools: every sync carries the whole list, and building a JSON tree of it
/// first (copying each schema) was most of a sync's cost with many tools. The dialect's other
/// keys take the app's values from `keep.settings` where it set them.
pub(crate) fn merged_update_text(
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

/// The `session.update` a realtime session sends to give its model `tools` and nothing of its
/// own (no app tools or settings kept), as the text on the wire: what an embedding app or a
/// benchmark (benches/budget.rs, the bytes a budget saves) can measure without a session.
pub fn session_update_text(dialect: Dialect, tools: &[SharedTool]) -> String {
    merged_update_text(dialect, tools, Keep::default(), "update")
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

/// A `tools` array: the session's own tools as written, then the registered ones in the
/// dialect's shape, serialised straight from the shared tools.
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

/// One registered tool as an entry of a `tools` array in `dialect`'s shape.
fn registered_tool_value(dialect: Dialect, tool: &SharedTool) -> Value {
    let value = match dialect {
        Dialect::Qwen => serde_json::to_value(NestedTool::new(tool)),
        Dialect::Openai | Dialect::Glm => serde_json::to_value(FlatTool::new(tool)),
    };
    value.expect("a tool serialises")
}

/// The `session` object of a session event, whole, its tools left out: what an attached call's
/// session is set to.
pub(crate) fn session_settings(text: &str) -> Option<Map<String, Value>> {
    #[derive(Deserialize)]
    struct Event {
        session: Map<String, Value>,
    }
    let mut session = serde_json::from_str::<Event>(text).ok()?.session;
    session.remove("tools");
    Some(session)
}

#[cfg(test)]
mod tests;
