//! The HTTP client of MCP's Streamable HTTP transport for the MCP servers this server calls (a
//! configured `[[mcp_server]]` with a `url`, and those plugins register at run time).
//!
//! It is the exchange of rmcp's own reqwest client — `POST` each message, the answer as JSON or
//! as an event stream, the session's `GET` stream, `DELETE` at the end; redirects never
//! followed, no proxy — with what comes back bounded while it is read ([`super::bounds`]): a
//! `tools/call` answer by `dispatch.max_response_bytes`, anything else by
//! [`MAX_MCP_MESSAGE_BYTES`]. An answer to a request that cannot be taken (over its bound, or
//! not a JSON-RPC message: a wrong content type, JSON of another shape) becomes a JSON-RPC error
//! for that request, with [`ANSWER_REFUSED`] and a text that says why, so the caller hears at
//! once (rmcp would drop such an answer and leave the request to its timeout).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ErrorCode, ErrorData, RequestId, ServerJsonRpcMessage};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::common::http_header::{
    EVENT_STREAM_MIME_TYPE, HEADER_LAST_EVENT_ID, HEADER_SESSION_ID, JSON_MIME_TYPE,
};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse,
};
use sse_stream::{Sse, SseStream};

use super::bounds::{ANSWER_REFUSED, MAX_MCP_MESSAGE_BYTES, MessageBound, bound_name, over_bound};
use crate::domain::peer_text;

type HttpError = StreamableHttpError<reqwest::Error>;

/// The Streamable HTTP transport to the MCP server at `url`, its answers bounded.
pub(crate) fn transport(
    url: &str,
    max_result_bytes: usize,
) -> Result<StreamableHttpClientTransport<BoundedHttp>, String> {
    let client = reqwest::Client::builder()
        // The server is on loopback: an HTTP proxy of the environment must not see it.
        .no_proxy()
        // Never followed, as for a callback: a loopback server must not be able to send the
        // calls elsewhere.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    Ok(StreamableHttpClientTransport::with_client(
        BoundedHttp {
            client,
            max_result_bytes,
        },
        StreamableHttpClientTransportConfig::with_uri(url),
    ))
}

/// reqwest, with every answer bounded.
#[derive(Clone)]
pub(crate) struct BoundedHttp {
    client: reqwest::Client,
    /// The bound of a `tools/call` answer (`dispatch.max_response_bytes`).
    max_result_bytes: usize,
}

/// The request a message is, if it is one: what its answer is refused for.
struct Asked {
    id: RequestId,
    method: String,
}

impl BoundedHttp {
    /// The bound of the answer to `asked` (a `tools/call`'s is a callback's).
    fn limit(&self, asked: Option<&Asked>) -> usize {
        match asked {
            Some(asked) if asked.method == "tools/call" => self.max_result_bytes,
            _ => MAX_MCP_MESSAGE_BYTES,
        }
    }

    /// The request's answer is refused: a JSON-RPC error for it, saying `why`; for a
    /// notification or a response, an error of the exchange.
    fn refuse(
        asked: Option<&Asked>,
        why: String,
        session: Option<String>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        match asked {
            Some(asked) => Ok(StreamableHttpPostResponse::Json(
                ServerJsonRpcMessage::error(refusal(why), Some(asked.id.clone())),
                session,
            )),
            None => Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                why,
            ))),
        }
    }
}

fn refusal(why: String) -> ErrorData {
    ErrorData::new(ErrorCode(ANSWER_REFUSED), why, None)
}

fn over_limit_text(asked: Option<&Asked>, limit: usize, max_result_bytes: usize) -> String {
    let what = asked.map_or("a message", |a| a.method.as_str());
    format!(
        "its answer to {what} is over the {limit}-byte limit ({})",
        bound_name(limit, max_result_bytes)
    )
}

/// Reads a whole body within `limit` bytes; `None` past it.
async fn read_bounded(
    response: reqwest::Response,
    limit: usize,
) -> Result<Option<Bytes>, HttpError> {
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Ok(None);
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(Bytes::from(body)))
}

/// An event stream whose events are each at most `limit` bytes. Past it, the stream ends: with
/// `instead` as its last event when there is one (the refusal of the request the stream
/// answers), else with an error.
fn bounded_events(
    body: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
    limit: usize,
    instead: Option<String>,
) -> BoxStream<'static, Result<Sse, SseError>> {
    let bound = MessageBound::events(limit);
    let bytes = body.scan((bound, false), move |(bound, done), chunk| {
        let item = match chunk {
            _ if *done => None,
            Err(e) => {
                *done = true;
                Some(Err(std::io::Error::other(e)))
            }
            Ok(chunk) if bound.take(&chunk) => Some(Ok(chunk)),
            Ok(_) => {
                *done = true;
                Some(match &instead {
                    // The event cut short is closed as one of another type, which the
                    // transport passes over; the refusal follows as a message.
                    Some(refusal) => Ok(Bytes::from(format!(
                        "\nevent: over-limit\n\ndata: {refusal}\n\n"
                    ))),
                    None => Err(over_bound(limit)),
                })
            }
        };
        futures_util::future::ready(item)
    });
    SseStream::from_bytes_stream(bytes).boxed()
}

impl StreamableHttpClient for BoundedHttp {
    type Error = reqwest::Error;

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        last_event_id: Option<String>,
        auth_token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        let mut request = self
            .client
            .get(uri.as_ref())
            .header(ACCEPT, [EVENT_STREAM_MIME_TYPE, JSON_MIME_TYPE].join(", "))
            .header(HEADER_SESSION_ID, session_id.as_ref());
        if let Some(last_event_id) = last_event_id {
            request = request.header(HEADER_LAST_EVENT_ID, last_event_id);
        }
        if let Some(auth) = auth_token {
            request = request.bearer_auth(auth);
        }
        for (name, value) in custom_headers {
            request = request.header(name, value);
        }
        let response = request.send().await?;
        if response.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        let response = response.error_for_status()?;
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .map(|ct| String::from_utf8_lossy(ct.as_bytes()).into_owned());
        if !content_type.as_deref().is_some_and(|ct| {
            ct.starts_with(EVENT_STREAM_MIME_TYPE) || ct.starts_with(JSON_MIME_TYPE)
        }) {
            return Err(StreamableHttpError::UnexpectedContentType(content_type));
        }
        Ok(bounded_events(
            response.bytes_stream(),
            MAX_MCP_MESSAGE_BYTES,
            None,
        ))
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        // Nothing of the answer is read.
        self.client
            .delete_session(uri, session_id, auth_token, custom_headers)
            .await
    }

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_token: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let asked = match &message {
            ClientJsonRpcMessage::Request(request) => Some(Asked {
                id: request.id.clone(),
                method: request.request.method().to_owned(),
            }),
            _ => None,
        };
        let limit = self.limit(asked.as_ref());
        let mut request = self
            .client
            .post(uri.as_ref())
            .header(ACCEPT, [EVENT_STREAM_MIME_TYPE, JSON_MIME_TYPE].join(", "));
        if let Some(auth) = auth_token {
            request = request.bearer_auth(auth);
        }
        for (name, value) in custom_headers {
            request = request.header(name, value);
        }
        let session_was_attached = session_id.is_some();
        if let Some(session_id) = session_id {
            request = request.header(HEADER_SESSION_ID, session_id.as_ref());
        }
        let response = request.json(&message).send().await?;
        let status = response.status();
        if matches!(
            status,
            reqwest::StatusCode::ACCEPTED | reqwest::StatusCode::NO_CONTENT
        ) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == reqwest::StatusCode::NOT_FOUND && session_was_attached {
            return Err(StreamableHttpError::SessionExpired);
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .map(|ct| String::from_utf8_lossy(ct.as_bytes()).into_owned());
        let session = response
            .headers()
            .get(HEADER_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // Spec requires 202 for these, but some servers answer an empty 200.
        if status.is_success() && asked.is_none() && response.content_length() == Some(0) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        let is = |mime: &str| {
            content_type
                .as_deref()
                .is_some_and(|ct| ct.starts_with(mime))
        };
        if status.is_success() && is(EVENT_STREAM_MIME_TYPE) {
            let instead = asked.as_ref().map(|asked| {
                let error = ServerJsonRpcMessage::error(
                    refusal(over_limit_text(Some(asked), limit, self.max_result_bytes)),
                    Some(asked.id.clone()),
                );
                serde_json::to_string(&error).unwrap_or_default()
            });
            let events = bounded_events(response.bytes_stream(), limit, instead);
            return Ok(StreamableHttpPostResponse::Sse(events, session));
        }
        let Some(body) = read_bounded(response, limit).await? else {
            let why = over_limit_text(asked.as_ref(), limit, self.max_result_bytes);
            return Self::refuse(asked.as_ref(), why, session);
        };
        let what = asked.as_ref().map_or("a message", |a| a.method.as_str());
        if !status.is_success() {
            // An error status may carry a JSON-RPC error: it is the answer.
            if is(JSON_MIME_TYPE)
                && let Ok(error @ ServerJsonRpcMessage::Error(_)) = serde_json::from_slice(&body)
            {
                return Ok(StreamableHttpPostResponse::Json(error, session));
            }
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                peer_text::bounded(format!("HTTP {status}: {}", String::from_utf8_lossy(&body))),
            )));
        }
        if !is(JSON_MIME_TYPE) {
            let why = format!(
                "it answered {what} with {}, not JSON or an event stream",
                content_type.map_or("no content type".to_owned(), |ct| format!("{ct:?}"))
            );
            return Self::refuse(asked.as_ref(), why, session);
        }
        match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
            Ok(answer) => Ok(StreamableHttpPostResponse::Json(answer, session)),
            // A notification's or a response's answer is not read (some servers say more than
            // they should); a request's must be its answer.
            Err(_) if asked.is_none() => Ok(StreamableHttpPostResponse::Accepted),
            Err(e) => {
                let why = peer_text::bounded(format!(
                    "it answered {what} with something that is not a JSON-RPC message ({e}): {}",
                    String::from_utf8_lossy(&body)
                ));
                Self::refuse(asked.as_ref(), why, session)
            }
        }
    }
}
