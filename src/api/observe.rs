//! `GET /metrics` (the Prometheus text format) and `GET /api/calls` (the recent calls).
//!
//! Both read the server's [`Observer`](crate::observe::Observer), which rides with the event
//! hub. The metrics' gauges are read at scrape time: the sessions from the router (one
//! message), the tools from the published roster, the running calls from the dispatcher.

use actix_web::http::header::ContentType;
use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::error::{ApiError, ErrorBody, FieldError, ValidationErrorBody};
use super::{AppState, ask_router};
use crate::actors::router::ListSessions;
use crate::observe::metrics::Snapshot;
use crate::observe::recent::{CallFilter, RECENT_CALLS, RecentCall};

/// The recent calls a listing gives when it names no `limit`: a screenful.
pub(crate) const DEFAULT_CALLS_LIMIT: usize = 100;

/// The content type of the Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource("/metrics").route(super::read_route().to(metrics)))
        .service(
            super::resource("/api/calls")
                .app_data(super::query_config())
                .route(super::read_route().to(calls)),
        );
}

/// The server's metrics in the Prometheus text exposition format (version 0.0.4): calls by
/// character, tool, caller, kind and outcome, their durations, session syncs, sessions, tools,
/// running calls, changes, model requests and rounds, upstream errors, exported and dropped
/// spans. docs/observability.md lists every metric.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "observability",
    responses(
        (status = 200, description = "The exposition", content_type = "text/plain; version=0.0.4", body = String),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 405, description = "Only GET and HEAD are allowed", body = ErrorBody),
        (status = 503, description = "The router did not answer in time", body = ErrorBody),
    )
)]
async fn metrics(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let reports = ask_router(&state, ListSessions).await?;
    let sessions = reports
        .iter()
        .flat_map(|(_, report)| &report.connections)
        .map(|c| (c.kind.name(), c.state.name()))
        .collect();
    let tools = state
        .directory
        .list(None)?
        .into_iter()
        .map(|r| {
            let count = r.tools.tools().count();
            (r.role, count)
        })
        .collect();
    let snapshot = Snapshot {
        sessions,
        tools,
        running_calls: state.dispatcher.running(),
    };
    let text = state.events.observer().render_metrics(&snapshot);
    Ok(HttpResponse::Ok()
        .insert_header(ContentType(
            PROMETHEUS_TEXT.parse().expect("a valid media type"),
        ))
        .body(text))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct CallsQuery {
    /// Only the calls of this character.
    role: Option<String>,
    /// Only the calls of this tool.
    tool: Option<String>,
    /// At most this many calls (1 to 1000; default 100).
    limit: Option<usize>,
}

/// The recent calls.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CallsResponse {
    /// Newest first; the server keeps the last 1,000.
    #[schema(value_type = Vec<RecentCall>)]
    calls: Vec<std::sync::Arc<RecentCall>>,
}

/// The last calls the server finished (it keeps 1,000), newest first: who called which tool,
/// how long it took, how it ended, and its trace id. Never the arguments or the output.
#[utoipa::path(
    get,
    path = "/api/calls",
    tag = "observability",
    params(CallsQuery),
    responses(
        (status = 200, description = "The calls, newest first", body = CallsResponse),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 404, description = "`role` names no character", body = ErrorBody),
        (status = 405, description = "Only GET and HEAD are allowed", body = ErrorBody),
        (status = 422, description = "`limit` is not 1 to 1000, or the query string could not be read", body = ValidationErrorBody),
    )
)]
async fn calls(
    state: web::Data<AppState>,
    query: web::Query<CallsQuery>,
) -> Result<HttpResponse, ApiError> {
    let CallsQuery { role, tool, limit } = query.into_inner();
    let limit = limit.unwrap_or(DEFAULT_CALLS_LIMIT);
    if !(1..=RECENT_CALLS).contains(&limit) {
        return Err(ApiError::Validation(vec![FieldError {
            loc: vec!["query".into(), "limit".into()],
            msg: format!("must be 1 to {RECENT_CALLS}, got {limit}"),
            kind: "value_error",
        }]));
    }
    let role = role.filter(|r| !r.is_empty());
    if let Some(role) = &role {
        // An unknown character is a 404, as for the listing.
        state.directory.list(Some(role))?;
    }
    let calls = state.events.observer().recent_calls(&CallFilter {
        role: role.as_deref(),
        tool: tool.as_deref().filter(|t| !t.is_empty()),
        limit,
    });
    Ok(HttpResponse::Ok().json(CallsResponse { calls }))
}
