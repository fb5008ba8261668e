//! The OpenAPI schemas of the reports other layers hand the HTTP API: what a change did to a
//! character (`RoleFailure`), the sessions listing (`SessionReport` and what it holds), the MCP
//! servers' reports. Those types belong to their modules and know nothing of HTTP (the same
//! values are the `session.state`, `chat.state` and `mcp.state` events). Each is described here
//! by a schema-only twin with the same fields, and the real type takes its twin's schema, so the
//! handlers' response types name the real ones. The tests check every real value against its
//! twin's schema, with no field the twin lacks.

use std::borrow::Cow;

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;

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

/// Gives each real type its twin's schema, under the same name.
macro_rules! described_by_twin {
    ($($real:ident),* $(,)?) => {$(
        impl utoipa::PartialSchema for $real {
            fn schema() -> RefOr<Schema> {
                <twin::$real as utoipa::PartialSchema>::schema()
            }
        }

        impl utoipa::ToSchema for $real {
            fn name() -> Cow<'static, str> {
                <twin::$real as utoipa::ToSchema>::name()
            }

            fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
                <twin::$real as utoipa::ToSchema>::schemas(schemas)
            }
        }
    )*};
}

described_by_twin!(
    RoleFailure,
    SessionReport,
    ConnectionState,
    ConnectionReport,
    SyncOutcome,
    ResumptionReport,
    RunningCallReport,
    Conversation,
    Behavior,
    ConnectionKind,
    ChatFailure,
    ToolsRefused,
    ChatReport,
    McpState,
    McpServerReport,
    RuntimeMcpState,
    RuntimeMcpReport,
    McpStage,
    Skipped,
    RecentCall,
    Caller,
);

// An outcome's schema is the list of its names, so a new outcome needs no second list here.
impl utoipa::PartialSchema for Outcome {
    fn schema() -> RefOr<Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(
                "How a call ended: `ok`, `tool_error` (the tool answered with an error, an HTTP \
                 status of 400 or more, or an answer that could not be read), \
                 `invalid_arguments`, `timeout`, `unreachable` (no connection), `cancelled`, \
                 `unknown_tool`, `refused` (a limit, or a call from a tool callback), `stopped` \
                 (the server stopped).",
            ))
            .enum_values(Some(Outcome::ALL.iter().map(|o| o.name())))
            .into()
    }
}

impl utoipa::ToSchema for Outcome {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Outcome")
    }
}

/// The twins: never built, only described. Their docs are what the document says.
#[allow(dead_code)]
mod twin {
    use serde::Serialize;
    use utoipa::ToSchema;

    /// A character that could not take a change, and why (the answers and events carry the reason
    /// as its text).
    #[derive(Serialize, ToSchema)]
    pub(super) struct RoleFailure {
        role: String,
        error: String,
    }

    /// A character's sessions, for `GET /api/sessions`.
    #[derive(Serialize, ToSchema)]
    pub(super) struct SessionReport {
        /// The server's own connection (`mode = "client"`); without one, `connected` while any
        /// relay or attachment is open and `none` otherwise.
        state: ConnectionState,
        /// The most recent tool update of any of its connections.
        #[schema(required = true)]
        last_sync: Option<SyncOutcome>,
        /// Tools in the last update the server's own connection (or, without one, the most
        /// recently synced connection) acknowledged.
        acknowledged_tools: usize,
        /// Every active session: the server's own, relays, attachments, in-process ones.
        connections: Vec<ConnectionReport>,
        /// The character's text chat endpoint (`POST /v1/chat/completions`), present only when it
        /// has `[character.chat]`.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(required = false, nullable = false)]
        chat: Option<ChatReport>,
    }

    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "lowercase")]
    pub(super) enum ConnectionState {
        /// No session is configured.
        None,
        Connecting,
        Connected,
        /// Waiting before the next connection attempt.
        Backoff,
        /// Ended for good: a relay or an attachment that closed. Only its last `session.state`
        /// event says so; the listing no longer shows it.
        Closed,
    }

    /// One active session of a character.
    #[derive(Serialize, ToSchema)]
    pub(super) struct ConnectionReport {
        kind: ConnectionKind,
        /// When it connected (RFC 3339, UTC); for the client, its current connection or attempt.
        since: String,
        /// The model endpoint it talks to; null for an in-process session.
        #[schema(required = true)]
        upstream: Option<String>,
        state: ConnectionState,
        /// The outcome of its last tool update, or null before the first.
        #[schema(required = true)]
        last_sync: Option<SyncOutcome>,
        /// Registered tools in the last update it acknowledged.
        acknowledged_tools: usize,
        /// Calls of registered tools the server answered on it.
        calls_answered: u64,
        /// Registered tools left out because the app has a tool of the same name.
        clashes: Vec<String>,
        /// The server's tools the session is offered now (`find_tools` and, on Gemini Live,
        /// `call_tool` included; an app's own tools not): at most the character's budget.
        offered_tools: usize,
        /// The character holds more tools than the session is offered and the session cannot
        /// search for the rest (`[character.tools] search = "off"`).
        over_budget: bool,
        /// A Gemini Live session (`kind = "gemini-live"`): its resumption handle's age, its
        /// moves to a new connection made and refused; absent for other sessions.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(required = false, nullable = false)]
        gemini: Option<ResumptionReport>,
        /// The calls running in this session now, in the order they started.
        running_calls: Vec<RunningCallReport>,
        /// Where its conversation stands: the model is asked to speak of a non-blocking call's
        /// result only when it is `idle` (`idle` for a session that does not say).
        conversation: Conversation,
    }

    /// Where a live conversation stands.
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub(super) enum Conversation {
        /// No response in progress, nobody speaking.
        Idle,
        /// A response is in progress.
        Responding,
        /// The person is speaking.
        PersonSpeaking,
        /// The person stopped speaking; the reply to their turn has not begun.
        AwaitingReply,
    }

    /// One call running in a session.
    #[derive(Serialize, ToSchema)]
    pub(super) struct RunningCallReport {
        tool: String,
        call_id: String,
        /// `blocking`: the model waits for it; `non_blocking`: answered as running, its result
        /// follows when it comes.
        behavior: Behavior,
        /// When the model's call arrived, RFC 3339, UTC.
        started: String,
        /// How long it has run, in milliseconds.
        running_ms: u64,
    }

    /// Whether the model's conversation waits for a tool's calls.
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub(super) enum Behavior {
        Blocking,
        NonBlocking,
    }

    /// How a session that takes new tools on a new connection (Gemini Live) resumes itself.
    #[derive(Serialize, ToSchema)]
    pub(super) struct ResumptionReport {
        /// Milliseconds since the latest resumption handle came; null before the first.
        #[schema(required = true)]
        handle_age_ms: Option<u64>,
        /// Times the session moved to a new connection (new tools, or the provider's `goAway`).
        switches: u64,
        /// Tool updates that failed because no moment came to open a new connection in time.
        refused: u64,
    }

    /// The outcome of a tool update, as the sessions listing shows it.
    #[derive(Serialize, ToSchema)]
    pub(super) struct SyncOutcome {
        ok: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// RFC 3339, UTC.
        at: String,
    }

    /// Which kind of connection an active session is.
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "lowercase")]
    pub(super) enum ConnectionKind {
        /// The server's own connection (`mode = "client"`).
        Client,
        /// An app's connection through `GET /v1/realtime`.
        Relay,
        /// A live call joined with `POST /api/sessions/attach`.
        Attach,
        /// An application's in-process session.
        Embedded,
        /// A text chat through `POST /v1/chat/completions` (the server runs the tool loop of each
        /// request); never one of a manager's sessions.
        Chat,
        /// A text chat through `POST /v1/responses` (the Responses API); never one of a
        /// manager's sessions.
        Responses,
    }

    /// One finished call of the recent calls (`GET /api/calls`). Never its arguments or output.
    #[derive(Serialize, ToSchema)]
    pub(super) struct RecentCall {
        call_id: String,
        role: String,
        tool: String,
        /// The tool's source; null when the character has no such tool.
        #[schema(required = true)]
        source: Option<String>,
        caller: Caller,
        /// The kind of session whose model made the call; null for an invoke or an `/mcp` call.
        #[schema(required = true)]
        kind: Option<ConnectionKind>,
        /// When the call started, RFC 3339, UTC.
        started_at: String,
        duration_ms: f64,
        #[schema(value_type = super::Outcome)]
        outcome: String,
        /// The trace of the call's span (32 hex digits): what its callback's `traceparent` named.
        trace_id: String,
    }

    /// Who made a call: a model (a live session's, a chat request's), the invoke route, or an
    /// MCP client of `/mcp`.
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "snake_case")]
    pub(super) enum Caller {
        Model,
        Invoke,
        Mcp,
    }

    /// An error, and when it happened.
    #[derive(Serialize, ToSchema)]
    pub(super) struct ChatFailure {
        /// RFC 3339, UTC.
        at: String,
        message: String,
    }

    /// A model that refused tools.
    #[derive(Serialize, ToSchema)]
    pub(super) struct ToolsRefused {
        model: String,
        /// When it refused (RFC 3339, UTC), and what the upstream said.
        at: String,
        error: String,
    }

    /// A character's chat endpoint, for `GET /api/sessions` and the `chat.state` event.
    #[derive(Serialize, ToSchema)]
    pub(super) struct ChatReport {
        /// The upstream's base URL, as configured.
        upstream: String,
        /// The model used when a request names none.
        #[schema(required = true)]
        model: Option<String>,
        /// Requests served (chat completions and the Responses API).
        requests: u64,
        /// Of them, requests to `POST /v1/responses`.
        responses: u64,
        /// Upstream calls made for them (one per round).
        rounds: u64,
        /// Calls of registered tools the server ran.
        calls: u64,
        /// The last request's failure (an upstream that could not be reached, or answered with an
        /// error), or null.
        #[schema(required = true)]
        last_error: Option<ChatFailure>,
        /// Registered tools left out of the last request because the app has tools of the same
        /// names.
        clashes: Vec<String>,
        /// Models that refused tools: their requests go without tools until the character's tools
        /// change.
        tools_refused: Vec<ToolsRefused>,
        /// Turns handed back to apps whose server calls are kept for their next request (and,
        /// for the Responses API, the ids of streamed answers whose last response has another).
        handed_turns: usize,
    }

    /// Where an MCP server's connection stands.
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "lowercase")]
    pub(super) enum McpState {
        /// Starting the process or connecting, then initializing and listing.
        Connecting,
        /// Its tools are registered.
        Connected,
        /// Waiting before the next attempt; its tools are removed.
        Backoff,
    }

    /// One MCP server, as `GET /api/mcp` reports it.
    #[derive(Serialize, ToSchema)]
    pub(super) struct McpServerReport {
        state: McpState,
        /// `stdio` or `http`.
        transport: String,
        /// The source its tools are registered with: `mcp:<name>`.
        source: String,
        /// The characters that get its tools; `null`: every character.
        #[schema(required = true)]
        roles: Option<Vec<String>>,
        /// The tools registered from its last listing, in its order.
        tools: Vec<String>,
        /// Tools of the listing that break this server's name rule, and why.
        skipped: Vec<Skipped>,
        /// Why the last connection failed or ended; `null` once connected.
        #[schema(required = true)]
        last_error: Option<String>,
        /// How many times it was started again after a failure or a disconnection.
        restarts: u32,
        /// The child process, for a stdio server that is running.
        #[schema(required = true)]
        pid: Option<u32>,
    }

    /// Where the connection to an MCP server registered at run time stands.
    #[derive(Serialize, ToSchema)]
    #[serde(rename_all = "lowercase")]
    pub(super) enum RuntimeMcpState {
        /// Registered; its last exchange (the listing, or a call) reached it.
        Connected,
        /// Its last call could not connect to it (a `plugin:` source's tools are removed after
        /// three such failures in a row).
        Unreachable,
    }

    /// One MCP server a plugin registered at run time (`POST /api/mcp/register`), as
    /// `GET /api/mcp` reports it.
    #[derive(Serialize, ToSchema)]
    pub(super) struct RuntimeMcpReport {
        state: RuntimeMcpState,
        /// Always `http` (Streamable HTTP).
        transport: String,
        /// Its endpoint, as registered.
        url: String,
        /// The source its tools are registered with.
        source: String,
        /// The character that gets its tools; `null`: every character that existed at its
        /// registration (and at each listing since).
        #[schema(required = true)]
        role: Option<String>,
        /// The tools registered from its last listing, in its order.
        tools: Vec<String>,
        /// Tools of the listing that could not be registered, and why.
        skipped: Vec<Skipped>,
        /// The longest one `tools/call` may take.
        timeout_seconds: f64,
        /// When it was registered (RFC 3339, UTC).
        registered_at: String,
        /// Why its last listing or call failed; `null` after an exchange that reached it.
        #[schema(required = true)]
        last_error: Option<String>,
    }

    /// Which step of a registration failed.
    #[derive(Serialize, ToSchema)]
    pub(super) enum McpStage {
        /// The TCP connection to the endpoint.
        #[serde(rename = "connect")]
        Connect,
        /// MCP's `initialize` handshake.
        #[serde(rename = "initialize")]
        Initialize,
        /// Listing the tools.
        #[serde(rename = "tools/list")]
        ToolsList,
    }

    /// A tool of the listing that could not be registered, and why.
    #[derive(Serialize, ToSchema)]
    pub(super) struct Skipped {
        name: String,
        reason: String,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde::Serialize;
    use serde_json::{Value, json};
    use utoipa::{OpenApi, ToSchema};

    use super::*;
    use crate::actors::change::ChangeFailure;
    use crate::api::openapi::ApiDoc;
    use crate::session::SyncError;

    /// The document with `$ref` to `T`'s schema, every object schema closed to fields it does
    /// not list.
    fn closed_schema_of<T: ToSchema>() -> Value {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let mut components = doc["components"].clone();
        for schema in components["schemas"].as_object_mut().unwrap().values_mut() {
            if schema["type"] == "object" {
                schema["additionalProperties"] = json!(false);
            }
        }
        json!({"$ref": format!("#/components/schemas/{}", T::name()), "components": components})
    }

    /// Panics unless each value serialises to JSON its twin's schema accepts, with no field
    /// the twin lacks.
    fn described<T: Serialize + ToSchema>(values: &[T]) {
        let validator = jsonschema::draft202012::new(&closed_schema_of::<T>()).unwrap();
        for value in values {
            let value = serde_json::to_value(value).unwrap();
            let errors: Vec<String> = validator
                .iter_errors(&value)
                .map(|e| format!("{e} at {}", e.instance_path()))
                .collect();
            assert!(errors.is_empty(), "{}: {value}: {errors:#?}", T::name());
        }
    }

    fn connection(kind: ConnectionKind, state: ConnectionState) -> ConnectionReport {
        ConnectionReport {
            kind,
            since: "2026-12-03T09:00:00.000Z".into(),
            upstream: (kind != ConnectionKind::Embedded).then(|| "wss://model.example".into()),
            state,
            last_sync: Some(SyncOutcome::now(&Err(SyncError::Closed))),
            acknowledged_tools: 3,
            calls_answered: 7,
            clashes: vec!["get_weather".into()],
            offered_tools: 4,
            over_budget: true,
            gemini: (kind == ConnectionKind::Client).then_some(ResumptionReport {
                handle_age_ms: Some(1200),
                switches: 2,
                refused: 1,
            }),
            running_calls: vec![crate::session::RunningCallReport {
                tool: "find_flight".into(),
                call_id: "call_1".into(),
                behavior: Behavior::NonBlocking,
                started: "2026-12-03T09:00:01.000Z".into(),
                running_ms: 5300,
            }],
            conversation: crate::session::Conversation::Responding,
        }
    }

    fn chat() -> ChatReport {
        let failure = ChatFailure {
            at: "2026-12-03T09:00:00.000Z".into(),
            message: "the upstream answered 500".into(),
        };
        ChatReport {
            upstream: "http://127.0.0.1:11434/v1".into(),
            model: Some("local".into()),
            requests: 4,
            responses: 1,
            rounds: 6,
            calls: 2,
            last_error: Some(failure),
            clashes: vec!["get_weather".into()],
            tools_refused: vec![ToolsRefused {
                model: "small".into(),
                at: "2026-12-03T09:00:00.000Z".into(),
                error: "tools are not supported".into(),
            }],
            handed_turns: 1,
        }
    }

    #[test]
    fn every_session_report_is_what_its_schema_says() {
        use ConnectionKind::{Attach, Chat, Client, Embedded, Relay, Responses};
        use ConnectionState::{Backoff, Closed, Connected, Connecting};
        let kinds = [Client, Relay, Attach, Embedded, Chat, Responses];
        let states = [
            ConnectionState::None,
            Connecting,
            Connected,
            Backoff,
            Closed,
        ];
        // A new variant must join the lists above.
        for kind in kinds {
            match kind {
                Client | Relay | Attach | Embedded | Chat | Responses => {}
            }
        }
        for state in states {
            match state {
                ConnectionState::None | Connecting | Connected | Backoff | Closed => {}
            }
        }
        let connections: Vec<ConnectionReport> = kinds
            .iter()
            .zip(states.into_iter().cycle())
            .map(|(kind, state)| connection(*kind, state))
            .collect();
        described(&connections);
        described(&[
            SyncOutcome::now(&Ok(())),
            SyncOutcome::now(&Err(SyncError::Refused("no".into()))),
        ]);
        let mut with_chat = SessionReport::of(connections.clone());
        with_chat.chat = Some(chat());
        described(&[
            SessionReport::none(),
            SessionReport::of(connections),
            with_chat,
        ]);
        described(&[RoleFailure {
            role: "Lanlan".into(),
            error: ChangeFailure::NoAnswer(Duration::from_secs(5)),
        }]);
    }

    #[test]
    fn every_mcp_report_is_what_its_schema_says() {
        let skipped = vec![Skipped {
            name: "l".repeat(65),
            reason: "the name is longer than 64 characters".into(),
        }];
        let configured = |state, pid| McpServerReport {
            state,
            transport: "stdio",
            source: "mcp:time".into(),
            roles: Some(vec!["Lanlan".into()]),
            tools: vec!["get_time".into()],
            skipped: skipped.clone(),
            last_error: Some("it exited".into()),
            restarts: 2,
            pid,
        };
        described(&[
            configured(McpState::Connecting, None),
            configured(McpState::Connected, Some(4242)),
            configured(McpState::Backoff, None),
        ]);
        let runtime = |state| RuntimeMcpReport {
            state,
            transport: "http",
            url: "http://127.0.0.1:9400/mcp".into(),
            source: "plugin:weather".into(),
            role: None,
            tools: vec!["get_weather".into()],
            skipped: skipped.clone(),
            timeout_seconds: 30.0,
            registered_at: "2026-12-03T09:00:00.000Z".into(),
            last_error: None,
        };
        described(&[
            runtime(RuntimeMcpState::Connected),
            runtime(RuntimeMcpState::Unreachable),
        ]);
        described(&[McpStage::Connect, McpStage::Initialize, McpStage::ToolsList]);
    }
}
