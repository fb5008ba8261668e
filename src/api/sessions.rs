//! `GET /api/sessions`: each character's model-session state and last sync.

use actix_web::{HttpResponse, web};
use serde_json::{Map, Value, json};

use super::error::ApiError;
use super::{AppState, ask_router};
use crate::actors::router::ListSessions;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource("/api/sessions").route(web::get().to(list_sessions)));
}

async fn list_sessions(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let reports = ask_router(&state, ListSessions).await?;
    let mut by_role = Map::new();
    for (role, report) in reports {
        by_role.insert(role, serde_json::to_value(report).unwrap_or(Value::Null));
    }
    Ok(HttpResponse::Ok().json(json!({"ok": true, "sessions_by_role": by_role})))
}
