//! The person's side of approvals: `GET /api/approvals` lists the calls that wait for a
//! decision, `POST /api/approvals/{id}` decides one. Only these routes decide: no tool, MCP
//! method or model output reaches the store's decision, and the model never sees an id.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use super::body::JsonObject;
use super::error::{ApiError, BodyRouteErrors, ErrorBody, ValidationErrorBody};
use super::operator::{AsOperator, Decide};
use super::requests::DecisionRequest;
use crate::domain::connection::{Caller, ConnectionKind};
use crate::policy::{DecideError, PendingApproval};

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        super::resource("/api/approvals")
            .app_data(super::query_config())
            .route(super::read_route().to(list)),
    )
    .service(super::resource("/api/approvals/{id}").route(web::post().to(decide)));
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ApprovalsQuery {
    /// Only this character's pending approvals; every character's when absent or empty.
    role: Option<String>,
}

/// The calls that wait for a person's approval now, oldest first.
#[utoipa::path(
    get,
    path = "/api/approvals",
    tag = "approvals",
    params(ApprovalsQuery),
    responses(
        (status = 200, description = "The pending approvals", body = ApprovalsResponse),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 404, description = "`role` names no character", body = ErrorBody),
        (status = 405, description = "Only GET is allowed", body = ErrorBody),
        (status = 422, description = "The query string could not be read (e.g. `role` twice)", body = ValidationErrorBody),
    )
)]
async fn list(
    state: web::Data<AppState>,
    query: web::Query<ApprovalsQuery>,
) -> Result<HttpResponse, ApiError> {
    let role = query.into_inner().role.filter(|r| !r.is_empty());
    if let Some(role) = &role {
        state.directory.list(Some(role))?;
    }
    let approvals = state.policy.pending_approvals(role.as_deref());
    Ok(HttpResponse::Ok().json(ApprovalsResponse { approvals }))
}

/// Approve or deny a pending call. Single use: a second decision, or one after the approval
/// expired or was cancelled, is a 409 that says which.
#[utoipa::path(
    post,
    path = "/api/approvals/{id}",
    tag = "approvals",
    params(("id" = String, Path, description = "The approval's id (`apr_...`), from `GET /api/approvals` or `approval.requested`")),
    request_body = DecisionBody,
    responses(
        (status = 200, description = "Decided: the call runs (approve) or is answered as declined (deny)", body = DecisionResponse),
        BodyRouteErrors,
        (status = 401, description = "No `Authorization: Bearer` operator token (unless `[security] decisions = \"loopback\"`); the detail says where the token is", body = ErrorBody),
        (status = 403, description = "The bearer token is not the operator token (a plugin's token is not), or the caller is not on loopback", body = ErrorBody),
        (status = 404, description = "No approval of this id", body = ErrorBody),
        (status = 409, description = "It was already decided, expired or was cancelled (the detail says which)", body = ErrorBody),
    )
)]
async fn decide(
    // First: the credential is checked before the body is read.
    _: AsOperator<Decide>,
    state: web::Data<AppState>,
    id: web::Path<String>,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let request = DecisionRequest::parse(&body).map_err(ApiError::Validation)?;
    let id = id.into_inner();
    match state
        .policy
        .decide_approval(&id, request.approve, request.reason)
    {
        Ok(()) => Ok(HttpResponse::Ok().json(DecisionResponse {
            ok: true,
            id,
            decision: if request.approve { "approve" } else { "deny" },
        })),
        Err(DecideError::Unknown) => Err(ApiError::NotFound(format!("no approval with id {id}"))),
        Err(DecideError::Ended(how)) => Err(ApiError::Conflict(format!(
            "approval {id} was {}: a decision is taken once, while the call waits",
            how.already()
        ))),
    }
}

/// `GET /api/approvals`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ApprovalsResponse {
    #[schema(value_type = Vec<ApprovalView>)]
    approvals: Vec<PendingApproval>,
}

/// A pending approval (also the data of `approval.requested`).
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) struct ApprovalView {
    /// `apr_` and 128 random bits in hex.
    id: String,
    role: String,
    tool: String,
    source: String,
    call_id: String,
    caller: Caller,
    /// The kind of session whose model made the call; absent for an `/mcp` call.
    kind: Option<ConnectionKind>,
    /// The arguments as the model sent them, parsed: the call that runs after approval uses
    /// exactly these.
    arguments: serde_json::Map<String, serde_json::Value>,
    /// Lowercase hex SHA-256 of the exact argument text the model sent.
    arguments_sha256: String,
    /// The registration the call was made under; a new registration of the tool cancels it.
    generation: u64,
    timeout_seconds: u64,
    /// RFC 3339, UTC.
    requested_at: String,
    /// RFC 3339, UTC: when it expires unanswered (the model is then told nobody answered).
    expires_at: String,
}

/// A decision on a pending approval.
#[derive(Debug, ToSchema)]
#[schema(example = json!({"decision": "deny", "reason": "not now"}))]
#[allow(dead_code)]
pub(crate) struct DecisionBody {
    /// `approve` or `deny`.
    #[schema(pattern = "^(approve|deny)$")]
    decision: String,
    /// Why (shown to the model on a denial); at most 1,024 characters.
    #[schema(max_length = 1024)]
    reason: Option<String>,
}

/// The answer to a decision.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DecisionResponse {
    ok: bool,
    id: String,
    /// `approve` or `deny`, as decided.
    decision: &'static str,
}
