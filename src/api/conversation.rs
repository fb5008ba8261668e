//! What plugins add to a live conversation besides their answers:
//! `POST /api/tools/calls/{call_id}/progress` (a running call's progress, told to the model
//! of the session that runs it and announced as `tool.progress`) and
//! `POST /api/sessions/context` (a plugin's text for the conversations of a character, or of
//! every character, announced as `context.added` with the source its token binds). Under
//! `plugin_tokens = "required"` both need the token of a bound source.

use actix_web::{HttpResponse, web};
use serde::Serialize;
use utoipa::ToSchema;

use super::body::JsonObject;
use super::error::{ApiError, BodyRouteErrors, ErrorBody};
use super::requests::{ContextRequest, ProgressRequest};
use super::token::PluginToken;
use super::{AppState, ask_router};
use crate::actors::change::RoleFailure;
use crate::actors::router::AddContextTo;
use crate::dispatch::CallProgress;
use crate::domain::ownership::Credential;
use crate::domain::role::RoleName;
use crate::events::{ContextAdded, ToolProgress};
use crate::session::AddContext;

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        super::resource("/api/tools/calls/{call_id}/progress").route(web::post().to(progress)),
    )
    .service(super::resource("/api/sessions/context").route(web::post().to(context)));
}

/// Report a running call's progress. In a live session the model gets it as a `system` message
/// that names the tool (and, with `speak`, is asked to speak of it when the session is idle); in
/// Gemini Live as a client content turn; in text chat only the event stream (`tool.progress`)
/// shows it.
#[utoipa::path(
    post,
    path = "/api/tools/calls/{call_id}/progress",
    tag = "tools",
    params(("call_id" = String, Path, description = "The running call's id, as its callback received it")),
    request_body = ProgressBody,
    responses(
        (status = 200, description = "Reported", body = ProgressResponse),
        BodyRouteErrors,
        (status = 401, description = "No `X-Plugin-Token`, and the server requires one", body = ErrorBody),
        (status = 404, description = "No call of this id is running", body = ErrorBody),
    )
)]
async fn progress(
    state: web::Data<AppState>,
    call_id: web::Path<String>,
    PluginToken(token): PluginToken,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let request = ProgressRequest::parse(&body).map_err(ApiError::Validation)?;
    let call_id = call_id.into_inner();
    let who = Credential::Plugin(token);
    // A server that requires a token (of a bound source) says so before it says whether the
    // call runs.
    state.owners.with(|owners| owners.reporter(who))?;
    let not_running = || ApiError::NotFound(format!("no call with call_id {call_id} is running"));
    let Some(place) = state.dispatcher.board().find(&call_id) else {
        return Err(not_running());
    };
    state.owners.authorize(who, [place.source.as_str()], None)?;
    let delivered = match &place.session {
        Some(session) => {
            let told = session
                .send(CallProgress {
                    call_id: call_id.clone(),
                    message: request.message.clone(),
                    speak: request.speak,
                })
                .await;
            // The call ended (or its session did) between the lookup and now.
            if !matches!(told, Ok(Some(_))) {
                return Err(not_running());
            }
            true
        }
        None => false,
    };
    state.events.tool_progress(&ToolProgress {
        role: &place.role,
        tool: &place.tool,
        call_id: &call_id,
        message: &request.message,
        speak: request.speak,
        delivered,
    });
    Ok(HttpResponse::Ok().json(ProgressResponse {
        ok: true,
        role: place.role,
        tool: place.tool,
        delivered,
    }))
}

/// A running call's progress.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) struct ProgressBody {
    /// 1 to 2,048 characters.
    #[schema(min_length = 1, max_length = 2048)]
    message: String,
    /// Ask the model to speak of it when the session is idle (default: it is only told).
    #[schema(default = false)]
    speak: Option<bool>,
}

/// The answer to a progress report.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ProgressResponse {
    pub ok: bool,
    /// The character whose session runs the call.
    pub role: String,
    /// The call's tool.
    pub tool: String,
    /// The model was told (a live session); false for a call of text chat, whose progress only
    /// the event stream shows.
    pub delivered: bool,
}

/// Add a plugin's text to the live conversations of a character (or of every character with a
/// live session): each session's model gets it as a `system` message; with `respond` it is
/// asked to answer (when the session is idle, or at once with `scheduling: "interrupt"`). A
/// character's text chat keeps it (the latest 16, for an hour) for its next request.
#[utoipa::path(
    post,
    path = "/api/sessions/context",
    tag = "sessions",
    request_body = ContextBody,
    responses(
        (status = 200, description = "Told; `ok` is false when no character took it", body = ContextResponse),
        BodyRouteErrors,
        (status = 401, description = "No `X-Plugin-Token`, and the server requires one", body = ErrorBody),
        (status = 404, description = "`role` names no character", body = ErrorBody),
        (status = 503, description = "The router did not answer", body = ErrorBody),
    )
)]
async fn context(
    state: web::Data<AppState>,
    PluginToken(token): PluginToken,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let request = ContextRequest::parse(&body).map_err(ApiError::Validation)?;
    // Whose text it is: the source the token binds (needed under `plugin_tokens = "required"`).
    let source = state
        .owners
        .with(|owners| owners.reporter(Credential::Plugin(token)))?;
    let text: std::sync::Arc<str> = request.text.into();
    let report = ask_router(
        &state,
        AddContextTo {
            role: request.role.clone(),
            context: AddContext {
                text: text.clone(),
                respond: request.respond,
            },
        },
    )
    .await??;
    state.events.context_added(
        &ContextAdded {
            source: source.as_deref(),
            role: request.role.as_deref(),
            text: &text,
            respond: request.respond.is_some(),
            affected_roles: &report.affected_roles,
            failed_roles: &report.failed_roles,
        },
        &report.failed_role_names(),
    );
    Ok(HttpResponse::Ok().json(ContextResponse {
        ok: !report.affected_roles.is_empty(),
        affected_roles: report.affected_roles,
        failed_roles: report.failed_roles,
    }))
}

/// A plugin's text for the conversation.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) struct ContextBody {
    /// One character; null or `""`: every character with a live session.
    #[schema(nullable)]
    role: Option<String>,
    /// 1 to 8,192 characters.
    #[schema(min_length = 1, max_length = 8192)]
    text: String,
    /// Ask the model to answer it (default: it is only told).
    #[schema(default = false)]
    respond: Option<bool>,
    /// With `respond`: `when_idle` (default), `interrupt` (cancel a response in progress and
    /// answer at once) or `silent`.
    #[schema(default = "when_idle", pattern = "^(when_idle|silent|interrupt)$")]
    scheduling: Option<String>,
}

/// The answer to a context: shaped like a registration's.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ContextResponse {
    /// False when no character took it.
    pub ok: bool,
    /// Characters whose live sessions were told (or whose text chat keeps it).
    #[schema(value_type = Vec<String>)]
    pub affected_roles: Vec<RoleName>,
    /// Characters that could not take it, and why (e.g. no live session).
    pub failed_roles: Vec<RoleFailure>,
}
