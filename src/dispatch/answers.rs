//! Whether a callback's origin answers HTTP: what wakes a restored tool (`actors::router`'s
//! dormancy). A TCP connection alone proves nothing — any process may listen on a port a plugin
//! left — so the probe sends a request and waits for a response head, whatever its status.
//!
//! The request is a `HEAD` of the callback URL: safe by HTTP's rules, so no plugin acts on it,
//! and a plugin that serves only `POST` there answers it too (405, 404 or 501 all count). It
//! goes on a connection of its own, closed after the answer.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HOST, HeaderName, HeaderValue};
use url::Position;

use super::client::{self, Peer};
use super::{CALLBACK_CONNECT_TIMEOUT, HOP_HEADER};
use crate::domain::callback_url::CallbackUrl;

/// Longest wait for the answer once the request is sent. A plugin on loopback answers a `HEAD`
/// in milliseconds; a peer that accepts and never answers is not taken for the plugin, and is
/// probed again after the backoff.
pub(crate) const PROBE_ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Probes: a connection of their own each, never kept for a call.
const PROBES: Peer = Peer {
    connect_timeout: CALLBACK_CONNECT_TIMEOUT,
    keep_alive: Duration::ZERO,
};

/// The status `url`'s origin answered a `HEAD` of `url` with; the error says why there was no
/// answer.
pub(crate) async fn answers_http(url: &CallbackUrl) -> Result<u16, String> {
    let parsed = url.url();
    let mut request = hyper::Request::new(Full::new(Bytes::new()));
    *request.method_mut() = hyper::Method::HEAD;
    *request.uri_mut() = parsed[Position::BeforePath..Position::AfterQuery]
        .parse()
        .map_err(|e| format!("the callback URL cannot be requested: {e}"))?;
    let host = HeaderValue::from_str(&parsed[Position::BeforeHost..Position::AfterPort])
        .map_err(|e| format!("the callback URL's host cannot be sent: {e}"))?;
    let headers = request.headers_mut();
    headers.insert(HOST, host);
    headers.insert(
        HeaderName::from_static(HOP_HEADER),
        HeaderValue::from_static("1"),
    );
    let exchange = client::exchange(&PROBES, url.origin().as_str(), request);
    match tokio::time::timeout(PROBE_ANSWER_TIMEOUT, exchange).await {
        Ok(Ok(response)) => Ok(response.status().as_u16()),
        Ok(Err(client::SendError::Connect(e))) => Err(format!("no connection: {e}")),
        Ok(Err(client::SendError::Exchange(e))) => Err(format!("no HTTP answer: {e}")),
        Err(_) => Err(format!(
            "no answer within {} s",
            PROBE_ANSWER_TIMEOUT.as_secs()
        )),
    }
}
