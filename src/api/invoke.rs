//! `POST /api/tools/invoke`: runs the same dispatch a model's call triggers, by hand.

use actix_web::{HttpResponse, web};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::AppState;
use super::body::JsonObject;
use super::error::{ApiError, BodyRouteErrors, ErrorBody};
use super::requests::InvokeRequest;
use crate::domain::call::ToolCall;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource("/api/tools/invoke").route(web::post().to(invoke)));
}

/// Run a registered tool by hand, exactly as a model's call would, and return the result the
/// model would see.
#[utoipa::path(
    post,
    path = "/api/tools/invoke",
    tag = "tools",
    request_body = InvokeBody,
    responses(
        (status = 200, description = "The call ran; tool-level failures are `is_error: true`", body = InvokeResponse),
        BodyRouteErrors,
        (status = 404, description = "`role` names no character, or no such tool is registered", body = ErrorBody),
    )
)]
async fn invoke(
    state: web::Data<AppState>,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let request = InvokeRequest::parse(&body).map_err(ApiError::Validation)?;
    // Resolved on this worker's thread from the published snapshots: no round trip to the
    // router.
    let resolved = state
        .directory
        .resolve(request.role.as_deref(), &request.name)?;
    let call_id = request.call_id.unwrap_or_else(new_call_id);
    let call = ToolCall::from_arguments(call_id, request.name, request.arguments);
    let result = state.dispatcher.dispatch(&resolved.tool, call).await;
    Ok(HttpResponse::Ok().json(InvokeResponse {
        ok: true,
        name: result.name,
        call_id: result.call_id,
        output: result.output,
        is_error: result.is_error,
        error: result.error,
    }))
}

/// The result of a call, as the model would get it.
#[derive(Debug, Serialize, ToSchema)]
pub struct InvokeResponse {
    pub ok: bool,
    pub name: String,
    pub call_id: String,
    /// The tool's output (any JSON); `null` on a tool error.
    #[schema(value_type = Value)]
    pub output: Value,
    pub is_error: bool,
    /// Why the call failed, present only on a tool error.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub error: Option<String>,
}

/// A fresh call id in the style models use.
fn new_call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

// The request body, for the OpenAPI document only: the handler reads it field by field
// (`super::requests`), so this is never constructed.

/// `POST /api/tools/invoke`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({"name": "get_weather", "arguments": {"location": "Shanghai"}, "role": null}))]
pub struct InvokeBody {
    #[schema(min_length = 1, max_length = 64)]
    name: String,
    /// The call's arguments (default `{}`).
    #[schema(value_type = Option<Object>, nullable = false)]
    arguments: Option<Map<String, Value>>,
    /// The character whose registration to use; null or `""`: the first that has the tool.
    #[schema(nullable)]
    role: Option<String>,
    /// The call id the callback receives (default: a fresh `call_...`).
    #[schema(nullable)]
    call_id: Option<String>,
}
