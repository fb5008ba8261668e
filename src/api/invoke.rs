//! `POST /api/tools/invoke`: runs the same dispatch a model's call triggers, by hand.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::AppState;
use super::body::JsonObjectText;
use super::error::{ApiError, BodyRouteErrors, ErrorBody};
use super::requests::InvokeRequest;
use crate::dispatch::{HOP_HEADER, Where};
use crate::domain::call::{JsonText, Outcome, ToolCall, ToolResult};
use crate::domain::images::ToolImage;
use crate::events::{CallStart, CallWatch, Caller};
use crate::policy::Asker;

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource("/api/tools/invoke").route(web::post().to(invoke)));
}

/// Run a registered tool by hand, exactly as a model's call would, and return the result the
/// model would see. The arguments reach the callback exactly as written here.
#[utoipa::path(
    post,
    path = "/api/tools/invoke",
    tag = "tools",
    request_body = InvokeBody,
    responses(
        (status = 200, description = "The call ran, or its arguments did not match the tool's schema; tool-level failures (and a call that arrives through a tool callback) are `is_error: true`", body = InvokeResponse),
        BodyRouteErrors,
        (status = 404, description = "`role` names no character, or no such tool is registered", body = ErrorBody),
    )
)]
async fn invoke(
    state: web::Data<AppState>,
    http: HttpRequest,
    body: JsonObjectText,
) -> Result<HttpResponse, ApiError> {
    let request = InvokeRequest::parse(body.object, &body.text).map_err(ApiError::Validation)?;
    let call_id = request.call_id.unwrap_or_else(new_call_id);
    let mut call = ToolCall::from_text(
        call_id,
        request.name,
        request.arguments_text,
        request.arguments,
    );
    if http.headers().contains_key(HOP_HEADER) {
        // A tool callback calling an invoke route: answering it by calling a tool again is how
        // a server ends up calling itself (or two servers each other) without end.
        let refused = call.failed(
            Outcome::Refused,
            format!(
                "invoke refused: the request came from a tool callback ({HOP_HEADER} header); a \
             tool's callback must not call the invoke route, or calls would loop without end"
            ),
        );
        return Ok(HttpResponse::Ok().json(InvokeResponse::from(refused)));
    }
    // Resolved on this worker's thread from the published snapshots: no round trip to the
    // router.
    let resolved = state
        .directory
        .resolve(request.role.as_deref(), &call.name)?;
    let call_id = call.call_id.clone();
    // If the client goes away, actix drops this future, which cancels the callback exchange;
    // the call is then announced as cancelled. A `traceparent` the request came with makes the
    // call's span part of the caller's trace.
    let parent = super::incoming_trace(&http);
    let watch = CallWatch::start(
        &state.events,
        CallStart {
            role: &resolved.role,
            tool: &resolved.tool.name,
            source: Some(&resolved.tool.source),
            call_id: &call_id,
            caller: Caller::Invoke,
            kind: None,
            behavior: crate::domain::tool::Behavior::Blocking,
        },
        parent.as_ref(),
    );
    call.trace = Some(watch.trace().clone());
    // Listed while it runs: a plugin's progress reaches the event stream.
    let _listed = state.dispatcher.board().list(
        &call_id,
        Where {
            role: resolved.role.to_string(),
            tool: resolved.tool.name.clone(),
            source: resolved.tool.source.clone(),
            session: None,
        },
    );
    // The invoke's caller is the person trying the tool: a tool that needs approval runs
    // without it, and the answer says so.
    let approval_not_asked = state
        .policy
        .approval_required(&resolved.role, &resolved.tool)
        .is_some();
    let asker = Asker {
        role: &resolved.role,
        caller: Caller::Invoke,
        kind: None,
        // The person trying a tool means each call: never taken for a repeat.
        dedupe: None,
    };
    let tool = &resolved.tool;
    let result = match state.policy.admit(asker, tool, &mut call) {
        Ok(admission) => {
            admission
                .run(call, |call| state.dispatcher.dispatch(tool, call))
                .await
        }
        Err(refused) => *refused,
    };
    watch.finished(&result);
    let mut answer = InvokeResponse::from(result);
    if approval_not_asked {
        answer.approval = Some(APPROVAL_NOT_ASKED);
    }
    Ok(HttpResponse::Ok().json(answer))
}

/// The result of a call, as the model would get it.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct InvokeResponse {
    pub ok: bool,
    pub name: String,
    pub call_id: String,
    /// The tool's output (any JSON, numbers exactly as the tool wrote them); on a tool error,
    /// what the tool sent with its error, or `null`.
    #[schema(value_type = Value)]
    pub output: JsonText,
    pub is_error: bool,
    /// Why the call failed, present only on a tool error.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub error: Option<String>,
    /// The images delivered with the output, present only when there are some.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    pub images: Vec<InvokeImage>,
    /// What happened to images that were dropped or changed (also in `output._image_warnings`),
    /// present only when there are some.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(required = false)]
    pub image_warnings: Vec<String>,
    /// Present only for a tool whose model calls wait for a person's approval on this
    /// character: `not_asked`, since the invoke's caller is the person trying the tool.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub approval: Option<&'static str>,
}

/// `approval` of an invoke of a tool that needs approval: none was asked.
const APPROVAL_NOT_ASKED: &str = "not_asked";

/// One delivered image.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct InvokeImage {
    /// `image/png` or `image/jpeg`.
    pub mime: &'static str,
    pub width: u32,
    pub height: u32,
    /// The image, base64.
    pub data_b64: String,
    /// What the model is asked to look for (may be empty).
    pub vision_prompt: String,
}

impl From<ToolImage> for InvokeImage {
    fn from(image: ToolImage) -> Self {
        Self {
            mime: image.mime,
            width: image.width,
            height: image.height,
            data_b64: image.data_b64,
            vision_prompt: image.vision_prompt,
        }
    }
}

impl From<ToolResult> for InvokeResponse {
    fn from(result: ToolResult) -> Self {
        Self {
            ok: true,
            name: result.name,
            call_id: result.call_id,
            output: result.output,
            is_error: result.is_error,
            error: result.error,
            images: result.images.into_iter().map(InvokeImage::from).collect(),
            image_warnings: result.image_warnings,
            approval: None,
        }
    }
}

/// A fresh call id in the style models use.
fn new_call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

// The request body, for the OpenAPI document only: the handler reads it field by field
// (`super::requests`), so this is never constructed.

/// `POST /api/tools/invoke`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({"name": "get_weather", "arguments": {"location": "Shanghai"}, "role": null}))]
pub(crate) struct InvokeBody {
    #[schema(min_length = 1, max_length = 64)]
    name: String,
    /// The call's arguments (default `{}`). Arguments that do not match the tool's schema are
    /// answered as the model would be: 200, `is_error: true`, the text saying what to fix.
    #[schema(value_type = Option<Object>, nullable = false)]
    arguments: Option<Map<String, Value>>,
    /// The character whose registration to use; null or `""`: the first that has the tool.
    #[schema(nullable)]
    role: Option<String>,
    /// The call id the callback receives (default: a fresh `call_...`); at most 256 bytes (a
    /// longer one is a 422).
    #[schema(nullable)]
    call_id: Option<String>,
}
