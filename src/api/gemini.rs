//! The Gemini relay: `GET /ws/google.ai.generativelanguage.{v1,v1beta,v1alpha}.GenerativeService.BidiGenerateContent`,
//! the Gemini Live API's own path, so an app's client (e.g. the official `google-genai` SDK
//! with its `base_url` set to this server) connects here instead of to Google. The server opens
//! the API's side with the character's session settings and relays both ways (see
//! `session::live::relay`).
//!
//! The character is `?character=NAME`, or the `X-Character` header (an SDK sets headers, not
//! query parameters), or the only character whose session is `gemini-live`. As for the realtime
//! relay, the relay joins the character's sessions before the handshake is answered, so it has
//! the current tools before the app's setup.

use actix_web::{HttpRequest, HttpResponse, web};

use super::AppState;
use super::error::ApiError;
use crate::actors::router::ResolveRelay;
use crate::session::live::{GeminiRelay, connect_gemini};
use crate::session::relay::RelayQuery;
use crate::session::settings::SessionProtocol;

/// The Gemini Live API's paths, as the SDKs build them from a base URL (with a custom base URL
/// the Python SDK asks for `v1`).
pub(crate) const GEMINI_RELAY_PATHS: [&str; 3] = [
    "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent",
    "/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContent",
    "/ws/google.ai.generativelanguage.v1.GenerativeService.BidiGenerateContent",
];

/// The header that may name the character.
const CHARACTER_HEADER: &str = "x-character";

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    for path in GEMINI_RELAY_PATHS {
        cfg.service(super::resource(path).route(web::get().to(open_gemini_relay)));
    }
}

async fn open_gemini_relay(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let query = RelayQuery::parse(req.query_string());
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let character = query
        .character
        .clone()
        .or_else(|| header(CHARACTER_HEADER).filter(|v| !v.is_empty()));
    // The app's own key serves only a character configured without one.
    let app_key = header(crate::session::gemini::API_KEY_HEADER).or_else(|| {
        query
            .upstream
            .iter()
            .find(|(k, _)| k == "key")
            .map(|(_, v)| v.clone())
    });
    let resolve = ResolveRelay {
        character,
        protocol: SessionProtocol::GeminiLive,
    };
    super::realtime::open_relay::<GeminiRelay, _>(
        req,
        payload,
        state,
        resolve,
        |settings| async move { connect_gemini(&settings, app_key).await },
    )
    .await
}
