//! `GET /api/tools/openapi.json`: the OpenAPI 3.1 document of this HTTP API.
//!
//! The document is derived (by `utoipa`) from the handlers' `#[utoipa::path]` attributes and from
//! the very types the handlers serialise (`RegisterResponse`, `ErrorBody`, ...), so a changed
//! response shape changes the document with it. Request bodies are read field by field in
//! [`super::requests`] (a 422 must name every failing field), so their schemas are
//! documentation-only structs next to each handler; the unit tests here check them against that
//! parser. This module reads the handlers' types; no handler reads it.

use std::sync::LazyLock;

use actix_web::{HttpResponse, web};
use utoipa::OpenApi;

use super::approvals::{self, ApprovalView, ApprovalsResponse, DecisionBody, DecisionResponse};
use super::chat;
use super::conversation::{self, ContextBody, ContextResponse, ProgressBody, ProgressResponse};
use super::error::{
    ApiError, ErrorBody, FieldError, JsonRpcErrorBody, JsonRpcErrorDetail, OpenAiErrorBody,
    OpenAiErrorDetail, ValidationErrorBody,
};
use super::events;
use super::health::{self, HealthResponse};
use super::invoke::{self, InvokeBody, InvokeImage, InvokeResponse};
use super::mcp::{
    self, McpRegisterBody, McpRegisterResponse, McpResponse, McpUnregisterBody,
    McpUnregisterResponse,
};
use super::observe::{self, CallsResponse};
use super::search::{self, FoundTool, SearchResponse};
use super::sessions::{
    self, AttachBody, AttachResponse, DetachBody, DetachResponse, SessionsResponse,
};
use super::sources::{self, SourceView, SourcesResponse, UnbindResponse, WakeBody, WakeResponse};
use super::tools::{
    self, ClearBody, ClearResponse, ListResponse, RegisterBody, RegisterResponse, ToolView,
    UnregisterBody, UnregisterResponse,
};
use crate::actors::change::RoleFailure;
use crate::actors::manager::SessionReport;
use crate::chat::{ChatFailure, ChatReport, ToolsRefused};
use crate::domain::call::Outcome;
use crate::domain::connection::{Caller, ConnectionKind};
use crate::domain::tool::Behavior;
use crate::mcp::mapping::Skipped;
use crate::mcp::runtime::McpStage;
use crate::mcp::status::{McpServerReport, McpState, RuntimeMcpReport, RuntimeMcpState};
use crate::observe::recent::RecentCall;
use crate::session::{
    ConnectionReport, ConnectionState, Conversation, ResumptionReport, RunningCallReport,
    SyncOutcome,
};

/// Where the document is served.
pub(crate) const OPENAPI_PATH: &str = "/api/tools/openapi.json";

/// The whole HTTP API.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Runtime Tool API",
        description = "Local plugins register HTTP callbacks as tools a live AI model session can \
                       call. Every route answers loopback callers only (anyone else gets 403).",
    ),
    paths(
        tools::register,
        tools::unregister,
        tools::clear,
        tools::list,
        search::search,
        invoke::invoke,
        conversation::progress,
        conversation::context,
        approvals::list,
        approvals::decide,
        sessions::list_sessions,
        sessions::attach,
        sessions::detach,
        sources::list,
        sources::wake,
        sources::unbind,
        events::events,
        mcp::list_mcp_servers,
        mcp::register,
        mcp::unregister,
        mcp::mcp_post,
        mcp::mcp_get,
        mcp::mcp_delete,
        chat::chat_completions,
        chat::responses,
        chat::list_models,
        observe::metrics,
        observe::calls,
        health::health,
        openapi_document,
    ),
    components(schemas(
        RegisterBody,
        UnregisterBody,
        ClearBody,
        InvokeBody,
        RegisterResponse,
        UnregisterResponse,
        ClearResponse,
        ListResponse,
        ToolView,
        SearchResponse,
        FoundTool,
        InvokeResponse,
        InvokeImage,
        SessionsResponse,
        ProgressBody,
        ProgressResponse,
        ContextBody,
        ContextResponse,
        SourcesResponse,
        SourceView,
        WakeBody,
        WakeResponse,
        UnbindResponse,
        ApprovalsResponse,
        ApprovalView,
        DecisionBody,
        DecisionResponse,
        RunningCallReport,
        Conversation,
        Behavior,
        SessionReport,
        ConnectionReport,
        ResumptionReport,
        ConnectionKind,
        SyncOutcome,
        ConnectionState,
        AttachBody,
        AttachResponse,
        DetachBody,
        DetachResponse,
        McpResponse,
        McpServerReport,
        McpState,
        RuntimeMcpReport,
        RuntimeMcpState,
        McpRegisterBody,
        McpRegisterResponse,
        McpStage,
        McpUnregisterBody,
        McpUnregisterResponse,
        HealthResponse,
        JsonRpcErrorBody,
        JsonRpcErrorDetail,
        ChatReport,
        ChatFailure,
        ToolsRefused,
        OpenAiErrorBody,
        OpenAiErrorDetail,
        Skipped,
        RoleFailure,
        ErrorBody,
        ValidationErrorBody,
        FieldError,
        CallsResponse,
        RecentCall,
        Outcome,
        Caller,
    )),
    tags(
        (name = "tools", description = "Register, remove, list, search and invoke remote tools"),
        (name = "sessions", description = "The characters' live model sessions: the server's own, apps' relays (`GET /v1/realtime`, a websocket, not in this document), attached calls, in-process ones"),
        (name = "sources", description = "Who owns a source: the listing of sources and their bindings, a plugin's wake of its restored tools, the operator's freeing of a binding"),
        (name = "events", description = "Change events, as Server-Sent Events"),
        (name = "mcp", description = "MCP both ways: the MCP servers whose tools the characters get (configured, and registered by plugins at run time), and a character's tools as an MCP server over Streamable HTTP (`/mcp`)"),
        (name = "chat", description = "The server as an OpenAI-compatible chat endpoint: a character's chat model with its registered tools, the tool loop run by the server (OpenAI's request, answer and error shapes)"),
        (name = "observability", description = "What the server did: Prometheus metrics, and the recent calls with their trace ids (docs/observability.md)"),
        (name = "meta", description = "This document"),
    )
)]
pub(crate) struct ApiDoc;

/// The document as served, built once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serialises")
});

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(super::resource(OPENAPI_PATH).route(super::read_route().to(openapi_document)));
}

/// This document.
#[utoipa::path(
    get,
    path = "/api/tools/openapi.json",
    tag = "meta",
    responses(
        (status = 200, description = "The OpenAPI 3.1 document of this API", body = Object, content_type = "application/json"),
        (status = 403, description = "Not a loopback caller, a foreign `Host`, or a non-loopback browser `Origin`", body = ErrorBody),
        (status = 405, description = "Only GET and HEAD are allowed", body = ErrorBody),
    )
)]
async fn openapi_document() -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(DOCUMENT.as_str()))
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, Value, json};

    use super::*;
    use crate::api::requests::{
        AttachRequest, ClearRequest, DecisionRequest, DetachRequest, InvokeRequest,
        McpRegisterRequest, McpUnregisterRequest, RegisterRequest, UnregisterRequest,
    };

    type Parse = fn(&Map<String, Value>) -> Result<(), Vec<FieldError>>;

    fn document() -> Value {
        serde_json::from_str(&DOCUMENT).unwrap()
    }

    /// Each request-body schema with the parser of the body it documents.
    fn bodies() -> Vec<(&'static str, Parse)> {
        vec![
            ("RegisterBody", |b| {
                RegisterRequest::parse(b.clone(), "127.0.0.1:48911".parse().unwrap()).map(drop)
            }),
            ("UnregisterBody", |b| UnregisterRequest::parse(b).map(drop)),
            ("ClearBody", |b| ClearRequest::parse(b).map(drop)),
            ("InvokeBody", |b| {
                InvokeRequest::parse(b.clone(), &serde_json::to_vec(b).unwrap()).map(drop)
            }),
            ("AttachBody", |b| AttachRequest::parse(b).map(drop)),
            ("DetachBody", |b| DetachRequest::parse(b).map(drop)),
            ("McpRegisterBody", |b| {
                McpRegisterRequest::parse(b, "127.0.0.1:48911".parse().unwrap(), |_| false)
                    .map(drop)
            }),
            ("McpUnregisterBody", |b| {
                McpUnregisterRequest::parse(b, |_| false).map(drop)
            }),
            ("DecisionBody", |b| DecisionRequest::parse(b).map(drop)),
        ]
    }

    #[test]
    fn is_openapi_3_1() {
        assert!(document()["openapi"].as_str().unwrap().starts_with("3.1."));
    }

    #[test]
    fn each_request_example_is_accepted() {
        let doc = document();
        for (name, parse) in bodies() {
            let example = doc["components"]["schemas"][name]["example"].clone();
            let Value::Object(example) = example else {
                panic!("{name} has no example object")
            };
            assert_eq!(parse(&example), Ok(()), "{name}");
        }
    }

    /// Every documented field is one the parser reads (a wrong type there is a 422 naming it),
    /// and every required one is required by the parser too.
    #[test]
    fn request_schemas_match_the_parsers() {
        let doc = document();
        for (name, parse) in bodies() {
            let schema = &doc["components"]["schemas"][name];
            let Value::Object(example) = schema["example"].clone() else {
                panic!("{name} has no example")
            };
            for field in schema["properties"].as_object().unwrap().keys() {
                let mut body = example.clone();
                body.insert(field.clone(), json!([]));
                let errors = parse(&body).expect_err(field);
                assert_eq!(errors[0].loc, ["body", field.as_str()], "{name}.{field}");

                // A nullable field of a type of its own is `oneOf` null and a reference.
                let property = &schema["properties"][field];
                let nullable = property["type"]
                    .as_array()
                    .or_else(|| property["oneOf"].as_array())
                    .is_some_and(|types| {
                        types.contains(&json!("null")) || types.contains(&json!({"type": "null"}))
                    });
                body.insert(field.clone(), Value::Null);
                assert_eq!(
                    parse(&body).is_ok(),
                    nullable,
                    "{name}.{field}: nullable in the schema iff the parser takes null"
                );
            }
            let required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().map(|f| f.as_str().unwrap()).collect())
                .unwrap_or_default();
            for field in schema["properties"].as_object().unwrap().keys() {
                let mut body = example.clone();
                body.remove(field);
                let missing = parse(&body)
                    .err()
                    .is_some_and(|e| e.iter().any(|e| e.kind == "missing"));
                assert_eq!(
                    missing,
                    required.contains(&field.as_str()),
                    "{name}.{field}: required in the schema iff the parser requires it"
                );
            }
        }
    }

    #[test]
    fn documented_limits_are_the_parsers() {
        use crate::api::requests::{MAX_NAME_CHARS, MAX_TIMEOUT_SECONDS};
        use crate::domain::tool::{DEFAULT_SOURCE, DEFAULT_TIMEOUT};

        let doc = document();
        let register = &doc["components"]["schemas"]["RegisterBody"]["properties"];
        for body in ["RegisterBody", "UnregisterBody", "InvokeBody"] {
            assert_eq!(
                doc["components"]["schemas"][body]["properties"]["name"]["maxLength"],
                json!(MAX_NAME_CHARS),
                "{body}"
            );
        }
        assert_eq!(
            register["timeout_seconds"]["maximum"].as_f64(),
            Some(MAX_TIMEOUT_SECONDS)
        );
        assert_eq!(
            register["timeout_seconds"]["default"].as_f64(),
            Some(DEFAULT_TIMEOUT.as_secs_f64())
        );
        assert_eq!(register["source"]["default"], json!(DEFAULT_SOURCE));
        assert_eq!(
            register["callback_url"]["maxLength"],
            json!(crate::domain::callback_url::MAX_CALLBACK_URL_BYTES)
        );
    }
}
