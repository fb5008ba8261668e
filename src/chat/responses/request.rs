//! The Responses API's request (`POST /v1/responses`), kept as the app wrote it: only what the
//! loop needs is read, and each round's body is the app's fields in the app's order with the
//! round's `input`, `previous_response_id`, `tools` and `model` written in. No I/O.

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::chat::wire::{
    AppRequest, Raw, RequestError, ToolFields, ToolShape, flag, optional_string, request_items,
};
use crate::domain::tool::SharedTool;

/// An app's `POST /v1/responses` body.
#[derive(Debug)]
pub(crate) struct ResponsesRequest {
    app: AppRequest,
    /// The input items, each as written (a text input as one user message).
    pub input: Vec<Raw>,
    /// The upstream stores the responses (the app did not say `"store": false`): rounds chain
    /// by `previous_response_id`.
    pub store: bool,
    /// The response the app continues from.
    pub previous_response_id: Option<String>,
}

impl ResponsesRequest {
    pub(crate) fn parse(body: &[u8]) -> Result<Self, RequestError> {
        let app = AppRequest::read(body)?;
        let input = match app.fields.get("input").map(|raw| raw.get()) {
            None | Some("null") => Vec::new(),
            Some(text) => match serde_json::from_str::<String>(text) {
                Ok(words) => vec![
                    serde_json::value::to_raw_value(
                        &serde_json::json!({"role": "user", "content": words}),
                    )
                    .expect("a message serialises"),
                ],
                Err(_) => request_items(text, "input")?.ok_or_else(|| {
                    RequestError::new("input", "input must be a string or an array of input items")
                })?,
            },
        };
        let store = flag(&app.fields, "store", true)?;
        let previous_response_id = optional_string(&app.fields, "previous_response_id")?;
        Ok(Self {
            app,
            input,
            store,
            previous_response_id,
        })
    }

    pub(crate) fn stream(&self) -> bool {
        self.app.stream
    }

    pub(crate) fn model(&self) -> Option<&str> {
        self.app.model.as_deref()
    }

    pub(crate) fn app_tools(&self) -> &[crate::session::core::ForeignTool] {
        &self.app.app_tools
    }

    /// Whether the app declared a tool of this name (its calls are the app's to answer).
    pub(crate) fn is_app_tool(&self, name: &str) -> bool {
        self.app.app_tools.iter().any(|t| t.name == name)
    }

    /// The body of one round's upstream request: the app's fields in the app's order, with
    /// `input` and `previous_response_id` the round's, `tools` the app's then `registered`
    /// (or, when `with_tools` is false, no `tools`, `tool_choice` or `parallel_tool_calls` at
    /// all), and `model` the default when the app named none.
    pub(crate) fn upstream_body(
        &self,
        input: &[&[Raw]],
        previous: Option<&str>,
        registered: &[SharedTool],
        with_tools: bool,
        default_model: Option<&str>,
    ) -> Vec<u8> {
        let body = RoundBody {
            request: self,
            input: Input(input),
            previous,
            tools: ToolFields {
                app: &self.app.app_tools,
                registered,
                shape: ToolShape::FlatLoose,
                with_tools,
                model: self.app.model.as_deref(),
                default_model,
            },
        };
        // Strings and JSON text kept as written: serialising cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

/// A round's input: parts (the app's input, the rounds so far), written as one array.
struct Input<'a>(&'a [&'a [Raw]]);

impl Serialize for Input<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().flat_map(|part| part.iter()))
    }
}

struct RoundBody<'a> {
    request: &'a ResponsesRequest,
    input: Input<'a>,
    previous: Option<&'a str>,
    tools: ToolFields<'a>,
}

impl Serialize for RoundBody<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let fields = &self.request.app.fields;
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in fields {
            if self.tools.field(key, value, &mut map)? {
                continue;
            }
            match (key.as_str(), self.previous) {
                ("input", _) => map.serialize_entry(key, &self.input)?,
                ("previous_response_id", Some(previous)) => map.serialize_entry(key, previous)?,
                _ => map.serialize_entry(key, value)?,
            }
        }
        self.tools.added(fields, &mut map)?;
        if !fields.contains_key("input") {
            map.serialize_entry("input", &self.input)?;
        }
        if let (false, Some(previous)) =
            (fields.contains_key("previous_response_id"), self.previous)
        {
            map.serialize_entry("previous_response_id", previous)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {

    use serde_json::{Value, json};

    use super::*;

    fn tool(name: &str) -> SharedTool {
        crate::domain::tool::test_tool(name, "Get weather.")
    }

    #[test]
    fn a_round_keeps_the_apps_fields_and_writes_its_own() {
        let request = ResponsesRequest::parse(
            br#"{"model":"m","instructions":"Be brief.","input":"hi","store":false,
                 "tools":[{"type":"function","name":"app_clock","parameters":{},"strict":true}],
                 "tool_choice":"auto","include":["reasoning.encrypted_content"],"seed":123456789012345678901234567890}"#,
        )
        .unwrap();
        assert!(!request.store && !request.stream());
        assert_eq!(request.app_tools()[0].name, "app_clock");
        let outputs = [
            serde_json::value::to_raw_value(&json!({"type": "function_call_output",
            "call_id": "c1", "output": "1"}))
            .unwrap(),
        ];
        let text = String::from_utf8(request.upstream_body(
            &[&request.input, &outputs],
            Some("resp_1"),
            &[tool("w")],
            true,
            None,
        ))
        .unwrap();
        assert_eq!(
            text,
            r#"{"model":"m","instructions":"Be brief.","input":[{"role":"user","content":"hi"},{"type":"function_call_output","call_id":"c1","output":"1"}],"store":false,"tools":[{"type":"function","name":"app_clock","parameters":{},"strict":true},{"type":"function","name":"w","description":"Get weather.","parameters":{"type":"object","properties":{}},"strict":false}],"tool_choice":"auto","include":["reasoning.encrypted_content"],"seed":123456789012345678901234567890,"previous_response_id":"resp_1"}"#
        );
        let bare: Value = serde_json::from_slice(&request.upstream_body(
            &[&request.input],
            None,
            &[tool("w")],
            false,
            Some("dflt"),
        ))
        .unwrap();
        assert_eq!((bare.get("tools"), bare.get("tool_choice")), (None, None));
        assert_eq!(bare.get("previous_response_id"), None);
        assert_eq!(bare["model"], "m");
    }

    #[test]
    fn bad_requests_name_the_field() {
        let error = |text: &str| ResponsesRequest::parse(text.as_bytes()).unwrap_err();
        assert_eq!(error("[]").param, None);
        assert_eq!(error(r#"{"input":{}}"#).param, Some("input"));
        assert_eq!(error(r#"{"input":[],"tools":{}}"#).param, Some("tools"));
        assert_eq!(error(r#"{"store":"no"}"#).param, Some("store"));
        assert_eq!(
            error(r#"{"previous_response_id":7}"#).param,
            Some("previous_response_id")
        );
        let plain = ResponsesRequest::parse(br#"{"previous_response_id":"resp_9"}"#).unwrap();
        assert!(plain.store && plain.input.is_empty());
        assert_eq!(plain.previous_response_id.as_deref(), Some("resp_9"));
    }
}
