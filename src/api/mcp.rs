//! MCP over HTTP, both ways:
//!
//! - `GET /api/mcp`: the state of each MCP server — configured and registered at run time, apart
//!   — read from the board their clients keep (no message: the board is shared for reading).
//! - `POST /api/mcp/register`, `POST /api/mcp/unregister`: an MCP server (Streamable HTTP, on
//!   loopback) as a plugin's tool source; each parses the body and sends one message to
//!   `McpPlugins`.
//! - `POST` / `GET` / `DELETE /mcp`: a character's tools over MCP's Streamable HTTP transport.
//!   The handler adapts actix-web's request to the character's `StreamableHttpService` (rmcp's
//!   transport, a tower service over `http` types) and streams its answer back; the transport's
//!   own refusals become this API's error answers.

use std::convert::Infallible;
use std::time::Duration;

use actix::MailboxError;
use actix_web::http::StatusCode;
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Body as _;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use tower_service::Service;
use utoipa::ToSchema;

use super::AppState;
use super::body::{JsonObject, MAX_BODY_BYTES, read_body};
use super::error::{
    ApiError, BodyRouteErrors, ErrorBody, FieldError, JsonRpcErrorBody, McpHttpError, rpc_code,
};
use super::requests::{McpRegisterRequest, McpUnregisterRequest};
use super::token::PluginToken;
use crate::actors::change::RoleFailure;
use crate::domain::role::RoleName;
use crate::mcp::exact::{self, CallArguments};
use crate::mcp::http_serve::CharacterMcp;
use crate::mcp::http_sessions::with_reservation;
use crate::mcp::mapping::Skipped;
use crate::mcp::runtime::{McpStage, RegisterMcpServer, UnregisterMcpServer};
use crate::mcp::status::{McpServerReport, RuntimeMcpReport};

/// Beyond a registration's own `timeout_seconds` (its connect, initialize and listing), how
/// long its handler waits for the answer: the router's own bound on registering the tools
/// ([`super::ROUTER_REPLY_TIMEOUT`]) and a margin.
pub(crate) const REGISTER_MARGIN: Duration = Duration::from_secs(5);

/// How long an unregistration is waited for: the router's bound on removing the tools, the
/// close of the connection and a margin.
pub(crate) const UNREGISTER_TIMEOUT: Duration = Duration::from_secs(
    super::ROUTER_REPLY_TIMEOUT.as_secs() + crate::mcp::runtime::CLOSE_TIMEOUT.as_secs() + 5,
);

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource("/api/mcp").route(super::read_route().to(list_mcp_servers)))
        .service(super::resource("/api/mcp/register").route(web::post().to(register)))
        .service(super::resource("/api/mcp/unregister").route(web::post().to(unregister)))
        .service(
            web::resource("/mcp")
                .route(web::post().to(mcp_post))
                .route(web::get().to(mcp_get))
                .route(web::delete().to(mcp_delete))
                .default_service(web::to(mcp_other)),
        );
}

/// Each MCP server: the configured ones and those plugins registered at run time, apart.
#[utoipa::path(
    get,
    path = "/api/mcp",
    tag = "mcp",
    responses(
        (status = 200, description = "MCP servers by name: configured ones in configuration order, those registered at run time in registration order", body = McpResponse),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 405, description = "Only GET and HEAD are allowed", body = ErrorBody),
    )
)]
async fn list_mcp_servers(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(McpResponse {
        ok: true,
        mcp_servers: state.mcp.configured(),
        runtime_mcp_servers: state.mcp.runtime(),
    }))
}

/// The MCP servers listing.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct McpResponse {
    pub ok: bool,
    /// The configured servers (`[[mcp_server]]`), `{name: server, ...}` in configuration order.
    pub mcp_servers: IndexMap<String, McpServerReport>,
    /// The servers plugins registered (`POST /api/mcp/register`), `{name: server, ...}` in
    /// registration order.
    pub runtime_mcp_servers: IndexMap<String, RuntimeMcpReport>,
}

/// Register an MCP server (Streamable HTTP, on loopback) as a tool source, or replace the one of
/// the same name.
///
/// The server connects, initializes and lists every page of its tools, registers them for the
/// role(s) with the registration's source, and answers once every targeted character's live
/// model session acknowledged them. A server that cannot be reached, or does not speak MCP, is
/// `ok: false` with the step that failed; nothing is registered then.
#[utoipa::path(
    post,
    path = "/api/mcp/register",
    tag = "mcp",
    request_body = McpRegisterBody,
    responses(
        (status = 200, description = "Registered; `ok` is false (with `error`, and `stage` when the server could not be reached) when nothing was registered or no role accepted the tools", body = McpRegisterResponse),
        BodyRouteErrors,
        (status = 401, description = "No `X-Plugin-Token`, and the server requires one ([security] plugin_tokens = \"required\")", body = ErrorBody),
        (status = 404, description = "`role` names no character", body = ErrorBody),
        (status = 503, description = "The tool router or the MCP registry did not answer; retry (registration is idempotent)", body = ErrorBody),
    )
)]
async fn register(
    state: web::Data<AppState>,
    PluginToken(token): PluginToken,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let request = McpRegisterRequest::parse(&body, state.local_addr, |name| {
        state.mcp.is_configured(name)
    })
    .map_err(ApiError::Validation)?;
    let name = request.server.name.clone();
    let wait = request.server.timeout + super::ROUTER_REPLY_TIMEOUT + REGISTER_MARGIN;
    // What the state store keeps of it, when the server keeps state: the body as sent.
    let record = state
        .keeps_state
        .then(|| serde_json::to_string(&body).unwrap_or_default());
    let registered = state
        .mcp_plugins
        .send(RegisterMcpServer {
            registration: request.server,
            token,
            record,
        })
        .timeout(wait)
        .await
        .map_err(unavailable)??;
    Ok(HttpResponse::Ok().json(McpRegisterResponse {
        ok: registered.ok(),
        instance_id: state.events.instance_id().to_owned(),
        registered: name,
        tools: registered.tools,
        skipped: registered.skipped,
        affected_roles: registered.report.affected_roles,
        failed_roles: registered.report.failed_roles,
        error: registered.error,
        stage: registered.stage,
    }))
}

/// The MCP registry did not answer in time, or has stopped.
fn unavailable(e: MailboxError) -> ApiError {
    match e {
        MailboxError::Timeout => ApiError::Unavailable(
            "the MCP registry did not answer in time; the change may or may not have been \
             applied (register and unregister are idempotent: retry)"
                .into(),
        ),
        MailboxError::Closed => ApiError::Unavailable("the MCP registry has stopped".into()),
    }
}

/// The answer to an MCP server's registration.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct McpRegisterResponse {
    /// False when nothing was registered, or no role accepted the tools.
    pub ok: bool,
    /// This server instance's id: a new one means the server restarted.
    pub instance_id: String,
    /// The server's name.
    pub registered: String,
    /// The tools registered, in the server's order.
    pub tools: Vec<String>,
    /// Tools of the server's listing that could not be registered, and why (a name over 64
    /// characters, an unusable `inputSchema`).
    pub skipped: Vec<Skipped>,
    /// Characters that now have the tools (and whose session acknowledged them).
    #[schema(value_type = Vec<String>)]
    pub affected_roles: Vec<RoleName>,
    /// Characters that could not take them, and why.
    pub failed_roles: Vec<RoleFailure>,
    /// Why nothing was registered, naming the step that failed (`connect: ...`,
    /// `initialize: ...`, `tools/list: ...`), or `"no role accepted the registration"`; present
    /// only when `ok` is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub error: Option<String>,
    /// The step that failed when the server could not be reached; present only then.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub stage: Option<McpStage>,
}

/// Remove an MCP server a plugin registered: its tools from every character, its connection
/// closed (its MCP session ended with `DELETE`).
#[utoipa::path(
    post,
    path = "/api/mcp/unregister",
    tag = "mcp",
    request_body = McpUnregisterBody,
    responses(
        (status = 200, description = "Done; `removed` says whether a server of that name was registered", body = McpUnregisterResponse),
        BodyRouteErrors,
        (status = 401, description = "No `X-Plugin-Token`, and the server requires one ([security] plugin_tokens = \"required\")", body = ErrorBody),
        (status = 503, description = "The tool router or the MCP registry did not answer; retry (unregister is idempotent)", body = ErrorBody),
    )
)]
async fn unregister(
    state: web::Data<AppState>,
    PluginToken(token): PluginToken,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let request = McpUnregisterRequest::parse(&body, |name| state.mcp.is_configured(name))
        .map_err(ApiError::Validation)?;
    let unregistered = state
        .mcp_plugins
        .send(UnregisterMcpServer {
            name: request.name.clone(),
            token,
        })
        .timeout(UNREGISTER_TIMEOUT)
        .await
        .map_err(unavailable)??;
    let report = unregistered.report;
    Ok(HttpResponse::Ok().json(McpUnregisterResponse {
        ok: unregistered.removed || report.failed_roles.is_empty(),
        instance_id: state.events.instance_id().to_owned(),
        removed: unregistered.removed,
        name: request.name,
        affected_roles: report.affected_roles,
        failed_roles: report.failed_roles,
    }))
}

/// The answer to an MCP server's unregistration.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct McpUnregisterResponse {
    /// True unless some role failed and nothing was removed.
    pub ok: bool,
    /// This server instance's id: a new one means the server restarted.
    pub instance_id: String,
    /// Whether a server of that name was registered.
    pub removed: bool,
    pub name: String,
    /// Characters its tools were removed from.
    #[schema(value_type = Vec<String>)]
    pub affected_roles: Vec<RoleName>,
    pub failed_roles: Vec<RoleFailure>,
}

/// `/mcp`'s query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct McpQuery {
    /// The character whose tools to serve; the first character (in configuration order) when
    /// absent.
    role: Option<String>,
}

/// The transport of the character a request to `/mcp` names.
fn character(state: &AppState, http: &HttpRequest) -> Result<CharacterMcp, McpHttpError> {
    let query = web::Query::<McpQuery>::from_query(http.query_string()).map_err(|e| {
        McpHttpError::from(ApiError::Validation(vec![FieldError {
            loc: vec!["query".into()],
            msg: format!("query string could not be read: {e}"),
            kind: "query_invalid",
        }]))
    })?;
    let (_, character) = state.mcp_endpoint.service(query.role.as_deref())?;
    Ok(character)
}

/// A character's tools over MCP's Streamable HTTP transport: a JSON-RPC message from an MCP
/// client.
///
/// An `initialize` request (without `Mcp-Session-Id`) opens a session, whose id the answer's
/// `Mcp-Session-Id` header carries; every later message carries it. A request is answered as an
/// event stream carrying the JSON-RPC answer; a notification or a response is accepted (202).
/// Errors are JSON-RPC errors without an id.
#[utoipa::path(
    post,
    path = "/mcp",
    tag = "mcp",
    params(McpQuery),
    request_body(content = Object, description = "One JSON-RPC message (MCP)", content_type = "application/json"),
    responses(
        (status = 200, description = "The JSON-RPC answer, as an event stream", body = String, content_type = "text/event-stream",
            headers(("Mcp-Session-Id" = String, description = "The session (on the answer to `initialize`)"))),
        (status = 202, description = "A notification or response, accepted"),
        (status = 400, description = "Not a JSON-RPC message, or an unsupported `MCP-Protocol-Version`", body = JsonRpcErrorBody),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = JsonRpcErrorBody),
        (status = 404, description = "`role` names no character, or the session is unknown (ended, or let go after 5 minutes without a request, or to make room for a new one): initialize again", body = JsonRpcErrorBody),
        (status = 405, description = "Only POST, GET and DELETE are allowed", body = JsonRpcErrorBody),
        (status = 406, description = "`Accept` must list both `application/json` and `text/event-stream`", body = JsonRpcErrorBody),
        (status = 408, description = "The body did not arrive in full within 10 s", body = JsonRpcErrorBody),
        (status = 413, description = "The body is over 1 MiB", body = JsonRpcErrorBody),
        (status = 422, description = "Not sent as JSON, not JSON (code -32700), a first message that is not `initialize`, or a query that cannot be read", body = JsonRpcErrorBody),
        (status = 503, description = "An `initialize` while the character has `mcp_endpoint.max_sessions` sessions open (64 by default) and none is idle (code -32603)", body = JsonRpcErrorBody),
    )
)]
async fn mcp_post(
    state: web::Data<AppState>,
    http: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, McpHttpError> {
    let character = character(&state, &http)?;
    let mut payload = payload.into_inner();
    let body = read_body(&http, &mut payload, MAX_BODY_BYTES).await?;
    let message = serde_json::from_slice::<&RawValue>(&body).map_err(|e| {
        ApiError::Validation(vec![FieldError::body(
            "",
            "json_invalid",
            format!("JSON decode error: {e}"),
        )])
    })?;
    // A call's arguments go to the tool as the client wrote them, not as the SDK parses them.
    let arguments = exact::tools_call_arguments(message).map(|(_, text)| CallArguments(text));
    // A new session takes a place among the character's, reserved before the transport
    // creates it.
    let opens_session = !http.headers().contains_key(SESSION_HEADER)
        && serde_json::from_str::<MethodHead>(message.get())
            .is_ok_and(|head| head.method.as_deref() == Some("initialize"));
    let served = serve(character.service, &http, Bytes::from(body), arguments);
    if opens_session {
        let reservation = character.sessions.admit()?;
        return with_reservation(reservation, served).await;
    }
    served.await
}

/// The header that names an MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// What tells an `initialize` from other messages.
#[derive(Deserialize)]
struct MethodHead {
    #[serde(default)]
    method: Option<String>,
}

/// The session's stream of the server's own messages (`notifications/tools/list_changed`).
#[utoipa::path(
    get,
    path = "/mcp",
    tag = "mcp",
    params(McpQuery),
    responses(
        (status = 200, description = "The session's event stream", body = String, content_type = "text/event-stream"),
        (status = 400, description = "No `Mcp-Session-Id`", body = JsonRpcErrorBody),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = JsonRpcErrorBody),
        (status = 404, description = "`role` names no character, or the session is unknown: initialize again", body = JsonRpcErrorBody),
        (status = 406, description = "`Accept` must list `text/event-stream`", body = JsonRpcErrorBody),
        (status = 422, description = "The query string could not be read (e.g. `role` twice)", body = JsonRpcErrorBody),
    )
)]
async fn mcp_get(
    state: web::Data<AppState>,
    http: HttpRequest,
) -> Result<HttpResponse, McpHttpError> {
    let character = character(&state, &http)?;
    serve(character.service, &http, Bytes::new(), None).await
}

/// End a session.
#[utoipa::path(
    delete,
    path = "/mcp",
    tag = "mcp",
    params(McpQuery),
    responses(
        (status = 200, description = "The session ended (or was not open)"),
        (status = 400, description = "No `Mcp-Session-Id`", body = JsonRpcErrorBody),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = JsonRpcErrorBody),
        (status = 404, description = "`role` names no character", body = JsonRpcErrorBody),
        (status = 422, description = "The query string could not be read (e.g. `role` twice)", body = JsonRpcErrorBody),
    )
)]
async fn mcp_delete(
    state: web::Data<AppState>,
    http: HttpRequest,
) -> Result<HttpResponse, McpHttpError> {
    let character = character(&state, &http)?;
    let mut ended = serve(character.service, &http, Bytes::new(), None).await?;
    // The transport says 202; MCP's official clients take 200 (or 204) as the session ended.
    if ended.status() == StatusCode::ACCEPTED {
        *ended.status_mut() = StatusCode::OK;
    }
    Ok(ended)
}

/// `/mcp` with another method.
async fn mcp_other() -> Result<HttpResponse, McpHttpError> {
    Err(ApiError::MethodNotAllowed.into())
}

/// Hands the request (with the exact text of a call's `arguments`, when it is a call) to the
/// character's transport and turns its answer into actix-web's.
async fn serve(
    mut service: crate::mcp::http_serve::CharacterService,
    http: &HttpRequest,
    body: Bytes,
    arguments: Option<CallArguments>,
) -> Result<HttpResponse, McpHttpError> {
    let mut request = transport_request(http, body)?;
    if let Some(arguments) = arguments {
        request.extensions_mut().insert(arguments);
    }
    let Ok(response) = service.call(request).await;
    answer(response).await
}

/// The request as the transport reads it: method, target, headers and the body already read.
fn transport_request(
    http: &HttpRequest,
    body: Bytes,
) -> Result<hyper::Request<Full<Bytes>>, McpHttpError> {
    let mut request = hyper::Request::builder()
        .method(http.method().as_str())
        .uri(http.uri().to_string());
    for (name, value) in http.headers() {
        request = request.header(name.as_str(), value.as_bytes());
    }
    request
        .body(Full::new(body))
        .map_err(|e| ApiError::BadRequest(format!("the request could not be read: {e}")).into())
}

/// The transport's answer: a success with its headers and body (an event stream goes out as
/// it comes); a refusal as a JSON-RPC error, with its status and text.
async fn answer(
    response: hyper::Response<BoxBody<Bytes, Infallible>>,
) -> Result<HttpResponse, McpHttpError> {
    let (parts, body) = response.into_parts();
    let status = StatusCode::from_u16(parts.status.as_u16()).map_err(|e| {
        McpHttpError::from(ApiError::Internal(format!(
            "the MCP transport answered oddly: {e}"
        )))
    })?;
    if !status.is_success() {
        // Its refusals are short texts (or a JSON-RPC error), complete at once.
        let bytes = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(refusal(status, &bytes));
    }
    let mut answer = HttpResponse::build(status);
    for (name, value) in &parts.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_str().as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            answer.append_header((name, value));
        }
    }
    if body.size_hint().exact() == Some(0) {
        return Ok(answer.finish());
    }
    let frames = futures_util::stream::unfold(body, |mut body| async move {
        loop {
            match body.frame().await? {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        return Some((Ok::<_, Infallible>(data), body));
                    }
                }
                Err(never) => match never {},
            }
        }
    });
    Ok(answer.streaming(frames))
}

/// A refusal of the transport as a JSON-RPC error: its text (or its own JSON-RPC error's
/// message and code) with its status. A JSON body that is not a JSON-RPC message is a 400 here
/// (the transport says 415, but the content type was right).
fn refusal(status: StatusCode, body: &[u8]) -> McpHttpError {
    let (code, message) = match serde_json::from_slice::<Value>(body) {
        Ok(rpc) => (
            rpc["error"]["code"]
                .as_i64()
                .unwrap_or(rpc_code::INVALID_REQUEST),
            rpc["error"]["message"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| rpc.to_string()),
        ),
        Err(_) => (
            rpc_code::INVALID_REQUEST,
            String::from_utf8_lossy(body).into_owned(),
        ),
    };
    let status = match status {
        StatusCode::UNSUPPORTED_MEDIA_TYPE => StatusCode::BAD_REQUEST,
        other => other,
    };
    let code = if status.is_server_error() {
        rpc_code::INTERNAL_ERROR
    } else {
        code
    };
    McpHttpError {
        status,
        code,
        message,
    }
}

// The request bodies, for the OpenAPI document only: the handlers read them field by field
// (`super::requests`), so these are never constructed.

/// `POST /api/mcp/register`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({
    "name": "weather",
    "url": "http://127.0.0.1:9400/mcp",
    "role": null,
    "source": "plugin:weather",
    "timeout_seconds": 30
}))]
pub(crate) struct McpRegisterBody {
    /// Letters, digits, `-`, `_`, `.`, at most 64 characters; not the name of a configured MCP
    /// server. Registering a name again replaces that server (its connection and its tools).
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9._-]+$")]
    name: String,
    /// The server's Streamable HTTP endpoint: `http` on `localhost`, `127.x.x.x`, `[::1]` or
    /// `[::ffff:127.x.x.x]`, at most 2048 bytes, never this server; anything else is a 422.
    #[schema(
        format = "uri",
        max_length = 2048,
        example = "http://127.0.0.1:9400/mcp"
    )]
    url: String,
    /// One existing character; null or `""` means every current character.
    #[schema(nullable)]
    role: Option<String>,
    /// Lifecycle tag of its tools (`clear` with it removes them and closes the connection); a
    /// `plugin:` source's tools are removed after three calls in a row fail to connect. Another
    /// MCP server's source is a 422.
    #[schema(min_length = 1, default = "mcp:<name>", nullable = false)]
    source: Option<String>,
    /// Greater than 0 and at most 300: bounds the registration's connect, initialize and
    /// listing together, and each `tools/call`.
    #[schema(exclusive_minimum = 0, maximum = 300, default = 30, nullable = false)]
    timeout_seconds: Option<f64>,
    /// For every tool of the server: `blocking` (the default) or `non_blocking`, as for a
    /// tool's registration.
    #[schema(
        default = "blocking",
        nullable = false,
        pattern = "^(blocking|non_blocking)$"
    )]
    behavior: Option<String>,
    /// Which of the server's tools' calls wait for a person's approval: `never` (the
    /// default), `always`, or `destructive` (every tool whose annotations do not say
    /// `readOnlyHint: true`).
    #[schema(
        default = "never",
        nullable = false,
        pattern = "^(never|always|destructive)$"
    )]
    approval: Option<String>,
    /// For each of the server's tools (each its own bound, not the server's): at most this
    /// many of its calls run at once, 1 to 1,024, as for a tool's registration. Null or absent:
    /// no bound.
    #[schema(minimum = 1, maximum = 1024, nullable = true)]
    max_concurrent: Option<u32>,
    /// For each of the server's tools: at most `calls` calls in any `per_seconds` seconds, as
    /// for a tool's registration. Null or absent: no bound.
    #[schema(nullable = true)]
    rate: Option<super::tools::RateBody>,
    /// For each of the server's tools: 0 to 300, as for a tool's registration.
    #[schema(minimum = 0, maximum = 300, default = 0, nullable = false)]
    dedupe_seconds: Option<u32>,
}

/// `POST /api/mcp/unregister`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({"name": "weather"}))]
pub(crate) struct McpUnregisterBody {
    /// A server registered with `POST /api/mcp/register` (a configured one is a 422).
    #[schema(min_length = 1, max_length = 64)]
    name: String,
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::*;
    use crate::mcp::runtime::McpPluginError;

    fn body(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    fn server() -> std::net::SocketAddr {
        "127.0.0.1:48911".parse().unwrap()
    }

    fn fields(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(|e| e.loc.join(".")).collect()
    }

    #[test]
    fn a_registration_defaults_its_source_to_its_name() {
        let r = McpRegisterRequest::parse(
            &body(json!({"name": "weather", "url": "http://127.0.0.1:9400/mcp"})),
            server(),
            |_| false,
        )
        .unwrap()
        .server;
        assert_eq!(
            (r.name.as_str(), r.source.as_str(), r.role, r.timeout),
            ("weather", "mcp:weather", None, Duration::from_secs(30))
        );
        assert_eq!(r.url.as_written(), "http://127.0.0.1:9400/mcp");
    }

    #[test]
    fn every_bad_field_of_a_registration_is_named() {
        let errors = McpRegisterRequest::parse(
            &body(
                json!({"name": "a b", "url": "http://example.com/mcp", "role": 1,
                         "source": "", "timeout_seconds": 0}),
            ),
            server(),
            |_| false,
        )
        .unwrap_err();
        assert_eq!(
            fields(&errors),
            [
                "body.name",
                "body.url",
                "body.role",
                "body.source",
                "body.timeout_seconds"
            ]
        );
        assert_eq!(errors[0].kind, "string_pattern_mismatch");
        assert_eq!(
            errors[1].msg,
            "Value error, url host \"example.com\" is not loopback: MCP servers must be on \
             loopback; use http:// with host localhost, 127.x.x.x, [::1] or \
             [::ffff:127.x.x.x], e.g. http://127.0.0.1:9400/mcp"
        );
        let long = "n".repeat(65);
        let errors = McpRegisterRequest::parse(
            &body(json!({"name": long, "url": "https://127.0.0.1:9400/mcp"})),
            server(),
            |_| false,
        )
        .unwrap_err();
        assert_eq!(fields(&errors), ["body.name", "body.url"]);
        assert_eq!(errors[0].kind, "string_too_long");
        assert!(errors[1].msg.contains("only http://"), "{}", errors[1].msg);
    }

    #[test]
    fn this_servers_own_url_and_a_configured_name_are_refused() {
        let errors = McpRegisterRequest::parse(
            &body(json!({"name": "time", "url": "http://localhost:48911/mcp"})),
            server(),
            |name| name == "time",
        )
        .unwrap_err();
        assert_eq!(fields(&errors), ["body.name", "body.url"]);
        assert_eq!(
            errors[0].msg,
            "Value error, \"time\" is an MCP server of the configuration ([[mcp_server]]): a \
             plugin's MCP server needs a name of its own"
        );
        assert!(
            errors[1]
                .msg
                .starts_with("Value error, url points at this server itself (127.0.0.1:48911)"),
            "{}",
            errors[1].msg
        );
        let errors = McpUnregisterRequest::parse(&body(json!({"name": "time"})), |n| n == "time")
            .unwrap_err();
        assert_eq!(fields(&errors), ["body.name"]);
        let ok = McpUnregisterRequest::parse(&body(json!({"name": "weather"})), |_| false);
        assert_eq!(ok.unwrap().name, "weather");
    }

    #[test]
    fn a_registration_refused_for_what_is_registered_is_a_422_naming_the_field() {
        let too_many = ApiError::from(McpPluginError::TooMany);
        assert_eq!(
            actix_web::ResponseError::status_code(&too_many),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        let ApiError::Validation(fields) = too_many else {
            panic!("not a validation error");
        };
        assert_eq!(
            (fields[0].loc.join("."), fields[0].msg.as_str()),
            (
                "body.name".to_owned(),
                "Value error, 256 MCP servers are registered already (the most at once): \
                 unregister one first"
            )
        );
    }

    #[test]
    fn the_transports_refusals_become_json_rpc_errors() {
        let not_found = refusal(StatusCode::NOT_FOUND, b"Not Found: Session not found");
        assert_eq!(
            not_found,
            McpHttpError {
                status: StatusCode::NOT_FOUND,
                code: rpc_code::INVALID_REQUEST,
                message: "Not Found: Session not found".into()
            }
        );
        let rpc = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"Invalid Request: version"}}"#;
        assert_eq!(
            refusal(StatusCode::BAD_REQUEST, rpc).message,
            "Invalid Request: version"
        );
        let not_rpc = refusal(StatusCode::UNSUPPORTED_MEDIA_TYPE, b"fail to deserialize");
        assert_eq!(not_rpc.status, StatusCode::BAD_REQUEST);
        let parse = McpHttpError::from(ApiError::Validation(vec![FieldError::body(
            "",
            "json_invalid",
            "JSON decode error: x",
        )]));
        assert_eq!(
            (parse.status, parse.code),
            (StatusCode::UNPROCESSABLE_ENTITY, rpc_code::PARSE_ERROR)
        );
        let body = actix_web::ResponseError::error_response(&not_found);
        assert_eq!(body.status(), StatusCode::NOT_FOUND);
    }
}
