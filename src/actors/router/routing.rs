//! Routing a change: register, unregister, clear, dead-origin removal and an MCP source's
//! replacement pick their target characters, number the change per character, remember it until
//! the character's snapshot shows it, and send it to each target's manager; [`super::gather`]
//! collects the answers, and the request is then logged and announced as one `tools.changed`
//! event with the roles it really affected and those that failed. A clear of every character is
//! then told to the clear watcher (the MCP servers registered at run time), which ends the
//! connection of a server of that source before the clear answers.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

use super::gather::{Gathering, Reply, Target, gather};
use super::{Router, RouterError};
use crate::actors::change::{ChangeFailure, ChangeReport, RoleFailure};
use crate::actors::manager::ApplyChange;
use crate::domain::call::LocalToolHandler;
use crate::domain::callback_url::CallbackOrigin;
use crate::domain::failures::{DeadOrigin, DeadOriginRemover};
use crate::domain::registry::Change;
use crate::domain::tool::{SharedTool, ToolSpec};
use crate::events::{ChangeOp, EventHub, ToolsChanged};

/// Register or replace a tool for one character (`role`) or every current character (`None`).
#[derive(Message, Debug)]
#[rtype(result = "Result<ChangeReport, RouterError>")]
pub struct RegisterTool {
    pub tool: ToolSpec,
    /// `None` or `""`: every character that exists now.
    pub role: Option<String>,
}

/// Remove a tool by name from one character or every character.
#[derive(Message, Debug)]
#[rtype(result = "Result<ChangeReport, RouterError>")]
pub struct UnregisterTool {
    pub name: String,
    pub role: Option<String>,
}

/// Remove every tool of a `source` from one character or every character.
#[derive(Message, Debug)]
#[rtype(result = "Result<ChangeReport, RouterError>")]
pub struct ClearSource {
    pub source: String,
    pub role: Option<String>,
}

/// Remove the tools of a plugin `source` served from a dead callback `origin`, everywhere.
#[derive(Message, Debug)]
#[rtype(result = "ChangeReport")]
pub struct RemoveDeadOrigin {
    pub source: String,
    pub origin: CallbackOrigin,
    /// Consecutive connection failures that led here, for the log.
    pub failures: u32,
}

/// Make `tools` the tools of `source` for `roles` (`None`: every character that exists now), as
/// one change per character, announced as `tools.changed` with op `mcp`. An MCP server's client
/// sends it after each listing, and with no tools (and `roles: None`) when the server goes away.
#[derive(Message, Debug)]
#[rtype(result = "ChangeReport")]
pub struct ReplaceSource {
    pub source: String,
    pub tools: Vec<ToolSpec>,
    pub roles: Option<Vec<String>>,
    /// Only the tools of `source` this handler runs are replaced (`None`: every tool of
    /// `source`): an MCP server registered at run time replaces its own tools, never an HTTP
    /// tool a plugin registered under the same source.
    pub owner: Option<LocalToolHandler>,
}

/// A clear of every character's tools of `source` was applied: told to whoever watches clears
/// (the MCP servers registered at run time, whose connection a clear of their source ends), and
/// answered once it has acted, before the clear's own answer.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct SourceCleared {
    pub source: String,
}

/// From now on, tell `0` about every clear of every character ([`SourceCleared`]).
#[derive(Message)]
#[rtype(result = "()")]
pub struct WatchClears(pub Recipient<SourceCleared>);

impl Router {
    /// Numbers `change` for each of `targets`, remembers it until their snapshots show it, and
    /// sends it to their managers; the future gathers the outcomes.
    fn fan_out(&mut self, targets: Vec<usize>, change: Change) -> ResponseFuture<ChangeReport> {
        let adds = change.adds();
        let change = Arc::new(change);
        let mut pending = Vec::with_capacity(targets.len());
        // One deadline for the whole fan-out: the longest any target may take.
        let mut wait = Duration::ZERO;
        for i in targets {
            let character = &mut self.characters[i];
            let number = character.next_change;
            character.next_change += 1;
            character.forget_confirmed();
            character.unconfirmed.push_back((number, change.clone()));
            let role = character.name.clone();
            if !character.manager.connected() {
                // The manager died (a panic): bring it back with its tools, this change
                // included, and report it.
                tracing::warn!(character = %role, "session manager had stopped; restarting it with its tools");
                self.restart_manager(i);
                pending.push(Target {
                    role,
                    generation: self.characters[i].generation,
                    reply: Reply::Failed(ChangeFailure::Restarted),
                });
                continue;
            }
            wait = wait.max(character.reply_timeout());
            let (reply, outcome) = oneshot::channel();
            character.manager.do_send(ApplyChange {
                number,
                change: change.clone(),
                reply,
            });
            pending.push(Target {
                role,
                generation: character.generation,
                reply: Reply::Waiting(outcome),
            });
        }
        let how = Gathering {
            adds,
            deadline: tokio::time::Instant::now() + wait,
            wait,
            router: self.me.clone(),
            directory: self.directory.clone(),
            failures: self.failures.clone(),
        };
        Box::pin(gather(pending, how))
    }

    /// Routes a change requested for `role` (`None` or `""`: every character).
    fn route(
        &mut self,
        role: Option<&str>,
        change: Change,
    ) -> ResponseFuture<Result<ChangeReport, RouterError>> {
        let targets = match self.targets(role) {
            Ok(targets) => targets,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let report = self.route_to(targets, Vec::new(), change);
        Box::pin(async move { Ok(report.await) })
    }

    /// Routes a change to `targets`, then logs and announces its outcome; `unknown` are the
    /// roles the request named that do not exist, reported as failed.
    fn route_to(
        &mut self,
        targets: Vec<usize>,
        unknown: Vec<RoleFailure>,
        change: Change,
    ) -> ResponseFuture<ChangeReport> {
        let subject = Subject::of(&change);
        let report = self.fan_out(targets, change);
        let events = self.events.clone();
        Box::pin(async move {
            let mut report = report.await;
            report.failed_roles.extend(unknown);
            subject.log(&report);
            subject.announce(&events, &report);
            report
        })
    }
}

/// What a change request is about, as its log line and its `tools.changed` event name it.
struct Subject {
    op: ChangeOp,
    /// The tool, for register and unregister.
    name: Option<String>,
    /// The source, for every change but unregister.
    source: Option<String>,
}

impl Subject {
    fn of(change: &Change) -> Self {
        let (op, name, source) = match change {
            Change::Register(tool) => (
                ChangeOp::Register,
                Some(tool.name.clone()),
                Some(tool.source.clone()),
            ),
            Change::Unregister(name) => (ChangeOp::Unregister, Some(name.clone()), None),
            Change::ClearSource(source) => (ChangeOp::Clear, None, Some(source.clone())),
            Change::RemoveOrigin { source, .. } => {
                (ChangeOp::AutoRemoved, None, Some(source.clone()))
            }
            Change::ReplaceSource { source, .. } => (ChangeOp::Mcp, None, Some(source.clone())),
        };
        Self { op, name, source }
    }

    /// The `tools.changed` event of the request, for the roles its report names, and its
    /// count in the metrics.
    fn announce(&self, events: &EventHub, report: &ChangeReport) {
        events
            .observer()
            .metrics()
            .tools_changed(self.op.name(), report.removed);
        let change = ToolsChanged {
            op: self.op,
            name: self.name.as_deref(),
            source: self.source.as_deref(),
            affected_roles: &report.affected_roles,
            failed_roles: &report.failed_roles,
        };
        events.tools_changed(&change, &report.failed_role_names());
    }

    /// One info line per change request, naming the characters that failed but only counting
    /// those that took it (their names at debug level: with many characters, formatting every
    /// name on every registration was a measurable share of a register's CPU); never the tool's
    /// arguments or payloads.
    fn log(&self, report: &ChangeReport) {
        let route = self.op.name();
        let name = self.name.as_deref().unwrap_or_default();
        let source = self.source.as_deref().unwrap_or_default();
        let failed = report.failed_role_names();
        tracing::info!(
            route,
            name,
            source,
            removed = report.removed,
            affected = report.affected_roles.len(),
            failed_roles = ?failed,
            "tool change"
        );
        tracing::debug!(route, name, affected_roles = ?report.affected_roles, "tool change reached");
        for failure in &report.failed_roles {
            tracing::warn!(route, role = %failure.role, error = %failure.error, "character did not take the change");
        }
    }
}

impl Handler<RegisterTool> for Router {
    type Result = ResponseFuture<Result<ChangeReport, RouterError>>;

    fn handle(&mut self, msg: RegisterTool, _: &mut Self::Context) -> Self::Result {
        let change = Change::Register(Arc::new(msg.tool));
        self.route(msg.role.as_deref(), change)
    }
}

impl Handler<UnregisterTool> for Router {
    type Result = ResponseFuture<Result<ChangeReport, RouterError>>;

    fn handle(&mut self, msg: UnregisterTool, _: &mut Self::Context) -> Self::Result {
        self.route(msg.role.as_deref(), Change::Unregister(msg.name))
    }
}

impl Handler<ClearSource> for Router {
    type Result = ResponseFuture<Result<ChangeReport, RouterError>>;

    fn handle(&mut self, msg: ClearSource, _: &mut Self::Context) -> Self::Result {
        let everywhere = msg.role.as_deref().is_none_or(str::is_empty);
        let report = self.route(msg.role.as_deref(), Change::ClearSource(msg.source.clone()));
        let watcher = self.clear_watcher.clone().filter(|_| everywhere);
        Box::pin(async move {
            let report = report.await?;
            if let Some(watcher) = watcher {
                // A watcher that has stopped has nothing left to end.
                let _ = watcher.send(SourceCleared { source: msg.source }).await;
            }
            Ok(report)
        })
    }
}

impl Handler<WatchClears> for Router {
    type Result = ();

    fn handle(&mut self, WatchClears(watcher): WatchClears, _: &mut Self::Context) {
        self.clear_watcher = Some(watcher);
    }
}

impl Handler<RemoveDeadOrigin> for Router {
    type Result = ResponseFuture<ChangeReport>;

    fn handle(&mut self, msg: RemoveDeadOrigin, _: &mut Self::Context) -> Self::Result {
        let targets = (0..self.characters.len()).collect();
        let change = Change::RemoveOrigin {
            source: msg.source.clone(),
            origin: msg.origin.clone(),
        };
        let subject = Subject::of(&change);
        let report = self.fan_out(targets, change);
        let events = self.events.clone();
        Box::pin(async move {
            let report = report.await;
            // Concurrent calls to a dead plugin can each reach the threshold; only the removal
            // that found tools to remove is worth a warning (and an event).
            if report.removed == 0 {
                tracing::debug!(source = %msg.source, origin = %msg.origin, "dead plugin origin already removed");
                return report;
            }
            subject.announce(&events, &report);
            tracing::warn!(
                source = %msg.source,
                origin = %msg.origin,
                failures = msg.failures,
                removed = report.removed,
                affected_roles = ?report.affected_roles,
                failed_roles = ?report.failed_roles,
                "removed the tools of a dead plugin callback origin"
            );
            report
        })
    }
}

impl Handler<ReplaceSource> for Router {
    type Result = ResponseFuture<ChangeReport>;

    fn handle(&mut self, msg: ReplaceSource, _: &mut Self::Context) -> Self::Result {
        let mut unknown = Vec::new();
        let targets = match &msg.roles {
            None => (0..self.characters.len()).collect(),
            Some(roles) => roles
                .iter()
                .filter_map(|role| {
                    let found = self.position(role);
                    if found.is_none() {
                        unknown.push(RoleFailure {
                            role: role.clone(),
                            error: ChangeFailure::UnknownRole(role.clone()),
                        });
                    }
                    found
                })
                .collect(),
        };
        let tools: Arc<[SharedTool]> = msg.tools.into_iter().map(Arc::new).collect();
        let change = Change::ReplaceSource {
            source: msg.source,
            tools,
            owner: msg.owner,
        };
        self.route_to(targets, unknown, change)
    }
}

/// The dispatcher reports dead origins to the router through its recipient.
impl DeadOriginRemover for Recipient<RemoveDeadOrigin> {
    fn remove(&self, dead: DeadOrigin) -> BoxFuture<'static, bool> {
        self.send(RemoveDeadOrigin {
            source: dead.source,
            origin: dead.origin,
            failures: dead.failures,
        })
        .map(|answered| answered.is_ok())
        .boxed()
    }
}
