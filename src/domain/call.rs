//! Tool calls and their results: the arguments rule, the callback-response mapping and the text
//! the model receives. Plain functions; the dispatcher and the sessions use them.

use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::Serialize;
use serde_json::{Map, Value};

/// How many characters of an HTTP error body a tool error quotes.
pub const ERROR_BODY_QUOTE_CHARS: usize = 200;

/// One call of a tool, as the model (or the invoke route) made it. Serialised, it is the body
/// POSTed to a remote tool's callback, fields in the spec's order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    pub name: String,
    /// The arguments as a JSON object (see [`parse_arguments`]).
    pub arguments: Map<String, Value>,
    pub call_id: String,
    /// The exact argument text the model produced.
    pub raw_arguments: String,
}

/// What became of a call: always a value the model can be shown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResult {
    pub call_id: String,
    pub name: String,
    pub output: Value,
    pub is_error: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The outcome of running a tool, before it is tied to its call.
pub type ToolOutcome = Result<Value, String>;

/// An in-process tool's handler. Implemented for actor recipients in `local_tool`, so in-process
/// plugins write an actor; kept as a trait here so the domain does not depend on the actor system.
pub trait LocalHandler: Send + Sync {
    fn call(&self, call: ToolCall) -> BoxFuture<'static, ToolOutcome>;

    /// The longest a call may take, when the handler bounds its calls itself (an MCP server's
    /// tool does); listings show it.
    fn timeout(&self) -> Option<std::time::Duration> {
        None
    }
}

/// A shared handle on an in-process tool's handler.
#[derive(Clone)]
pub struct LocalToolHandler(pub Arc<dyn LocalHandler>);

impl fmt::Debug for LocalToolHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LocalToolHandler")
    }
}

impl ToolCall {
    /// A call from the model's argument text, parsed as [`parse_arguments`] says.
    pub fn from_raw(call_id: String, name: String, raw_arguments: String) -> Self {
        Self {
            arguments: parse_arguments(&raw_arguments),
            call_id,
            name,
            raw_arguments,
        }
    }

    /// A call from already-parsed arguments; `raw_arguments` is their JSON text.
    pub fn from_arguments(call_id: String, name: String, arguments: Map<String, Value>) -> Self {
        // Serialising a map of JSON values cannot fail.
        let raw_arguments = serde_json::to_string(&arguments).unwrap_or_default();
        Self {
            call_id,
            name,
            arguments,
            raw_arguments,
        }
    }

    /// Ties an outcome to this call.
    pub fn result(&self, outcome: ToolOutcome) -> ToolResult {
        let (output, error) = match outcome {
            Ok(output) => (output, None),
            Err(error) => (Value::Null, Some(error)),
        };
        ToolResult {
            call_id: self.call_id.clone(),
            name: self.name.clone(),
            is_error: error.is_some(),
            output,
            error,
        }
    }
}

impl ToolResult {
    /// The text the model receives: the JSON text of the output, or for an error a JSON object
    /// text carrying the error, so the model always learns what went wrong.
    pub fn model_text(&self) -> String {
        match &self.error {
            Some(error) => serde_json::json!({"error": error, "is_error": true}).to_string(),
            None => self.output.to_string(),
        }
    }
}

/// The model's argument text as a JSON object: empty text is `{}`, a JSON value that is not an
/// object is `{"value": it}`, and text that is not JSON is `{"_raw": text}`.
pub fn parse_arguments(raw: &str) -> Map<String, Value> {
    if raw.trim().is_empty() {
        return Map::new();
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(map)) => map,
        Ok(other) => Map::from_iter([("value".to_owned(), other)]),
        Err(_) => Map::from_iter([("_raw".to_owned(), Value::String(raw.to_owned()))]),
    }
}

/// Maps a completed callback exchange to the tool's outcome.
pub fn map_callback_response(status: u16, body: &[u8]) -> ToolOutcome {
    if (300..400).contains(&status) {
        return Err(format!(
            "remote tool callback answered with a redirect (HTTP {status}); redirects are not followed"
        ));
    }
    if status >= 400 {
        let text = String::from_utf8_lossy(body);
        let quoted: String = text.chars().take(ERROR_BODY_QUOTE_CHARS).collect();
        return Err(format!(
            "remote tool callback returned HTTP {status}: {quoted}"
        ));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut object))
            if object.contains_key("output") || object.contains_key("is_error") =>
        {
            if object.get("is_error").is_some_and(is_truthy) {
                Err(error_text(object.remove("error")))
            } else {
                Ok(object.remove("output").unwrap_or(Value::Null))
            }
        }
        Ok(value) => Ok(value),
        Err(_) => Ok(Value::String(String::from_utf8_lossy(body).into_owned())),
    }
}

/// Python truthiness, which plugins written for the reference server rely on.
fn is_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn error_text(error: Option<Value>) -> String {
    match error {
        Some(Value::String(text)) if !text.is_empty() => text,
        None | Some(Value::Null) | Some(Value::String(_)) => {
            "remote tool reported an error without a message".to_owned()
        }
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn arguments_rule() {
        assert_eq!(parse_arguments(""), Map::new());
        assert_eq!(parse_arguments("  "), Map::new());
        assert_eq!(
            Value::Object(parse_arguments(r#"{"a":1}"#)),
            json!({"a": 1})
        );
        assert_eq!(
            Value::Object(parse_arguments("[1,2]")),
            json!({"value": [1, 2]})
        );
        assert_eq!(Value::Object(parse_arguments("7")), json!({"value": 7}));
        assert_eq!(
            Value::Object(parse_arguments("{oops")),
            json!({"_raw": "{oops"})
        );
    }

    #[test]
    fn success_output() {
        let body = br#"{"output": {"temperature_c": 28}, "is_error": false}"#;
        assert_eq!(
            map_callback_response(200, body),
            Ok(json!({"temperature_c": 28}))
        );
        assert_eq!(
            map_callback_response(200, br#"{"output": null}"#),
            Ok(Value::Null)
        );
    }

    #[test]
    fn tool_level_error() {
        let body = br#"{"error": "location not found", "is_error": true}"#;
        assert_eq!(
            map_callback_response(200, body),
            Err("location not found".to_owned())
        );
    }

    #[test]
    fn business_dict_is_output_as_a_whole() {
        let body = br#"{"error": "x", "temp": 3}"#;
        assert_eq!(
            map_callback_response(200, body),
            Ok(json!({"error": "x", "temp": 3}))
        );
    }

    #[test]
    fn non_object_json_and_text() {
        assert_eq!(map_callback_response(200, b"[1,2]"), Ok(json!([1, 2])));
        assert_eq!(map_callback_response(200, b"\"hi\""), Ok(json!("hi")));
        assert_eq!(
            map_callback_response(200, b"plain text"),
            Ok(json!("plain text"))
        );
    }

    #[test]
    fn http_errors_quote_200_characters() {
        let body = "é".repeat(300);
        let Err(text) = map_callback_response(503, body.as_bytes()) else {
            panic!("503 must be an error")
        };
        assert_eq!(
            text,
            format!(
                "remote tool callback returned HTTP 503: {}",
                "é".repeat(200)
            )
        );
    }

    #[test]
    fn redirects_are_errors() {
        let Err(text) = map_callback_response(302, b"") else {
            panic!("302 must be an error")
        };
        assert!(text.contains("redirect"), "{text}");
    }

    #[test]
    fn model_text_carries_the_error() {
        let call = ToolCall::from_raw("c1".into(), "t".into(), "{}".into());
        let result = call.result(Err("location not found".into()));
        assert_eq!(
            serde_json::from_str::<Value>(&result.model_text()).unwrap(),
            json!({"error": "location not found", "is_error": true})
        );
        let ok = call.result(Ok(json!({"t": 1})));
        assert_eq!(ok.model_text(), r#"{"t":1}"#);
    }

    #[test]
    fn from_arguments_keeps_raw_text_in_step() {
        let mut args = Map::new();
        args.insert("city".into(), json!("Tokyo"));
        let call = ToolCall::from_arguments("c".into(), "t".into(), args.clone());
        assert_eq!(call.raw_arguments, r#"{"city":"Tokyo"}"#);
        assert_eq!(call.arguments, args);
    }
}
