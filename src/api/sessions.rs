//! `GET /api/sessions`: each character's model-session state and last sync.

use actix_web::{HttpResponse, web};
use indexmap::IndexMap;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody};
use super::{AppState, ask_router};
use crate::actors::router::ListSessions;
use crate::session::SessionReport;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource("/api/sessions").route(super::read_route().to(list_sessions)));
}

/// Each character's live model session: connection state, last sync, acknowledged tools.
#[utoipa::path(
    get,
    path = "/api/sessions",
    tag = "sessions",
    responses(
        (status = 200, description = "Sessions by character, in configuration order", body = SessionsResponse),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 405, description = "Only GET and HEAD are allowed", body = ErrorBody),
        (status = 503, description = "The router did not answer", body = ErrorBody),
    )
)]
async fn list_sessions(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let reports = ask_router(&state, ListSessions).await?;
    Ok(HttpResponse::Ok().json(SessionsResponse {
        ok: true,
        sessions_by_role: reports.into_iter().collect(),
    }))
}

/// The sessions listing.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionsResponse {
    pub ok: bool,
    /// `{role: session, ...}`, roles in configuration order (`state: "none"` without a session).
    pub sessions_by_role: IndexMap<String, SessionReport>,
}
