//! An app's `setup`, behind the Gemini relay: its own function declarations (kept as written,
//! first in every setup the server sends), its other tools (e.g. Google Search) and settings
//! (kept as written), and whether it asked for session resumption itself (then its resumption
//! updates reach it).

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::session::core::ForeignTool;

/// The setup of an app, read.
#[derive(Debug)]
pub(crate) struct AppSetup {
    /// Its own function declarations, in order.
    pub own: Vec<ForeignTool>,
    /// Everything else of its setup: tools that are not function declarations under `tools`,
    /// its resumption settings under `sessionResumption`.
    pub settings: Map<String, Value>,
    /// It asked for `sessionResumptionUpdate`s itself.
    pub resumes: bool,
}

/// The app's first message as a setup (`setup`, the API's and the SDKs' key), or `None` when
/// it is not one.
pub(crate) fn app_setup(text: &str) -> Option<AppSetup> {
    let Value::Object(mut message) = serde_json::from_str::<Value>(text).ok()? else {
        return None;
    };
    let Some(Value::Object(mut setup)) = message.remove("setup") else {
        return None;
    };
    let resumption = setup
        .remove("sessionResumption")
        .or_else(|| setup.remove("session_resumption"));
    let resumes = resumption.as_ref().is_some_and(Value::is_object);
    let mut own = Vec::new();
    let mut other_tools = Vec::new();
    if let Some(Value::Array(tools)) = setup.remove("tools") {
        for mut tool in tools {
            let declarations = tool.as_object_mut().and_then(|t| {
                t.remove("functionDeclarations")
                    .or_else(|| t.remove("function_declarations"))
            });
            if let Some(Value::Array(declarations)) = declarations {
                for declaration in declarations {
                    let name = declaration["name"].as_str().unwrap_or_default().to_owned();
                    let json = RawValue::from_string(declaration.to_string())
                        .expect("a JSON value is JSON text");
                    own.push(ForeignTool { name, json });
                }
            }
            // What is left of the entry (another kind of tool), unless nothing is.
            if tool.as_object().is_none_or(|t| !t.is_empty()) {
                other_tools.push(tool);
            }
        }
    }
    if !other_tools.is_empty() {
        setup.insert("tools".into(), Value::Array(other_tools));
    }
    if let Some(resumption) = resumption.filter(Value::is_object) {
        setup.insert("sessionResumption".into(), resumption);
    }
    Some(AppSetup {
        own,
        settings: setup,
        resumes,
    })
}
