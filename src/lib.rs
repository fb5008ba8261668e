//! runtime-tools: turns local plugins' HTTP callbacks into tools a live AI model session can
//! call.
//!
//! A plugin registers a tool over `POST /api/tools/register`; the [`Router`] fans it out to
//! each target character's session manager, which owns that character's registry and pushes the
//! new list into the character's live sessions. The [`Dispatcher`] runs the calls. An
//! application embeds the server through [`Application`], and may register in-process tools
//! ([`local_handler`]) and run its own model session ([`embedding`]) next to the HTTP plugins.
//!
//! # Layout
//!
//! Each module imports only the ones listed after it (`tests/layout.rs` checks it):
//!
//! - `startup`: [`Application`], the seam that builds the actors and the HTTP server and runs
//!   them; `demo` uses it.
//! - `api`: the HTTP handlers, their request and answer shapes, the caller guard, the OpenAPI
//!   document and the inspector page. Handlers talk to the router, the event hub and the call policy.
//! - `config`: reads the TOML file (and the command line) into each module's settings.
//! - `mcp`: MCP servers as tool sources, and a character's tools served over MCP.
//! - `actors`: the [`Router`], one session manager per character, in-process tools.
//! - `chat`: text chat (`POST /v1/chat/completions`), the server running the tool loop.
//! - `session`: live model sessions: one protocol-agnostic core, one adapter per wire protocol,
//!   one actor per kind of connection.
//! - `policy`: what a call must pass before it runs (a person's approval, the tool's limits);
//!   it announces on `events`.
//! - `dispatch`: the [`Dispatcher`], which runs a call against a callback or a local tool.
//! - `events`: the [`EventHub`] behind `GET /api/events`, and the watch every call is observed
//!   through.
//! - `observe`: metrics (`GET /metrics`), the recent calls (`GET /api/calls`) and OpenTelemetry
//!   spans.
//! - `state`: the durable registrations of `--state FILE` (a `redb` store).
//! - `domain`: plain values and rules (tools, arguments, calls, callback URLs, registries); it
//!   imports nothing of the actor system or the web framework.
//! - `telemetry`: logging.
//!
//! Everything else is private to the crate (`unreachable_pub` keeps a `pub` from pretending
//! otherwise); what is exported below is the whole public surface.

#![warn(unreachable_pub)]

mod actors;
mod api;
mod chat;
mod config;
pub mod demo;
mod dispatch;
mod domain;
mod events;
mod mcp;
mod observe;
mod policy;
mod session;
mod startup;
mod state;
pub mod telemetry;

// The application seam and its settings.
pub use actors::settings::CharacterSettings;
pub use chat::settings::ChatSettings;
pub use config::{Settings, parse_bind};
pub use dispatch::settings::DispatchSettings;
pub use domain::budget::{Budget, CALL_TOOL, FIND_TOOLS, Found, Offer, SearchMode};
pub use domain::operator::{Decisions, OperatorToken, TokenOrigin};
pub use domain::ownership::{ConfiguredSource, OwnershipError, TokenPolicy};
pub use events::{EventHub, EventKind, EventSettings};
pub use mcp::settings::{McpEndpointSettings, McpServerSettings, McpTransport};
pub use observe::Observer;
pub use observe::trace::TraceSettings;
pub use session::settings::{Dialect, SessionMode, SessionProtocol, SessionSettings};
pub use startup::{Application, Stopper};
pub use state::settings::StateSettings;

// The router and the messages it takes.
pub use actors::change::{ChangeFailure, ChangeReport, RoleFailure};
pub use actors::router::{
    AddCharacter, AttachCall, ClearSource, DetachCall, JoinSession, ListCharacters, ListSessions,
    ListTools, RebuildCharacter, RegisterTool, RemoveCharacter, ReplaceSource, ResolveTool,
    ResolvedTool, RoleTools, Router, RouterError, UnregisterTool,
};
pub use domain::call_url::CallUrl;
pub use domain::role::RoleName;

// Tools, their calls, and in-process tools.
pub use actors::local_tool::{CallLocalTool, local_handler};
pub use dispatch::Dispatcher;
pub use domain::approval::{Approval, McpApproval};
pub use domain::arguments::Parameters;
pub use domain::call::{LocalHandler, LocalToolHandler, Scheduling, ToolCall, ToolOutcome};
pub use domain::callback_url::CallbackUrl;
pub use domain::limits::{CallLimits, Rate};
pub use domain::tool::{Behavior, SharedTool, ToolHandler, ToolSpec, empty_parameters};

/// An application's own model session, joined to a character with [`JoinSession`]: the
/// messages it handles and the report it gives.
pub mod embedding {
    pub use crate::actors::manager::SessionReport;
    pub use crate::dispatch::CallCanceller;
    pub use crate::domain::call::Outcome;
    pub use crate::domain::call::ToolResult;
    pub use crate::domain::connection::ConnectionKind;
    pub use crate::events::{CallStart, CallWatch, Caller, ToolCallFinished};
    pub use crate::session::attach::{JoinError, Joined};
    pub use crate::session::core::rfc3339_now;
    pub use crate::session::realtime::image_message;
    pub use crate::session::{
        CloseSession, ConnectionReport, ConnectionState, Conversation, ResumptionReport,
        RunningCallReport, SessionHandle, SessionStatus, SyncError, SyncOutcome, SyncTools,
    };
}

/// The tool definitions a model session is sent, as the server writes them on the wire: a
/// realtime `session.update` and a chat or Responses request's `tools`. The budget's benchmark
/// (benches/budget.rs) measures their bytes with every tool and with a budget's set.
pub mod wire {
    pub use crate::chat::wire::tools_text;
    pub use crate::session::realtime::session_update_text;
}

/// Tool search: the ranking `GET /api/tools/search` uses, over any tool definitions (a
/// character's are searched through its snapshot, `ToolSnapshot::search`). The benchmark that
/// tunes and evaluates it (benches/tool_search.rs) uses it here.
pub mod search {
    pub use crate::domain::search::{Catalog, Hit, Weights};
}

/// The `runtime-tools mcp` command: a character's tools served to an MCP client over stdio.
pub mod mcp_bridge {
    pub use crate::mcp::serve::{DEFAULT_SERVER, ServeSettings, run};
}

/// The bounds the server keeps (docs/reliability.md): what a caller, a plugin or a model may
/// send, and how long the server waits. Tests and operators read them here.
pub mod limits {
    pub use crate::api::body::{BODY_READ_TIMEOUT, MAX_BODY_BYTES};
    pub use crate::api::requests::{MAX_CONTEXT_CHARS, MAX_NAME_CHARS, MAX_PROGRESS_CHARS};
    pub use crate::chat::kept::forgotten::{MAX_FORGOTTEN_BYTES, MAX_FORGOTTEN_IDS};
    pub use crate::chat::kept::{LOST_RESULT_TEXT, MAX_KEPT_BYTES, MAX_KEPT_TURNS};
    pub use crate::chat::responses::issued::MAX_ISSUED_IDS;
    pub use crate::chat::settings::DEFAULT_MAX_CONCURRENT_REQUESTS;
    pub use crate::chat::upstream::MAX_UPSTREAM_ANSWER_BYTES;
    pub use crate::chat::wire::MAX_REQUEST_ITEMS;
    pub use crate::chat::{KEPT_CONTEXT_AGE, MAX_KEPT_CONTEXT};
    pub use crate::domain::arguments::MAX_FIX_IT_BYTES;
    pub use crate::domain::callback_url::{ACCEPTED_FORMS, MAX_CALLBACK_URL_BYTES};
    pub use crate::domain::limits::{
        MAX_CONCURRENT, MAX_DEDUPE_SECONDS, MAX_RATE_CALLS, MAX_RATE_SECONDS,
    };
    pub use crate::domain::peer_id::{MAX_CALL_ID_BYTES, MAX_INVENTED_NAME_BYTES};
    pub use crate::domain::peer_text::MAX_PEER_TEXT_BYTES;
    pub use crate::domain::tool::MAX_TIMEOUT;
    pub use crate::events::RING_MAX_BYTES;
    pub use crate::events::{RING_CAPACITY, SUBSCRIBER_BUFFER};
    pub use crate::mcp::bounds::{
        MAX_LISTING_BYTES, MAX_MCP_MESSAGE_BYTES, MAX_TOOL_DEFINITION_BYTES,
    };
    pub use crate::mcp::settings::{DEFAULT_MAX_MCP_SESSIONS, DEFAULT_MCP_SESSION_IDLE};
    pub use crate::observe::metrics::MAX_TOOL_LABELS;
    pub use crate::observe::recent::RECENT_CALLS;
    pub use crate::observe::recent::RECENT_CALLS_MAX_BYTES;
    pub use crate::observe::trace::DEFAULT_SPAN_QUEUE;
    pub use crate::policy::{MAX_REMEMBERED_BYTES, MAX_REMEMBERED_CALLS, MAX_WAITING};
    pub use crate::session::MAX_EVENT_BYTES;
    pub use crate::session::core::{REPLY_GRACE, RESPONSE_START_GRACE};
    pub use crate::session::outbox::MAX_APP_QUEUE_BYTES;
    pub use crate::session::settings::DEFAULT_MAX_ATTACHMENTS;
    pub use crate::session::shell::MAX_UPSTREAM_QUEUE_BYTES;
    pub use crate::startup::{NON_LOOPBACK_WARNING, REQUEST_HEAD_TIMEOUT};
}

/// Fault injection, for tests of how the server contains failures: a manager that panics, a
/// router that stops, every connection closed as a stopping server does.
#[doc(hidden)]
pub mod faults {
    pub use crate::actors::router::{CloseAllConnections, InjectManagerPanic, InjectRouterStop};
}

/// The call policy, for the benchmarks (`benches/router.rs`, group `limits`): it has no public
/// path of its own.
#[doc(hidden)]
pub mod bench {
    pub use crate::policy::bench::BenchPolicy;
}

/// The request parsers, for the fuzz targets (`fuzz/`).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::api::body::parse_object;
    pub use crate::api::requests::{
        ClearRequest, InvokeRequest, RegisterRequest, UnregisterRequest,
    };
}
