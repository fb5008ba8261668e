//! `GET /api/sessions` (each character's sessions and their connections), and
//! `POST /api/sessions/attach` / `POST /api/sessions/detach` (joining a live call the app started
//! elsewhere, and leaving it).

use actix_web::{HttpResponse, web};
use indexmap::IndexMap;
use serde::Serialize;
use utoipa::ToSchema;

use super::body::JsonObject;
use super::error::{ApiError, BodyRouteErrors, ErrorBody};
use super::requests::{AttachRequest, DetachRequest};
use super::{AppState, ask_router};
use crate::actors::manager::SessionReport;
use crate::actors::router::{AttachCall, DetachCall, ListSessions};

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource("/api/sessions").route(super::read_route().to(list_sessions)))
        .service(super::resource("/api/sessions/attach").route(web::post().to(attach)))
        .service(super::resource("/api/sessions/detach").route(web::post().to(detach)));
}
/// Each character's sessions: the summary (state, last sync, acknowledged tools) and every
/// connection (the server's own, relays, attachments, in-process ones).
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
pub(crate) struct SessionsResponse {
    pub ok: bool,
    /// `{role: session, ...}`, roles in configuration order (`state: "none"` without a session).
    pub sessions_by_role: IndexMap<String, SessionReport>,
}

/// Join a live call the app started elsewhere (WebRTC or SIP) for a character: a second
/// websocket to the call's session, whose tools get the character's registered tools merged in
/// (the call's own tools are kept) and whose calls of registered tools the server answers.
///
/// Returns once the call took the tools (or refused them, or did not answer in time). The
/// attachment ends when the call ends, or on detach.
#[utoipa::path(
    post,
    path = "/api/sessions/attach",
    tag = "sessions",
    request_body = AttachBody,
    responses(
        (status = 200, description = "Attached; `ok` is false (with `error`) when the call did not take the tools", body = AttachResponse),
        BodyRouteErrors,
        (status = 404, description = "`role` names no character", body = ErrorBody),
        (status = 409, description = "The character is attached to as many calls as its configuration allows (`max_attachments`)", body = ErrorBody),
        (status = 502, description = "The call's websocket could not be opened", body = ErrorBody),
        (status = 503, description = "The router or the character's session manager did not answer, or the server is stopping", body = ErrorBody),
    )
)]
async fn attach(
    state: web::Data<AppState>,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let request = AttachRequest::parse(&body).map_err(ApiError::Validation)?;
    let url = request.url.as_written().to_owned();
    let joined = ask_router(
        &state,
        AttachCall {
            role: request.role.clone(),
            url: request.url,
            api_key_env: request.api_key_env,
        },
    )
    .await??;
    let synced = joined
        .map_err(|e| ApiError::BadGateway(format!("could not join the call at {url}: {e}")))?;
    Ok(HttpResponse::Ok().json(AttachResponse {
        ok: synced.is_ok(),
        role: request.role,
        url,
        error: synced.err().map(|e| e.to_string()),
    }))
}

/// The answer to an attach.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttachResponse {
    /// Whether the call took the character's tools.
    pub ok: bool,
    pub role: String,
    /// The call's URL, as given.
    pub url: String,
    /// Why the call did not take the tools, present only when `ok` is false. The attachment
    /// stays open: the next change is sent to it again.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub error: Option<String>,
}

/// Leave a call joined with attach.
#[utoipa::path(
    post,
    path = "/api/sessions/detach",
    tag = "sessions",
    request_body = DetachBody,
    responses(
        (status = 200, description = "Done; `detached` says whether the character was attached to that call", body = DetachResponse),
        BodyRouteErrors,
        (status = 404, description = "`role` names no character", body = ErrorBody),
        (status = 503, description = "The router or the character's session manager did not answer", body = ErrorBody),
    )
)]
async fn detach(
    state: web::Data<AppState>,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let request = DetachRequest::parse(&body).map_err(ApiError::Validation)?;
    let detached = ask_router(
        &state,
        DetachCall {
            role: request.role.clone(),
            url: request.url.clone(),
        },
    )
    .await??;
    Ok(HttpResponse::Ok().json(DetachResponse {
        ok: true,
        role: request.role,
        url: request.url,
        detached,
    }))
}

/// The answer to a detach.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DetachResponse {
    /// Always `true`: leaving a call the character is not in is not an error.
    pub ok: bool,
    pub role: String,
    pub url: String,
    /// Whether the character was attached to that call (and now is not).
    pub detached: bool,
}

// The request bodies, for the OpenAPI document only: the handlers read them field by field
// (`super::requests`), so these are never constructed.

/// `POST /api/sessions/attach`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({
    "role": "Mio",
    "url": "wss://api.openai.com/v1/realtime?call_id=rtc_123",
    "api_key_env": null
}))]
pub(crate) struct AttachBody {
    /// The character whose tools the call gets.
    #[schema(min_length = 1)]
    role: String,
    /// The call's websocket: `wss://` to a host the character's configuration names
    /// (`attach_hosts`, by default `api.openai.com`), or `ws://` on loopback only, written
    /// plainly.
    #[schema(
        format = "uri",
        example = "wss://api.openai.com/v1/realtime?call_id=rtc_123"
    )]
    url: String,
    /// Name of an environment variable of the server holding the API key, sent as
    /// `Authorization: Bearer <key>`: the character's own `api_key_env` or one of its
    /// `attach_api_key_envs`, and only to a `wss://` provider host or the character's own session
    /// endpoint; any other name is a 422, alike whether the variable exists or not.
    #[schema(nullable)]
    api_key_env: Option<String>,
}

/// `POST /api/sessions/detach`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({"role": "Mio", "url": "wss://api.openai.com/v1/realtime?call_id=rtc_123"}))]
pub(crate) struct DetachBody {
    #[schema(min_length = 1)]
    role: String,
    /// The URL the call was attached with.
    #[schema(min_length = 1)]
    url: String,
}
