//! `McpPlugins`: the MCP servers plugins register at run time (`POST /api/mcp/register`), each a
//! tool source with the same contract as an HTTP plugin's callbacks.
//!
//! A registration connects to the server's Streamable HTTP endpoint, initializes, lists every
//! page of its tools and registers them through the router for the registration's role(s) with
//! its source (`ReplaceSource`, owned by the server's own tool handler: one change per character,
//! sessions synced before the answer). Registering the same name again replaces the connection
//! and its tools. `notifications/tools/list_changed` lists again and applies the difference. The
//! server goes — its tools removed from every character, its MCP session ended with `DELETE` —
//! on `POST /api/mcp/unregister`, on a clear of its source (the router tells this actor), when
//! its connection ends by itself, and, for a `plugin:` source, after three calls in a row could
//! not connect to it (the auto-removal rule of callbacks).
//!
//! The HTTP handlers of `/api/mcp/register` and `/api/mcp/unregister` talk to this actor; it
//! talks to the router and keeps the [`McpBoard`]'s runtime reports. A call of such a tool never
//! passes through it: each tool's handler ([`PluginTool`]) holds the connection's peer and sends
//! `tools/call` itself, and counts the connection failures.
//!
//! With `--state`, each registration is durable before its answer and each removal is durable
//! too; at start the servers stored are restored dormant until they answer (`restore.rs`).
//!
//! Nothing here waits inside the actor: connecting and listing run beside it, and the router's
//! answers are awaited by the futures that reply. Changes still reach the router in the order
//! this actor decides them (`send` enqueues at once), so one server's listings apply in order.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use actix::fut::LocalBoxActorFuture;
use actix::prelude::*;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use indexmap::IndexMap;
use rmcp::model::Tool;
use rmcp::service::RunningServiceCancellationToken;
use tokio::sync::watch;

use super::listing::{Listing, list_every_tool};
use super::mapping::{self, Definition, Skipped};
use super::status::{McpBoard, RuntimeMcpReport, RuntimeMcpState};
use crate::actors::change::ChangeReport;
use crate::actors::router::{
    Directory, ListingRecord, McpListing, ReplaceSource, Router, RouterError, SourceCleared,
};
use crate::domain::call::{LocalToolHandler, seconds};
use crate::domain::failures::FailureTracker;
use crate::domain::ownership::{Credential, SharedOwners, TokenHash};
use crate::state::{Op, StateStore};

/// Most MCP servers registered at run time at once: each holds a connection and an event
/// stream; a plugin that registers without end is refused past this.
pub(crate) const MAX_RUNTIME_SERVERS: usize = 256;

/// Longest wait for a TCP connection to a server (the first step of a registration, and the
/// probe after a failed call). On loopback a listening server accepts at once; this only bounds
/// a full accept queue.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest a closed connection is waited for: rmcp gives the `DELETE` that ends the MCP session
/// 5 s; one more for the rest of the close.
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(6);

/// What no role accepting a server's tools reports in `error`, as a registration does.
const NO_ROLE_ACCEPTED: &str = "no role accepted the registration";

mod connection;
mod handlers;
mod messages;
mod restore;
mod tool;

use connection::{Listener, Opened, close, open};
pub(crate) use messages::{
    CloseMcpPlugins, McpPluginError, McpRegistered, McpRegistration, McpStage, McpUnregistered,
    RegisterMcpServer, UnregisterMcpServer,
};
use messages::{ConnectionEnded, ServerDead, ToolListChanged};
pub(crate) use restore::{McpKeeping, restore};
use restore::{Restoring, durable, stored};
use tool::{PluginTool, PluginToolHandler};

/// One registered server.
struct Server {
    registration: Arc<McpRegistration>,
    generation: u64,
    /// The handler every tool of this server runs on: also what marks them as its own.
    tool: Arc<PluginToolHandler>,
    cancel: RunningServiceCancellationToken,
    /// Becomes true once the connection has closed.
    closed: watch::Receiver<bool>,
    /// What the last applied listing registered.
    applied: Vec<Definition>,
    /// A listing is running; another was asked for meanwhile.
    listing: bool,
    relist: bool,
    /// Changes sent to the router and not answered yet.
    applying: usize,
    /// The token hash of the plugin that registered it, if it sent one: its listings pass the
    /// ownership rule with it.
    token: Option<TokenHash>,
    /// Its registration's body, when the server keeps state.
    record: Option<String>,
    /// The tools of its last listing (what the store keeps of those registered).
    listed: Vec<Tool>,
    /// True until it is retired: a listing's record is stored only while it is (the router
    /// builds the record when it takes the listing, which may be after a retirement).
    kept: Arc<AtomicBool>,
}

impl Server {
    fn owner(&self) -> LocalToolHandler {
        LocalToolHandler(self.tool.clone())
    }
}

pub(crate) struct McpPlugins {
    router: Addr<Router>,
    directory: Directory,
    board: McpBoard,
    /// The bound of a call's result (`dispatch.max_response_bytes`).
    max_result_bytes: usize,
    servers: IndexMap<String, Server>,
    /// Registrations still connecting: their generation and source, by name.
    pending: IndexMap<String, (u64, String)>,
    next_generation: u64,
    /// Which sources are bound to a plugin's token (the router's): a registration or removal
    /// passes it before anything changes.
    owners: SharedOwners,
    /// The state store, when the server keeps state.
    store: Option<StateStore>,
    /// Servers restored from the store that have not answered yet, by name.
    restoring: IndexMap<String, Restoring>,
}

impl McpPlugins {
    pub(crate) fn launch(
        router: Addr<Router>,
        directory: Directory,
        board: McpBoard,
        max_result_bytes: usize,
        owners: SharedOwners,
        keeping: McpKeeping,
    ) -> Addr<Self> {
        let mut restoring = IndexMap::new();
        let mut next_generation = 0;
        for restored in keeping.restored {
            next_generation += 1;
            let registration = Arc::new(restored.registration);
            board.set_runtime(
                &restored.name,
                McpPlugins::dormant_report(&registration, restored.tools),
            );
            restoring.insert(
                restored.name,
                Restoring {
                    registration,
                    generation: next_generation,
                    token: restored.token,
                    record: restored.record,
                    owner: restored.owner,
                    awaits_owner: restored.token.is_some(),
                    deadline: restore::deadline(restored.since, keeping.dormant_ttl),
                },
            );
        }
        McpPlugins {
            router,
            directory,
            board,
            max_result_bytes,
            servers: IndexMap::new(),
            pending: IndexMap::new(),
            next_generation,
            owners,
            store: keeping.store,
            restoring,
        }
        .start()
    }

    /// The source of the server registered (or connecting) under `name`, if any.
    fn source_of(&self, name: &str) -> Option<&str> {
        self.servers
            .get(name)
            .map(|s| s.registration.source.as_str())
            .or_else(|| self.pending.get(name).map(|(_, source)| source.as_str()))
            .or_else(|| {
                self.restoring
                    .get(name)
                    .map(|r| r.registration.source.as_str())
            })
    }

    /// The refusals decided before connecting: an unknown role, a source another server has,
    /// one server too many.
    fn check(&self, registration: &McpRegistration) -> Result<(), McpPluginError> {
        if let Some(role) = &registration.role {
            self.directory.list(Some(role))?;
        }
        let registered = self
            .servers
            .iter()
            .map(|(name, s)| (name.as_str(), s.registration.source.as_str()));
        let connecting = self
            .pending
            .iter()
            .map(|(name, (_, source))| (name.as_str(), source.as_str()));
        let restoring = self
            .restoring
            .iter()
            .map(|(name, r)| (name.as_str(), r.registration.source.as_str()));
        admit(
            registration,
            registered.chain(connecting).chain(restoring),
            self.board.configured_with_source(&registration.source),
        )
    }

    /// Makes a connected server the one of its name: registers its tools (replacing those of
    /// the server it replaces, or its restored ones), stores it when the server keeps state
    /// (`record`), and resolves to what the registration did once that is durable. A tool whose
    /// name a tool of a source bound to another token holds is skipped (the ownership rule,
    /// with `token`).
    fn install(
        &mut self,
        registration: Arc<McpRegistration>,
        generation: u64,
        opened: Opened,
        token: Option<TokenHash>,
        record: Option<String>,
        ctx: &mut Context<Self>,
    ) -> LocalBoxActorFuture<Self, Result<McpRegistered, McpPluginError>> {
        let Opened { service, listing } = opened;
        let name = registration.name.clone();
        let (definitions, skipped) = listing.definitions();
        log_skipped(&name, &skipped);
        let tool = Arc::new(PluginToolHandler(Arc::new(PluginTool {
            name: name.as_str().into(),
            generation,
            source: registration.source.clone(),
            url: registration.url.clone(),
            peer: service.peer().clone(),
            timeout: registration.timeout,
            max_result_bytes: self.max_result_bytes,
            failures: Mutex::new(FailureTracker::new()),
            was_unreachable: AtomicBool::new(false),
            plugins: ctx.address(),
            board: self.board.clone(),
        })));
        let cancel = service.cancellation_token();
        let (closed_tx, closed) = watch::channel(false);
        let me = ctx.address();
        let watched = name.clone();
        actix::spawn(async move {
            let reason = match service.waiting().await {
                Ok(reason) => format!("the connection ended ({reason:?})"),
                Err(e) => format!("the connection failed ({e})"),
            };
            closed_tx.send_replace(true);
            me.do_send(ConnectionEnded {
                name: watched,
                generation,
                reason,
            });
        });
        let names: Vec<String> = definitions.iter().map(|d| d.name.clone()).collect();
        self.board.set_runtime(
            &name,
            RuntimeMcpReport {
                state: RuntimeMcpState::Connected,
                transport: "http",
                url: registration.url.as_written().to_owned(),
                source: registration.source.clone(),
                role: registration.role.clone(),
                tools: names.clone(),
                skipped: skipped.clone(),
                timeout_seconds: registration.timeout.as_secs_f64(),
                registered_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
                last_error: None,
            },
        );
        let server = Server {
            registration: registration.clone(),
            generation,
            tool,
            cancel,
            closed,
            applied: definitions.clone(),
            listing: false,
            relist: false,
            applying: 1,
            token,
            record,
            listed: listing.tools.clone(),
            kept: Arc::new(AtomicBool::new(true)),
        };
        let old = self.servers.shift_remove(&name);
        let restored = self.restoring.shift_remove(&name);
        // The tools of the server replaced, if any, are the ones this listing replaces: they
        // are the candidates for removal where the new tools go.
        let owner = match &old {
            Some(old) if old.registration.source == registration.source => old.owner(),
            _ => server.owner(),
        };
        let specs = definitions
            .iter()
            .map(|d| {
                mapping::tool_spec(
                    d,
                    &registration.source,
                    server.owner(),
                    (
                        registration.behavior,
                        registration.approval,
                        registration.limits,
                    ),
                )
            })
            .collect();
        let record = self.listing_record(&name, &server);
        let registered = self.router.send(McpListing {
            replace: ReplaceSource {
                source: registration.source.clone(),
                tools: specs,
                roles: targets(&registration),
                owner: Some(owner),
            },
            token,
            record,
        });
        // What the replaced server left where the new one does not go (another source, or
        // other characters) is removed after; with its owner, nothing else can be.
        let leftovers = old
            .as_ref()
            .filter(|old| {
                old.registration.source != registration.source
                    || (old.registration.role != registration.role && registration.role.is_some())
            })
            .map(|old| (old.registration.source.clone(), old.owner()))
            // A restored server's dormant tools that its new listing did not replace.
            .or_else(|| {
                restored
                    .filter(|r| r.generation != generation)
                    .map(|r| (r.registration.source.clone(), r.owner))
            })
            .map(|(source, owner)| {
                self.router.send(ReplaceSource {
                    source,
                    tools: Vec::new(),
                    roles: None,
                    owner: Some(owner),
                })
            });
        if let Some(old) = old {
            tracing::info!(mcp_server = %name, "MCP server registered again: the old connection is closed");
            actix::spawn(close(old.cancel, old.closed));
        }
        self.servers.insert(name.clone(), server);
        tracing::info!(mcp_server = %name, url = %registration.url.as_written(), tools = names.len(), "MCP server registered");
        let waiting = async move {
            let report = registered.await;
            if let Some(leftovers) = leftovers {
                let _ = leftovers.await;
            }
            report
        };
        Box::pin(waiting.into_actor(self).then(move |report, act, _| {
            act.answered(&name, generation);
            let Ok(replaced) = report else {
                // Nothing can be registered any more: the connection is not kept for nothing.
                if act
                    .servers
                    .get(&name)
                    .is_some_and(|s| s.generation == generation)
                {
                    act.retire(&name, "the tool router has stopped", false, false);
                }
                let stopped: LocalBoxActorFuture<Self, _> =
                    Box::pin(fut::ready(Err(McpPluginError::RouterStopped)));
                return stopped;
            };
            if let Some(why) = replaced.not_stored {
                // None of its tools was made: the server is not kept either.
                let current = act.servers.get(&name).map(|s| s.generation) == Some(generation);
                if let Some(retired) = current
                    .then(|| act.retire(&name, "its tools could not be stored", false, false))
                    .flatten()
                {
                    actix::spawn(retired.map(drop));
                }
                let refused: LocalBoxActorFuture<Self, _> = Box::pin(fut::ready(Err(
                    McpPluginError::Router(RouterError::NotStored(why)),
                )));
                return refused;
            }
            let (names, skipped) = act.refused(&name, generation, names, skipped, replaced.refused);
            let report = replaced.report;
            let error = (!names.is_empty() && report.affected_roles.is_empty())
                .then(|| NO_ROLE_ACCEPTED.to_owned());
            // Stored with its listing's commit, which the router's answer waited for.
            Box::pin(fut::ready(Ok(McpRegistered {
                tools: names,
                skipped,
                report,
                error,
                stage: None,
            })))
        }))
    }

    /// Takes the tools the router refused (their names held by a source bound to another
    /// token) out of `names` into `skipped`, with why, on the board too when server `name`
    /// (this incarnation) is still there.
    fn refused(
        &mut self,
        name: &str,
        generation: u64,
        mut names: Vec<String>,
        mut skipped: Vec<Skipped>,
        refused: Vec<(String, crate::domain::ownership::OwnershipError)>,
    ) -> (Vec<String>, Vec<Skipped>) {
        if refused.is_empty() {
            return (names, skipped);
        }
        let refused: Vec<Skipped> = refused
            .into_iter()
            .map(|(tool, why)| Skipped {
                name: tool,
                reason: format!("its name is taken: {why}"),
            })
            .collect();
        log_skipped(name, &refused);
        names.retain(|n| !refused.iter().any(|r| r.name == *n));
        skipped.extend(refused);
        if self
            .servers
            .get(name)
            .is_some_and(|s| s.generation == generation)
        {
            let (tools, skips) = (names.clone(), skipped.clone());
            self.board.update_runtime(name, |r| {
                r.tools = tools;
                r.skipped = skips;
            });
        }
        (names, skipped)
    }

    /// With a state store, the record of `server` (registered as `name`) to store with its
    /// listing: its body and the tools of its last listing that were registered.
    fn listing_record(&self, name: &str, server: &Server) -> Option<ListingRecord> {
        self.store.as_ref()?;
        let body = server.record.clone()?;
        let (name, registration) = (name.to_owned(), server.registration.clone());
        let (listed, kept) = (server.listed.clone(), server.kept.clone());
        Some(Box::new(move |registered: &[String]| {
            if !kept.load(Ordering::Acquire) {
                return Vec::new();
            }
            let stored = stored(&registration, &body, &listed, registered);
            vec![Op::McpRegister { name, stored }]
        }))
    }

    /// A change for server `name` (this incarnation) was answered.
    fn answered(&mut self, name: &str, generation: u64) {
        if let Some(server) = self
            .servers
            .get_mut(name)
            .filter(|s| s.generation == generation)
        {
            server.applying = server.applying.saturating_sub(1);
        }
    }

    /// Lists server `name`'s tools again, then applies what changed (and lists once more if
    /// asked meanwhile).
    fn relist(&mut self, name: String, ctx: &mut Context<Self>) {
        let Some(server) = self.servers.get_mut(&name) else {
            return;
        };
        server.listing = true;
        server.relist = false;
        let generation = server.generation;
        let peer = server.tool.0.peer.clone();
        let timeout = server.registration.timeout;
        let listing = async move { tokio::time::timeout(timeout, list_every_tool(&peer)).await };
        ctx.spawn(listing.into_actor(self).map(move |listed, act, ctx| {
            let Some(server) = act
                .servers
                .get_mut(&name)
                .filter(|s| s.generation == generation)
            else {
                return;
            };
            server.listing = false;
            let again = server.relist;
            match listed {
                Ok(Ok(listing)) => act.apply(&name, listing, ctx),
                Ok(Err(e)) => act.listing_failed(&name, format!("tools/list failed: {e}")),
                Err(_) => act.listing_failed(
                    &name,
                    format!("tools/list did not answer within {} s", seconds(timeout)),
                ),
            }
            if again {
                act.relist(name, ctx);
            }
        }));
    }

    fn listing_failed(&mut self, name: &str, error: String) {
        tracing::warn!(mcp_server = %name, %error, "MCP server could not list its changed tools");
        self.board
            .update_runtime(name, |r| r.last_error = Some(error));
    }

    /// Registers what a new listing changed.
    fn apply(&mut self, name: &str, listing: Listing, ctx: &mut Context<Self>) {
        let Some(server) = self.servers.get_mut(name) else {
            return;
        };
        let (definitions, skipped) = listing.definitions();
        log_skipped(name, &skipped);
        let names: Vec<String> = definitions.iter().map(|d| d.name.clone()).collect();
        let (tools, skips) = (names.clone(), skipped.clone());
        self.board.update_runtime(name, |r| {
            r.tools = tools;
            r.skipped = skips;
            r.last_error = None;
        });
        if server.applied == definitions {
            tracing::debug!(mcp_server = %name, "MCP tool listing unchanged");
            return;
        }
        let registration = server.registration.clone();
        let specs = definitions
            .iter()
            .map(|d| {
                mapping::tool_spec(
                    d,
                    &registration.source,
                    server.owner(),
                    (
                        registration.behavior,
                        registration.approval,
                        registration.limits,
                    ),
                )
            })
            .collect();
        server.listed = listing.tools;
        let (owner, token) = (server.owner(), server.token);
        let record = self.listing_record(name, &self.servers[name]);
        let change = self.router.send(McpListing {
            replace: ReplaceSource {
                source: registration.source.clone(),
                tools: specs,
                roles: targets(&registration),
                owner: Some(owner),
            },
            token,
            record,
        });
        let server = self.servers.get_mut(name).expect("found above");
        server.applied = definitions;
        server.applying += 1;
        let (name, generation) = (name.to_owned(), server.generation);
        ctx.spawn(change.into_actor(self).map(move |report, act, _| {
            act.answered(&name, generation);
            let Ok(replaced) = report else {
                tracing::warn!(mcp_server = %name, "the router did not take the MCP tools");
                return;
            };
            if replaced.not_stored.is_some() {
                // Not made: the next listing is applied even if it is the same.
                if let Some(server) = act
                    .servers
                    .get_mut(&name)
                    .filter(|s| s.generation == generation)
                {
                    server.applied = Vec::new();
                }
                return;
            }
            act.refused(&name, generation, names, skipped, replaced.refused);
        }));
    }

    /// Takes server `name` away: its tools from every character (`remove_tools`, in the commit
    /// that removes it from the store; without, it leaves the store on its own), its report
    /// from the board; resolves to the router's report once the tools are gone and the
    /// connection is closed (or [`CLOSE_TIMEOUT`] passed; not awaited when `wait_close` is
    /// false), or to the router having stopped.
    fn retire(
        &mut self,
        name: &str,
        reason: &str,
        remove_tools: bool,
        wait_close: bool,
    ) -> Option<BoxFuture<'static, Result<ChangeReport, McpPluginError>>> {
        let (source, owner, closing) = self.let_go(name, reason, wait_close)?;
        let (removal, stored) = if remove_tools {
            (Some(self.remove_with_tools(name, source, owner)), None)
        } else {
            let stored = self.journal(Op::McpUnregister {
                name: name.to_owned(),
            });
            (None, stored)
        };
        Some(
            async move {
                let report = match removal {
                    Some(removal) => removal.await,
                    None => Ok(ChangeReport::default()),
                };
                closing.await;
                durable(stored).await?;
                report
            }
            .boxed(),
        )
    }

    /// Takes server `name` out of this registry and the board and closes its connection:
    /// resolves once it is closed (at once when `wait_close` is false). Its tools and its
    /// record in the store are the caller's; returns its source and the handler its tools run on.
    fn let_go(
        &mut self,
        name: &str,
        reason: &str,
        wait_close: bool,
    ) -> Option<(String, LocalToolHandler, BoxFuture<'static, ()>)> {
        let server = self.servers.shift_remove(name)?;
        server.kept.store(false, Ordering::Release);
        self.board.remove_runtime(name, reason);
        let (source, owner) = (server.registration.source.clone(), server.owner());
        let closing = close(server.cancel, server.closed);
        let closing = if wait_close {
            closing.boxed()
        } else {
            actix::spawn(closing);
            async {}.boxed()
        };
        Some((source, owner, closing))
    }
}

/// Whether `registration` may join the servers in `others` (every server registered or still
/// connecting, by name and source) when `configured` is the configured server with its source,
/// if any: a source names one server's tools, and at most [`MAX_RUNTIME_SERVERS`] are held at
/// once (a name registered again replaces its server: it is not one more).
fn admit<'a>(
    registration: &McpRegistration,
    others: impl IntoIterator<Item = (&'a str, &'a str)>,
    configured: Option<String>,
) -> Result<(), McpPluginError> {
    let mut names = HashSet::new();
    for (name, source) in others {
        if name != registration.name && source == registration.source {
            return Err(McpPluginError::SourceTaken {
                taken: source.to_owned(),
                server: name.to_owned(),
            });
        }
        names.insert(name);
    }
    if let Some(server) = configured {
        return Err(McpPluginError::SourceTaken {
            taken: registration.source.clone(),
            server,
        });
    }
    if !names.contains(registration.name.as_str()) && names.len() >= MAX_RUNTIME_SERVERS {
        return Err(McpPluginError::TooMany);
    }
    Ok(())
}

/// The characters a registration's tools go to (`None`: every character).
fn targets(registration: &McpRegistration) -> Option<Vec<String>> {
    registration.role.clone().map(|role| vec![role])
}

fn log_skipped(name: &str, skipped: &[Skipped]) {
    for skip in skipped {
        tracing::warn!(mcp_server = %name, tool = %skip.name, reason = %skip.reason, "MCP tool not registered");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::callback_url::CallbackUrl;

    fn registration(name: &str, source: &str) -> McpRegistration {
        McpRegistration {
            name: name.to_owned(),
            url: CallbackUrl::parse("http://127.0.0.1:9400/mcp").unwrap(),
            role: None,
            source: source.to_owned(),
            timeout: Duration::from_secs(30),
            behavior: Default::default(),
            approval: Default::default(),
            limits: Default::default(),
        }
    }

    #[test]
    fn a_source_belongs_to_one_server_and_the_servers_are_bounded() {
        let names: Vec<String> = (0..MAX_RUNTIME_SERVERS).map(|i| format!("s{i}")).collect();
        let sources: Vec<String> = names.iter().map(|n| format!("mcp:{n}")).collect();
        let full = || {
            names
                .iter()
                .zip(&sources)
                .map(|(n, s)| (n.as_str(), s.as_str()))
        };
        assert_eq!(
            admit(&registration("new", "mcp:new"), full(), None),
            Err(McpPluginError::TooMany)
        );
        // One of them registered again, or still connecting as well: not one more.
        let again = full().chain([("s3", "mcp:s3")]);
        assert_eq!(admit(&registration("s3", "mcp:s3"), again, None), Ok(()));
        assert_eq!(
            admit(&registration("new", "mcp:new"), full().skip(1), None),
            Ok(())
        );
        assert_eq!(
            admit(&registration("new", "mcp:s7"), full().take(10), None),
            Err(McpPluginError::SourceTaken {
                taken: "mcp:s7".into(),
                server: "s7".into()
            })
        );
        assert_eq!(
            admit(
                &registration("new", "mcp:cfg"),
                full().take(1),
                Some("cfg".into())
            ),
            Err(McpPluginError::SourceTaken {
                taken: "mcp:cfg".into(),
                server: "cfg".into()
            })
        );
    }
}
