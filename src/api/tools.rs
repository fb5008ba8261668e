//! The four routes of the contract: register, unregister, clear and list.
//!
//! Each handler parses the body into a domain type, sends one message to the router and maps the
//! reply. No business logic lives here.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::json;

use super::body::JsonObject;
use super::error::ApiError;
use super::requests::{ClearRequest, RegisterRequest, UnregisterRequest};
use super::{AppState, ask_router};
use crate::actors::router::{ClearSource, ListTools, RegisterTool, RoleTools, UnregisterTool};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource("/api/tools/register").route(web::post().to(register)))
        .service(super::resource("/api/tools/unregister").route(web::post().to(unregister)))
        .service(super::resource("/api/tools/clear").route(web::post().to(clear)))
        .service(super::resource("/api/tools").route(web::get().to(list)));
}

async fn register(
    state: web::Data<AppState>,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let request = RegisterRequest::parse(&body).map_err(ApiError::Validation)?;
    let name = request.tool.name.clone();
    let report = ask_router(
        &state,
        RegisterTool {
            tool: request.tool,
            role: request.role,
        },
    )
    .await??;
    let ok = !report.affected_roles.is_empty();
    let mut response = json!({
        "ok": ok,
        "registered": name,
        "affected_roles": report.affected_roles,
        "failed_roles": report.failed_roles,
    });
    if !ok {
        response["error"] = json!("no role accepted the registration");
    }
    Ok(HttpResponse::Ok().json(response))
}

async fn unregister(
    state: web::Data<AppState>,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let request = UnregisterRequest::parse(&body).map_err(ApiError::Validation)?;
    let report = ask_router(
        &state,
        UnregisterTool {
            name: request.name.clone(),
            role: request.role,
        },
    )
    .await??;
    let removed = report.removed > 0;
    Ok(HttpResponse::Ok().json(json!({
        "ok": removed || report.failed_roles.is_empty(),
        "removed": removed,
        "name": request.name,
        "affected_roles": report.affected_roles,
        "failed_roles": report.failed_roles,
    })))
}

async fn clear(
    state: web::Data<AppState>,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let request = ClearRequest::parse(&body).map_err(ApiError::Validation)?;
    let report = ask_router(
        &state,
        ClearSource {
            source: request.source.clone(),
            role: request.role,
        },
    )
    .await??;
    Ok(HttpResponse::Ok().json(json!({
        "ok": report.removed > 0 || report.failed_roles.is_empty(),
        "removed": report.removed,
        "source": request.source,
        "affected_roles": report.affected_roles,
        "failed_roles": report.failed_roles,
    })))
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    role: Option<String>,
}

async fn list(
    state: web::Data<AppState>,
    query: web::Query<ListQuery>,
) -> Result<HttpResponse, ApiError> {
    let roles = ask_router(
        &state,
        ListTools {
            role: query.into_inner().role,
        },
    )
    .await??;
    let body = serde_json::to_vec(&ListResponse {
        ok: true,
        tools_by_role: ToolsByRole(&roles),
    })
    .map_err(|e| ApiError::Unavailable(format!("listing could not be encoded: {e}")))?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(body))
}

#[derive(Serialize)]
struct ListResponse<'a> {
    ok: bool,
    tools_by_role: ToolsByRole<'a>,
}

/// `{role: [tool, ...], ...}` in configuration order, serialised straight from the shared tools.
struct ToolsByRole<'a>(&'a [RoleTools]);

#[derive(Serialize)]
struct ToolView<'a> {
    name: &'a str,
    description: &'a str,
    source: &'a str,
    callback_url: Option<&'a str>,
    is_remote: bool,
}

impl Serialize for ToolsByRole<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for role in self.0 {
            let views: Vec<ToolView<'_>> = role
                .tools
                .iter()
                .map(|t| ToolView {
                    name: &t.name,
                    description: &t.description,
                    source: &t.source,
                    callback_url: t.callback_url(),
                    is_remote: t.is_remote(),
                })
                .collect();
            map.serialize_entry(&role.role, &views)?;
        }
        map.end()
    }
}
