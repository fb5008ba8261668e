//! Plain conversions between an MCP server's tools and this server's: an MCP tool as a
//! [`ToolSpec`] (or why it cannot be one), and a `tools/call` result as the call's outcome.

use rmcp::model::{CallToolResult, ContentBlock, Tool};
use serde_json::{Value, json};

use crate::domain::approval::{Approval, McpApproval};
use crate::domain::arguments::Parameters;
use crate::domain::call::{LocalToolHandler, ToolOutcome};
use crate::domain::limits::CallLimits;
use crate::domain::peer_text;
use crate::domain::tool::{Behavior, ToolSpec};

/// Longest tool name this server accepts (the name rule of a registration).
pub(crate) const MAX_TOOL_NAME_CHARS: usize = 64;

/// What the model sees of an MCP tool (its schema checked and compiled), compared to tell
/// whether a new listing changed anything.
#[derive(Clone)]
pub(crate) struct Definition {
    pub name: String,
    pub description: String,
    pub parameters: Parameters,
    /// Its `readOnlyHint` annotation, if it has one (the server's word: used only to ask for
    /// approval more often, never less).
    pub read_only: Option<bool>,
}

impl PartialEq for Definition {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.description == other.description
            && self.parameters.schema() == other.parameters.schema()
            && self.read_only == other.read_only
    }
}

impl std::fmt::Debug for Definition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Definition")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("parameters", self.parameters.schema())
            .finish()
    }
}

/// A tool of the listing that could not be registered, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Skipped {
    pub name: String,
    pub reason: String,
}

/// The model-facing definition of an MCP tool, or why it cannot be one: a name that breaks this
/// server's name rule, or an `inputSchema` a registration would refuse.
pub(crate) fn definition(tool: &Tool) -> Result<Definition, Skipped> {
    let name = tool.name.to_string();
    let chars = name.chars().count();
    let problem = if chars == 0 {
        Some("the name is empty".to_owned())
    } else if chars > MAX_TOOL_NAME_CHARS {
        Some(format!(
            "the name is longer than {MAX_TOOL_NAME_CHARS} characters"
        ))
    } else if name.chars().any(char::is_control) {
        Some("the name contains control characters".to_owned())
    } else if crate::domain::budget::is_reserved_name(&name) {
        Some(format!("the name is the server's own tool's ({name})"))
    } else {
        None
    };
    if let Some(reason) = problem {
        return Err(Skipped { name, reason });
    }
    let parameters = match Parameters::new((*tool.input_schema).clone()) {
        Ok(parameters) => parameters,
        Err(e) => {
            let reason = format!("its inputSchema cannot be used: {e}");
            return Err(Skipped { name, reason });
        }
    };
    Ok(Definition {
        name,
        description: tool.description.as_deref().unwrap_or_default().to_owned(),
        parameters,
        read_only: tool.annotations.as_ref().and_then(|a| a.read_only_hint),
    })
}

/// The tool a definition becomes, run by `handler`, registered as `source` with the server's
/// `behavior`, `approval` policy and limits (each tool its own: `max_concurrent` and `rate`
/// bound each of the server's tools, not the server).
pub(crate) fn tool_spec(
    definition: &Definition,
    source: &str,
    handler: LocalToolHandler,
    (behavior, approval, limits): (Behavior, McpApproval, CallLimits),
) -> ToolSpec {
    ToolSpec::local(
        definition.name.clone(),
        definition.description.clone(),
        definition.parameters.clone(),
        source,
        handler,
    )
    .with_behavior(behavior)
    .with_approval(Approval {
        required: approval.requires(definition.read_only),
        ..Approval::default()
    })
    .with_limits(limits)
}

/// A `tools/call` result as the call's outcome: `isError` is an error with the content's text;
/// otherwise `structuredContent` is the output when there is one, else the content as text.
/// Images go to the image channel (the in-process envelope `{"output", "images"}`), where they
/// are checked and delivered like a callback's; anything else but text is described in words.
pub(crate) fn outcome(result: CallToolResult) -> ToolOutcome {
    let (images, rest): (Vec<&ContentBlock>, Vec<&ContentBlock>) = result
        .content
        .iter()
        .partition(|block| matches!(block, ContentBlock::Image(_)));
    let text = rest
        .into_iter()
        .map(describe)
        .collect::<Vec<_>>()
        .join("\n");
    if result.is_error == Some(true) {
        return Err(if text.is_empty() {
            "MCP tool reported an error without a message".to_owned()
        } else {
            peer_text::bounded(text)
        });
    }
    let output = match result.structured_content {
        Some(structured) => structured,
        None => Value::String(text),
    };
    if images.is_empty() {
        return Ok(output);
    }
    let images: Vec<Value> = images
        .into_iter()
        .filter_map(|block| match block {
            ContentBlock::Image(image) => {
                Some(json!({"data_b64": image.data, "mime": image.mime_type}))
            }
            _ => None,
        })
        .collect();
    Ok(json!({"output": output, "images": images}))
}

fn describe(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Image(image) => format!(
            "[image: {}, {} bytes of base64]",
            image.mime_type,
            image.data.len()
        ),
        ContentBlock::Audio(audio) => format!(
            "[audio: {}, {} bytes of base64]",
            audio.mime_type,
            audio.data.len()
        ),
        ContentBlock::Resource(resource) => {
            format!(
                "[resource: {}]",
                serde_json::to_string(&resource.resource).unwrap_or_default()
            )
        }
        ContentBlock::ResourceLink(link) => format!("[resource link: {}]", link.uri),
        other => format!(
            "[content: {}]",
            serde_json::to_string(other).unwrap_or_default()
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn tool(name: &str) -> Tool {
        let schema = json!({"type": "object", "properties": {"tz": {"type": "string"}}});
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        Tool::new(name.to_owned(), "Tell the time.", Arc::new(schema))
    }

    #[test]
    fn definitions_follow_the_name_rule() {
        let ok = definition(&tool("get_current_time")).unwrap();
        assert_eq!(ok.description, "Tell the time.");
        assert_eq!(
            Value::Object(ok.parameters.schema().clone()),
            json!({"type": "object", "properties": {"tz": {"type": "string"}}})
        );
        let long = "x".repeat(65);
        assert_eq!(
            definition(&tool(&long)).unwrap_err().reason,
            "the name is longer than 64 characters"
        );
        assert!(
            definition(&tool(&"é".repeat(64))).is_ok(),
            "characters, not bytes"
        );
        assert_eq!(
            definition(&tool("a\u{7}")).unwrap_err().reason,
            "the name contains control characters"
        );
    }

    #[test]
    fn a_schema_a_registration_would_refuse_is_skipped() {
        let Value::Object(schema) = json!({"type": "string"}) else {
            unreachable!()
        };
        let odd = Tool::new("odd".to_owned(), "Takes a string.", Arc::new(schema));
        let skipped = definition(&odd).unwrap_err();
        assert_eq!(skipped.name, "odd");
        assert!(
            skipped.reason.starts_with(
                "its inputSchema cannot be used: parameters must describe a JSON object"
            ),
            "{}",
            skipped.reason
        );
    }

    #[test]
    fn results_map_to_outcomes() {
        let text = CallToolResult::success(vec![ContentBlock::text("12:00")]);
        assert_eq!(outcome(text), Ok(json!("12:00")));

        let mut structured = CallToolResult::success(vec![ContentBlock::text("{\"a\":1}")]);
        structured.structured_content = Some(json!({"a": 1}));
        assert_eq!(outcome(structured), Ok(json!({"a": 1})));

        let failed = CallToolResult::error(vec![ContentBlock::text("bad timezone")]);
        assert_eq!(outcome(failed), Err("bad timezone".to_owned()));
        assert_eq!(
            outcome(CallToolResult::error(vec![])),
            Err("MCP tool reported an error without a message".to_owned())
        );
        // A server's error text is cut like every peer's.
        let long = CallToolResult::error(vec![ContentBlock::text("w".repeat(4 << 20))]);
        let error = outcome(long).unwrap_err();
        assert!(error.len() <= peer_text::MAX_PEER_TEXT_BYTES);
        assert!(error.ends_with("… (cut: 4194304 bytes in all)"));

        let image = CallToolResult::success(vec![
            ContentBlock::text("here:"),
            ContentBlock::image("aGVsbG8=", "image/png"),
        ]);
        assert_eq!(
            outcome(image),
            Ok(
                json!({"output": "here:", "images": [{"data_b64": "aGVsbG8=", "mime": "image/png"}]})
            )
        );
    }
}
