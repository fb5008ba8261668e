//! `POST /api/tools/invoke`: runs the same dispatch a model's call triggers, by hand.

use actix_web::{HttpResponse, web};
use serde_json::json;

use super::body::JsonObject;
use super::error::ApiError;
use super::requests::InvokeRequest;
use super::{AppState, ask_router};
use crate::actors::router::ResolveTool;
use crate::domain::call::ToolCall;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource("/api/tools/invoke").route(web::post().to(invoke)));
}

async fn invoke(
    state: web::Data<AppState>,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let request = InvokeRequest::parse(&body).map_err(ApiError::Validation)?;
    let resolved = ask_router(
        &state,
        ResolveTool {
            name: request.name.clone(),
            role: request.role,
        },
    )
    .await??;
    let call_id = request.call_id.unwrap_or_else(new_call_id);
    let call = ToolCall::from_arguments(call_id, request.name, request.arguments);
    let result = state.dispatcher.dispatch(&resolved.tool, call).await;
    let mut response = json!({
        "ok": true,
        "name": result.name,
        "call_id": result.call_id,
        "output": result.output,
        "is_error": result.is_error,
    });
    if let Some(error) = result.error {
        response["error"] = json!(error);
    }
    Ok(HttpResponse::Ok().json(response))
}

/// A fresh call id in the style models use.
fn new_call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}
