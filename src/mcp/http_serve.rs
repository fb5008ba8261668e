//! `McpEndpoint`: a character's tools as an MCP server over the Streamable HTTP transport, served
//! at `/mcp` on the main server (`?role=NAME`; without it, the first character).
//!
//! The transport — sessions (`Mcp-Session-Id`), JSON-RPC over `POST` answered as an event
//! stream, the `GET` stream for the server's own messages, `DELETE` ending a session, the
//! `MCP-Protocol-Version` header — is rmcp's `StreamableHttpService`, one per character (so a
//! session belongs to the character it was opened for); the HTTP route (`api::mcp`) adapts
//! actix-web's request and response to it. The loopback, `Host` and `Origin` rules are the API's
//! guard's, applied before a request reaches it.
//!
//! What a session serves: `tools/list` reads the character's published tools (no message to any
//! actor) and lists the set its budget gives the session (`[character.tools]`: beyond the
//! budget, the pinned tools, `find_tools` and the tools the session found; a `find_tools` call
//! is answered here, and when it adds tools to the session's set the client is sent
//! `notifications/tools/list_changed`), `tools/call` runs the tool through the dispatcher exactly as a model's call (the
//! arguments checked, and passed on as the client wrote them; images delivered as MCP image
//! content, failures as `isError` results) and announces it as a `tool.call` event, and `notifications/tools/list_changed` follows the
//! character's `tools.changed` events.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::{Either, select};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ErrorData, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerInfo, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{Peer, RoleServer, ServerHandler};
use serde_json::Value;
use tokio::sync::watch;

use super::exact::{self, CallArguments};
use super::http_sessions::BoundedSessions;
use super::settings::McpEndpointSettings;
use crate::actors::router::{Directory, RouterError};
use crate::dispatch::Dispatcher;
use crate::domain::budget::{FIND_TOOLS, FindTools, Found, found_result};
use crate::domain::call::{ToolCall, ToolResult};
use crate::domain::tool::SharedTool;
use crate::events::{CallStart, CallWatch, Caller, EventHub, EventKind, SearchKind};
use crate::policy::{Asker, DedupeWindow, Policy};

/// Interval of the keep-alive comment on a session's event streams: under the idle timeouts of
/// common clients (30 s and up), as for `GET /api/events`.
pub(crate) const STREAM_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The transport of one character's sessions.
pub(crate) type CharacterService = StreamableHttpService<SessionTools, BoundedSessions>;

/// A character's `/mcp`: its transport, and its sessions (which the route admits).
#[derive(Clone)]
pub(crate) struct CharacterMcp {
    pub service: CharacterService,
    pub sessions: Arc<BoundedSessions>,
}

/// Why a request to `/mcp` names no character.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum McpEndpointError {
    #[error(transparent)]
    Router(#[from] RouterError),
    #[error("this server has no character: /mcp serves the tools of one")]
    NoCharacter,
}

/// `/mcp`'s state: each character's transport, created on its first request; cheap to clone.
#[derive(Clone)]
pub(crate) struct McpEndpoint(Arc<Inner>);

struct Inner {
    directory: Directory,
    dispatcher: Dispatcher,
    events: EventHub,
    policy: Policy,
    config: StreamableHttpServerConfig,
    settings: McpEndpointSettings,
    services: Mutex<HashMap<String, CharacterMcp>>,
}

impl McpEndpoint {
    pub(crate) fn new(
        directory: Directory,
        dispatcher: Dispatcher,
        events: EventHub,
        policy: Policy,
        settings: McpEndpointSettings,
    ) -> Self {
        let config = StreamableHttpServerConfig::default()
            // The API's guard has already refused every peer, `Host` and `Origin` that is not
            // loopback (with every loopback form the other routes take: rmcp's own list would
            // refuse `127.0.0.2` and `[::ffff:127.0.0.1]`).
            .disable_allowed_hosts()
            .disable_allowed_origins()
            .with_sse_keep_alive(Some(STREAM_KEEP_ALIVE));
        Self(Arc::new(Inner {
            directory,
            dispatcher,
            events,
            policy,
            config,
            settings,
            services: Mutex::new(HashMap::new()),
        }))
    }

    /// The character a request names (`None` or `""`: the first character, in configuration
    /// order), and the transport of its sessions.
    pub(crate) fn service(
        &self,
        role: Option<&str>,
    ) -> Result<(String, CharacterMcp), McpEndpointError> {
        let listed = self.0.directory.list(role)?;
        let role = listed
            .into_iter()
            .next()
            .ok_or(McpEndpointError::NoCharacter)?
            .role;
        let mut services = self
            .0
            .services
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let service = services.entry(role.clone()).or_insert_with(|| {
            let inner = self.0.clone();
            let character = role.clone();
            let mut local = LocalSessionManager::default();
            // The idle expiry is the bounded sessions': rmcp's counts a long call or an open
            // stream as idle.
            local.session_config.keep_alive = None;
            let sessions = Arc::new(BoundedSessions::new(
                local,
                self.0.settings.max_sessions,
                self.0.settings.session_idle,
            ));
            let service = StreamableHttpService::new(
                move || {
                    Ok(SessionTools {
                        role: character.clone(),
                        directory: inner.directory.clone(),
                        dispatcher: inner.dispatcher.clone(),
                        events: inner.events.clone(),
                        policy: inner.policy.clone(),
                        dedupe: DedupeWindow::new(),
                        ended: watch::Sender::new(()),
                        found: Mutex::default(),
                    })
                },
                sessions.clone(),
                self.0.config.clone(),
            );
            CharacterMcp { service, sessions }
        });
        Ok((role, service.clone()))
    }

    /// Ends every session and stream (the server is stopping: an open stream would otherwise
    /// hold the graceful stop until its end).
    pub(crate) fn close(&self) {
        self.0.config.cancellation_token.cancel();
    }
}

/// One MCP session: the tools of one character.
pub(crate) struct SessionTools {
    role: String,
    directory: Directory,
    dispatcher: Dispatcher,
    events: EventHub,
    policy: Policy,
    /// The session's recent calls, for a tool with `dedupe_seconds`: an MCP session is one
    /// client's conversation.
    dedupe: DedupeWindow,
    /// Dropped with the session: ends its `list_changed` watcher.
    ended: watch::Sender<()>,
    /// The tools this session found with `find_tools`: its set beyond the budget.
    found: Mutex<Found>,
}

impl SessionTools {
    fn found(&self) -> std::sync::MutexGuard<'_, Found> {
        // A list of names: a panic under the lock leaves nothing worth refusing.
        self.found.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The set the session is offered now: the character's tools as its budget gives them
    /// to this session.
    fn offer(&self) -> Result<Vec<SharedTool>, RouterError> {
        let listed = self.directory.list(Some(&self.role))?;
        let budget = self.directory.budget(&self.role)?;
        let all: Vec<SharedTool> = listed
            .iter()
            .flat_map(|role| role.tools.tools())
            .cloned()
            .collect();
        let offered = budget.offer(&all, &self.found()).tools;
        Ok(offered)
    }

    /// A `find_tools` call, answered here when the session is offered `find_tools` (`None`:
    /// it is not, and the call is one of a tool the character does not hold). The tools found
    /// join the session's set; when that changes the set, the client is told to list again.
    async fn find_tools(&self, call: &mut ToolCall, peer: &Peer<RoleServer>) -> Option<ToolResult> {
        let before = self.offer().ok()?;
        if !before
            .iter()
            .any(|t| t.is_built_in() && t.name == FIND_TOOLS)
        {
            return None;
        }
        let ask = match FindTools::from_call(call) {
            Ok(ask) => ask,
            Err(refused) => return Some(*refused),
        };
        let listed = self.directory.list(Some(&self.role)).ok()?;
        let snapshot = &listed.first()?.tools;
        let found = self
            .events
            .find_tools(&self.role, snapshot, &ask, SearchKind::Mcp, false);
        self.found()
            .reveal(found.tools.iter().map(|t| t.name.as_str()));
        let names = |tools: &[SharedTool]| -> Vec<String> {
            tools.iter().map(|t| t.name.clone()).collect()
        };
        let changed = self
            .offer()
            .is_ok_and(|after| names(&after) != names(&before));
        if changed && let Err(e) = peer.notify_tool_list_changed().await {
            tracing::debug!(role = %self.role, "an MCP session's client could not be told its tools changed: {e}");
        }
        Some(found_result(call, found.output))
    }
}

impl ServerHandler for SessionTools {
    fn get_info(&self) -> ServerInfo {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        ServerInfo::new(capabilities)
            .with_server_info(
                Implementation::new("runtime-tools", env!("CARGO_PKG_VERSION"))
                    .with_title(format!("the tools of {} on runtime-tools", self.role)),
            )
            .with_instructions(
                "Tools that local plugins registered with a runtime-tools server. Each call runs \
                 as the model's call would; errors come back as isError results.",
            )
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let offered = self
            .offer()
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let tools = offered
            .iter()
            .map(|tool| {
                Tool::new(
                    tool.name.clone(),
                    tool.description.clone(),
                    Arc::new(tool.parameters.schema().clone()),
                )
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let name = request.name.to_string();
        let call_id = format!("mcp_{}", uuid::Uuid::new_v4().simple());
        let parsed = request.arguments.unwrap_or_default();
        // The route kept the client's own text of the arguments (the SDK's parse rounds numbers
        // beyond an `f64`).
        let written = context
            .extensions
            .get::<hyper::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<CallArguments>())
            .and_then(|CallArguments(text)| exact::if_parsed_as(text.clone(), &parsed));
        let mut call = match written {
            Some(text) => ToolCall::from_text(call_id, name.clone(), text, parsed),
            None => ToolCall::from_arguments(call_id, name.clone(), parsed),
        };
        if name == FIND_TOOLS
            && let Some(answered) = self.find_tools(&mut call, &context.peer).await
        {
            return Ok(call_result(answered));
        }
        let resolved = match self.directory.resolve(Some(&self.role), &name) {
            Ok(resolved) => resolved,
            Err(e) => return Ok(call_result(call.error(e.to_string()))),
        };
        // A client that cancels the request (`notifications/cancelled`) drops the dispatch,
        // which closes a callback's exchange, as a cancelled invoke does; the call is then
        // announced as cancelled.
        let call_id = call.call_id.clone();
        // A trace context in the request's `_meta` (SEP-414) makes the call's span part of the
        // client's trace.
        let parent = [Some(&context.meta), request.meta.as_ref()]
            .into_iter()
            .flatten()
            .find_map(|meta| crate::observe::trace::incoming(|name| meta.get(name)?.as_str()));
        let watch = CallWatch::start(
            &self.events,
            CallStart {
                role: &resolved.role,
                tool: &resolved.tool.name,
                source: Some(&resolved.tool.source),
                call_id: &call_id,
                caller: Caller::Mcp,
                kind: None,
                behavior: crate::domain::tool::Behavior::Blocking,
            },
            parent.as_ref(),
        );
        call.trace = Some(watch.trace().clone());
        // A tool that needs approval: the call waits for the person.
        let asker = Asker {
            role: &resolved.role,
            caller: Caller::Mcp,
            kind: None,
            dedupe: Some(&self.dedupe),
        };
        let admission = match self.policy.admit(asker, &resolved.tool, &mut call) {
            Ok(admission) => admission,
            Err(refused) => {
                watch.finished(&refused);
                return Ok(call_result(*refused));
            }
        };
        let tool = &resolved.tool;
        let dispatch =
            std::pin::pin!(admission.run(call, |call| self.dispatcher.dispatch(tool, call)));
        let cancelled = std::pin::pin!(context.ct.cancelled());
        let result = match select(dispatch, cancelled).await {
            Either::Left((result, _)) => result,
            Either::Right(((), _)) => {
                return Err(ErrorData::internal_error("the call was cancelled", None));
            }
        };
        watch.finished(&result);
        Ok(call_result(result))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        tracing::debug!(role = %self.role, "MCP client initialized a session of /mcp");
        tokio::spawn(watch_tools(
            self.events.clone(),
            self.role.clone(),
            context.peer,
            self.ended.subscribe(),
        ));
    }
}

/// A call's result as MCP's: the text the model would get (the output's exact JSON text, or the
/// error text), the output as `structuredContent` when it is a JSON object, and each delivered
/// image as image content; a failure is an `isError` result.
fn call_result(result: ToolResult) -> CallToolResult {
    let mut content = vec![ContentBlock::text(result.model_text())];
    content.extend(
        result
            .images
            .iter()
            .map(|image| ContentBlock::image(image.data_b64.clone(), image.mime)),
    );
    if result.is_error {
        return CallToolResult::error(content);
    }
    let mut success = CallToolResult::success(content);
    if let Ok(Value::Object(structured)) = serde_json::from_str::<Value>(result.output.get()) {
        success.structured_content = Some(Value::Object(structured));
    }
    success
}

/// Tells the session's client to list again whenever the character's tools change, until the
/// session ends (or the server stops: the event hub closes).
async fn watch_tools(
    events: EventHub,
    role: String,
    peer: Peer<RoleServer>,
    mut ended: watch::Receiver<()>,
) {
    let mut subscription = events.subscribe(Some(role.clone()), None);
    loop {
        let event = {
            let next = std::pin::pin!(subscription.events.recv());
            let gone = std::pin::pin!(ended.changed());
            match select(next, gone).await {
                Either::Left((event, _)) => event,
                Either::Right(_) => return,
            }
        };
        match event {
            Some(event) if event.kind == EventKind::ToolsChanged => {
                if peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
            Some(_) => {}
            None => {
                // Dropped for falling behind (its buffer filled), or the server is stopping.
                // Subscribed again, the client is told to list again: a change may have been
                // missed.
                subscription = events.subscribe(Some(role.clone()), None);
                if subscription.events.is_closed() {
                    return;
                }
                if peer.notify_tool_list_changed().await.is_err() {
                    return;
                }
            }
        }
    }
}
