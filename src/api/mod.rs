//! The HTTP API: thin actix-web handlers over the router.
//!
//! Every route runs behind the loopback guard; each route module exposes `configure`, and
//! [`configure`] composes the whole tree. Handlers parse, send one message with a timeout, and
//! map the reply; [`error`] is the one place errors become status codes. The inspector page
//! (`GET /` and its assets) is served from here too, as embedded files, and so is `/mcp`, a
//! character's tools over MCP's Streamable HTTP transport (adapted to rmcp's tower service).

mod approvals;
pub(crate) mod body;
mod chat;
mod conversation;
pub(crate) mod error;
mod events;
mod gemini;
pub(crate) mod guard;
mod health;
mod inspector;
mod invoke;
mod mcp;
mod observe;
pub(crate) mod openapi;
pub(crate) mod operator;
#[cfg(test)]
mod properties;
pub(crate) mod realtime;
mod reports;
pub(crate) mod requests;
mod search;
mod sessions;
mod sources;
mod token;
mod tools;

use std::time::Duration;

use actix::prelude::*;
use actix_web::{HttpResponse, web};

use crate::actors::router::{Directory, MANAGER_REPLY_TIMEOUT, Router};
use crate::dispatch::Dispatcher;
use crate::domain::ownership::SharedOwners;
use crate::events::EventHub;
use crate::mcp::http_serve::McpEndpoint;
use crate::mcp::runtime::McpPlugins;
use crate::mcp::status::McpBoard;
use crate::policy::Policy;
use crate::session::settings::MAX_SYNC_TIMEOUT;
use crate::session::shell::MODEL_CONNECT_TIMEOUT;
use error::ApiError;

/// How long a handler waits for the router: longer than the router's own wait for any manager
/// (a session's sync timeout is at most [`MAX_SYNC_TIMEOUT`], after the websocket handshake of
/// an attachment, at most [`MODEL_CONNECT_TIMEOUT`]), so the router's per-character report, not this
/// backstop, is what a slow character produces.
pub(crate) const ROUTER_REPLY_TIMEOUT: Duration = Duration::from_secs(
    MODEL_CONNECT_TIMEOUT.as_secs()
        + if MANAGER_REPLY_TIMEOUT.as_secs() > MAX_SYNC_TIMEOUT.as_secs() {
            MANAGER_REPLY_TIMEOUT.as_secs()
        } else {
            MAX_SYNC_TIMEOUT.as_secs()
        }
        + 5,
);

/// What every handler shares.
pub(crate) struct AppState {
    /// The person's credential, which the operator routes (deciding an approval) require.
    pub operator: operator::Operator,
    pub router: Addr<Router>,
    pub dispatcher: Dispatcher,
    /// Every character's published tools, read directly by the listing and the invoke route.
    pub directory: Directory,
    /// The change events: subscribed to by `GET /api/events`, published to by invoke.
    pub events: EventHub,
    /// The call policy: what a call passes before it runs; the approval routes list and decide
    /// on it.
    pub policy: Policy,
    /// Interval of the keep-alive comment on an idle event stream.
    pub keep_alive: Duration,
    /// Each MCP server's state, read by `GET /api/mcp`.
    pub mcp: McpBoard,
    /// The MCP servers plugins register at run time (`POST /api/mcp/register`, `unregister`).
    pub mcp_plugins: Addr<McpPlugins>,
    /// A character's tools over MCP's Streamable HTTP transport (`/mcp`).
    pub mcp_endpoint: McpEndpoint,
    /// The address the server listens on: register refuses callbacks that point here.
    pub local_addr: std::net::SocketAddr,
    /// Which sources are bound to a plugin's token (the router's): progress for a call passes it.
    pub owners: SharedOwners,
    /// Whether registrations are kept in a state store (`--state`): a registration's body is
    /// then passed on for it.
    pub keeps_state: bool,
    /// How many tools were restored from the state store at start.
    pub restored: usize,
    /// Whether the state store writes its file (`None`: no `--state`).
    pub store_status: Option<crate::state::StoreStatus>,
}

/// The whole route tree.
pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.configure(tools::configure)
        .configure(search::configure)
        .configure(approvals::configure)
        .configure(conversation::configure)
        .configure(invoke::configure)
        .configure(sessions::configure)
        .configure(sources::configure)
        .configure(realtime::configure)
        .configure(gemini::configure)
        .configure(chat::configure)
        .configure(events::configure)
        .configure(mcp::configure)
        .configure(observe::configure)
        .configure(health::configure)
        .configure(openapi::configure)
        .configure(inspector::configure);
}

/// The route of a read: GET, and HEAD answered as GET without the body (actix-http drops the
/// body of an answer to HEAD and keeps its `Content-Length`).
fn read_route() -> actix_web::Route {
    web::route().guard(actix_web::guard::Any(actix_web::guard::Get()).or(actix_web::guard::Head()))
}

/// A resource whose other methods answer 405 with a JSON body.
fn resource(path: &str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(|| async {
        Err::<HttpResponse, _>(ApiError::MethodNotAllowed)
    }))
}

/// How the `GET` routes read their query string: one that serde cannot read (e.g. `role` twice)
/// gets a JSON 422 like every other malformed request, not actix's plain-text 400.
fn query_config() -> web::QueryConfig {
    web::QueryConfig::default().error_handler(|e, _| {
        ApiError::Validation(vec![error::FieldError {
            loc: vec!["query".into()],
            msg: format!("query string could not be read: {e}"),
            kind: "query_invalid",
        }])
        .into()
    })
}

/// The W3C trace context (`traceparent`, `tracestate`) a request came with, when valid: the
/// parent of the spans it causes.
fn incoming_trace(request: &actix_web::HttpRequest) -> Option<opentelemetry::trace::SpanContext> {
    let headers = request.headers();
    crate::observe::trace::incoming(|name| headers.get(name).and_then(|v| v.to_str().ok()))
}

/// The answer for paths that do not exist.
pub(crate) async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound("Not Found".into()))
}

/// Sends one message to the router, bounded by [`ROUTER_REPLY_TIMEOUT`].
async fn ask_router<M>(state: &AppState, msg: M) -> Result<M::Result, ApiError>
where
    M: Message + Send + 'static,
    M::Result: Send,
    Router: Handler<M>,
{
    state
        .router
        .send(msg)
        .timeout(ROUTER_REPLY_TIMEOUT)
        .await
        .map_err(|e| match e {
            MailboxError::Timeout => ApiError::Unavailable(
                "the tool router did not answer in time; the change may or may not have been \
                 applied (register, unregister and clear are idempotent: retry)"
                    .into(),
            ),
            MailboxError::Closed => ApiError::Unavailable("the tool router has stopped".into()),
        })
}

/// An MCP server registration read back from the state store: its stored body, parsed as
/// `POST /api/mcp/register` parses a new one (`configured` names the configured servers).
pub(crate) fn restore_mcp_server(
    body: &str,
    local_addr: std::net::SocketAddr,
    configured: impl Fn(&str) -> bool,
) -> Result<crate::mcp::runtime::McpRegistration, String> {
    let body: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(body).map_err(|e| format!("not a JSON object: {e}"))?;
    requests::McpRegisterRequest::parse(&body, local_addr, configured)
        .map(|request| request.server)
        .map_err(|fields| field_errors(&fields))
}

/// Field errors as one line.
fn field_errors(fields: &[error::FieldError]) -> String {
    fields
        .iter()
        .map(|f| format!("{}: {}", f.loc.join("."), f.msg))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A tool read back from the state store: its stored registration body, read by the same
/// parser as a new registration (so a field a later version added is read the same way). The
/// error names the fields that fail.
pub(crate) fn restore_tool(
    body: &str,
    local_addr: std::net::SocketAddr,
) -> Result<crate::domain::tool::ToolSpec, String> {
    let body: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(body).map_err(|e| format!("not a JSON object: {e}"))?;
    requests::RegisterRequest::parse(body, local_addr)
        .map(|request| request.tool)
        .map_err(|fields| field_errors(&fields))
}
