//! `POST /v1/chat/completions`, `POST /v1/responses` and `GET /v1/models` (and
//! `/v1/models/{model}`): the server as an OpenAI-compatible chat endpoint. An app reaches a
//! character's chat model by changing only its SDK's base URL; the server adds the character's
//! registered tools and runs their calls (see [`crate::chat`]). The character is `?character=NAME` or the `X-Character` header (either may
//! be left out when exactly one character has a chat). Errors take OpenAI's shape.
//!
//! The handlers find the character's chat endpoint and tools in the `Directory` on the worker's
//! own thread, like the invoke route, and run the request there.

use std::convert::Infallible;

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;

use super::AppState;
use super::body::{read_body, refuse_duplicate_keys};
use super::error::{OpenAiError, OpenAiErrorBody};
use crate::actors::router::ChatTarget;
use crate::chat::responses::request::ResponsesRequest;
use crate::chat::run::{ChatContext, Reply};
use crate::chat::upstream::{AppHeaders, UpstreamError};
use crate::chat::wire::{ChatRequest, RequestError};
use crate::chat::{complete, respond};

/// Largest chat request body: a conversation's history carries its images as data URLs, and a
/// few photos of a phone's camera are tens of megabytes of base64.
pub(crate) const MAX_CHAT_BODY_BYTES: usize = 32 * 1024 * 1024;

/// Bodies larger than this are checked and parsed on the blocking pool, not on the HTTP worker:
/// that takes a few milliseconds per MiB in a release build (ten times more in a debug one),
/// and a worker busy with one body would hold up every other connection it serves.
pub(crate) const INLINE_BODY_BYTES: usize = 256 * 1024;

/// The header that names the character, for apps that cannot add a query parameter.
pub(crate) const CHARACTER_HEADER: &str = "x-character";

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(resource("/v1/chat/completions").route(web::post().to(chat_completions)))
        .service(resource("/v1/responses").route(web::post().to(responses)))
        .service(resource("/v1/models").route(super::read_route().to(list_models)))
        .service(resource("/v1/models/{model:.+}").route(super::read_route().to(get_model)));
}

/// A resource whose other methods answer 405 in OpenAI's shape.
fn resource(path: &str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(|| async {
        Err::<HttpResponse, _>(OpenAiError::from(super::error::ApiError::MethodNotAllowed))
    }))
}

/// The character a request names, and its chat endpoint.
fn target(state: &AppState, req: &HttpRequest) -> Result<ChatTarget, OpenAiError> {
    let from_query = url::form_urlencoded::parse(req.query_string().as_bytes())
        .find(|(key, value)| key == "character" && !value.is_empty())
        .map(|(_, value)| value.into_owned());
    let from_header = req
        .headers()
        .get(CHARACTER_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let character = from_query.or(from_header);
    Ok(state.directory.chat(character.as_deref())?)
}

/// Create a chat completion: the app's request passed to the character's chat model with the
/// registered tools added; calls of registered tools are run by the server, the model is asked
/// again, and the app gets the model's answer (or a turn with only its own calls).
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "chat",
    params(
        ("character" = Option<String>, Query, description = "The character whose chat model and tools to use (or the `X-Character` header); may be left out when exactly one character has `[character.chat]`"),
    ),
    request_body(content = Object, description = "An OpenAI chat-completions request; every field is passed upstream as written"),
    responses(
        (status = 200, description = "A chat completion; with `stream: true`, a stream of `chat.completion.chunk` events ending with `data: [DONE]`. An error status the upstream answered with is passed to the app with its body", content(
            (Object = "application/json"),
            (String = "text/event-stream"),
        )),
        (status = 400, description = "The body is not a chat request, repeats a key in an object, or has more than 65 536 `messages` (code `array_above_max_length`)", body = OpenAiErrorBody),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = OpenAiErrorBody),
        (status = 404, description = "The character is unknown, has no `[character.chat]`, or was left out while several characters have one", body = OpenAiErrorBody),
        (status = 405, description = "Only POST is allowed", body = OpenAiErrorBody),
        (status = 408, description = "The body did not arrive in full within 10 s", body = OpenAiErrorBody),
        (status = 413, description = "The body is over 32 MiB", body = OpenAiErrorBody),
        (status = 429, description = "The character already runs `chat.max_concurrent_requests` requests (8 by default); code `rate_limit_exceeded`", body = OpenAiErrorBody),
        (status = 502, description = "The upstream could not be reached, did not answer with a chat completion, answered with more than 64 MiB, or redirected (never followed)", body = OpenAiErrorBody),
        (status = 504, description = "The upstream did not answer, or did not send its whole answer, within the character's `chat.timeout_seconds`", body = OpenAiErrorBody),
    )
)]
async fn chat_completions(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, OpenAiError> {
    serve(
        req,
        payload,
        state,
        ChatRequest::parse,
        |_, _, _| Ok(()),
        complete,
    )
    .await
}

/// Create a model response (the Responses API): the app's request passed to the character's
/// model (`URL/responses`) with the registered tools added; calls of registered tools are run by
/// the server, the model is asked again, and the app gets one response (or one with only its
/// own calls).
#[utoipa::path(
    post,
    path = "/v1/responses",
    tag = "chat",
    params(
        ("character" = Option<String>, Query, description = "The character whose model and tools to use (or the `X-Character` header); may be left out when exactly one character has `[character.chat]`"),
    ),
    request_body(content = Object, description = "A Responses API request (`input`, `tools`, `previous_response_id`, `store`, ...); every field is passed upstream as written"),
    responses(
        (status = 200, description = "A response whose `output` holds the model's items of every round and the app's own calls; with `stream: true`, one stream of response events (`response.created` ... `response.completed`). An error status the upstream answered with (a 404 from one that does not speak the Responses API) is passed to the app with its body", content(
            (Object = "application/json"),
            (String = "text/event-stream"),
        )),
        (status = 400, description = "The body is not a Responses API request, has more than 65 536 `input` items (code `array_above_max_length`), or its `previous_response_id` was returned for another character (code `previous_response_not_found`)", body = OpenAiErrorBody),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = OpenAiErrorBody),
        (status = 404, description = "The character is unknown, has no `[character.chat]`, or was left out while several characters have one", body = OpenAiErrorBody),
        (status = 405, description = "Only POST is allowed", body = OpenAiErrorBody),
        (status = 408, description = "The body did not arrive in full within 10 s", body = OpenAiErrorBody),
        (status = 413, description = "The body is over 32 MiB", body = OpenAiErrorBody),
        (status = 429, description = "The character already runs `chat.max_concurrent_requests` requests (8 by default); code `rate_limit_exceeded`", body = OpenAiErrorBody),
        (status = 502, description = "The upstream could not be reached, redirected, or did not answer with a response (codes `upstream_unreachable`, `upstream_too_large`, `upstream_redirect`, `upstream_invalid`)", body = OpenAiErrorBody),
        (status = 504, description = "The upstream did not answer, or did not send its whole answer, within the character's `chat.timeout_seconds`", body = OpenAiErrorBody),
    )
)]
async fn responses(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, OpenAiError> {
    serve(
        req,
        payload,
        state,
        ResponsesRequest::parse,
        previous_of_this_character,
        respond,
    )
    .await
}

/// A `previous_response_id` another character returned is not this one's to go on from: a 400
/// as the upstream answers an id it never stored. An id no character returned passes.
fn previous_of_this_character(
    state: &AppState,
    target: &ChatTarget,
    request: &ResponsesRequest,
) -> Result<(), OpenAiError> {
    let Some(id) = request.previous_response_id.as_deref() else {
        return Ok(());
    };
    let others = state.directory.chat_endpoints();
    if crate::chat::issued_elsewhere(&target.chat, others.iter().map(|(_, chat)| &**chat), id) {
        return Err(OpenAiError {
            code: Some("previous_response_not_found"),
            ..OpenAiError::invalid(
                format!(
                    "Previous response with id '{}' not found: it was returned for another \
                     character's conversation",
                    crate::domain::peer_text::bounded_str(id)
                ),
                Some("previous_response_id"),
            )
        });
    }
    Ok(())
}

/// Either wire format's request: the character found, the body read and parsed, the request
/// run, its reply mapped.
async fn serve<R, F>(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    parse: fn(&[u8]) -> Result<R, RequestError>,
    check: fn(&AppState, &ChatTarget, &R) -> Result<(), OpenAiError>,
    run: fn(ChatContext, R) -> F,
) -> Result<HttpResponse, OpenAiError>
where
    R: Send + 'static,
    F: std::future::Future<Output = Reply>,
{
    let target = target(&state, &req)?;
    let permit = target.chat.admit()?;
    let mut payload: Payload = payload.into_inner();
    let body = read_body(&req, &mut payload, MAX_CHAT_BODY_BYTES)
        .await
        .map_err(OpenAiError::from)?;
    let large = body.len() > INLINE_BODY_BYTES;
    let read = move || {
        refuse_duplicate_keys(&body).map_err(|e| {
            OpenAiError::invalid(format!("the request body must not repeat a key: {e}"), None)
        })?;
        parse(&body).map_err(|e| OpenAiError {
            code: e.code,
            ..OpenAiError::invalid(e.message, e.param)
        })
    };
    // A large body is read on the blocking pool: the worker goes on serving its other
    // connections meanwhile.
    let request = if large {
        web::block(read)
            .await
            .map_err(|e| OpenAiError::from(super::error::ApiError::Internal(e.to_string())))??
    } else {
        read()?
    };
    check(&state, &target, &request)?;
    let context = ChatContext {
        role: target.role,
        endpoint: target.chat,
        tools: target.tools,
        dispatcher: state.dispatcher.clone(),
        events: state.events.clone(),
        policy: state.policy.clone(),
        app: AppHeaders::from_request(req.headers()),
        parent: super::incoming_trace(&req),
        client: req.peer_addr(),
        _permit: permit,
    };
    Ok(match run(context, request).await {
        Reply::Whole {
            status,
            content_type,
            body,
        } => HttpResponse::build(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY))
            .content_type(content_type)
            .body(body),
        Reply::Stream(frames) => {
            let frames = futures_util::stream::unfold(frames, |mut frames| async move {
                frames
                    .recv()
                    .await
                    .map(|frame| (Ok::<Bytes, Infallible>(frame), frames))
            });
            HttpResponse::Ok()
                .content_type("text/event-stream")
                .insert_header(("cache-control", "no-cache"))
                .streaming(frames)
        }
    })
}

/// The models of the character's chat upstream, as the upstream lists them.
#[utoipa::path(
    get,
    path = "/v1/models",
    tag = "chat",
    params(
        ("character" = Option<String>, Query, description = "As for `/v1/chat/completions`"),
    ),
    responses(
        (status = 200, description = "The upstream's list, passed through (as is any other status it answers with); `GET /v1/models/{model}` passes one model's description the same way", body = Object),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = OpenAiErrorBody),
        (status = 404, description = "The character is unknown or has no `[character.chat]`", body = OpenAiErrorBody),
        (status = 405, description = "Only GET and HEAD are allowed", body = OpenAiErrorBody),
        (status = 502, description = "The upstream could not be reached", body = OpenAiErrorBody),
        (status = 504, description = "The upstream did not answer, or did not send its whole answer, within the character's `chat.timeout_seconds`", body = OpenAiErrorBody),
    )
)]
async fn list_models(
    req: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, OpenAiError> {
    pass_through(&state, &req, "models".into()).await
}

/// One model of the character's chat upstream, as the upstream describes it.
async fn get_model(
    req: HttpRequest,
    state: web::Data<AppState>,
    model: web::Path<String>,
) -> Result<HttpResponse, OpenAiError> {
    let model = model.into_inner();
    let encoded: String = url::form_urlencoded::byte_serialize(model.as_bytes()).collect();
    pass_through(&state, &req, format!("models/{encoded}")).await
}

/// A GET of the upstream's, answered with its status, type and body.
async fn pass_through(
    state: &AppState,
    req: &HttpRequest,
    path: String,
) -> Result<HttpResponse, OpenAiError> {
    let target = target(state, req)?;
    let upstream = target.chat.upstream();
    let app = AppHeaders::from_request(req.headers());
    let outcome = async {
        let deadline = upstream.deadline();
        let response = upstream.get(&path, &app).await?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json")
            .to_owned();
        let body = upstream.read(response.into_body(), &app, deadline).await?;
        Ok::<_, UpstreamError>((status, content_type, body))
    };
    match outcome.await {
        Ok((status, content_type, body)) => Ok(HttpResponse::build(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
        )
        .content_type(content_type)
        .body(body)),
        Err(e) => Err(upstream_failure(e)),
    }
}

fn upstream_failure(e: UpstreamError) -> OpenAiError {
    OpenAiError {
        status: StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_GATEWAY),
        message: e.to_string(),
        kind: "upstream_error",
        param: None,
        code: Some(e.code()),
    }
}
