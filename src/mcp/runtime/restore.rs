//! The MCP servers plugins registered at run time, kept by the state store (`--state`): what is
//! stored, what a restart reads back, and how a restored server wakes.
//!
//! A registration is stored once its tools are registered, before its answer (its body as
//! sent, the tools of its listing that were registered, under its name); a new listing stores
//! the new tools; every removal (unregister, a clear of its source, its connection ending, the
//! auto-removal) removes it. At start each stored server is read back: its registration with the
//! parser of a new one, its tools as its last listing had them. Those tools are restored
//! dormant in the router (listed, given to no model) and the server is probed — connect,
//! initialize, list — at once and then with the backoff of restored callbacks; when it answers,
//! its listing replaces the dormant tools as a registration would (and its new record, stored,
//! is no longer dormant). The owner rule of restored callbacks holds here too: a server whose
//! source is bound to a token is not probed until its owner proves itself (the router's
//! [`SourceMayWake`], after a wake or a change carrying the token), since its listings would run
//! with that token. A server that does not answer within the dormant time — counted from when
//! it went dormant, across restarts — is removed, from the store too; the router removes its
//! tools as an auto-removal.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use actix::prelude::*;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use rmcp::model::Tool;

use super::connection::open;
use super::messages::{McpRegistration, McpUnregistered};
use super::{Listener, McpPluginError, McpPlugins};
use crate::actors::change::ChangeReport;
use crate::actors::router::{
    ListingRecord, McpListing, ReplaceSource, RouterError, SourceMayWake, SourceReplaced,
};
use crate::domain::call::{LocalHandler, LocalToolHandler, ToolCall, ToolOutcome};
use crate::domain::dormant::{DormantTool, FIRST_PROBE_BACKOFF, next_backoff};
use crate::domain::ownership::TokenHash;
use crate::mcp::mapping;
use crate::mcp::status::{RuntimeMcpReport, RuntimeMcpState};
use crate::state::{Durable, Op, StoredMcpServer};

/// A server read back from the store, not answering yet.
pub(crate) struct RestoredMcp {
    pub name: String,
    pub registration: McpRegistration,
    /// Its stored registration body.
    pub record: String,
    /// The token hash its source is bound to, if it is: the credential of its listings.
    pub token: Option<TokenHash>,
    /// The handler its dormant tools carry (their owner in the router).
    pub owner: LocalToolHandler,
    /// Its dormant tools' names.
    pub tools: Vec<String>,
    /// When it went dormant (in an earlier run, if it never answered since).
    pub since: SystemTime,
}

/// What the MCP registry keeps across restarts: the store (when the server keeps state), the
/// servers read back from it, and how long they may take to answer.
pub(crate) struct McpKeeping {
    pub store: Option<crate::state::StateStore>,
    pub restored: Vec<RestoredMcp>,
    pub dormant_ttl: Duration,
}

impl Default for McpKeeping {
    fn default() -> Self {
        Self {
            store: None,
            restored: Vec::new(),
            dormant_ttl: crate::state::settings::DEFAULT_DORMANT_TTL,
        }
    }
}

/// The stored server `name` as the registry restores it, and its tools (as its last listing
/// had them) dormant for `characters` (those its role names: every one when it names none).
pub(crate) fn restore(
    name: &str,
    stored: &StoredMcpServer,
    registration: McpRegistration,
    characters: &[String],
    token: Option<TokenHash>,
    since: SystemTime,
) -> Result<(RestoredMcp, Vec<DormantTool>), String> {
    let tools: Vec<Tool> = serde_json::from_str(&stored.tools)
        .map_err(|e| format!("its stored tools cannot be read: {e}"))?;
    let owner = LocalToolHandler(Arc::new(NotAnswering {
        name: name.to_owned(),
    }));
    let targets: Vec<&String> = characters
        .iter()
        .filter(|c| registration.role.as_ref().is_none_or(|role| role == *c))
        .collect();
    let mut dormant = Vec::new();
    let mut names = Vec::new();
    for tool in &tools {
        let Ok(definition) = mapping::definition(tool) else {
            continue;
        };
        let policy = (
            registration.behavior,
            registration.approval,
            registration.limits,
        );
        let spec = Arc::new(mapping::tool_spec(
            &definition,
            &registration.source,
            owner.clone(),
            policy,
        ));
        names.push(definition.name);
        for character in &targets {
            dormant.push(DormantTool {
                character: (*character).clone(),
                tool: spec.clone(),
                mcp: true,
                since,
                awaits_owner: token.is_some(),
            });
        }
    }
    let restored = RestoredMcp {
        name: name.to_owned(),
        registration,
        record: stored.body.clone(),
        token,
        owner,
        tools: names,
        since,
    };
    Ok((restored, dormant))
}

/// The handler of a restored server's dormant tools: no model is given them, so it is never
/// called; were it called, it says why it cannot run.
struct NotAnswering {
    name: String,
}

impl LocalHandler for NotAnswering {
    fn call(&self, _: ToolCall) -> BoxFuture<'static, ToolOutcome> {
        let text = format!(
            "MCP server {} has not answered since the server restarted",
            self.name
        );
        async move { Err(text) }.boxed()
    }
}

/// A restored server still waiting for its MCP server to answer.
pub(super) struct Restoring {
    pub(super) registration: Arc<McpRegistration>,
    pub(super) generation: u64,
    pub(super) token: Option<TokenHash>,
    pub(super) record: String,
    pub(super) owner: LocalToolHandler,
    /// Its source is bound to a token whose owner has not proved itself since the restart: it
    /// is not probed until then.
    pub(super) awaits_owner: bool,
    /// When it is removed if it has not answered.
    pub(super) deadline: Instant,
}

/// When a server that went dormant at `since` is removed, with `ttl` of dormant time.
pub(super) fn deadline(since: SystemTime, ttl: Duration) -> Instant {
    let left = (since + ttl)
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    Instant::now() + left
}

/// The stored record of a registration: `tools` are those of `listed` that were registered.
pub(super) fn stored(
    registration: &McpRegistration,
    record: &str,
    listed: &[Tool],
    registered: &[String],
) -> StoredMcpServer {
    let tools: Vec<&Tool> = listed
        .iter()
        .filter(|t| registered.iter().any(|n| *n == t.name))
        .collect();
    StoredMcpServer {
        source: registration.source.clone(),
        body: record.to_owned(),
        tools: serde_json::to_string(&tools).unwrap_or_else(|_| "[]".to_owned()),
        dormant_since: None,
    }
}

/// Waits for a change handed to the store: an error when it could not be kept.
pub(super) async fn durable(durable: Option<Durable>) -> Result<(), McpPluginError> {
    let Some(durable) = durable else {
        return Ok(());
    };
    let stored = durable
        .await
        .unwrap_or_else(|_| Err("the state store stopped before the change was stored".into()));
    stored.map_err(|e| McpPluginError::Router(RouterError::NotStored(e)))
}

impl McpPlugins {
    /// Hands `op` to the state store, if the server keeps state.
    pub(super) fn journal(&self, op: Op) -> Option<Durable> {
        self.store.as_ref().map(|store| store.submit(op))
    }

    /// Removes server `name` from the store and its tools (those `owner` runs, of `source`)
    /// from every character, in one commit: both are made, or neither (a store that cannot
    /// keep it refuses the change, and the server's tools stay where they are).
    pub(super) fn remove_with_tools(
        &self,
        name: &str,
        source: String,
        owner: LocalToolHandler,
    ) -> BoxFuture<'static, Result<ChangeReport, McpPluginError>> {
        let record: Option<ListingRecord> = self.store.as_ref().map(|_| {
            let name = name.to_owned();
            Box::new(move |_: &[String]| vec![Op::McpUnregister { name }]) as ListingRecord
        });
        let removal = self.router.send(McpListing {
            replace: ReplaceSource {
                source,
                tools: Vec::new(),
                roles: None,
                owner: Some(owner),
            },
            token: None,
            record,
        });
        async move {
            match removal.await {
                Err(_) => Err(McpPluginError::RouterStopped),
                Ok(SourceReplaced {
                    not_stored: Some(why),
                    ..
                }) => Err(McpPluginError::Router(RouterError::NotStored(why))),
                Ok(replaced) => Ok(replaced.report),
            }
        }
        .boxed()
    }

    /// Starts probing each restored server that may wake, and sets the timer that removes each
    /// that has not answered by its deadline.
    pub(super) fn watch_restored(&mut self, ctx: &mut Context<Self>) {
        let restoring: Vec<(String, u64, bool, Instant)> = self
            .restoring
            .iter()
            .map(|(name, r)| (name.clone(), r.generation, r.awaits_owner, r.deadline))
            .collect();
        if !restoring.is_empty() {
            tracing::info!(
                servers = restoring.len(),
                "restored MCP servers are dormant until they answer (a bound source's after its \
                 owner's token is seen again)"
            );
        }
        let now = Instant::now();
        for (name, generation, awaits_owner, deadline) in restoring {
            let expiring = name.clone();
            ctx.run_later(deadline.saturating_duration_since(now), move |act, _| {
                if act
                    .restoring
                    .get(&expiring)
                    .is_some_and(|r| r.generation == generation)
                {
                    act.expire(&expiring);
                }
            });
            if !awaits_owner {
                self.wake(name, generation, Duration::ZERO, ctx);
            }
        }
    }

    /// The board's report of a restored server, dormant.
    pub(super) fn dormant_report(
        registration: &McpRegistration,
        tools: Vec<String>,
    ) -> RuntimeMcpReport {
        RuntimeMcpReport {
            state: RuntimeMcpState::Dormant,
            transport: "http",
            url: registration.url.as_written().to_owned(),
            source: registration.source.clone(),
            role: registration.role.clone(),
            tools,
            skipped: Vec::new(),
            timeout_seconds: registration.timeout.as_secs_f64(),
            registered_at: humantime::format_rfc3339_millis(std::time::SystemTime::now())
                .to_string(),
            last_error: None,
        }
    }

    /// After `wait`, tries to reach restored server `name` (this incarnation): connect,
    /// initialize, list. When it answers it is installed as a registration; otherwise it is
    /// tried again after a longer wait, until the dormant time is up.
    fn wake(&mut self, name: String, generation: u64, wait: Duration, ctx: &mut Context<Self>) {
        let Some(restoring) = self
            .restoring
            .get(&name)
            .filter(|r| r.generation == generation)
        else {
            return;
        };
        let now = Instant::now();
        if now >= restoring.deadline {
            self.expire(&name);
            return;
        }
        let wait = wait.min(restoring.deadline - now);
        let listener = Listener {
            plugins: ctx.address(),
            name: name.clone(),
            generation,
        };
        let attempt = {
            let registration = restoring.registration.clone();
            let max_result_bytes = self.max_result_bytes;
            async move {
                tokio::time::sleep(wait).await;
                open(registration, listener, max_result_bytes).await
            }
        };
        ctx.spawn(attempt.into_actor(self).map(move |opened, act, ctx| {
            if act
                .restoring
                .get(&name)
                .is_none_or(|r| r.generation != generation)
            {
                // Registered again, unregistered or cleared meanwhile.
                return;
            }
            match opened {
                Ok(opened) => {
                    let Some(restoring) = act.restoring.get(&name) else {
                        return;
                    };
                    let (registration, token) = (restoring.registration.clone(), restoring.token);
                    let record = Some(restoring.record.clone());
                    tracing::info!(mcp_server = %name, "restored MCP server answers: its tools are given to the models");
                    let installed = act.install(registration, generation, opened, token, record, ctx);
                    ctx.spawn(installed.map(move |done, _, _| {
                        if let Err(e) = done {
                            tracing::warn!(error = %e, "a restored MCP server's tools could not be registered");
                        }
                    }));
                }
                Err(failure) => {
                    tracing::debug!(mcp_server = %name, stage = failure.stage.name(), error = %failure.error, "restored MCP server does not answer yet");
                    let error = format!("{}: {}", failure.stage.name(), failure.error);
                    act.board
                        .update_runtime(&name, |r| r.last_error = Some(error));
                    let next = if wait.is_zero() {
                        FIRST_PROBE_BACKOFF
                    } else {
                        next_backoff(wait)
                    };
                    act.wake(name, generation, next, ctx);
                }
            }
        }));
    }

    /// Removes restored server `name` (unregistered, or its source cleared): from the board,
    /// the store, and its dormant tools from the router; `None` when no such server waits.
    pub(super) fn forget_restored(
        &mut self,
        name: &str,
        reason: &str,
    ) -> Option<BoxFuture<'static, Result<McpUnregistered, McpPluginError>>> {
        let gone = self.restoring.shift_remove(name)?;
        self.board.remove_runtime(name, reason);
        let removal = self.remove_with_tools(name, gone.registration.source.clone(), gone.owner);
        Some(
            async move {
                let report = removal.await?;
                Ok(McpUnregistered {
                    removed: true,
                    report,
                })
            }
            .boxed(),
        )
    }

    /// Restored server `name` never answered within the dormant time: removed, from the store
    /// too (the router removes its dormant tools as an auto-removal).
    fn expire(&mut self, name: &str) {
        let Some(gone) = self.restoring.shift_remove(name) else {
            return;
        };
        tracing::warn!(mcp_server = %name, url = %gone.registration.url.as_written(), waited_for_owner = gone.awaits_owner, "removed a restored MCP server that did not wake within the dormant time");
        self.board.remove_runtime(
            name,
            "auto_removed: it did not answer within the dormant time",
        );
        // A failure is logged by the store; the server is gone from this run either way.
        drop(self.journal(Op::McpUnregister {
            name: name.to_owned(),
        }));
    }
}

impl Handler<SourceMayWake> for McpPlugins {
    type Result = ();

    /// The owner of the source proved itself (or the source was unbound): its restored servers
    /// are probed from now on.
    fn handle(&mut self, msg: SourceMayWake, ctx: &mut Self::Context) {
        let released: Vec<(String, u64)> = self
            .restoring
            .iter_mut()
            .filter(|(_, r)| r.awaits_owner && r.registration.source == msg.source)
            .map(|(name, r)| {
                r.awaits_owner = false;
                (name.clone(), r.generation)
            })
            .collect();
        for (name, generation) in released {
            tracing::info!(mcp_server = %name, "restored MCP server may wake: probing it");
            self.wake(name, generation, Duration::ZERO, ctx);
        }
    }
}
