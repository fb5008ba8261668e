//! The one place errors become HTTP responses.
//!
//! Bodies follow the FastAPI convention plugins already parse: `{"ok": false, "detail": TEXT}`,
//! and for 422 `{"ok": false, "detail": [{"loc": [...], "msg": TEXT, "type": KIND}, ...]}`.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use utoipa::ToSchema;

use crate::actors::router::RouterError;
use crate::domain::ownership::{OwnershipError, UnbindError};
use crate::mcp::http_serve::McpEndpointError;
use crate::mcp::runtime::McpPluginError;

/// One failing field of a request body, as FastAPI reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct FieldError {
    /// Where the failure is: `["body"]` for the body as a whole, `["body", FIELD]` for a field.
    #[schema(example = json!(["body", "callback_url"]))]
    pub loc: Vec<String>,
    /// What is wrong, and what is accepted instead.
    pub msg: String,
    /// A stable kind, e.g. `missing`, `string_type`, `json_invalid`, `content_type`.
    #[serde(rename = "type")]
    #[schema(value_type = String)]
    pub kind: &'static str,
}

/// The error answers every POST route with a JSON body shares, for the OpenAPI document (never
/// built: handlers answer with [`ApiError`]).
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub(crate) enum BodyRouteErrors {
    /// Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// Only POST is allowed
    #[response(status = 405)]
    MethodNotAllowed(ErrorBody),
    /// The body did not arrive in full within 10 s
    #[response(status = 408)]
    RequestTimeout(ErrorBody),
    /// The body is over 1 MiB
    #[response(status = 413)]
    PayloadTooLarge(ErrorBody),
    /// Every field that failed validation
    #[response(status = 422)]
    Validation(ValidationErrorBody<'static>),
}

/// The body of every error but 422: `{"ok": false, "detail": TEXT}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    /// Always `false`.
    pub ok: bool,
    /// What is wrong, in words.
    #[schema(example = "unknown role: Mio")]
    pub detail: String,
}

/// The body of a 422: `{"ok": false, "detail": [FieldError, ...]}`, naming every failing field.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ValidationErrorBody<'a> {
    /// Always `false`.
    pub ok: bool,
    pub detail: &'a [FieldError],
}

impl FieldError {
    /// An error located at `body.<field>` (or at `body` itself when `field` is empty).
    pub(crate) fn body(field: &str, kind: &'static str, msg: impl Into<String>) -> Self {
        let mut loc = vec!["body".to_owned()];
        if !field.is_empty() {
            loc.push(field.to_owned());
        }
        Self {
            loc,
            msg: msg.into(),
            kind,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    /// 401: a change without the `X-Plugin-Token` the configuration requires.
    #[error("{0}")]
    Unauthorized(String),
    /// 403: not a loopback caller, or a foreign `Host`; a change to a source another plugin's
    /// token owns.
    #[error("{0}")]
    Forbidden(String),
    /// 404: an unknown role or tool, or an unknown route.
    #[error("{0}")]
    NotFound(String),
    /// 405 on a known path.
    #[error("Method Not Allowed")]
    MethodNotAllowed,
    /// 408: the request body did not arrive in full within the time allowed.
    #[error("request body was not received within {0} s")]
    RequestTimeout(u64),
    /// 413: the body is over the limit.
    #[error("request body is larger than the {0}-byte limit")]
    PayloadTooLarge(usize),
    /// 422: every field that failed.
    #[error("request validation failed")]
    Validation(Vec<FieldError>),
    /// 503: the router did not answer; a change may or may not have been applied.
    #[error("{0}")]
    Unavailable(String),
    /// 400: a request to the relay that is not a websocket handshake.
    #[error("{0}")]
    BadRequest(String),
    /// 502: the model (or the call) could not be reached.
    #[error("{0}")]
    BadGateway(String),
    /// 500: something that should not happen did (the MCP transport failed inside).
    #[error("{0}")]
    Internal(String),
    /// 409: the request conflicts with what the server holds now (a character attached to as
    /// many calls as it may be, a configured source's binding).
    #[error("{0}")]
    Conflict(String),
}

impl From<RouterError> for ApiError {
    fn from(e: RouterError) -> Self {
        match e {
            RouterError::UnknownRole(_)
            | RouterError::ToolNotFound(_)
            | RouterError::NoChat(_)
            | RouterError::UnknownSource(_) => ApiError::NotFound(e.to_string()),
            RouterError::Unbind(UnbindError::NotBound(_)) => ApiError::NotFound(e.to_string()),
            RouterError::Unbind(UnbindError::Configured(_)) => ApiError::Conflict(e.to_string()),
            // The relay's query names the character (or must).
            RouterError::NoSession(_)
            | RouterError::CharacterRequired(_)
            | RouterError::OtherProtocol { .. } => ApiError::Validation(vec![FieldError {
                loc: vec!["query".into(), "character".into()],
                msg: e.to_string(),
                kind: "value_error",
            }]),
            RouterError::AttachRefused { field, ref reason } => {
                ApiError::Validation(vec![FieldError::body(
                    field,
                    "value_error",
                    format!("Value error, {reason}"),
                )])
            }
            RouterError::TooManyAttachments { .. } => ApiError::Conflict(e.to_string()),
            RouterError::Ownership(e) => e.into(),
            RouterError::NotStored(_) => ApiError::Unavailable(e.to_string()),
            // Character lifecycle errors have no HTTP route today.
            RouterError::DuplicateCharacter(_)
            | RouterError::InvalidSession { .. }
            | RouterError::ManagerUnavailable(_)
            | RouterError::Stopping => ApiError::Unavailable(e.to_string()),
        }
    }
}

impl From<OwnershipError> for ApiError {
    fn from(e: OwnershipError) -> Self {
        match e {
            OwnershipError::TokenRequired => ApiError::Unauthorized(e.to_string()),
            OwnershipError::NotOwner { .. }
            | OwnershipError::UnboundToken
            | OwnershipError::NotWaker { .. }
            | OwnershipError::Unbound { .. } => ApiError::Forbidden(e.to_string()),
        }
    }
}

impl From<McpPluginError> for ApiError {
    fn from(e: McpPluginError) -> Self {
        match e {
            McpPluginError::Router(e) => e.into(),
            McpPluginError::SourceTaken { .. } => ApiError::Validation(vec![FieldError::body(
                "source",
                "value_error",
                format!("Value error, {e}"),
            )]),
            McpPluginError::TooMany => ApiError::Validation(vec![FieldError::body(
                "name",
                "value_error",
                format!("Value error, {e}"),
            )]),
            McpPluginError::RouterStopped => ApiError::Unavailable(e.to_string()),
        }
    }
}

impl From<McpEndpointError> for ApiError {
    fn from(e: McpEndpointError) -> Self {
        match e {
            McpEndpointError::Router(e) => e.into(),
            McpEndpointError::NoCharacter => ApiError::NotFound(e.to_string()),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Validation(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        match self {
            ApiError::Validation(errors) => response.json(ValidationErrorBody {
                ok: false,
                detail: errors,
            }),
            other => response.json(ErrorBody {
                ok: false,
                detail: other.to_string(),
            }),
        }
    }
}

/// An error of the OpenAI-compatible routes (`/v1/chat/completions`, `/v1/responses`,
/// `/v1/models`), in the
/// shape OpenAI's SDKs parse: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct OpenAiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's error type, e.g. `invalid_request_error`.
    pub kind: &'static str,
    pub param: Option<&'static str>,
    pub code: Option<&'static str>,
}

impl OpenAiError {
    /// A 400 about the request.
    pub(crate) fn invalid(message: impl Into<String>, param: Option<&'static str>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param,
            code: None,
        }
    }

    /// The body, as JSON.
    pub(crate) fn body(&self) -> serde_json::Value {
        crate::chat::wire::error_body(&self.message, self.kind, self.param, self.code)
    }
}

impl From<RouterError> for OpenAiError {
    fn from(e: RouterError) -> Self {
        let (status, code) = match &e {
            RouterError::UnknownRole(_) => (StatusCode::NOT_FOUND, "character_not_found"),
            RouterError::NoChat(_) => (StatusCode::NOT_FOUND, "chat_not_configured"),
            _ => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        };
        Self {
            status,
            message: e.to_string(),
            kind: "invalid_request_error",
            param: Some("character"),
            code: Some(code),
        }
    }
}

impl From<ApiError> for OpenAiError {
    /// The errors every route shares (the loopback guard, the body's size and time limits).
    fn from(e: ApiError) -> Self {
        let (kind, code) = match &e {
            ApiError::Forbidden(_) => ("permission_error", "forbidden"),
            ApiError::PayloadTooLarge(_) => ("invalid_request_error", "request_too_large"),
            ApiError::RequestTimeout(_) => ("invalid_request_error", "request_timeout"),
            ApiError::MethodNotAllowed => ("invalid_request_error", "method_not_allowed"),
            ApiError::NotFound(_) => ("invalid_request_error", "not_found"),
            _ => ("invalid_request_error", "invalid_request"),
        };
        let status = match &e {
            // A malformed body is a 400 here, as OpenAI answers it.
            ApiError::Validation(_) => StatusCode::BAD_REQUEST,
            other => other.status_code(),
        };
        Self {
            status,
            message: e.to_string(),
            kind,
            param: None,
            code: Some(code),
        }
    }
}

impl From<crate::chat::TooManyRequests> for OpenAiError {
    /// OpenAI's own answer to too many requests, so SDKs back off and retry.
    fn from(e: crate::chat::TooManyRequests) -> Self {
        Self {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: e.to_string(),
            kind: "requests",
            param: None,
            code: Some("rate_limit_exceeded"),
        }
    }
}

impl ResponseError for OpenAiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status).json(self.body())
    }
}

/// The body of an error of the OpenAI-compatible routes, for the OpenAPI document (never built:
/// the routes answer with [`OpenAiError`]).
#[derive(ToSchema)]
#[allow(dead_code)]
#[schema(example = json!({"error": {"message": "messages is required",
    "type": "invalid_request_error", "param": "messages", "code": null}}))]
pub(crate) struct OpenAiErrorBody {
    error: OpenAiErrorDetail,
}

/// What went wrong, in OpenAI's words.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct OpenAiErrorDetail {
    message: String,
    /// `invalid_request_error`, `permission_error`, `upstream_error`, ...
    #[schema(rename = "type")]
    kind: String,
    /// The request field at fault.
    #[schema(required = true)]
    param: Option<String>,
    /// A stable code, e.g. `character_not_found`, `upstream_unreachable`.
    #[schema(required = true)]
    code: Option<String>,
}

/// JSON-RPC's error codes `/mcp` answers with.
pub(crate) mod rpc_code {
    /// The body is not JSON.
    pub(crate) const PARSE_ERROR: i64 = -32700;
    /// Anything else about the request (its headers, its session, its size, its caller).
    pub(crate) const INVALID_REQUEST: i64 = -32600;
    /// Something that should not happen did.
    pub(crate) const INTERNAL_ERROR: i64 = -32603;
}

/// An error of `/mcp` (MCP's Streamable HTTP transport), in the shape MCP clients read: a
/// JSON-RPC error without an id, `{"jsonrpc": "2.0", "id": null, "error": {"code", "message"}}`,
/// with the HTTP status the transport asks for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct McpHttpError {
    pub status: StatusCode,
    pub code: i64,
    pub message: String,
}

impl From<crate::mcp::http_sessions::SessionsFull> for McpHttpError {
    /// The server cannot take another session now: it is there, and will again.
    fn from(e: crate::mcp::http_sessions::SessionsFull) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: rpc_code::INTERNAL_ERROR,
            message: e.to_string(),
        }
    }
}

impl From<ApiError> for McpHttpError {
    /// The errors every route shares (the loopback guard, the body's size and time limits, the
    /// query) and the unknown character.
    fn from(e: ApiError) -> Self {
        let status = e.status_code();
        let (code, message) = match &e {
            ApiError::Validation(errors) => {
                let code = if errors.iter().any(|f| f.kind == "json_invalid") {
                    rpc_code::PARSE_ERROR
                } else {
                    rpc_code::INVALID_REQUEST
                };
                let texts: Vec<&str> = errors.iter().map(|f| f.msg.as_str()).collect();
                (code, texts.join("; "))
            }
            ApiError::Internal(_) => (rpc_code::INTERNAL_ERROR, e.to_string()),
            _ => (rpc_code::INVALID_REQUEST, e.to_string()),
        };
        Self {
            status,
            code,
            message,
        }
    }
}

impl From<McpEndpointError> for McpHttpError {
    fn from(e: McpEndpointError) -> Self {
        ApiError::from(e).into()
    }
}

impl ResponseError for McpHttpError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status).json(serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": self.code, "message": self.message},
        }))
    }
}

/// The body of an error of `/mcp`, for the OpenAPI document (never built: the route answers
/// with [`McpHttpError`]).
#[derive(ToSchema)]
#[allow(dead_code)]
#[schema(example = json!({"jsonrpc": "2.0", "id": null,
    "error": {"code": -32600, "message": "unknown role: Nobody"}}))]
pub(crate) struct JsonRpcErrorBody {
    /// Always `"2.0"`.
    jsonrpc: String,
    /// Always `null`: the error is about the HTTP request, not one message.
    #[schema(required = true, value_type = Option<String>)]
    id: Option<String>,
    error: JsonRpcErrorDetail,
}

/// What went wrong, as JSON-RPC says it.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct JsonRpcErrorDetail {
    /// `-32700` (the body is not JSON), `-32600` (anything else about the request) or `-32603`.
    code: i64,
    message: String,
}

/// Whether `path` is `/mcp`, whose errors take JSON-RPC's shape.
pub(crate) fn is_mcp_path(path: &str) -> bool {
    path == "/mcp"
}

/// Whether `path` is one of the OpenAI-compatible routes, whose errors take OpenAI's shape.
pub(crate) fn is_openai_path(path: &str) -> bool {
    matches!(
        path,
        "/v1/chat/completions" | "/v1/responses" | "/v1/models"
    ) || path.starts_with("/v1/models/")
}
