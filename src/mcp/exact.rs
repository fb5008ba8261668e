//! The exact text of a `tools/call`'s `arguments`, read from the client's JSON-RPC message before
//! the SDK parses it. rmcp parses arguments into `serde_json` values, which rounds numbers beyond
//! an `f64`; a tool gets its arguments exactly as the client wrote them, as it gets the model's.
//!
//! Both servers of a character's tools use it: `runtime-tools mcp` ([`super::serve`]) keeps the
//! text of each call read from stdin by request id, and `/mcp` ([`super::http_serve`]) carries the
//! text of the one message a `POST` holds to its handler as a request extension
//! ([`CallArguments`]). Either way, the text is used only when it is the text of what the SDK
//! parsed.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::domain::call::JsonText;

/// The argument text of the `tools/call` a `POST /mcp` carries: put in the request's extensions
/// by the route, read by the session's `call_tool`.
#[derive(Debug, Clone)]
pub(crate) struct CallArguments(pub JsonText);

/// One JSON-RPC message, read only as far as a `tools/call` needs.
#[derive(Deserialize)]
struct Incoming<'a> {
    id: Option<Value>,
    #[serde(borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow)]
    params: Option<IncomingParams<'a>>,
}

#[derive(Deserialize)]
struct IncomingParams<'a> {
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}

/// The request id and the exact argument text of `message`, when it is a `tools/call` request
/// whose arguments are an object.
pub(crate) fn tools_call_arguments(message: &RawValue) -> Option<(Value, JsonText)> {
    let incoming = serde_json::from_str::<Incoming<'_>>(message.get()).ok()?;
    if incoming.method.as_deref() != Some("tools/call") {
        return None;
    }
    let arguments = incoming.params?.arguments?;
    if !arguments.get().trim_start().starts_with('{') {
        return None;
    }
    Some((incoming.id?, arguments.to_owned()))
}

/// `text` when it is the text of `parsed` (what the SDK made of the same message): text read
/// differently is never used.
pub(crate) fn if_parsed_as(text: JsonText, parsed: &Map<String, Value>) -> Option<JsonText> {
    let same = serde_json::from_str::<Map<String, Value>>(text.get()).ok()? == *parsed;
    same.then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> &RawValue {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn only_a_calls_object_arguments_are_read_exactly() {
        let big = r#"{"n": 123456789012345678901234567890}"#;
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{{"name":"t","arguments":{big}}}}}"#
        );
        let (id, text) = tools_call_arguments(raw(&call)).unwrap();
        assert_eq!((id, text.get()), (Value::from("c1"), big));
        for other in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":[1]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#,
            r#"[1, 2]"#,
        ] {
            assert!(tools_call_arguments(raw(other)).is_none(), "{other}");
        }
    }

    #[test]
    fn text_is_used_only_for_what_the_sdk_parsed() {
        let text = raw(r#"{"x": 1}"#).to_owned();
        let same: Map<String, Value> = serde_json::from_str(r#"{"x":1}"#).unwrap();
        let other: Map<String, Value> = serde_json::from_str(r#"{"x":2}"#).unwrap();
        assert_eq!(
            if_parsed_as(text.clone(), &same).unwrap().get(),
            r#"{"x": 1}"#
        );
        assert!(if_parsed_as(text, &other).is_none());
    }
}
