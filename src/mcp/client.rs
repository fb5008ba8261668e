//! `McpClient`: one supervised actor per `[[mcp_server]]`, which makes that MCP server a tool
//! source.
//!
//! It starts the server (a child process on stdio) or connects to it (Streamable HTTP),
//! initializes, lists every page of its tools and registers them through the router, as one
//! change per character (`ReplaceSource`, source `mcp:<name>`, so sessions are synced and a
//! `tools.changed` event with op `mcp` is announced). On `notifications/tools/list_changed` it
//! lists again and applies the difference. When the connection ends (the child died, the HTTP
//! server went away) it removes the tools from every character and stops; its supervisor starts
//! it again after a capped backoff, and the tools come back with the new connection.
//!
//! A call of such a tool never passes through this actor: each registered tool holds the
//! connection's peer and sends `tools/call` itself ([`super::call`]).

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use rmcp::model::{ClientCapabilities, ClientInfo, Implementation};
use rmcp::service::{NotificationContext, RunningService, RunningServiceCancellationToken};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::bounds::{BoundedLines, MAX_MCP_MESSAGE_BYTES};
use super::call::McpToolHandler;
use super::http_client;
use super::listing::{Listing, list_every_tool};
use super::mapping::{self, Definition};
use super::settings::{McpServerSettings, McpTransport};
use super::status::{McpBoard, McpState};
use crate::actors::router::{ReplaceSource, Router};
use crate::domain::call::LocalToolHandler;
use crate::domain::peer_text;
use crate::domain::secrets;

/// First wait before starting a server again; doubled per failed attempt up to [`MAX_BACKOFF`].
pub(crate) const INITIAL_BACKOFF: Duration = Duration::from_millis(250);

/// Longest wait between attempts: a server that keeps failing is retried twice a minute.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Longest a start takes: the process starting (a `uvx` or `npx` server may first install
/// itself), the initialize handshake and the first listing.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest a listing after `notifications/tools/list_changed` takes.
pub(crate) const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// The server announced `notifications/tools/list_changed`.
#[derive(Message, Debug)]
#[rtype(result = "()")]
struct ToolListChanged {
    /// The connection that announced it.
    connection: u64,
}

/// A connection ended (the process exited, the stream closed, or it was cancelled).
#[derive(Message, Debug)]
#[rtype(result = "()")]
struct ConnectionEnded {
    connection: u64,
    reason: String,
}

/// What a successful start hands the actor.
struct Opened {
    service: RunningService<RoleClient, Listener>,
    child: Option<tokio::process::Child>,
    tools: Listing,
}

pub(crate) struct McpClient {
    settings: Arc<McpServerSettings>,
    router: Addr<Router>,
    board: McpBoard,
    /// Failed attempts in a row (drives the backoff).
    attempt: u32,
    /// Number of the current connection, so a late message of an earlier one is ignored.
    connection: u64,
    peer: Option<Peer<RoleClient>>,
    cancel: Option<RunningServiceCancellationToken>,
    /// What the last applied listing registered; `None` before the first.
    applied: Option<Vec<Definition>>,
    /// The bound of a call's result (`dispatch.max_response_bytes`).
    max_result_bytes: usize,
}

impl McpClient {
    /// Starts the supervised client of one MCP server.
    pub(crate) fn launch(
        settings: McpServerSettings,
        router: Addr<Router>,
        board: McpBoard,
        max_result_bytes: usize,
    ) -> Addr<Self> {
        let client = McpClient {
            max_result_bytes,
            settings: Arc::new(settings),
            router,
            board,
            attempt: 0,
            connection: 0,
            peer: None,
            cancel: None,
            applied: None,
        };
        Supervisor::start(|_: &mut Context<Self>| client)
    }

    fn name(&self) -> &str {
        &self.settings.name
    }

    fn backoff(&self) -> Duration {
        let factor = 2u32.saturating_pow(self.attempt.saturating_sub(1));
        INITIAL_BACKOFF.saturating_mul(factor).min(MAX_BACKOFF)
    }

    fn connect(&mut self, ctx: &mut Context<Self>) {
        self.connection += 1;
        let connection = self.connection;
        self.board
            .update(self.name(), |r| r.state = McpState::Connecting);
        let settings = self.settings.clone();
        let max_result_bytes = self.max_result_bytes;
        let listener = Listener {
            actor: ctx.address(),
            connection,
        };
        let opening = async move {
            match tokio::time::timeout(CONNECT_TIMEOUT, open(&settings, listener, max_result_bytes))
                .await
            {
                Ok(opened) => opened,
                Err(_) => Err(format!(
                    "did not start, initialize and list its tools within {} s",
                    CONNECT_TIMEOUT.as_secs()
                )),
            }
        };
        ctx.wait(opening.into_actor(self).map(|opened, act, ctx| match opened {
            Ok(opened) => act.on_connected(opened, ctx),
            Err(error) => {
                // It may quote the server's own message: kept in `GET /api/mcp` and logged.
                let error = peer_text::bounded(error);
                tracing::warn!(mcp_server = %act.name(), %error, "MCP server could not be reached");
                act.board.update(act.name(), |r| {
                    r.state = McpState::Backoff;
                    r.last_error = Some(error);
                    r.pid = None;
                });
                ctx.stop();
            }
        }));
    }

    fn on_connected(&mut self, opened: Opened, ctx: &mut Context<Self>) {
        let Opened {
            service,
            child,
            tools,
        } = opened;
        let pid = child.as_ref().and_then(tokio::process::Child::id);
        tracing::info!(mcp_server = %self.name(), tools = tools.tools.len(), ?pid, "MCP server connected");
        self.attempt = 0;
        self.peer = Some(service.peer().clone());
        self.cancel = Some(service.cancellation_token());
        self.board.update(self.name(), |r| {
            r.state = McpState::Connected;
            r.last_error = None;
            r.pid = pid;
        });
        let me = ctx.address();
        let connection = self.connection;
        actix::spawn(async move {
            let reason = peer_text::bounded(match service.waiting().await {
                Ok(reason) => format!("the connection ended ({reason:?})"),
                Err(e) => format!("the connection failed ({e})"),
            });
            // The process goes with its connection (it is killed if it has not exited).
            drop(child);
            me.do_send(ConnectionEnded { connection, reason });
        });
        self.apply(tools, ctx);
    }

    /// Registers a listing (what changed since the last one) through the router; the actor
    /// handles nothing else until the router has answered.
    fn apply(&mut self, listing: Listing, ctx: &mut Context<Self>) {
        let Some(peer) = self.peer.clone() else {
            return;
        };
        let (definitions, skipped) = listing.definitions();
        for skip in &skipped {
            tracing::warn!(mcp_server = %self.name(), tool = %skip.name, reason = %skip.reason, "MCP tool not registered");
        }
        let names: Vec<String> = definitions.iter().map(|d| d.name.clone()).collect();
        self.board.update(self.name(), |r| {
            r.tools = names;
            r.skipped = skipped;
        });
        if self.applied.as_ref() == Some(&definitions) {
            tracing::debug!(mcp_server = %self.name(), "MCP tool listing unchanged");
            return;
        }
        let handler = LocalToolHandler(Arc::new(McpToolHandler::new(
            &self.settings.name,
            peer,
            self.settings.timeout,
            self.max_result_bytes,
        )));
        let source = self.settings.source();
        let specs = definitions
            .iter()
            .map(|d| {
                mapping::tool_spec(
                    d,
                    &source,
                    handler.clone(),
                    (
                        self.settings.behavior,
                        self.settings.approval,
                        self.settings.limits,
                    ),
                )
            })
            .collect();
        let change = self.router.send(ReplaceSource {
            source,
            tools: specs,
            roles: self.settings.roles.clone(),
            owner: None,
        });
        self.applied = Some(definitions);
        ctx.wait(change.into_actor(self).map(|report, act, _| {
            if let Err(e) = report {
                tracing::warn!(mcp_server = %act.name(), error = %e, "the router did not take the MCP tools");
            }
        }));
    }
}

impl Actor for McpClient {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.attempt == 0 {
            self.connect(ctx);
        } else {
            self.board
                .update(self.name(), |r| r.state = McpState::Backoff);
            ctx.run_later(self.backoff(), |act, ctx| act.connect(ctx));
        }
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        self.peer = None;
        self.applied = None;
        if let Some(cancel) = self.cancel.take() {
            cancel.cancel();
        }
    }
}

impl Supervised for McpClient {
    fn restarting(&mut self, _: &mut Self::Context) {
        self.attempt = self.attempt.saturating_add(1);
        self.board.update(&self.settings.name, |r| r.restarts += 1);
    }
}

impl Handler<ToolListChanged> for McpClient {
    type Result = ();

    fn handle(&mut self, msg: ToolListChanged, ctx: &mut Self::Context) {
        let Some(peer) = self
            .peer
            .clone()
            .filter(|_| msg.connection == self.connection)
        else {
            return;
        };
        let listing =
            async move { tokio::time::timeout(LIST_TIMEOUT, list_every_tool(&peer)).await };
        ctx.wait(listing.into_actor(self).map(|listed, act, ctx| match listed {
            Ok(Ok(tools)) => act.apply(tools, ctx),
            Ok(Err(e)) => {
                let error = peer_text::bounded(e.to_string());
                tracing::warn!(mcp_server = %act.name(), %error, "MCP server could not list its changed tools");
            }
            Err(_) => {
                tracing::warn!(mcp_server = %act.name(), "MCP server did not list its changed tools within {} s", LIST_TIMEOUT.as_secs());
            }
        }));
    }
}

impl Handler<ConnectionEnded> for McpClient {
    type Result = ();

    /// Removes the server's tools from every character, then stops: the supervisor starts the
    /// actor again, which reconnects after the backoff.
    fn handle(&mut self, msg: ConnectionEnded, ctx: &mut Self::Context) {
        if msg.connection != self.connection {
            return;
        }
        tracing::warn!(mcp_server = %self.name(), reason = %msg.reason, "MCP server went away; removing its tools and starting it again");
        self.peer = None;
        self.cancel = None;
        self.applied = None;
        self.board.update(self.name(), |r| {
            r.state = McpState::Backoff;
            r.tools.clear();
            r.last_error = Some(msg.reason);
            r.pid = None;
        });
        let removal = self.router.send(ReplaceSource {
            source: self.settings.source(),
            tools: Vec::new(),
            roles: None,
            owner: None,
        });
        ctx.wait(removal.into_actor(self).map(|_, _, ctx| ctx.stop()));
    }
}

/// Starts (or reaches) the server, initializes and lists every page of its tools.
async fn open(
    settings: &McpServerSettings,
    listener: Listener,
    max_result_bytes: usize,
) -> Result<Opened, String> {
    let (service, child) = match &settings.transport {
        McpTransport::Stdio { command, args, env } => {
            // What its environment is given (tokens, often) is held with the server's keys.
            for value in env.values() {
                secrets::hold(value);
            }
            let mut child = tokio::process::Command::new(command)
                .args(args)
                .envs(env)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("could not start {command:?}: {e}"))?;
            let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                return Err("the child's stdio could not be opened".to_owned());
            };
            if let Some(stderr) = child.stderr.take() {
                log_stderr(settings.name.clone(), stderr);
            }
            // Each line the server writes is one message, read within its bound.
            let stdout = BoundedLines::new(stdout, MAX_MCP_MESSAGE_BYTES);
            let service = listener
                .serve((stdout, stdin))
                .await
                .map_err(|e| format!("the initialize handshake failed: {e}"))?;
            (service, Some(child))
        }
        McpTransport::Http { url } => {
            let transport = http_client::transport(url.as_str(), max_result_bytes)?;
            let service = listener
                .serve(transport)
                .await
                .map_err(|e| format!("the initialize handshake with {url} failed: {e}"))?;
            (service, None)
        }
    };
    let tools = list_every_tool(service.peer())
        .await
        .map_err(|e| format!("tools/list failed: {e}"))?;
    Ok(Opened {
        service,
        child,
        tools,
    })
}

/// Copies the child's stderr to the log at debug, line by line, until it closes.
fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    actix::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            tracing::debug!(mcp_server = %server, "stderr: {line}");
        }
    });
}

/// The client side of one connection: tells the actor when the tool list changed.
struct Listener {
    actor: Addr<McpClient>,
    connection: u64,
}

impl ClientHandler for Listener {
    fn get_info(&self) -> ClientInfo {
        ClientInfo::new(
            ClientCapabilities::default(),
            Implementation::new("runtime-tools", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.actor.do_send(ToolListChanged {
            connection: self.connection,
        });
    }
}
