//! `GET /api/tools/openapi.json`: the OpenAPI 3.1 document of this HTTP API.
//!
//! The document is derived (by `utoipa`) from the handlers' `#[utoipa::path]` attributes and from
//! the very types the handlers serialise (`RegisterResponse`, `ErrorBody`, ...), so a changed
//! response shape changes the document with it. Request bodies are read field by field in
//! [`super::requests`] (a 422 must name every failing field), so their schemas are the
//! documentation-only structs below; the unit tests here check them against that parser.

use std::sync::LazyLock;

use actix_web::{HttpResponse, web};
use serde_json::{Map, Value};
use utoipa::{OpenApi, ToSchema};

use super::error::{ApiError, ErrorBody, FieldError, ValidationErrorBody};
use super::events;
use super::invoke::{self, InvokeImage, InvokeResponse};
use super::mcp::{self, McpResponse};
use super::sessions::{self, AttachResponse, DetachResponse, SessionsResponse};
use super::tools::{
    self, ClearResponse, ListResponse, RegisterResponse, ToolView, UnregisterResponse,
};
use crate::actors::router::RoleFailure;
use crate::mcp::mapping::Skipped;
use crate::mcp::status::{McpServerReport, McpState};
use crate::session::{
    ConnectionKind, ConnectionReport, ConnectionState, SessionReport, SyncOutcome,
};

/// Where the document is served.
pub const OPENAPI_PATH: &str = "/api/tools/openapi.json";

/// The whole HTTP API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Runtime Tool API",
        description = "Local plugins register HTTP callbacks as tools a live AI model session can \
                       call. Every route answers loopback callers only (anyone else gets 403).",
    ),
    paths(
        tools::register,
        tools::unregister,
        tools::clear,
        tools::list,
        invoke::invoke,
        sessions::list_sessions,
        sessions::attach,
        sessions::detach,
        events::events,
        mcp::list_mcp_servers,
        openapi_document,
    ),
    components(schemas(
        RegisterBody,
        UnregisterBody,
        ClearBody,
        InvokeBody,
        RegisterResponse,
        UnregisterResponse,
        ClearResponse,
        ListResponse,
        ToolView,
        InvokeResponse,
        InvokeImage,
        SessionsResponse,
        SessionReport,
        ConnectionReport,
        ConnectionKind,
        SyncOutcome,
        ConnectionState,
        AttachBody,
        AttachResponse,
        DetachBody,
        DetachResponse,
        McpResponse,
        McpServerReport,
        McpState,
        Skipped,
        RoleFailure,
        ErrorBody,
        ValidationErrorBody,
        FieldError,
    )),
    tags(
        (name = "tools", description = "Register, remove, list and invoke remote tools"),
        (name = "sessions", description = "The characters' live model sessions: the server's own, apps' relays (`GET /v1/realtime`, a websocket, not in this document), attached calls, in-process ones"),
        (name = "events", description = "Change events, as Server-Sent Events"),
        (name = "mcp", description = "The MCP servers whose tools the characters get"),
        (name = "meta", description = "This document"),
    )
)]
pub struct ApiDoc;

/// The document as served, built once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serialises")
});

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource(OPENAPI_PATH).route(web::get().to(openapi_document)));
}

/// This document.
#[utoipa::path(
    get,
    path = "/api/tools/openapi.json",
    tag = "meta",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document of this API", body = Object, content_type = "application/json"),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 405, description = "Only GET is allowed", body = ErrorBody),
    )
)]
async fn openapi_document() -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(DOCUMENT.as_str()))
}

// The request bodies, for the document only: the handlers read them by hand (see the module
// header), so these are never constructed.

/// `POST /api/tools/register`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({
    "name": "get_weather",
    "description": "Get weather for a location.",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
    "callback_url": "http://127.0.0.1:9333/tools/get_weather",
    "role": null,
    "source": "plugin:weather",
    "timeout_seconds": 30
}))]
pub struct RegisterBody {
    /// The tool's name: 1 to 64 characters, no control characters. Replaces a tool of the
    /// same name.
    #[schema(min_length = 1, max_length = 64)]
    name: String,
    /// Shown to the model.
    #[schema(default = "", nullable = false)]
    description: Option<String>,
    /// JSON Schema (draft 2020-12) of the tool's arguments, describing an object: top-level
    /// `type` absent or `"object"` (default: an empty object schema). An invalid schema is a 422
    /// naming each problem's JSON pointer; every call's arguments are checked against it.
    #[schema(value_type = Option<Object>, nullable = false)]
    parameters: Option<Map<String, Value>>,
    /// `http` or `https` on `localhost`, `127.x.x.x`, `[::1]` or `[::ffff:127.x.x.x]`; anything
    /// else is a 422.
    #[schema(format = "uri", example = "http://127.0.0.1:9333/tools/get_weather")]
    callback_url: String,
    /// One existing character; null or `""` means every current character.
    #[schema(nullable)]
    role: Option<String>,
    /// Lifecycle tag `clear` uses; plugins should use `plugin:<id>`.
    #[schema(min_length = 1, default = "external", nullable = false)]
    source: Option<String>,
    /// Greater than 0 and at most 300.
    #[schema(exclusive_minimum = 0, maximum = 300, default = 30, nullable = false)]
    timeout_seconds: Option<f64>,
}

/// `POST /api/sessions/attach`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({
    "role": "Mio",
    "url": "wss://api.openai.com/v1/realtime?call_id=rtc_123",
    "api_key_env": null
}))]
pub struct AttachBody {
    /// The character whose tools the call gets.
    #[schema(min_length = 1)]
    role: String,
    /// The call's websocket: `wss://`, or `ws://` on loopback only.
    #[schema(
        format = "uri",
        example = "wss://api.openai.com/v1/realtime?call_id=rtc_123"
    )]
    url: String,
    /// Name of an environment variable of the server holding the API key, sent as
    /// `Authorization: Bearer <key>`; a variable that is not set is a 422.
    #[schema(nullable)]
    api_key_env: Option<String>,
}

/// `POST /api/sessions/detach`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({"role": "Mio", "url": "wss://api.openai.com/v1/realtime?call_id=rtc_123"}))]
pub struct DetachBody {
    #[schema(min_length = 1)]
    role: String,
    /// The URL the call was attached with.
    #[schema(min_length = 1)]
    url: String,
}

/// `POST /api/tools/unregister`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({"name": "get_weather", "role": null}))]
pub struct UnregisterBody {
    #[schema(min_length = 1, max_length = 64)]
    name: String,
    /// One existing character; null or `""` means every current character.
    #[schema(nullable)]
    role: Option<String>,
}

/// `POST /api/tools/clear`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({"source": "plugin:weather", "role": null}))]
pub struct ClearBody {
    /// Every tool registered with this `source` is removed.
    #[schema(min_length = 1)]
    source: String,
    /// One existing character; null or `""` means every current character.
    #[schema(nullable)]
    role: Option<String>,
}

/// `POST /api/tools/invoke`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({"name": "get_weather", "arguments": {"location": "Shanghai"}, "role": null}))]
pub struct InvokeBody {
    #[schema(min_length = 1, max_length = 64)]
    name: String,
    /// The call's arguments (default `{}`). Arguments that do not match the tool's schema are
    /// answered as the model would be: 200, `is_error: true`, the text saying what to fix.
    #[schema(value_type = Option<Object>, nullable = false)]
    arguments: Option<Map<String, Value>>,
    /// The character whose registration to use; null or `""`: the first that has the tool.
    #[schema(nullable)]
    role: Option<String>,
    /// The call id the callback receives (default: a fresh `call_...`).
    #[schema(nullable)]
    call_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::requests::{
        AttachRequest, ClearRequest, DetachRequest, InvokeRequest, RegisterRequest,
        UnregisterRequest,
    };

    type Parse = fn(&Map<String, Value>) -> Result<(), Vec<FieldError>>;

    fn document() -> Value {
        serde_json::from_str(&DOCUMENT).unwrap()
    }

    /// Each request-body schema with the parser of the body it documents.
    fn bodies() -> Vec<(&'static str, Parse)> {
        vec![
            ("RegisterBody", |b| {
                RegisterRequest::parse(b, "127.0.0.1:48911".parse().unwrap()).map(drop)
            }),
            ("UnregisterBody", |b| UnregisterRequest::parse(b).map(drop)),
            ("ClearBody", |b| ClearRequest::parse(b).map(drop)),
            ("InvokeBody", |b| {
                InvokeRequest::parse(b, &serde_json::to_vec(b).unwrap()).map(drop)
            }),
            ("AttachBody", |b| AttachRequest::parse(b).map(drop)),
            ("DetachBody", |b| DetachRequest::parse(b).map(drop)),
        ]
    }

    #[test]
    fn is_openapi_3_1() {
        assert!(document()["openapi"].as_str().unwrap().starts_with("3.1."));
    }

    #[test]
    fn each_request_example_is_accepted() {
        let doc = document();
        for (name, parse) in bodies() {
            let example = doc["components"]["schemas"][name]["example"].clone();
            let Value::Object(example) = example else {
                panic!("{name} has no example object")
            };
            assert_eq!(parse(&example), Ok(()), "{name}");
        }
    }

    /// Every documented field is one the parser reads (a wrong type there is a 422 naming it),
    /// and every required one is required by the parser too.
    #[test]
    fn request_schemas_match_the_parsers() {
        let doc = document();
        for (name, parse) in bodies() {
            let schema = &doc["components"]["schemas"][name];
            let Value::Object(example) = schema["example"].clone() else {
                panic!("{name} has no example")
            };
            for field in schema["properties"].as_object().unwrap().keys() {
                let mut body = example.clone();
                body.insert(field.clone(), json!([]));
                let errors = parse(&body).expect_err(field);
                assert_eq!(errors[0].loc, ["body", field.as_str()], "{name}.{field}");

                let nullable = schema["properties"][field]["type"]
                    .as_array()
                    .is_some_and(|types| types.contains(&json!("null")));
                body.insert(field.clone(), Value::Null);
                assert_eq!(
                    parse(&body).is_ok(),
                    nullable,
                    "{name}.{field}: nullable in the schema iff the parser takes null"
                );
            }
            let required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().map(|f| f.as_str().unwrap()).collect())
                .unwrap_or_default();
            for field in schema["properties"].as_object().unwrap().keys() {
                let mut body = example.clone();
                body.remove(field);
                let missing = parse(&body)
                    .err()
                    .is_some_and(|e| e.iter().any(|e| e.kind == "missing"));
                assert_eq!(
                    missing,
                    required.contains(&field.as_str()),
                    "{name}.{field}: required in the schema iff the parser requires it"
                );
            }
        }
    }

    #[test]
    fn documented_limits_are_the_parsers() {
        use crate::api::requests::{MAX_NAME_CHARS, MAX_TIMEOUT_SECONDS};
        use crate::domain::tool::{DEFAULT_SOURCE, DEFAULT_TIMEOUT};

        let doc = document();
        let register = &doc["components"]["schemas"]["RegisterBody"]["properties"];
        for body in ["RegisterBody", "UnregisterBody", "InvokeBody"] {
            assert_eq!(
                doc["components"]["schemas"][body]["properties"]["name"]["maxLength"],
                json!(MAX_NAME_CHARS),
                "{body}"
            );
        }
        assert_eq!(
            register["timeout_seconds"]["maximum"].as_f64(),
            Some(MAX_TIMEOUT_SECONDS)
        );
        assert_eq!(
            register["timeout_seconds"]["default"].as_f64(),
            Some(DEFAULT_TIMEOUT.as_secs_f64())
        );
        assert_eq!(register["source"]["default"], json!(DEFAULT_SOURCE));
    }
}
