//! `GET /v1/realtime`: the relay. An app's realtime client (e.g. the official SDK with
//! `websocket_base_url="ws://127.0.0.1:PORT/v1"`) connects here instead of to the provider; the
//! server opens the upstream connection with the character's session settings and relays both
//! ways (see [`crate::session::relay`]).
//!
//! The handler checks the handshake, asks the router which character and settings serve it,
//! opens the relay, and makes it one of the character's active sessions before it answers, so
//! the relay has the current tools before the app's first event. Failures before the upgrade
//! answer as every route does (JSON error bodies); the model refusing the connection is a 502.

use actix::dev::ToEnvelope;
use actix::{Actor, Addr, Handler};
use actix_web::body::{BodyStream, MessageBody};
use actix_web::http::header::AUTHORIZATION;
use actix_web::{HttpRequest, HttpResponse, web};

use super::error::ApiError;
use super::{AppState, ask_router};
use crate::actors::router::{JoinSession, ResolveRelay};
use crate::domain::connection::ConnectionKind;
use crate::session::outbox::OutboxBody;
use crate::session::relay::{self, Relay};
use crate::session::settings::SessionProtocol;
use crate::session::shell::MAX_EVENT_BYTES;
use crate::session::{AddContext, CloseSession, SessionHandle, SessionStatus, SyncTools};

/// Where apps connect; `websocket_base_url` is this without `/realtime`.
pub(crate) const RELAY_PATH: &str = "/v1/realtime";

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource(RELAY_PATH).route(web::get().to(open_relay)));
}

async fn open_relay(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    actix_http::ws::verify_handshake(req.head())
        .map_err(|e| ApiError::BadRequest(format!("{RELAY_PATH} is a websocket endpoint: {e}")))?;
    let query = relay::RelayQuery::parse(req.query_string());
    let target = ask_router(
        &state,
        ResolveRelay {
            character: query.character.clone(),
            protocol: SessionProtocol::OpenaiRealtime,
        },
    )
    .await??;
    let app_authorization = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let upstream = relay::connect_upstream(&target.settings, &query, app_authorization)
        .await
        .map_err(ApiError::BadGateway)?;
    let (_, _, app_stream) = actix_ws::handle(&req, payload)
        .map_err(|e| ApiError::BadRequest(format!("{RELAY_PATH}: {e}")))?;
    let url = upstream.url.clone();
    let (relay, body) = Relay::open(
        target.character.clone(),
        &target.settings,
        upstream,
        app_stream.max_frame_size(MAX_EVENT_BYTES),
        state.dispatcher.clone(),
        state.events.clone(),
    );
    join_and_answer(&req, &state, target.character, url, &relay, body).await
}

/// Makes an opened relay one of `character`'s sessions, then answers the app's handshake with
/// the relay's outbox as the response's body; a relay that cannot join is closed.
pub(super) async fn join_and_answer<A>(
    req: &HttpRequest,
    state: &web::Data<AppState>,
    character: String,
    url: String,
    relay: &Addr<A>,
    body: OutboxBody,
) -> Result<HttpResponse, ApiError>
where
    A: Actor
        + Handler<SyncTools>
        + Handler<SessionStatus>
        + Handler<CloseSession>
        + Handler<AddContext>,
    A::Context: ToEnvelope<A, SyncTools>
        + ToEnvelope<A, SessionStatus>
        + ToEnvelope<A, CloseSession>
        + ToEnvelope<A, AddContext>,
{
    let joined = ask_router(
        state,
        JoinSession {
            role: character,
            session: SessionHandle::of_session(ConnectionKind::Relay, Some(url), relay),
        },
    )
    .await;
    if let Err(e) = joined.and_then(|r| r.map_err(ApiError::from)) {
        relay.do_send(CloseSession);
        return Err(e);
    }
    let response = actix_http::ws::handshake_response(req.head())
        .message_body(BodyStream::new(body).boxed())
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(response.into())
}
