//! The four routes of the contract: register, unregister, clear and list.
//!
//! Each change handler parses the body into a domain type, sends one message to the router and
//! maps the reply; the listing reads the published snapshots directly. No business logic lives
//! here.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use super::body::JsonObject;
use super::error::{ApiError, BodyRouteErrors, ErrorBody, ValidationErrorBody};
use super::requests::{ClearRequest, RegisterRequest, UnregisterRequest};
use super::token::PluginToken;
use super::{AppState, ask_router};
use crate::actors::change::{ChangeReport, RoleFailure};
use crate::actors::router::{
    ChangeRequest, ClearSource, PluginChange, RegisterTool, RoleTools, UnregisterTool,
};
use crate::dispatch::LOCAL_TOOL_TIMEOUT;
use crate::domain::limits::Rate;
use crate::domain::role::RoleName;
use crate::domain::tool::Behavior;
use crate::policy::Policy;

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource("/api/tools/register").route(web::post().to(register)))
        .service(super::resource("/api/tools/unregister").route(web::post().to(unregister)))
        .service(super::resource("/api/tools/clear").route(web::post().to(clear)))
        .service(
            super::resource("/api/tools")
                .app_data(super::query_config())
                .route(super::read_route().to(list)),
        );
}

/// A registration's body as the store keeps it: without `role` (a restored tool belongs to the
/// character it is stored under).
fn stored_body(body: &Map<String, Value>) -> String {
    let kept: Map<String, Value> = body
        .iter()
        .filter(|(key, _)| key.as_str() != "role")
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    Value::Object(kept).to_string()
}

/// What no role accepting a registration reports in `error`.
const NO_ROLE_ACCEPTED: &str = "no role accepted the registration";

/// Register or replace a remote tool, for one character or every current one.
///
/// Returns after every targeted character's live model session acknowledged the new tool list.
#[utoipa::path(
    post,
    path = "/api/tools/register",
    tag = "tools",
    request_body = RegisterBody,
    responses(
        (status = 200, description = "Applied; `ok` is false (with `error`) when no role accepted it", body = RegisterResponse),
        BodyRouteErrors,
        (status = 401, description = "No `X-Plugin-Token`, and the server requires one ([security] plugin_tokens = \"required\")", body = ErrorBody),
        (status = 404, description = "`role` names no character", body = ErrorBody),
        (status = 503, description = "The router did not answer; retry (registration is idempotent)", body = ErrorBody),
    )
)]
async fn register(
    state: web::Data<AppState>,
    PluginToken(token): PluginToken,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    // What the state store keeps: the body as sent, read again by this parser on restore.
    let record = state.keeps_state.then(|| stored_body(&body));
    let request = RegisterRequest::parse(body, state.local_addr).map_err(ApiError::Validation)?;
    let name = request.tool.name.clone();
    let register = RegisterTool {
        tool: request.tool,
        role: request.role,
    };
    let report = ask_router(
        &state,
        PluginChange {
            request: ChangeRequest::Register(Box::new(register)),
            token,
            record,
        },
    )
    .await??;
    let ok = !report.affected_roles.is_empty();
    Ok(HttpResponse::Ok().json(RegisterResponse {
        ok,
        instance_id: state.events.instance_id().to_owned(),
        registered: name,
        affected_roles: report.affected_roles,
        failed_roles: report.failed_roles,
        error: (!ok).then_some(NO_ROLE_ACCEPTED),
    }))
}

/// The answer to a registration.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RegisterResponse {
    /// False only when no role accepted the registration.
    pub ok: bool,
    /// This server instance's id (`GET /api/health`): a new one means the server restarted.
    pub instance_id: String,
    /// The tool's name.
    pub registered: String,
    /// Characters that now have the tool (and whose session acknowledged it).
    #[schema(value_type = Vec<String>)]
    pub affected_roles: Vec<RoleName>,
    /// Characters that could not take it, and why.
    pub failed_roles: Vec<RoleFailure>,
    /// `"no role accepted the registration"`, present only when `ok` is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, required = false, nullable = false)]
    pub error: Option<&'static str>,
}

/// Remove a tool by name, from one character or every current one.
#[utoipa::path(
    post,
    path = "/api/tools/unregister",
    tag = "tools",
    request_body = UnregisterBody,
    responses(
        (status = 200, description = "Done; `removed` says whether any role had the tool", body = UnregisterResponse),
        BodyRouteErrors,
        (status = 401, description = "No `X-Plugin-Token`, and the server requires one ([security] plugin_tokens = \"required\")", body = ErrorBody),
        (status = 404, description = "`role` names no character", body = ErrorBody),
        (status = 503, description = "The router did not answer; retry (unregister is idempotent)", body = ErrorBody),
    )
)]
async fn unregister(
    state: web::Data<AppState>,
    PluginToken(token): PluginToken,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let request = UnregisterRequest::parse(&body).map_err(ApiError::Validation)?;
    let unregister = UnregisterTool {
        name: request.name.clone(),
        role: request.role,
    };
    let report = ask_router(
        &state,
        PluginChange {
            request: ChangeRequest::Unregister(unregister),
            token,
            record: None,
        },
    )
    .await??;
    let removed = report.removed > 0;
    Ok(HttpResponse::Ok().json(UnregisterResponse {
        ok: removal_ok(&report),
        instance_id: state.events.instance_id().to_owned(),
        removed,
        name: request.name,
        affected_roles: report.affected_roles,
        failed_roles: report.failed_roles,
    }))
}

/// The `ok` of a removal: true unless some role failed and nothing was removed.
fn removal_ok(report: &ChangeReport) -> bool {
    report.removed > 0 || report.failed_roles.is_empty()
}

/// The answer to an unregistration.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct UnregisterResponse {
    /// True unless some role failed and nothing was removed.
    pub ok: bool,
    /// This server instance's id: a new one means the server restarted.
    pub instance_id: String,
    /// Whether any role had the tool.
    pub removed: bool,
    pub name: String,
    /// Characters the tool was actually removed from.
    #[schema(value_type = Vec<String>)]
    pub affected_roles: Vec<RoleName>,
    pub failed_roles: Vec<RoleFailure>,
}

/// Remove every tool a `source` registered, from one character or every current one.
#[utoipa::path(
    post,
    path = "/api/tools/clear",
    tag = "tools",
    request_body = ClearBody,
    responses(
        (status = 200, description = "Done; `removed` counts the registry entries dropped", body = ClearResponse),
        BodyRouteErrors,
        (status = 401, description = "No `X-Plugin-Token`, and the server requires one ([security] plugin_tokens = \"required\")", body = ErrorBody),
        (status = 404, description = "`role` names no character", body = ErrorBody),
        (status = 503, description = "The router did not answer; retry (clear is idempotent)", body = ErrorBody),
    )
)]
async fn clear(
    state: web::Data<AppState>,
    PluginToken(token): PluginToken,
    JsonObject(body): JsonObject,
) -> Result<HttpResponse, ApiError> {
    let request = ClearRequest::parse(&body).map_err(ApiError::Validation)?;
    let clear = ClearSource {
        source: request.source.clone(),
        role: request.role,
    };
    let report = ask_router(
        &state,
        PluginChange {
            request: ChangeRequest::Clear(clear),
            token,
            record: None,
        },
    )
    .await??;
    Ok(HttpResponse::Ok().json(ClearResponse {
        ok: removal_ok(&report),
        instance_id: state.events.instance_id().to_owned(),
        removed: report.removed,
        source: request.source,
        affected_roles: report.affected_roles,
        failed_roles: report.failed_roles,
    }))
}

/// The answer to a clear.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ClearResponse {
    /// True unless some role failed and nothing was removed.
    pub ok: bool,
    /// This server instance's id: a new one means the server restarted.
    pub instance_id: String,
    /// Registry entries removed, summed over characters.
    pub removed: usize,
    pub source: String,
    /// Characters that lost at least one tool.
    #[schema(value_type = Vec<String>)]
    pub affected_roles: Vec<RoleName>,
    pub failed_roles: Vec<RoleFailure>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// One character to list; every current character when absent.
    role: Option<String>,
    /// `full` adds each tool's `parameters` and `timeout_seconds`.
    #[param(inline)]
    detail: Option<Detail>,
}

/// How much of each tool a listing shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum Detail {
    /// Everything a caller needs to show or call the tool: its parameters schema and timeout too.
    Full,
}

/// List the current registrations of every character, or of one.
#[utoipa::path(
    get,
    path = "/api/tools",
    tag = "tools",
    params(ListQuery),
    responses(
        (status = 200, description = "Tools by character, in configuration order", body = ListResponse),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 404, description = "`role` names no character", body = ErrorBody),
        (status = 405, description = "Only GET and HEAD are allowed", body = ErrorBody),
        (status = 422, description = "The query string could not be read (e.g. `role` twice)", body = ValidationErrorBody),
    )
)]
async fn list(
    state: web::Data<AppState>,
    query: web::Query<ListQuery>,
) -> Result<HttpResponse, ApiError> {
    let ListQuery { role, detail } = query.into_inner();
    // Read on this worker's thread from the published snapshots: no round trip to the router.
    let roles = state.directory.list(role.as_deref())?;
    let body = serde_json::to_vec(&ListResponse {
        ok: true,
        tools_by_role: ToolsByRole {
            roles: &roles,
            full: detail == Some(Detail::Full),
            states: state.keeps_state,
            policy: &state.policy,
        },
    })
    .map_err(|e| ApiError::Unavailable(format!("listing could not be encoded: {e}")))?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(body))
}

/// The listing.
#[derive(Serialize, ToSchema)]
pub(crate) struct ListResponse<'a> {
    pub ok: bool,
    /// `{role: [tool, ...], ...}`, roles in configuration order.
    #[schema(value_type = indexmap::IndexMap<String, Vec<ToolView>>)]
    tools_by_role: ToolsByRole<'a>,
}

/// `{role: [tool, ...], ...}` in configuration order, serialised straight from the shared tools.
struct ToolsByRole<'a> {
    roles: &'a [RoleTools],
    /// `?detail=full`: with each tool's parameters and timeout.
    full: bool,
    /// Whether each tool says whether it is active or dormant (the server keeps state).
    states: bool,
    /// Where each character's approval rules are held.
    policy: &'a Policy,
}

/// One listed tool.
#[derive(Serialize, ToSchema)]
pub(crate) struct ToolView<'a> {
    name: &'a str,
    description: &'a str,
    /// The lifecycle tag `clear` uses.
    source: &'a str,
    /// Exactly as registered; null for an in-process tool.
    #[schema(required = true)]
    callback_url: Option<&'a str>,
    /// False for an in-process tool.
    is_remote: bool,
    /// JSON Schema of the arguments; only with `?detail=full`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>, required = false, nullable = false)]
    parameters: Option<&'a Map<String, Value>>,
    /// The longest a call may take, in seconds; only with `?detail=full`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    timeout_seconds: Option<f64>,
    /// `blocking` or `non_blocking`; only with `?detail=full`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, required = false, nullable = false)]
    behavior: Option<Behavior>,
    /// Only when the server keeps state (`--state`): `active`, given to the models, or
    /// `dormant`, restored from the state store and waiting for its callback to accept
    /// connections (given to no model until then).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, required = false, nullable = false, pattern = "^(active|dormant)$")]
    state: Option<&'static str>,
    /// `always` when this character's calls of it wait for a person's approval (by its
    /// registration, its MCP server's policy or the character's `[character.approval]`), else
    /// `never`; only with `?detail=full`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false, pattern = "^(always|never)$")]
    approval: Option<&'static str>,
    /// How long a call waits for approval before it expires, in seconds; only with
    /// `?detail=full`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    approval_timeout_seconds: Option<u64>,
    /// At most this many of its calls run at once, across every character and session (null:
    /// no bound); only with `?detail=full`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u32>, required = false, nullable = true, minimum = 1, maximum = 1024)]
    max_concurrent: Option<Option<u32>>,
    /// `{"calls": N, "per_seconds": S}`: at most N calls in any S seconds (null: no bound);
    /// only with `?detail=full`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<RateBody>, required = false, nullable = true)]
    rate: Option<Option<Rate>>,
    /// A model's repeat of a call within this many seconds gets the first call's result (0:
    /// never); only with `?detail=full`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false, maximum = 300)]
    dedupe_seconds: Option<u32>,
    /// Its calls running now (of this registration, every character's); only with
    /// `?detail=full`, for a tool with `max_concurrent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    calls_running: Option<usize>,
    /// Its calls waiting for their turn now, in arrival order; only with `?detail=full`, for a
    /// tool with `max_concurrent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    calls_waiting: Option<usize>,
}

impl Serialize for ToolsByRole<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.roles.len()))?;
        for role in self.roles {
            let active = role.tools.tools().map(|t| (t, "active"));
            let dormant = role.dormant.iter().map(|t| (t, "dormant"));
            let views: Vec<ToolView<'_>> = active
                .chain(dormant)
                .map(|(t, state)| {
                    let at_once = self.full.then(|| self.policy.calls_at_once(t)).flatten();
                    ToolView {
                        name: &t.name,
                        description: &t.description,
                        source: &t.source,
                        callback_url: t.callback_url(),
                        is_remote: t.is_remote(),
                        parameters: self.full.then_some(t.parameters.schema()),
                        timeout_seconds: self
                            .full
                            .then(|| t.timeout().unwrap_or(LOCAL_TOOL_TIMEOUT).as_secs_f64()),
                        behavior: self.full.then_some(t.behavior),
                        state: self.states.then_some(state),
                        approval: self.full.then(|| {
                            match self.policy.approval_required(&role.role, t) {
                                Some(_) => "always",
                                None => "never",
                            }
                        }),
                        approval_timeout_seconds: self.full.then(|| t.approval.timeout.as_secs()),
                        max_concurrent: self.full.then_some(t.limits.max_concurrent),
                        rate: self.full.then_some(t.limits.rate),
                        dedupe_seconds: self.full.then_some(t.limits.dedupe_seconds),
                        calls_running: at_once.map(|(running, _)| running),
                        calls_waiting: at_once.map(|(_, waiting)| waiting),
                    }
                })
                .collect();
            map.serialize_entry(&role.role, &views)?;
        }
        map.end()
    }
}

// The request bodies, for the OpenAPI document only: the handlers read them field by field
// (`super::requests`), so these are never constructed.

/// `POST /api/tools/register`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({
    "name": "get_weather",
    "description": "Get weather for a location.",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
    "callback_url": "http://127.0.0.1:9333/tools/get_weather",
    "role": null,
    "source": "plugin:weather",
    "timeout_seconds": 30
}))]
pub(crate) struct RegisterBody {
    /// The tool's name: 1 to 64 characters, no control characters. Replaces a tool of the
    /// same name.
    #[schema(min_length = 1, max_length = 64)]
    name: String,
    /// Shown to the model.
    #[schema(default = "", nullable = false)]
    description: Option<String>,
    /// JSON Schema (draft 2020-12) of the tool's arguments, describing an object: top-level
    /// `type` absent or `"object"` (default: an empty object schema). An invalid schema is a 422
    /// naming each problem's JSON pointer; every call's arguments are checked against it.
    #[schema(value_type = Option<Object>, nullable = false)]
    parameters: Option<Map<String, Value>>,
    /// `http` or `https` on `localhost`, `127.x.x.x`, `[::1]` or `[::ffff:127.x.x.x]`, at most
    /// 2048 bytes; anything else is a 422.
    #[schema(
        format = "uri",
        max_length = 2048,
        example = "http://127.0.0.1:9333/tools/get_weather"
    )]
    callback_url: String,
    /// One existing character; null or `""` means every current character.
    #[schema(nullable)]
    role: Option<String>,
    /// Lifecycle tag `clear` uses; plugins should use `plugin:<id>`.
    #[schema(min_length = 1, default = "external", nullable = false)]
    source: Option<String>,
    /// Greater than 0 and at most 300.
    #[schema(exclusive_minimum = 0, maximum = 300, default = 30, nullable = false)]
    timeout_seconds: Option<f64>,
    /// `blocking` (the default): the model's call waits for the tool; `non_blocking`: in a live
    /// session the call is answered at once as running and the result follows when it comes.
    #[schema(
        default = "blocking",
        nullable = false,
        pattern = "^(blocking|non_blocking)$"
    )]
    behavior: Option<String>,
    /// `never` (the default) or `always`: each call waits for a person's decision
    /// (`POST /api/approvals/{id}`) before the callback is called.
    #[schema(default = "never", nullable = false, pattern = "^(never|always)$")]
    approval: Option<String>,
    /// How long a call waits for that decision, 1 to 3,600 whole seconds.
    #[schema(minimum = 1, maximum = 3600, default = 120, nullable = false)]
    approval_timeout_seconds: Option<u64>,
    /// At most this many calls of the tool run at once (1 to 1,024), across every character and
    /// session; a call beyond it waits in arrival order, at most its `timeout_seconds`, for its
    /// turn (then a tool error, outcome `busy`). Null or absent: no bound.
    #[schema(minimum = 1, maximum = 1024, nullable = true)]
    max_concurrent: Option<u32>,
    /// At most `calls` calls in any `per_seconds` seconds; a call beyond it is answered at once
    /// with a tool error saying when the next is possible (outcome `rate_limited`). Null or
    /// absent: no bound.
    #[schema(nullable = true)]
    rate: Option<RateBody>,
    /// 0 to 300: a model's call repeated with the same arguments in the same session or
    /// conversation, while the first runs or within this many seconds after it ended, gets the
    /// first call's result without calling the tool (outcome `deduplicated`). 0: never.
    #[schema(minimum = 0, maximum = 300, default = 0, nullable = false)]
    dedupe_seconds: Option<u32>,
}

/// `rate` of a registration.
#[allow(dead_code)]
#[derive(ToSchema)]
pub(crate) struct RateBody {
    /// 1 to 100,000.
    #[schema(minimum = 1, maximum = 100000)]
    calls: u32,
    /// 1 to 86,400.
    #[schema(minimum = 1, maximum = 86400)]
    per_seconds: u32,
}

/// `POST /api/tools/unregister`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({"name": "get_weather", "role": null}))]
pub(crate) struct UnregisterBody {
    #[schema(min_length = 1, max_length = 64)]
    name: String,
    /// One existing character; null or `""` means every current character.
    #[schema(nullable)]
    role: Option<String>,
}

/// `POST /api/tools/clear`. Unknown fields are ignored.
#[allow(dead_code)]
#[derive(ToSchema)]
#[schema(example = json!({"source": "plugin:weather", "role": null}))]
pub(crate) struct ClearBody {
    /// Every tool registered with this `source` is removed.
    #[schema(min_length = 1)]
    source: String,
    /// One existing character; null or `""` means every current character.
    #[schema(nullable)]
    role: Option<String>,
}
