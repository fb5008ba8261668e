//! The chat upstream's HTTP client: the server's own HTTP/1.1 client (`dispatch::client`, the
//! callbacks' too: hyper's connection API, a keep-alive pool per thread, rustls on ring and the
//! webpki roots for `https`), so a round's exchange stays in the task of the request that asks
//! for it, on the worker that serves the app. Redirects are never followed (the key goes only
//! where the configuration says): one is an error, as is an answer over
//! [`MAX_UPSTREAM_ANSWER_BYTES`]. Every byte read from the upstream has the server's keys (the
//! configured one among them, [`crate::domain::secrets`]) and the app's own key of the exchange
//! redacted before anything repeats it: the app's answer, the log, `last_error`, the events.
//! Dropping a request or its body closes its connection: that is how an app that goes away
//! cancels the upstream's work.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use hyper::{Request, Response};
use url::Position;

use super::settings::ChatSettings;
use crate::dispatch::client::{self, Peer, PooledBody, SendError};
use crate::domain::event_stream::EventStreamReader;
use crate::domain::peer_text;
use crate::domain::secrets::{self, Secrets};
use crate::session::shell::MODEL_CONNECT_TIMEOUT;

/// How long an idle connection to the upstream is kept for the next request: providers close
/// theirs after about a minute; half of that is never cut under us.
pub(crate) const UPSTREAM_KEEP_ALIVE: Duration = Duration::from_secs(30);

/// The chat upstreams, to the server's HTTP client.
const UPSTREAMS: Peer = Peer {
    connect_timeout: MODEL_CONNECT_TIMEOUT,
    keep_alive: UPSTREAM_KEEP_ALIVE,
};

/// Largest upstream answer read (a whole completion, a streamed round, or an error body): a
/// completion is kilobytes; this only bounds a misbehaving upstream.
pub const MAX_UPSTREAM_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// Headers an app sends that pass upstream unchanged (the provider's own routing headers).
const PASSED_HEADERS: [&str; 4] = [
    "openai-organization",
    "openai-project",
    "http-referer",
    "x-title",
];

type Body = Full<Bytes>;

/// An upstream answer's body: reading it drives its connection.
pub(crate) type UpstreamBody = PooledBody;

/// Why the upstream gave no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UpstreamError {
    /// No connection, or it broke before or while the answer came (a 502).
    #[error("the upstream {url} could not be reached: {reason}")]
    Unreachable { url: String, reason: String },
    /// No answer, or no next part of a stream, within the timeout (a 504).
    #[error("the upstream {url} did not answer within {seconds} s")]
    TimedOut { url: String, seconds: f64 },
    /// A whole answer (not a stream) still coming when the timeout since the request was sent
    /// ran out (a 504): an upstream that trickles its answer holds no request for longer.
    #[error("the upstream {url} did not send its whole answer within {seconds} s")]
    Unfinished { url: String, seconds: f64 },
    /// The answer was longer than the server reads (a 502).
    #[error("the upstream {url} answered with more than {limit} bytes")]
    TooLarge { url: String, limit: usize },
    /// The upstream redirected the request, which is never followed (a 502).
    #[error(
        "the upstream {url} answered HTTP {status}, a redirect to {location}: redirects are not \
         followed (the key goes only where the configuration says)"
    )]
    Redirected {
        url: String,
        status: u16,
        location: String,
    },
}

impl UpstreamError {
    /// The status the app gets.
    pub fn status(&self) -> u16 {
        match self {
            Self::TimedOut { .. } | Self::Unfinished { .. } => 504,
            Self::Unreachable { .. } | Self::TooLarge { .. } | Self::Redirected { .. } => 502,
        }
    }

    /// The `code` of the app's error (OpenAI's shape).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unreachable { .. } => "upstream_unreachable",
            Self::TimedOut { .. } | Self::Unfinished { .. } => "upstream_timeout",
            Self::TooLarge { .. } => "upstream_too_large",
            Self::Redirected { .. } => "upstream_redirect",
        }
    }

    /// The failure's `reason` in the metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unreachable { .. } => "unreachable",
            Self::TimedOut { .. } | Self::Unfinished { .. } => "timeout",
            Self::TooLarge { .. } => "too_large",
            Self::Redirected { .. } => "redirect",
        }
    }
}

/// A chat character's upstream: where its requests go and with which key.
#[derive(Debug)]
pub struct Upstream {
    /// The base URL as configured, for messages.
    base: String,
    base_url: url::Url,
    /// `scheme://host:port` of the base, the pool's key.
    origin: String,
    /// `Bearer <key>` from the configuration, if any (the key is held with the server's
    /// others, kept out of what the upstream sends back).
    authorization: Option<HeaderValue>,
    timeout: Duration,
}

/// The app's headers that matter upstream.
#[derive(Debug, Default, Clone)]
pub struct AppHeaders {
    pub authorization: Option<HeaderValue>,
    pub passed: Vec<(HeaderName, HeaderValue)>,
}

impl AppHeaders {
    /// Reads them from the app's request.
    pub fn from_request(headers: &actix_web::http::header::HeaderMap) -> Self {
        let value =
            |v: &actix_web::http::header::HeaderValue| HeaderValue::from_bytes(v.as_bytes()).ok();
        Self {
            authorization: headers.get("authorization").and_then(value),
            passed: PASSED_HEADERS
                .iter()
                .filter_map(|name| {
                    let v = headers.get(*name).and_then(value)?;
                    Some((HeaderName::from_static(name), v))
                })
                .collect(),
        }
    }

    /// The app's own key (`Authorization: Bearer <key>`), to keep out of what comes back.
    fn key(&self) -> Option<&str> {
        let value = self.authorization.as_ref()?.to_str().ok()?;
        Some(value.strip_prefix("Bearer ").unwrap_or(value).trim())
    }
}

impl Upstream {
    /// Reads the key the configuration names (start-up fails without it).
    pub fn new(settings: &ChatSettings) -> anyhow::Result<Self> {
        let base_url = url::Url::parse(&settings.url)?;
        let key = settings.api_key()?;
        let authorization = key
            .as_ref()
            .map(|key| HeaderValue::from_str(&format!("Bearer {key}")))
            .transpose()?;
        let origin = format!(
            "{}://{}:{}",
            base_url.scheme(),
            base_url.host_str().unwrap_or_default(),
            base_url.port_or_known_default().unwrap_or_default()
        );
        Ok(Self {
            base: settings.url.clone(),
            base_url,
            origin,
            authorization,
            timeout: settings.timeout,
        })
    }

    /// The URL of `path` under the base (`chat/completions`, `responses`, `models`), its query
    /// kept.
    fn url(&self, path: &str) -> url::Url {
        let mut url = self.base_url.clone();
        let joined = format!("{}/{path}", url.path().trim_end_matches('/'));
        url.set_path(&joined);
        url
    }

    /// A request to `path`: origin-form, with its own `Host`.
    fn request(&self, method: hyper::Method, path: &str) -> hyper::http::request::Builder {
        let url = self.url(path);
        Request::builder()
            .method(method)
            .uri(&url[Position::BeforePath..Position::AfterQuery])
            .header(HOST, &url[Position::BeforeHost..Position::AfterPort])
    }

    /// POSTs a round's request to `path` (`chat/completions`, `responses`); resolves with the
    /// answer's head (its body still to be read).
    pub async fn post(
        &self,
        path: &str,
        body: Vec<u8>,
        stream: bool,
        app: &AppHeaders,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        let mut request = self
            .request(hyper::Method::POST, path)
            .header(CONTENT_TYPE, "application/json")
            .header(
                ACCEPT,
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            );
        request = self.authorize(request, app);
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| self.unreachable(e))?;
        self.send(request).await
    }

    /// GETs `models` or `models/{id}` for the app, as the upstream answers it.
    pub async fn get(
        &self,
        path: &str,
        app: &AppHeaders,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        let request = self.authorize(self.request(hyper::Method::GET, path), app);
        let request = request
            .body(Full::new(Bytes::new()))
            .map_err(|e| self.unreachable(e))?;
        self.send(request).await
    }

    /// The configured key, or else the app's own `Authorization`; and the provider headers.
    fn authorize(
        &self,
        mut request: hyper::http::request::Builder,
        app: &AppHeaders,
    ) -> hyper::http::request::Builder {
        if let Some(authorization) = self.authorization.as_ref().or(app.authorization.as_ref()) {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        for (name, value) in &app.passed {
            request = request.header(name, value.clone());
        }
        request
    }

    async fn send(&self, request: Request<Body>) -> Result<Response<UpstreamBody>, UpstreamError> {
        let sent = client::exchange(&UPSTREAMS, &self.origin, request);
        let response = match tokio::time::timeout(self.timeout, sent).await {
            Ok(Ok(response)) => response,
            Ok(Err(SendError::Connect(e))) => return Err(self.unreachable(error_chain(&*e))),
            Ok(Err(SendError::Exchange(e))) => return Err(self.unreachable(error_chain(&e))),
            Err(_) => return Err(self.timed_out()),
        };
        let status = response.status();
        if status.is_redirection() && status != hyper::StatusCode::NOT_MODIFIED {
            let location = response
                .headers()
                .get(hyper::header::LOCATION)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_else(|| "nowhere said".to_owned());
            return Err(UpstreamError::Redirected {
                url: self.base.clone(),
                status: status.as_u16(),
                location: peer_text::bounded(location),
            });
        }
        Ok(response)
    }

    /// When an exchange sent now must have its whole answer (not a stream): the timeout from
    /// now.
    pub fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.timeout
    }

    /// Reads a whole answer body (bounded in size, all of it by `deadline`: see
    /// [`Self::deadline`]), the keys of the exchange redacted.
    pub async fn read(
        &self,
        body: UpstreamBody,
        app: &AppHeaders,
        deadline: tokio::time::Instant,
    ) -> Result<Bytes, UpstreamError> {
        let mut body = Limited::new(body, MAX_UPSTREAM_ANSWER_BYTES);
        let mut bytes = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => {
                    return Err(UpstreamError::Unfinished {
                        url: self.base.clone(),
                        seconds: self.timeout.as_secs_f64(),
                    });
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(self.failed(&*e)),
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        bytes.extend_from_slice(&data);
                    }
                }
            }
        }
        let held = secrets::held();
        Ok(match held.with(app.key()).redact(&bytes) {
            std::borrow::Cow::Borrowed(_) => Bytes::from(bytes),
            std::borrow::Cow::Owned(redacted) => Bytes::from(redacted),
        })
    }

    /// The events of a streamed answer, each within the timeout of the one before, the keys of
    /// the exchange redacted from each.
    pub fn events(&self, body: UpstreamBody, app: &AppHeaders) -> Events<'_> {
        Events {
            body: Limited::new(body, MAX_UPSTREAM_ANSWER_BYTES),
            reader: EventStreamReader::default(),
            ended: false,
            upstream: self,
            secrets: secrets::held().with(app.key()).into_owned(),
        }
    }

    /// A body that could not be read: too long, or cut off.
    fn failed(&self, error: &(dyn std::error::Error + 'static)) -> UpstreamError {
        if over_limit(error) {
            UpstreamError::TooLarge {
                url: self.base.clone(),
                limit: MAX_UPSTREAM_ANSWER_BYTES,
            }
        } else {
            self.unreachable(error_chain(error))
        }
    }

    fn unreachable(&self, reason: impl std::fmt::Display) -> UpstreamError {
        UpstreamError::Unreachable {
            url: self.base.clone(),
            reason: reason.to_string(),
        }
    }

    fn timed_out(&self) -> UpstreamError {
        UpstreamError::TimedOut {
            url: self.base.clone(),
            seconds: self.timeout.as_secs_f64(),
        }
    }
}

/// How long a streamed answer's body may go on after its `[DONE]` before its connection is
/// closed rather than kept for the next exchange.
const AFTER_DONE: Duration = Duration::from_secs(1);

/// A streamed answer's events.
pub struct Events<'a> {
    body: Limited<UpstreamBody>,
    reader: EventStreamReader,
    /// The body was read to its end.
    ended: bool,
    upstream: &'a Upstream,
    secrets: Secrets,
}

impl Events<'_> {
    /// The stream said it is done (`[DONE]`): the rest of the body (its last chunk, which comes
    /// with it or right after) is read to its end, so that the connection goes back to the pool
    /// for the next round or request instead of being closed. An upstream that keeps the body
    /// open after `[DONE]` gets [`AFTER_DONE`], then its connection is closed.
    pub async fn finish(mut self) {
        if self.ended {
            return;
        }
        let rest = async { while let Some(Ok(_)) = self.body.frame().await {} };
        let _ = tokio::time::timeout(AFTER_DONE, rest).await;
    }

    /// The next event's data; `None` at the end of the stream.
    pub async fn next(&mut self) -> Result<Option<String>, UpstreamError> {
        loop {
            if let Some(data) = self.reader.next_data() {
                // The event's own text unless a key had to be taken out of it.
                let redacted = match self.secrets.redact_str(&data) {
                    std::borrow::Cow::Borrowed(_) => None,
                    std::borrow::Cow::Owned(redacted) => Some(redacted),
                };
                return Ok(Some(redacted.unwrap_or(data)));
            }
            if self.ended {
                return Ok(None);
            }
            match tokio::time::timeout(self.upstream.timeout, self.body.frame()).await {
                Err(_) => return Err(self.upstream.timed_out()),
                Ok(None) => self.ended = true,
                Ok(Some(Err(e))) => return Err(self.upstream.failed(&*e)),
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.reader.feed(&data);
                    }
                }
            }
        }
    }
}

/// An error with its causes, for the message the app gets ("connection refused" is a cause).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        source = cause_source(source);
    }
    text
}

/// Whether a body error is the size bound's (possibly wrapped in an I/O error).
fn over_limit(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.is::<LengthLimitError>()
            || e.downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .is_some_and(|inner| inner.is::<LengthLimitError>())
        {
            return true;
        }
        next = e.source();
    }
    false
}

fn cause_source<'a>(
    error: Option<&'a (dyn std::error::Error + 'static)>,
) -> Option<&'a (dyn std::error::Error + 'static)> {
    error.and_then(|e| e.source())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_the_base_and_keep_its_query() {
        let upstream = |url: &str| Upstream::new(&ChatSettings::new(url)).unwrap();
        assert_eq!(
            upstream("http://127.0.0.1:11434/v1")
                .url("chat/completions")
                .as_str(),
            "http://127.0.0.1:11434/v1/chat/completions"
        );
        assert_eq!(
            upstream("https://example.com/openai/v1/?api-version=2")
                .url("models")
                .as_str(),
            "https://example.com/openai/v1/models?api-version=2"
        );
    }
}
