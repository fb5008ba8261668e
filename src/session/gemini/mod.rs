//! The Gemini Live API (`BidiGenerateContent` over a websocket), as a [`Protocol`] adapter: the
//! setup that carries the tools, the function responses, the images, and the server messages
//! the session acts on ([`read`]). No I/O here.
//!
//! Gemini Live takes tools only in the `setup` that opens a connection, so a new tool list is a
//! new connection resumed from the session's resumption handle
//! ([`Protocol::tools_need_new_connection`]): the actor opens it (`session::live`).
//! Its model goes on by itself once it has the answers of a `toolCall`, which all go in one
//! `toolResponse` ([`Answers::TogetherPerTurn`]).

pub(crate) mod app;
pub(crate) mod read;

use std::cell::RefCell;
use std::rc::Rc;

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::core::{Answers, ForeignTool, Keep, ModelEvent, Protocol, ReadError};
use crate::domain::call::Scheduling;
use crate::domain::call::ToolResult;
use crate::domain::tool::{GeminiDeclaration, SharedTool};

/// The header that carries the API key (as the official SDKs send it).
pub(crate) const API_KEY_HEADER: &str = "x-goog-api-key";

/// The latest handle a session can be resumed from, shared between its actor (which keeps it)
/// and its adapter (which puts it in every setup).
pub(crate) type Resumption = Rc<RefCell<Option<String>>>;

/// The adapter.
#[derive(Debug, Clone)]
pub(crate) struct Gemini {
    handle: Resumption,
}

impl Gemini {
    /// An adapter whose setups resume the session of the handle in `handle`, when it holds one.
    pub(crate) fn new(handle: Resumption) -> Self {
        Self { handle }
    }
}

impl Protocol for Gemini {
    fn read(&self, text: &str) -> Result<ModelEvent, ReadError> {
        read::server_message(text)
    }

    fn tool_update(&self, tools: &[SharedTool], keep: Keep<'_>, _event_id: &str) -> String {
        setup_text(tools, keep, self.handle.borrow().as_deref())
    }

    fn answers(&self) -> Answers {
        Answers::TogetherPerTurn
    }

    fn call_output(&self, result: &ToolResult, event_id: &str) -> String {
        self.call_outputs(std::slice::from_ref(result), event_id)
    }

    fn call_outputs(&self, results: &[ToolResult], _event_id: &str) -> String {
        let message = ToolResponseMessage {
            tool_response: FunctionResponses {
                function_responses: results.iter().map(FunctionResponse::new).collect(),
            },
        };
        serde_json::to_string(&message).expect("a tool response serialises")
    }

    fn takes_images(&self) -> bool {
        true
    }

    fn images(&self, result: &ToolResult, _event_id: &str) -> String {
        let mut parts = Vec::with_capacity(result.images.len() * 2);
        for image in &result.images {
            parts.push(json!({"text": result.image_caption(image)}));
            parts.push(json!({"inlineData": {"mimeType": image.mime, "data": image.data_b64}}));
        }
        json!({"clientContent": {"turns": [{"role": "user", "parts": parts}], "turnComplete": true}})
            .to_string()
    }

    fn images_not_taken(&self, dropped: usize) -> String {
        format!("{dropped} image(s) not shown: this model session takes no images")
    }

    fn continue_turn(&self, _event_id: &str) -> Option<String> {
        None
    }

    fn tools_need_new_connection(&self) -> bool {
        true
    }

    fn answers_running_calls(&self) -> bool {
        false
    }

    fn schedules_itself(&self) -> bool {
        true
    }

    fn late_result(&self, result: &ToolResult, _event_id: &str) -> String {
        let message = ToolResponseMessage {
            tool_response: FunctionResponses {
                function_responses: vec![FunctionResponse::late(result)],
            },
        };
        serde_json::to_string(&message).expect("a tool response serialises")
    }

    fn note(&self, text: &str, respond: bool, _event_id: &str) -> String {
        json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": text}]}], "turnComplete": respond}})
            .to_string()
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolResponseMessage<'a> {
    tool_response: FunctionResponses<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FunctionResponses<'a> {
    function_responses: Vec<FunctionResponse<'a>>,
}

/// One `functionResponses` entry: the output as the response when it is a JSON object (its
/// exact text), any other output as `{"result": output}`, a tool error as `{"error": text}`.
#[derive(Serialize)]
struct FunctionResponse<'a> {
    id: &'a str,
    name: &'a str,
    response: Response<'a>,
    /// A non-blocking call's answer: when the model speaks of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduling: Option<&'static str>,
}

impl<'a> FunctionResponse<'a> {
    fn new(result: &'a ToolResult) -> Self {
        let response = match &result.error {
            Some(error) => Response::Error(error),
            None if result.output.get().trim_start().starts_with('{') => {
                Response::Object(&result.output)
            }
            None => Response::Result(&result.output),
        };
        Self {
            // The model's own id: its answer is matched to its call by it.
            id: result.model_call_id(),
            name: &result.name,
            response,
            scheduling: None,
        }
    }

    /// The answer of a non-blocking call, with its scheduling in Gemini's words.
    fn late(result: &'a ToolResult) -> Self {
        let scheduling = match result.scheduling {
            Scheduling::WhenIdle => "WHEN_IDLE",
            Scheduling::Silent => "SILENT",
            Scheduling::Interrupt => "INTERRUPT",
        };
        Self {
            scheduling: Some(scheduling),
            ..Self::new(result)
        }
    }
}

enum Response<'a> {
    Object(&'a RawValue),
    Result(&'a RawValue),
    Error(&'a str),
}

impl Serialize for Response<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Response::Object(output) => output.serialize(serializer),
            Response::Result(output) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("result", output)?;
                map.end()
            }
            Response::Error(error) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("error", error)?;
                map.end()
            }
        }
    }
}

/// The `setup` message: the session's settings as kept (the app's own, or the configured model),
/// its other tools (e.g. Google Search) as written, one `functionDeclarations` entry with its own
/// declarations (first, as written) and the registered tools, and `sessionResumption` (asked for
/// on every connection, so a later tool list can resume the session).
pub(crate) fn setup_text(tools: &[SharedTool], keep: Keep<'_>, handle: Option<&str>) -> String {
    let empty = Map::new();
    let message = SetupMessage {
        setup: Setup {
            handle,
            settings: keep.settings.unwrap_or(&empty),
            declarations: Declarations {
                own: keep.tools,
                tools,
            },
        },
    };
    serde_json::to_string(&message).expect("a setup serialises")
}

#[derive(Serialize)]
struct SetupMessage<'a> {
    setup: Setup<'a>,
}

struct Setup<'a> {
    /// The handle of the session this connection resumes.
    handle: Option<&'a str>,
    settings: &'a Map<String, Value>,
    declarations: Declarations<'a>,
}

impl Serialize for Setup<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut setup = serializer.serialize_map(None)?;
        for (key, value) in self.settings {
            if key != "tools" && key != "sessionResumption" {
                setup.serialize_entry(key, value)?;
            }
        }
        let other_tools = self
            .settings
            .get("tools")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        let any_declaration = !self.declarations.is_empty();
        if any_declaration || !other_tools.is_empty() {
            setup.serialize_entry(
                "tools",
                &ToolEntries {
                    other: other_tools,
                    declarations: any_declaration.then_some(&self.declarations),
                },
            )?;
        }
        let mut resumption = match self.settings.get("sessionResumption") {
            Some(Value::Object(resumption)) => resumption.clone(),
            _ => Map::new(),
        };
        // The session's latest handle; before the first, an app's own (it resumes its session).
        if let Some(handle) = self.handle {
            resumption.insert("handle".into(), handle.into());
        }
        setup.serialize_entry("sessionResumption", &resumption)?;
        setup.end()
    }
}

/// `setup.tools`: the session's other tools as written, then one entry of function
/// declarations.
struct ToolEntries<'a> {
    other: &'a [Value],
    declarations: Option<&'a Declarations<'a>>,
}

impl Serialize for ToolEntries<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut list = serializer.serialize_seq(None)?;
        for entry in self.other {
            list.serialize_element(entry)?;
        }
        if let Some(declarations) = self.declarations {
            list.serialize_element(&DeclarationEntry {
                function_declarations: declarations,
            })?;
        }
        list.end()
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DeclarationEntry<'a> {
    function_declarations: &'a Declarations<'a>,
}

/// A `functionDeclarations` list: the session's own, then the registered tools.
#[derive(Clone, Copy)]
struct Declarations<'a> {
    own: &'a [ForeignTool],
    tools: &'a [SharedTool],
}

impl Declarations<'_> {
    fn is_empty(&self) -> bool {
        self.own.is_empty() && self.tools.is_empty()
    }
}

impl Serialize for Declarations<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut list = serializer.serialize_seq(Some(self.own.len() + self.tools.len()))?;
        for tool in self.own {
            list.serialize_element(&tool.json)?;
        }
        for tool in self.tools {
            list.serialize_element(&GeminiDeclaration::new(tool))?;
        }
        list.end()
    }
}

#[cfg(test)]
mod tests;
