//! `GET /api/mcp`: the state of each configured MCP server, read from the board its client
//! actor keeps (no message: the board is shared for reading, as the listing reads the
//! `Directory`).

use actix_web::{HttpResponse, web};
use indexmap::IndexMap;
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, ErrorBody};
use crate::mcp::status::McpServerReport;

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource("/api/mcp").route(super::read_route().to(list_mcp_servers)));
}

/// Each configured MCP server: connection state, its tools, the last error.
#[utoipa::path(
    get,
    path = "/api/mcp",
    tag = "mcp",
    responses(
        (status = 200, description = "MCP servers by name, in configuration order", body = McpResponse),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 405, description = "Only GET and HEAD are allowed", body = ErrorBody),
    )
)]
async fn list_mcp_servers(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(McpResponse {
        ok: true,
        mcp_servers: state.mcp.reports(),
    }))
}

/// The MCP servers listing.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct McpResponse {
    pub ok: bool,
    /// `{name: server, ...}`, in configuration order.
    pub mcp_servers: IndexMap<String, McpServerReport>,
}
