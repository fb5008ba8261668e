//! `GET /api/health`: whether the server answers, which instance it is (a new `instance_id`
//! means it restarted), how many tools it restored from its state store and how many of them
//! are still dormant, whether the state store writes its file, and who may decide an approval.
//! A plugin polls it, or reads `instance_id` from any change's answer, to learn of a restart
//! without the event stream.

use actix_web::{HttpResponse, web};
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::error::{ApiError, ErrorBody};
use crate::domain::operator::Decisions;

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource("/api/health").route(super::read_route().to(health)));
}

/// The server's identity and what it restored.
#[utoipa::path(
    get,
    path = "/api/health",
    tag = "observability",
    responses(
        (status = 200, description = "The server answers", body = HealthResponse),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 405, description = "Only GET and HEAD are allowed", body = ErrorBody),
    )
)]
async fn health(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(HealthResponse {
        ok: true,
        instance_id: state.events.instance_id(),
        started_at: state.events.started_at(),
        version: env!("CARGO_PKG_VERSION"),
        restored: state.restored,
        dormant: state.directory.dormant(),
        state: state.store_status.as_ref().map_or("off", |s| s.name()),
        decisions: state.operator.decisions(),
    }))
}

/// The answer of `GET /api/health`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HealthResponse<'a> {
    pub ok: bool,
    /// Random per server start: a new one means the server restarted (register again).
    pub instance_id: &'a str,
    /// When this instance started (RFC 3339, UTC).
    pub started_at: &'a str,
    /// The server's version.
    pub version: &'a str,
    /// Tools read back from the state store at start (0 without `--state`).
    pub restored: usize,
    /// Restored tools still dormant (waiting for their owner's token, or for their callback to
    /// answer HTTP).
    pub dormant: usize,
    /// The state store (`--state`): `"ok"` while it writes its file, `"failing"` from a commit
    /// that failed (every change is then refused with 503, and none is made) until one
    /// succeeds again; `"off"` without `--state`.
    #[schema(example = "ok")]
    pub state: &'static str,
    /// Who may decide an approval: `operator` (with the operator token) or `loopback` (any
    /// local caller: `[security] decisions = "loopback"`).
    #[schema(value_type = String, pattern = "^(operator|loopback)$")]
    pub decisions: Decisions,
}
