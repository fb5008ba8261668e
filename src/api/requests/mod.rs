//! Request bodies, checked field by field into domain types.
//!
//! serde stops at the first error, but a 422 must name every failing field, so each body is read
//! from a JSON object by hand: every field is checked and every failure collected. Unknown fields
//! are ignored. Plain code with no actor or HTTP types, tested by ordinary unit tests.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::error::FieldError;
use crate::domain::arguments::{Parameters, SchemaError};
use crate::domain::call::JsonText;
use crate::domain::call_url::{ACCEPTED_CALL_URLS, CallUrl, CallUrlError};
use crate::domain::callback_url::{ACCEPTED_FORMS, CallbackUrl, CallbackUrlError};
use crate::domain::peer_id::MAX_CALL_ID_BYTES;
use crate::domain::tool::{
    Behavior, DEFAULT_SOURCE, DEFAULT_TIMEOUT, MAX_TIMEOUT, ToolSpec, empty_parameters,
};
use crate::mcp::runtime::McpRegistration;
use crate::mcp::settings::MCP_SOURCE_PREFIX;

/// Longest tool name, in characters (the spec's rule; OpenAI's function names share it).
pub const MAX_NAME_CHARS: usize = 64;

/// Longest timeout a tool may ask for, in seconds ([`MAX_TIMEOUT`]).
pub(crate) const MAX_TIMEOUT_SECONDS: f64 = MAX_TIMEOUT.as_secs() as f64;

mod approval;
mod conversation;
mod limits;
mod names;

pub(crate) use approval::DecisionRequest;
pub(crate) use conversation::{ContextRequest, ProgressRequest};
pub use conversation::{MAX_CONTEXT_CHARS, MAX_PROGRESS_CHARS};

/// `POST /api/tools/register`.
#[derive(Debug)]
pub(crate) struct RegisterRequest {
    pub tool: ToolSpec,
    pub role: Option<String>,
}

/// `POST /api/tools/unregister`.
#[derive(Debug)]
pub(crate) struct UnregisterRequest {
    pub name: String,
    pub role: Option<String>,
}

/// `POST /api/tools/clear`.
#[derive(Debug)]
pub(crate) struct ClearRequest {
    pub source: String,
    pub role: Option<String>,
}

/// `POST /api/tools/invoke`.
#[derive(Debug)]
pub(crate) struct InvokeRequest {
    pub name: String,
    /// The arguments, parsed (for logic).
    pub arguments: Map<String, Value>,
    /// The arguments object exactly as the client wrote it: what the callback receives.
    pub arguments_text: JsonText,
    pub role: Option<String>,
    pub call_id: Option<String>,
}

/// `POST /api/sessions/attach`.
#[derive(Debug)]
pub(crate) struct AttachRequest {
    pub role: String,
    pub url: CallUrl,
    /// The name of the variable whose key to send, if any: the character's configuration
    /// decides whether it may be (the router checks it), never the request alone.
    pub api_key_env: Option<String>,
}

/// `POST /api/sessions/detach`.
#[derive(Debug)]
pub(crate) struct DetachRequest {
    pub role: String,
    pub url: String,
}

/// `POST /api/mcp/register`.
#[derive(Debug)]
pub(crate) struct McpRegisterRequest {
    pub server: McpRegistration,
}

/// `POST /api/mcp/unregister`.
#[derive(Debug)]
pub(crate) struct McpUnregisterRequest {
    pub name: String,
}

type Checked<T> = Result<T, Vec<FieldError>>;

impl RegisterRequest {
    /// `server` is the address this server listens on: a callback there would be the server
    /// calling itself.
    pub(crate) fn parse(mut body: Map<String, Value>, server: SocketAddr) -> Checked<Self> {
        // The schema becomes the tool's: moved out of the body, not copied.
        let schema = body.get_mut("parameters").map(Value::take);
        let mut f = Fields::new(&body);
        let name = f.new_tool_name("name");
        let description = f.string_or("description", "");
        let parameters = f.parameters("parameters", schema);
        let callback_url = f.callback_url("callback_url", server);
        let role = f.role();
        let source = f.non_empty_string_or("source", DEFAULT_SOURCE);
        let timeout = f.timeout("timeout_seconds");
        let behavior = f.behavior("behavior");
        let approval = f.approval();
        let limits = f.limits();
        f.finish()?;
        let (
            Some(name),
            Some(description),
            Some(parameters),
            Some(callback_url),
            Some(source),
            Some(timeout),
            Some(behavior),
        ) = (
            name,
            description,
            parameters,
            callback_url,
            source,
            timeout,
            behavior,
        )
        else {
            unreachable!("every field is present when no field failed")
        };
        Ok(Self {
            tool: ToolSpec::remote(name, description, parameters, source, callback_url, timeout)
                .with_behavior(behavior)
                .with_approval(approval.unwrap_or_default())
                .with_limits(limits.unwrap_or_default()),
            role,
        })
    }
}

impl UnregisterRequest {
    pub(crate) fn parse(body: &Map<String, Value>) -> Checked<Self> {
        let mut f = Fields::new(body);
        let name = f.name("name");
        let role = f.role();
        f.finish()?;
        Ok(Self {
            name: name.unwrap_or_default(),
            role,
        })
    }
}

impl ClearRequest {
    pub(crate) fn parse(body: &Map<String, Value>) -> Checked<Self> {
        let mut f = Fields::new(body);
        let source = f.required_non_empty_string("source");
        let role = f.role();
        f.finish()?;
        Ok(Self {
            source: source.unwrap_or_default(),
            role,
        })
    }
}

impl InvokeRequest {
    /// `text` is the body `body` was parsed from: the arguments are taken from it as written.
    pub(crate) fn parse(mut body: Map<String, Value>, text: &[u8]) -> Checked<Self> {
        let mut f = Fields::new(&body);
        let name = f.name("name");
        f.object("arguments");
        let role = f.role();
        let call_id = f.call_id("call_id");
        f.finish()?;
        // Checked above to be absent or an object; taken rather than copied.
        let arguments = match body.remove("arguments") {
            Some(Value::Object(arguments)) => arguments,
            _ => Map::new(),
        };
        Ok(Self {
            name: name.unwrap_or_default(),
            arguments_text: arguments_text(text, &arguments),
            arguments,
            role,
            call_id,
        })
    }
}

impl AttachRequest {
    pub(crate) fn parse(body: &Map<String, Value>) -> Checked<Self> {
        let mut f = Fields::new(body);
        let role = f.required_non_empty_string("role");
        let url = f.call_url("url");
        let api_key_env = f.nullable_string("api_key_env");
        f.finish()?;
        let (Some(url), Some(api_key_env)) = (url, api_key_env) else {
            unreachable!("every field is present when no field failed")
        };
        Ok(Self {
            role: role.unwrap_or_default(),
            url,
            api_key_env: api_key_env.filter(|n| !n.is_empty()),
        })
    }
}

impl DetachRequest {
    pub(crate) fn parse(body: &Map<String, Value>) -> Checked<Self> {
        let mut f = Fields::new(body);
        let role = f.required_non_empty_string("role");
        let url = f.required_non_empty_string("url");
        f.finish()?;
        Ok(Self {
            role: role.unwrap_or_default(),
            url: url.unwrap_or_default(),
        })
    }
}

impl McpRegisterRequest {
    /// `server` is the address this server listens on (an MCP server there would be this
    /// server itself); `configured` tells the names of the configured MCP servers, which a
    /// plugin's server may not take.
    pub(crate) fn parse(
        body: &Map<String, Value>,
        server: SocketAddr,
        configured: impl Fn(&str) -> bool,
    ) -> Checked<Self> {
        let mut f = Fields::new(body);
        let name = f.mcp_server_name("name", &configured);
        let url = f.mcp_url("url", server);
        let role = f.role();
        let source = match &name {
            Some(name) => f.non_empty_string_or("source", &format!("{MCP_SOURCE_PREFIX}{name}")),
            None => f.non_empty_string_or("source", MCP_SOURCE_PREFIX),
        };
        let timeout = f.timeout("timeout_seconds");
        let behavior = f.behavior("behavior");
        let approval = f.mcp_approval();
        let limits = f.limits();
        f.finish()?;
        let (Some(name), Some(url), Some(source), Some(timeout), Some(behavior)) =
            (name, url, source, timeout, behavior)
        else {
            unreachable!("every field is present when no field failed")
        };
        Ok(Self {
            server: McpRegistration {
                name,
                url,
                role,
                source,
                timeout,
                behavior,
                approval: approval.unwrap_or_default(),
                limits: limits.unwrap_or_default(),
            },
        })
    }
}

impl McpUnregisterRequest {
    /// `configured` tells the names of the configured MCP servers, which only the configuration
    /// removes.
    pub(crate) fn parse(
        body: &Map<String, Value>,
        configured: impl Fn(&str) -> bool,
    ) -> Checked<Self> {
        let mut f = Fields::new(body);
        let name = f.mcp_server_name("name", &configured);
        f.finish()?;
        Ok(Self {
            name: name.unwrap_or_default(),
        })
    }
}

/// Just the `arguments` of an invoke body, as text.
#[derive(Deserialize)]
struct ArgumentsText<'a> {
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}

/// The arguments object of an invoke body exactly as written (`{}` when absent).
fn arguments_text(text: &[u8], parsed: &Map<String, Value>) -> JsonText {
    match serde_json::from_slice::<ArgumentsText>(text) {
        Ok(ArgumentsText {
            arguments: Some(raw),
        }) => raw.to_owned(),
        // Absent (or, impossibly, unreadable after the body parsed): the parsed form's text.
        _ => RawValue::from_string(serde_json::to_string(parsed).unwrap_or_else(|_| "{}".into()))
            .unwrap_or_else(|_| RawValue::NULL.to_owned()),
    }
}

/// Reads fields of one body, collecting every failure.
struct Fields<'a> {
    body: &'a Map<String, Value>,
    errors: Vec<FieldError>,
}

impl<'a> Fields<'a> {
    fn new(body: &'a Map<String, Value>) -> Self {
        Self {
            body,
            errors: Vec::new(),
        }
    }

    fn finish(self) -> Result<(), Vec<FieldError>> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self.errors)
        }
    }

    fn fail(&mut self, field: &str, kind: &'static str, msg: impl Into<String>) {
        self.errors.push(FieldError::body(field, kind, msg));
    }

    /// A string field; `None` (and an error) when it is missing-and-required or not a string.
    fn string(&mut self, field: &str, default: Option<&str>) -> Option<String> {
        match self.body.get(field) {
            Some(Value::String(s)) => Some(s.clone()),
            None => match default {
                Some(d) => Some(d.to_owned()),
                None => {
                    self.fail(field, "missing", "Field required");
                    None
                }
            },
            Some(_) => {
                self.fail(field, "string_type", "Input should be a valid string");
                None
            }
        }
    }

    fn string_or(&mut self, field: &str, default: &str) -> Option<String> {
        self.string(field, Some(default))
    }

    fn non_empty_string_or(&mut self, field: &str, default: &str) -> Option<String> {
        let value = self.string(field, Some(default))?;
        self.non_empty(field, value)
    }

    fn required_non_empty_string(&mut self, field: &str) -> Option<String> {
        let value = self.string(field, None)?;
        self.non_empty(field, value)
    }

    fn non_empty(&mut self, field: &str, value: String) -> Option<String> {
        if value.is_empty() {
            self.fail(
                field,
                "string_too_short",
                "String should have at least 1 character",
            );
            return None;
        }
        Some(value)
    }

    /// A string or null; `Some(None)` for null or absent.
    fn nullable_string(&mut self, field: &str) -> Option<Option<String>> {
        match self.body.get(field) {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) => Some(Some(s.clone())),
            Some(_) => {
                self.fail(
                    field,
                    "string_type",
                    "Input should be a valid string or null",
                );
                None
            }
        }
    }

    /// An optional call id (null or `""`: none) of at most [`MAX_CALL_ID_BYTES`] bytes.
    fn call_id(&mut self, field: &str) -> Option<String> {
        let id = self.nullable_string(field).flatten()?;
        if id.len() > MAX_CALL_ID_BYTES {
            self.fail(
                field,
                "string_too_long",
                format!(
                    "{field} is {} bytes long; at most {MAX_CALL_ID_BYTES} bytes are accepted",
                    id.len()
                ),
            );
            return None;
        }
        Some(id).filter(|c| !c.is_empty())
    }

    /// `behavior`: `"blocking"` (the default) or `"non_blocking"`.
    fn behavior(&mut self, field: &str) -> Option<Behavior> {
        let name = self.string(field, Some(Behavior::Blocking.name()))?;
        let behavior = Behavior::from_name(&name);
        if behavior.is_none() {
            self.fail(
                field,
                "enum",
                "Input should be 'blocking' or 'non_blocking'",
            );
        }
        behavior
    }

    /// A string of 1 to `max` characters (not bytes).
    fn text(&mut self, field: &str, max: usize) -> Option<String> {
        let text = self.required_non_empty_string(field)?;
        if text.chars().count() > max {
            self.fail(
                field,
                "string_too_long",
                format!("String should have at most {max} characters"),
            );
            return None;
        }
        Some(text)
    }

    /// A boolean, `default` when absent.
    fn flag(&mut self, field: &str, default: bool) -> Option<bool> {
        match self.body.get(field) {
            None => Some(default),
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                self.fail(field, "bool_type", "Input should be a valid boolean");
                None
            }
        }
    }

    /// `role`: a character name, or null / `""` for every character.
    fn role(&mut self) -> Option<String> {
        self.nullable_string("role")
            .flatten()
            .filter(|r| !r.is_empty())
    }

    /// Checks that a field is absent or an object, without taking it.
    fn object(&mut self, field: &str) {
        if self.body.get(field).is_some_and(|v| !v.is_object()) {
            self.not_an_object(field);
        }
    }

    fn not_an_object(&mut self, field: &str) {
        self.fail(
            field,
            "dict_type",
            "Input should be a valid dictionary (a JSON object)",
        );
    }

    /// `parameters`: a JSON Schema (draft 2020-12) describing an object, compiled once here.
    /// Every problem of the schema is its own error at this field. `value` is the field, taken
    /// out of the body (`None`: absent).
    fn parameters(&mut self, field: &str, value: Option<Value>) -> Option<Parameters> {
        let schema = match value {
            None => return Some(empty_parameters()),
            Some(Value::Object(schema)) => schema,
            Some(_) => {
                self.not_an_object(field);
                return None;
            }
        };
        match Parameters::new(schema) {
            Ok(parameters) => Some(parameters),
            Err(SchemaError::Invalid { problems }) => {
                for problem in problems {
                    self.fail(field, "value_error", format!("Value error, {problem}"));
                }
                None
            }
            Err(e @ (SchemaError::NotAnObject { .. } | SchemaError::Limit(_))) => {
                self.fail(field, "value_error", format!("Value error, {e}"));
                None
            }
        }
    }

    fn callback_url(&mut self, field: &str, server: SocketAddr) -> Option<CallbackUrl> {
        let written = self.string(field, None)?;
        match CallbackUrl::parse(&written) {
            Ok(url) if url.reaches(server) => {
                self.fail(
                    field,
                    "value_error",
                    format!(
                        "Value error, callback_url points at this server itself ({server}): a \
                         tool whose callback is this server would call itself without end; \
                         use the plugin's own server"
                    ),
                );
                None
            }
            Ok(url) => Some(url),
            Err(e @ CallbackUrlError::TooLong(_)) => {
                self.fail(field, "string_too_long", e.to_string());
                None
            }
            Err(e) => {
                self.fail(
                    field,
                    "value_error",
                    format!("Value error, {e}: callbacks must be on loopback; {ACCEPTED_FORMS}"),
                );
                None
            }
        }
    }

    /// The websocket URL of a live call: `wss://`, or `ws://` on loopback only, written plainly
    /// (an unencrypted connection carries the conversation). Which `wss://` hosts a character may
    /// attach to is its configuration's, checked by the router.
    fn call_url(&mut self, field: &str) -> Option<CallUrl> {
        let written = self.string(field, None)?;
        match CallUrl::parse(&written) {
            Ok(url) => Some(url),
            Err(e @ CallUrlError::TooLong(_)) => {
                self.fail(field, "string_too_long", e.to_string());
                None
            }
            Err(e) => {
                self.fail(
                    field,
                    "value_error",
                    format!("Value error, {e}: {ACCEPTED_CALL_URLS}"),
                );
                None
            }
        }
    }

    /// The name of an MCP server registered at run time: the `[[mcp_server]]` name rule (letters,
    /// digits, `-`, `_`, `.`), at most [`MAX_NAME_CHARS`] characters, and not the name of a
    /// configured server.
    fn mcp_server_name(
        &mut self,
        field: &str,
        configured: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let name = self.required_non_empty_string(field)?;
        if name.chars().count() > MAX_NAME_CHARS {
            self.fail(
                field,
                "string_too_long",
                format!("String should have at most {MAX_NAME_CHARS} characters"),
            );
            return None;
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            self.fail(
                field,
                "string_pattern_mismatch",
                "String should use only letters, digits, `-`, `_` and `.`",
            );
            return None;
        }
        if configured(&name) {
            self.fail(
                field,
                "value_error",
                format!(
                    "Value error, {name:?} is an MCP server of the configuration \
                     ([[mcp_server]]): a plugin's MCP server needs a name of its own"
                ),
            );
            return None;
        }
        Some(name)
    }

    /// The Streamable HTTP endpoint of an MCP server: the callback URL rule, `http://` only,
    /// and never this server itself.
    fn mcp_url(&mut self, field: &str, server: SocketAddr) -> Option<CallbackUrl> {
        let written = self.string(field, None)?;
        match CallbackUrl::parse(&written) {
            Ok(url) if url.reaches(server) => {
                self.fail(
                    field,
                    "value_error",
                    format!(
                        "Value error, url points at this server itself ({server}): its tools \
                         are its own already (and its /mcp serves them); give the MCP server's \
                         own endpoint"
                    ),
                );
                None
            }
            Ok(url) if url.url().scheme() != "http" => {
                self.fail(
                    field,
                    "value_error",
                    "Value error, only http:// is supported: the MCP server is on loopback, \
                     e.g. http://127.0.0.1:9400/mcp",
                );
                None
            }
            Ok(url) => Some(url),
            Err(e @ CallbackUrlError::TooLong(_)) => {
                self.fail(
                    field,
                    "string_too_long",
                    e.to_string().replace("callback_url", "url"),
                );
                None
            }
            Err(e) => {
                self.fail(
                    field,
                    "value_error",
                    format!(
                        "Value error, {}: MCP servers must be on loopback; use http:// with host \
                         localhost, 127.x.x.x, [::1] or [::ffff:127.x.x.x], e.g. \
                         http://127.0.0.1:9400/mcp",
                        e.to_string().replace("callback_url", "url")
                    ),
                );
                None
            }
        }
    }

    /// `timeout_seconds`: a number, > 0 and <= 300.
    fn timeout(&mut self, field: &str) -> Option<Duration> {
        let seconds = match self.body.get(field) {
            None => return Some(DEFAULT_TIMEOUT),
            Some(Value::Number(n)) => n.as_f64(),
            Some(_) => None,
        };
        let Some(seconds) = seconds.filter(|s| s.is_finite()) else {
            self.fail(field, "float_type", "Input should be a valid number");
            return None;
        };
        if seconds <= 0.0 {
            self.fail(field, "greater_than", "Input should be greater than 0");
            return None;
        }
        if seconds > MAX_TIMEOUT_SECONDS {
            self.fail(
                field,
                "less_than_equal",
                "Input should be less than or equal to 300",
            );
            return None;
        }
        Some(Duration::from_secs_f64(seconds))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    /// The address the server of these tests listens on.
    fn server() -> SocketAddr {
        "127.0.0.1:48911".parse().unwrap()
    }

    fn failing_fields(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(|e| e.loc.join(".")).collect()
    }

    #[test]
    fn register_defaults() {
        let r = RegisterRequest::parse(
            body(json!({
                "name": "get_weather",
                "callback_url": "http://127.0.0.1:9333/cb"
            })),
            server(),
        )
        .unwrap();
        assert_eq!(r.tool.description, "");
        assert_eq!(r.tool.source, "external");
        assert_eq!(
            Value::Object(r.tool.parameters.schema().clone()),
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(r.role, None);
        let crate::domain::tool::ToolHandler::Remote(remote) = &r.tool.handler else {
            panic!("remote")
        };
        assert_eq!(remote.timeout, Duration::from_secs(30));
    }

    #[test]
    fn register_collects_every_failure() {
        let errors = RegisterRequest::parse(
            body(json!({
                "name": null,
                "description": 5,
                "parameters": [],
                "callback_url": "http://8.8.8.8/cb",
                "role": 3,
                "source": "",
                "timeout_seconds": 300.5
            })),
            server(),
        )
        .unwrap_err();
        assert_eq!(
            failing_fields(&errors),
            [
                "body.name",
                "body.description",
                "body.parameters",
                "body.callback_url",
                "body.role",
                "body.source",
                "body.timeout_seconds"
            ]
        );
    }

    #[test]
    fn names_count_characters() {
        let ok = "名".repeat(64);
        let long = "名".repeat(65);
        let parse = |n: &str| {
            RegisterRequest::parse(
                body(json!({"name": n, "callback_url": "http://localhost/cb"})),
                server(),
            )
        };
        assert!(parse(&ok).is_ok());
        let errors = parse(&long).unwrap_err();
        assert_eq!(errors[0].kind, "string_too_long");
        assert_eq!(parse("").unwrap_err()[0].kind, "string_too_short");
        assert_eq!(
            parse("a\u{0}b").unwrap_err()[0].kind,
            "string_pattern_mismatch"
        );
    }

    #[test]
    fn timeout_bounds() {
        let parse = |t: Value| {
            RegisterRequest::parse(
                body(
                    json!({"name": "n", "callback_url": "http://localhost/cb", "timeout_seconds": t}),
                ),
                server(),
            )
        };
        assert!(parse(json!(300)).is_ok());
        assert!(parse(json!(0.01)).is_ok());
        assert_eq!(parse(json!(0)).unwrap_err()[0].kind, "greater_than");
        assert_eq!(parse(json!(-1)).unwrap_err()[0].kind, "greater_than");
        assert_eq!(parse(json!(300.5)).unwrap_err()[0].kind, "less_than_equal");
        assert_eq!(parse(json!("30")).unwrap_err()[0].kind, "float_type");
        assert_eq!(parse(json!(null)).unwrap_err()[0].kind, "float_type");
        assert_eq!(parse(json!(true)).unwrap_err()[0].kind, "float_type");
    }

    #[test]
    fn role_empty_means_every_character() {
        let r = UnregisterRequest::parse(&body(json!({"name": "x", "role": ""}))).unwrap();
        assert_eq!(r.role, None);
        let r = ClearRequest::parse(&body(json!({"source": "s", "role": "Mio"}))).unwrap();
        assert_eq!(r.role.as_deref(), Some("Mio"));
    }

    #[test]
    fn clear_needs_a_source() {
        let e = ClearRequest::parse(&body(json!({}))).unwrap_err();
        assert_eq!(e[0].kind, "missing");
        let e = ClearRequest::parse(&body(json!({"source": ""}))).unwrap_err();
        assert_eq!(e[0].kind, "string_too_short");
    }

    #[test]
    fn attach_fields() {
        let ok = AttachRequest::parse(&body(json!({
            "role": "Mio", "url": "wss://api.example/v1/realtime?call_id=rtc_1", "api_key_env": null
        })))
        .unwrap();
        assert_eq!((ok.role.as_str(), ok.api_key_env), ("Mio", None));
        assert_eq!(
            ok.url.as_written(),
            "wss://api.example/v1/realtime?call_id=rtc_1"
        );
        assert!(
            AttachRequest::parse(&body(
                json!({"role": "Mio", "url": "ws://[::1]:9/v1/realtime"})
            ))
            .is_ok()
        );
        // The name is only read here; whether it may be used is the configuration's.
        let named = AttachRequest::parse(&body(json!({
            "role": "Mio", "url": "ws://127.0.0.1:9/", "api_key_env": "RUNTIME_TOOLS_TEST_NEVER_SET"
        })))
        .unwrap();
        assert_eq!(
            named.api_key_env.as_deref(),
            Some("RUNTIME_TOOLS_TEST_NEVER_SET")
        );
        let e = AttachRequest::parse(&body(json!({
            "url": "ws://127.1/v1/realtime", "api_key_env": 5
        })))
        .unwrap_err();
        assert_eq!(
            failing_fields(&e),
            ["body.role", "body.url", "body.api_key_env"]
        );
        assert_eq!(
            e[1].msg,
            "Value error, \"ws://127.1/v1/realtime\" is ws:// to a host that is not loopback, or \
             not written plainly: the call's URL must be wss:// to a provider the configuration \
             names, or ws:// on loopback (localhost, 127.x.x.x or [::1]), e.g. \
             wss://api.openai.com/v1/realtime?call_id=rtc_123"
        );
        let e =
            AttachRequest::parse(&body(json!({"role": "Mio", "url": "https://x/"}))).unwrap_err();
        assert!(e[0].msg.contains("is not a websocket URL"), "{}", e[0].msg);
        let long = format!("wss://api.openai.com/{}", "a".repeat(2048));
        let e = AttachRequest::parse(&body(json!({"role": "Mio", "url": long}))).unwrap_err();
        assert_eq!(
            (e[0].kind, e[0].msg.as_str()),
            (
                "string_too_long",
                "url is 2069 bytes long; at most 2048 bytes are accepted"
            )
        );
    }

    #[test]
    fn invoke_arguments_keep_their_text() {
        let text = br#"{"arguments": {"big": 123456789012345678901234567890,  "s": "\u00e9"}, "name": "t"}"#;
        let r = InvokeRequest::parse(crate::api::body::parse_object(text).unwrap(), text).unwrap();
        assert_eq!(
            r.arguments_text.get(),
            r#"{"big": 123456789012345678901234567890,  "s": "\u00e9"}"#
        );
        assert_eq!(r.arguments["s"], json!("é"));
    }

    #[test]
    fn a_callback_on_this_server_is_refused() {
        let parse = |url: &str| {
            RegisterRequest::parse(body(json!({"name": "n", "callback_url": url})), server())
        };
        for url in [
            "http://127.0.0.1:48911/api/tools/invoke",
            "http://localhost:48911/x",
        ] {
            let errors = parse(url).unwrap_err();
            assert_eq!(failing_fields(&errors), ["body.callback_url"], "{url}");
            assert_eq!(
                errors[0].msg,
                "Value error, callback_url points at this server itself (127.0.0.1:48911): a \
                 tool whose callback is this server would call itself without end; use the \
                 plugin's own server"
            );
        }
        for url in [
            "http://127.0.0.1:48912/cb",
            "http://127.0.0.2:48911/cb",
            "http://[::1]:48911/cb",
        ] {
            assert!(parse(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn invoke_fields() {
        let text = br#"{"name": "t"}"#;
        let r = InvokeRequest::parse(crate::api::body::parse_object(text).unwrap(), text).unwrap();
        assert!(r.arguments.is_empty());
        assert_eq!(r.arguments_text.get(), "{}");
        assert_eq!(r.call_id, None);
        let e = InvokeRequest::parse(
            body(json!({"name": "t", "arguments": "x", "call_id": 1})),
            b"{}",
        )
        .unwrap_err();
        assert_eq!(failing_fields(&e), ["body.arguments", "body.call_id"]);
    }
}
