//! The sources plugins own: `GET /api/sources` lists every source that holds tools or a binding
//! (never a token or its hash); `POST /api/sources/{source}/wake` lets a plugin prove it owns a
//! source (its `X-Plugin-Token`) so the source's restored tools may wake; the operator's
//! `DELETE /api/sources/{source}/binding` (`Authorization: Bearer` with the operator token,
//! checked before anything else) frees a binding made at run time.

use actix_web::{HttpResponse, web};
use serde::Serialize;
use utoipa::ToSchema;

use super::body::JsonObject;
use super::error::{ApiError, ErrorBody, ValidationErrorBody};
use super::operator::{AsOperator, OperatorAct};
use super::token::PluginToken;
use super::{AppState, ask_router};
use crate::actors::router::{UnbindSource, WakeSource};
use crate::domain::sources::{SourceEntry, summarize};

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource("/api/sources").route(super::read_route().to(list)))
        .service(super::resource("/api/sources/{source}/wake").route(web::post().to(wake)))
        .service(super::resource("/api/sources/{source}/binding").route(web::delete().to(unbind)));
}

/// Every source that holds tools (active or dormant) or a binding, ordered by source. Needs no
/// token, like every listing.
#[utoipa::path(
    get,
    path = "/api/sources",
    tag = "sources",
    responses(
        (status = 200, description = "The sources, ordered by source", body = SourcesResponse),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 405, description = "Only GET and HEAD are allowed", body = ErrorBody),
    )
)]
async fn list(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let roster = state.directory.list(None)?;
    let tools = roster.iter().flat_map(|r| {
        let active = r.tools.tools().map(|t| (t.source.as_str(), false));
        active.chain(r.dormant.iter().map(|t| (t.source.as_str(), true)))
    });
    let bindings = state.owners.with(|owners| owners.bindings());
    let sources = summarize(bindings, tools)
        .into_iter()
        .map(SourceView::from)
        .collect();
    Ok(HttpResponse::Ok().json(SourcesResponse { sources }))
}

/// `GET /api/sources`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SourcesResponse {
    pub sources: Vec<SourceView>,
}

/// One source. No token, no hash.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SourceView {
    pub source: String,
    /// Bound to a plugin's token: a change to its tools needs that token.
    pub bound: bool,
    /// Bound by the configuration (`[[security.source]]`): no operator can free it.
    pub configured: bool,
    /// Its tools, counted per character (dormant ones included).
    pub tools: usize,
    /// How many of them are dormant (restored, not woken yet).
    pub dormant: usize,
}

impl From<SourceEntry> for SourceView {
    fn from(e: SourceEntry) -> Self {
        Self {
            source: e.source,
            bound: e.bound,
            configured: e.configured,
            tools: e.tools,
            dormant: e.dormant,
        }
    }
}

/// A source's owner is back: with the source's `X-Plugin-Token`, its restored tools may wake,
/// each once its callback's origin answers HTTP. The body is `{}`.
#[utoipa::path(
    post,
    path = "/api/sources/{source}/wake",
    tag = "sources",
    params(("source" = String, Path, description = "The source (percent-encoded)")),
    request_body = WakeBody,
    responses(
        (status = 200, description = "Its restored tools may wake; `woken` counts those this request released", body = WakeResponse),
        (status = 403, description = "No `X-Plugin-Token`, or not the one the source is bound to (or the source is bound to none); also not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 404, description = "No tool and no binding has this source", body = ErrorBody),
        (status = 405, description = "Only POST is allowed", body = ErrorBody),
        (status = 408, description = "The body did not arrive in full within 10 s", body = ErrorBody),
        (status = 413, description = "The body is over 1 MiB", body = ErrorBody),
        (status = 422, description = "The body is not a JSON object, or the token header is malformed", body = ValidationErrorBody),
        (status = 503, description = "The router did not answer", body = ErrorBody),
    )
)]
async fn wake(
    state: web::Data<AppState>,
    source: web::Path<String>,
    PluginToken(token): PluginToken,
    JsonObject(_): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let source = source.into_inner();
    let woken = ask_router(
        &state,
        WakeSource {
            source: source.clone(),
            token,
        },
    )
    .await??;
    Ok(HttpResponse::Ok().json(WakeResponse {
        ok: true,
        source,
        woken,
    }))
}

/// The body of a wake: `{}`.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub(crate) struct WakeBody {}

/// The answer to a wake.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WakeResponse {
    pub ok: bool,
    pub source: String,
    /// The restored tools this request released (per character); each wakes once its
    /// callback's origin answers HTTP.
    pub woken: usize,
}

/// Free a binding a plugin's registration made (the operator's route): the source's tools stay,
/// and the next registration with a token binds it again. With `--state` the unbinding is
/// stored before the answer.
#[utoipa::path(
    delete,
    path = "/api/sources/{source}/binding",
    tag = "sources",
    params(("source" = String, Path, description = "The source (percent-encoded)")),
    responses(
        (status = 200, description = "Freed", body = UnbindResponse),
        (status = 401, description = "No `Authorization: Bearer` with the operator token", body = ErrorBody),
        (status = 403, description = "Another bearer token than the operator's; also not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 404, description = "The source has no binding", body = ErrorBody),
        (status = 405, description = "Only DELETE is allowed", body = ErrorBody),
        (status = 409, description = "The configuration binds the source (`[[security.source]]`)", body = ErrorBody),
        (status = 503, description = "The router did not answer, or the unbinding could not be stored", body = ErrorBody),
    )
)]
async fn unbind(
    _: AsOperator<FreeBinding>,
    state: web::Data<AppState>,
    source: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let source = source.into_inner();
    ask_router(
        &state,
        UnbindSource {
            source: source.clone(),
        },
    )
    .await??;
    Ok(HttpResponse::Ok().json(UnbindResponse {
        ok: true,
        source,
        unbound: true,
    }))
}

/// Freeing a source's binding: the operator's act.
pub(crate) struct FreeBinding;

impl OperatorAct for FreeBinding {
    const WHAT: &'static str = "freeing a source's binding";
}

/// The answer to an unbinding.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct UnbindResponse {
    pub ok: bool,
    pub source: String,
    pub unbound: bool,
}
