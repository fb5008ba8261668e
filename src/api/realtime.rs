//! `GET /v1/realtime`: the relay. An app's realtime client (e.g. the official SDK with
//! `websocket_base_url="ws://127.0.0.1:PORT/v1"`) connects here instead of to the provider; the
//! server opens the upstream connection with the character's session settings and relays both
//! ways (see [`crate::session::relay`]).
//!
//! The handler checks the handshake, asks the router which character and settings serve it,
//! opens the relay, and makes it one of the character's active sessions before it answers, so
//! the relay has the current tools before the app's first event ([`open_relay`]: the steps of
//! every relay route, the Gemini relay's too). Failures before the upgrade
//! answer as every route does (JSON error bodies); the model refusing the connection is a 502.

use std::future::Future;

use actix_web::body::{BodyStream, MessageBody};
use actix_web::http::header::AUTHORIZATION;
use actix_web::{HttpRequest, HttpResponse, web};

use super::error::ApiError;
use super::{AppState, ask_router};
use crate::actors::router::{JoinSession, ResolveRelay};
use crate::domain::connection::ConnectionKind;
use crate::session::SessionHandle;
use crate::session::relay::{self, Relay};
use crate::session::relaying::{OpensRelay, RelayStart};
use crate::session::settings::{SessionProtocol, SessionSettings};
use crate::session::shell::MAX_EVENT_BYTES;

/// Where apps connect; `websocket_base_url` is this without `/realtime`.
pub(crate) const RELAY_PATH: &str = "/v1/realtime";

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource(RELAY_PATH).route(web::get().to(open_realtime_relay)));
}

async fn open_realtime_relay(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let query = relay::RelayQuery::parse(req.query_string());
    let app_authorization = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let resolve = ResolveRelay {
        character: query.character.clone(),
        protocol: SessionProtocol::OpenaiRealtime,
    };
    open_relay::<Relay, _>(req, payload, state, resolve, |settings| async move {
        relay::connect_upstream(&settings, &query, app_authorization).await
    })
    .await
}

/// What every relay route does: check the handshake, ask the router which character and
/// settings serve it (`resolve`), open the model's side (`connect`, with those settings), start
/// the relay on this worker, make it one of the character's active sessions, and answer the
/// app's handshake with the relay's outbox as the response's body. A relay that cannot join is
/// closed.
pub(super) async fn open_relay<A, F>(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    resolve: ResolveRelay,
    connect: impl FnOnce(SessionSettings) -> F,
) -> Result<HttpResponse, ApiError>
where
    A: OpensRelay,
    F: Future<Output = Result<A::Upstream, String>>,
{
    let path = req.path().to_owned();
    actix_http::ws::verify_handshake(req.head())
        .map_err(|e| ApiError::BadRequest(format!("{path} is a websocket endpoint: {e}")))?;
    let target = ask_router(&state, resolve).await??;
    let upstream = connect(target.settings.clone())
        .await
        .map_err(ApiError::BadGateway)?;
    let (_, _, app_stream) = actix_ws::handle(&req, payload)
        .map_err(|e| ApiError::BadRequest(format!("{path}: {e}")))?;
    let url = A::url(&upstream);
    let start = RelayStart {
        character: target.character.clone(),
        settings: &target.settings,
        app_stream: app_stream.max_frame_size(MAX_EVENT_BYTES),
        dispatcher: state.dispatcher.clone(),
        events: state.events.clone(),
        policy: state.policy.clone(),
    };
    let (relay, body) = A::open(start, upstream);
    let joined = ask_router(
        &state,
        JoinSession {
            role: target.character,
            session: SessionHandle::of_session(ConnectionKind::Relay, Some(url), &relay),
        },
    )
    .await;
    if let Err(e) = joined.and_then(|r| r.map_err(ApiError::from)) {
        relay.do_send(crate::session::CloseSession);
        return Err(e);
    }
    let response = actix_http::ws::handshake_response(req.head())
        .message_body(BodyStream::new(body).boxed())
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(response.into())
}
