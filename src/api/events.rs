//! `GET /api/events`: the change events as a Server-Sent Events stream.
//!
//! The handler checks the `?role=` filter against the characters (read from the published
//! roster, no message), subscribes to the [`EventHub`](crate::events::EventHub) (resuming after
//! `Last-Event-ID` when the client sends one) and streams the subscription until the hub drops it
//! or the client goes.

use actix_web::http::header::CACHE_CONTROL;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::AppState;
use super::error::{ApiError, ErrorBody, ValidationErrorBody};
use crate::events::EventStream;

/// The request header a reconnecting client names its last event with.
const LAST_EVENT_ID: &str = "last-event-id";

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        super::resource("/api/events")
            .app_data(super::query_config())
            .route(web::get().to(events)),
    );
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct EventsQuery {
    /// Only the events of this character (and those for everyone: `hello`, `reset`); every
    /// event when absent or empty.
    role: Option<String>,
}

/// The change events: `hello`, then `tools.changed`, `session.state` and `tool.call` as they
/// happen (`reset` when a `Last-Event-ID` can no longer be resumed). Each event has an `id:`, an
/// `event:` name and one JSON `data:` line; an idle stream gets a `: keep-alive` comment every
/// 15 s.
#[utoipa::path(
    get,
    path = "/api/events",
    tag = "events",
    params(
        EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id (sent by EventSource on reconnect)"),
    ),
    responses(
        (status = 200, description = "An endless `text/event-stream`", content_type = "text/event-stream", body = String),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 404, description = "`role` names no character", body = ErrorBody),
        (status = 405, description = "Only GET is allowed", body = ErrorBody),
        (status = 422, description = "The query string could not be read (e.g. `role` twice)", body = ValidationErrorBody),
    )
)]
async fn events(
    state: web::Data<AppState>,
    request: HttpRequest,
    query: web::Query<EventsQuery>,
) -> Result<HttpResponse, ApiError> {
    let role = query.into_inner().role.filter(|r| !r.is_empty());
    if let Some(role) = &role {
        // An unknown role is a 404 now rather than a stream that never says anything. Checked
        // against the published roster on this worker's thread: no round trip to the router.
        state.directory.list(Some(role))?;
    }
    let last_event_id = request
        .headers()
        .get(LAST_EVENT_ID)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let subscription = state.events.subscribe(role, last_event_id.as_deref());
    Ok(HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((CACHE_CONTROL, "no-cache"))
        .streaming(EventStream::new(subscription, state.keep_alive)))
}
