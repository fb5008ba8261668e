//! Routing a change: register, unregister, clear, dead-origin removal and an MCP source's
//! replacement pick their target characters, number the change per character, remember it until
//! the character's snapshot shows it, and send it to each target's manager; [`super::gather`]
//! collects the answers, and the request is then logged and announced as one `tools.changed`
//! event with the roles it really affected and those that failed. With a state store a change
//! is stored before it is sent ([`super::commit`]), and one the store could not keep is not
//! made. A clear of every character is then told to the clear watcher (the MCP servers
//! registered at run time), which ends the connection of a server of that source before the
//! clear answers.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

use super::commit::Undo;
use super::gather::{Gathering, Reply, Target, gather};
use super::{Router, RouterError};
use crate::actors::change::{ChangeFailure, ChangeReport, RoleFailure};
use crate::actors::manager::ApplyChange;
use crate::domain::call::LocalToolHandler;
use crate::domain::callback_url::CallbackOrigin;
use crate::domain::failures::{DeadOrigin, DeadOriginRemover};
use crate::domain::ownership::{Credential, OwnershipError, TokenHash};
use crate::domain::registry::Change;
use crate::domain::role::RoleName;
use crate::domain::tool::{SharedTool, ToolSpec};
use crate::events::{ChangeOp, EventHub, ToolsChanged};
use crate::state::{Durable, Op, StoreFailure, StoredTool};

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

/// A change a plugin asks for over HTTP, with the hash of its `X-Plugin-Token` if it sent one:
/// it passes the ownership rule (`domain::ownership`) before it is routed, and a refused one
/// changes nothing.
#[derive(Message, Debug)]
#[rtype(result = "Result<ChangeReport, RouterError>")]
pub(crate) struct PluginChange {
    pub request: ChangeRequest,
    pub token: Option<TokenHash>,
    /// A registration's body as the plugin sent it (without `role`), JSON text: what the
    /// state store keeps, when the server keeps state.
    pub record: Option<String>,
}

/// The changes a plugin makes over HTTP.
#[derive(Debug)]
pub(crate) enum ChangeRequest {
    /// Boxed: a tool is far larger than the other requests.
    Register(Box<RegisterTool>),
    Unregister(UnregisterTool),
    Clear(ClearSource),
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

/// A runtime MCP server's listing ([`ReplaceSource`] with the server's handler as `owner`), for
/// the plugin that registered it (its token's hash, if it sent one): a tool of the listing
/// whose name a tool of another source bound to another token holds is not registered.
#[derive(Message)]
#[rtype(result = "SourceReplaced")]
pub(crate) struct McpListing {
    pub replace: ReplaceSource,
    pub token: Option<TokenHash>,
    /// With a state store: the server's record, stored in the listing's own commit, so the
    /// server is stored exactly when its tools are made.
    pub record: Option<ListingRecord>,
}

/// A routed change's report, or why it was not made.
type Routed = ResponseFuture<Result<ChangeReport, RouterError>>;

/// The ops that store an MCP server with its listing, given the names of the tools the
/// listing registered (those the ownership rule let through).
pub(crate) type ListingRecord = Box<dyn FnOnce(&[String]) -> Vec<Op> + Send>;

impl std::fmt::Debug for McpListing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpListing")
            .field("replace", &self.replace)
            .field("token", &self.token)
            .field("record", &self.record.is_some())
            .finish()
    }
}

/// What an [`McpListing`] did, and the tools it left out with why.
#[derive(Debug, Default)]
pub(crate) struct SourceReplaced {
    pub report: ChangeReport,
    pub refused: Vec<(String, OwnershipError)>,
    /// Why the listing was not made: the state store could not keep it.
    pub not_stored: Option<String>,
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
    pub(super) fn fan_out(
        &mut self,
        targets: Vec<usize>,
        change: Change,
    ) -> ResponseFuture<ChangeReport> {
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

    /// Registers `msg.tool` for `who`: refused when a target holds a tool of that name whose
    /// source is bound to another token, or the tool's own source is; binds that source to
    /// `who`'s token when it is the first tokened registration of it.
    fn register(
        &mut self,
        msg: RegisterTool,
        who: Credential,
        record: Option<String>,
        ctx: &mut Context<Self>,
    ) -> ResponseFuture<Result<ChangeReport, RouterError>> {
        let targets = match self.targets(msg.role.as_deref()) {
            Ok(targets) => targets,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let mut holders = self.holders(&targets, &msg.tool.name);
        let names = self.names(&targets);
        for replaced in self.dormant_named(&names, &msg.tool.name) {
            holders.push(replaced);
        }
        let others = holders.iter().filter(|s| **s != msg.tool.source);
        let mut touched: Vec<&str> = others.map(String::as_str).collect();
        let bound =
            match self
                .owners
                .authorize(who, touched.iter().copied(), Some(&msg.tool.source))
            {
                Ok(bound) => bound,
                Err(e) => return Box::pin(async move { Err(e.into()) }),
            };
        touched.push(&msg.tool.source);
        let touched: Vec<String> = touched.into_iter().map(str::to_owned).collect();
        self.owner_seen(who, &as_strs(&touched), ctx);
        let mut ops = Vec::with_capacity(2);
        if let Some((source, hash)) = &bound {
            ops.push(Op::Bind {
                source: source.clone(),
                hash: *hash.bytes(),
            });
        }
        // A restored tool of that name is replaced by the new registration.
        let dormant = self.dormant.take_named(&as_strs(&names), &msg.tool.name);
        let stored = record.and_then(|body| {
            let origin = msg.tool.callback_origin()?.to_string();
            Some(StoredTool {
                source: msg.tool.source.clone(),
                origin,
                body,
                dormant_since: None,
            })
        });
        let change = Change::Register(Arc::new(msg.tool));
        ops.push(Op::of(&change, names, stored));
        let subject = Subject::of(&change);
        let undo = Undo { bound, dormant };
        self.route_to(targets, Vec::new(), change, ops, subject, undo)
    }

    /// Unregisters `msg.name` for `who`: refused when a target holds it under a source bound
    /// to another token. The change is logged and announced with the source that held it.
    fn unregister(
        &mut self,
        msg: UnregisterTool,
        who: Credential,
        ctx: &mut Context<Self>,
    ) -> ResponseFuture<Result<ChangeReport, RouterError>> {
        let targets = match self.targets(msg.role.as_deref()) {
            Ok(targets) => targets,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let mut holders = self.holders(&targets, &msg.name);
        let names = self.names(&targets);
        for dormant in self.dormant_named(&names, &msg.name) {
            if !holders.contains(&dormant) {
                holders.push(dormant);
            }
        }
        if let Err(e) = self
            .owners
            .authorize(who, holders.iter().map(String::as_str), None)
        {
            return Box::pin(async move { Err(e.into()) });
        }
        self.owner_seen(who, &as_strs(&holders), ctx);
        let dormant = self.dormant.take_named(&as_strs(&names), &msg.name);
        let change = Change::Unregister(msg.name);
        let op = Op::of(&change, names, None);
        let mut subject = Subject::of(&change);
        subject.source = holders.into_iter().next();
        let undo = Undo {
            dormant,
            ..Undo::default()
        };
        self.route_to(targets, Vec::new(), change, vec![op], subject, undo)
    }

    /// Clears `msg.source` for `who` (refused when it is bound to another token); a clear of
    /// every character is then told to the clear watcher.
    fn clear(
        &mut self,
        msg: ClearSource,
        who: Credential,
        ctx: &mut Context<Self>,
    ) -> ResponseFuture<Result<ChangeReport, RouterError>> {
        let targets = match self.targets(msg.role.as_deref()) {
            Ok(targets) => targets,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        if let Err(e) = self.owners.authorize(who, [msg.source.as_str()], None) {
            return Box::pin(async move { Err(e.into()) });
        }
        // A clear of some characters leaves the source's restored tools of the others.
        self.owner_seen(who, &[msg.source.as_str()], ctx);
        let everywhere = msg.role.as_deref().is_none_or(str::is_empty);
        let names = self.names(&targets);
        let dormant = self.dormant.take_source(&as_strs(&names), &msg.source);
        let change = Change::ClearSource(msg.source.clone());
        let op = Op::of(&change, names, None);
        let subject = Subject::of(&change);
        let undo = Undo {
            dormant,
            ..Undo::default()
        };
        let report = self.route_to(targets, Vec::new(), change, vec![op], subject, undo);
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

    /// Routes a change to `targets`, with a state store once `ops` are durable
    /// ([`Router::store_then_make`]); then logs and announces the outcome. `unknown` are the
    /// roles the request named that do not exist, reported as failed; `undo.dormant` the
    /// restored tools the change removed or replaced, whose characters count as affected (and,
    /// for a removal, their tools as removed). A change the store could not keep is not made:
    /// an error, with what it did when it was decided undone.
    pub(super) fn route_to(
        &mut self,
        targets: Vec<usize>,
        unknown: Vec<RoleFailure>,
        change: Change,
        ops: Vec<Op>,
        subject: Subject,
        undo: Undo,
    ) -> ResponseFuture<Result<ChangeReport, RouterError>> {
        let adds = change.adds();
        let dormant: Vec<RoleName> = undo
            .dormant
            .iter()
            .map(|t| RoleName::from(t.character.as_str()))
            .collect();
        let made = self.store_then_make(targets, ops, change, undo);
        if !dormant.is_empty() {
            self.publish_roster();
        }
        let events = self.events.clone();
        Box::pin(async move {
            let mut report = match made.await {
                Ok(report) => report,
                Err(failure) => {
                    subject.not_stored(&failure);
                    return Err(RouterError::NotStored(failure.text));
                }
            };
            report.failed_roles.extend(unknown);
            for role in dormant {
                if !adds {
                    report.removed += 1;
                }
                if !report.affected_roles.contains(&role) {
                    report.affected_roles.push(role);
                }
            }
            subject.log(&report);
            subject.announce(&events, &report);
            Ok(report)
        })
    }

    /// Hands `op` to the state store, if the server keeps state.
    pub(super) fn journal(&self, op: Op) -> Option<Durable> {
        self.store.as_ref().map(|store| store.submit(op))
    }

    /// The names of `targets`.
    pub(super) fn names(&self, targets: &[usize]) -> Vec<String> {
        targets
            .iter()
            .map(|&i| self.characters[i].name.to_string())
            .collect()
    }

    /// The sources of the restored tools named `name` of `characters`.
    fn dormant_named(&self, characters: &[String], name: &str) -> Vec<String> {
        characters
            .iter()
            .flat_map(|c| self.dormant.of(c))
            .filter(|t| t.name == name)
            .map(|t| t.source.clone())
            .collect()
    }
}

/// The names as `&str`s.
pub(super) fn as_strs(names: &[String]) -> Vec<&str> {
    names.iter().map(String::as_str).collect()
}

/// What a change request is about, as its log line and its `tools.changed` event name it.
pub(super) struct Subject {
    pub(super) op: ChangeOp,
    /// The tool, for register and unregister.
    pub(super) name: Option<String>,
    /// The source the change was made to: for an unregister, the source that held the tool.
    pub(super) source: Option<String>,
}

impl Subject {
    pub(super) fn of(change: &Change) -> Self {
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
    pub(super) fn announce(&self, events: &EventHub, report: &ChangeReport) {
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

    /// The warning of a change that was not made because the state store could not keep it.
    pub(super) fn not_stored(&self, failure: &StoreFailure) {
        tracing::warn!(
            route = self.op.name(),
            name = self.name.as_deref().unwrap_or_default(),
            source = self.source.as_deref().unwrap_or_default(),
            "tool change not made: the state store could not keep it: {failure}"
        );
    }

    /// One info line per change request, naming the characters that failed but only counting
    /// those that took it (their names at debug level: with many characters, formatting every
    /// name on every registration was a measurable share of a register's CPU); never the tool's
    /// arguments or payloads.
    pub(super) fn log(&self, report: &ChangeReport) {
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

    fn handle(&mut self, msg: RegisterTool, ctx: &mut Self::Context) -> Self::Result {
        self.register(msg, Credential::InProcess, None, ctx)
    }
}

impl Handler<UnregisterTool> for Router {
    type Result = ResponseFuture<Result<ChangeReport, RouterError>>;

    fn handle(&mut self, msg: UnregisterTool, ctx: &mut Self::Context) -> Self::Result {
        self.unregister(msg, Credential::InProcess, ctx)
    }
}

impl Handler<ClearSource> for Router {
    type Result = ResponseFuture<Result<ChangeReport, RouterError>>;

    fn handle(&mut self, msg: ClearSource, ctx: &mut Self::Context) -> Self::Result {
        self.clear(msg, Credential::InProcess, ctx)
    }
}

impl Handler<PluginChange> for Router {
    type Result = ResponseFuture<Result<ChangeReport, RouterError>>;

    fn handle(&mut self, msg: PluginChange, ctx: &mut Self::Context) -> Self::Result {
        let who = Credential::Plugin(msg.token);
        match msg.request {
            ChangeRequest::Register(r) => self.register(*r, who, msg.record, ctx),
            ChangeRequest::Unregister(u) => self.unregister(u, who, ctx),
            ChangeRequest::Clear(c) => self.clear(c, who, ctx),
        }
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
        let targets: Vec<usize> = (0..self.characters.len()).collect();
        let change = Change::RemoveOrigin {
            source: msg.source.clone(),
            origin: msg.origin.clone(),
        };
        let subject = Subject::of(&change);
        let names = self.names(&targets);
        let op = Op::of(&change, names, None);
        let made = self.store_then_make(targets, vec![op], change, Undo::default());
        let events = self.events.clone();
        Box::pin(async move {
            let report = match made.await {
                Ok(report) => report,
                Err(failure) => {
                    // Its tools stay; calls that cannot connect lead here again.
                    tracing::warn!(
                        source = %msg.source,
                        origin = %msg.origin,
                        "the tools of a dead plugin callback origin were not removed: the state \
                         store could not keep the removal: {failure}"
                    );
                    return ChangeReport::default();
                }
            };
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
        let (report, _) = self.replace_source(msg, Credential::InProcess, None);
        // Logged where it failed: a replacement the store could not keep was not made.
        Box::pin(async move { report.await.unwrap_or_default() })
    }
}

impl Handler<McpListing> for Router {
    type Result = ResponseFuture<SourceReplaced>;

    fn handle(&mut self, msg: McpListing, _: &mut Self::Context) -> Self::Result {
        let who = Credential::Plugin(msg.token);
        let (report, refused) = self.replace_source(msg.replace, who, msg.record);
        Box::pin(async move {
            let (report, not_stored) = match report.await {
                Ok(report) => (report, None),
                Err(RouterError::NotStored(why)) => (ChangeReport::default(), Some(why)),
                Err(e) => (ChangeReport::default(), Some(e.to_string())),
            };
            SourceReplaced {
                report,
                refused,
                not_stored,
            }
        })
    }
}

impl Router {
    /// Makes `msg.tools` the tools of `msg.source` for `who`: a tool whose name another
    /// source's tool holds in a target, when that source is bound to another token, is left
    /// out (returned with why: the ownership rule, as for a registration); the restored tools
    /// of a runtime MCP server of that source (its last listing, dormant) are replaced.
    /// `record`'s ops are stored in the same commit.
    fn replace_source(
        &mut self,
        msg: ReplaceSource,
        who: Credential,
        record: Option<ListingRecord>,
    ) -> (Routed, Vec<(String, OwnershipError)>) {
        let mut unknown = Vec::new();
        let targets: Vec<usize> = match &msg.roles {
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
        let names = self.names(&targets);
        let mut refused = Vec::new();
        let mut tools: Vec<SharedTool> = Vec::with_capacity(msg.tools.len());
        for tool in msg.tools {
            let mut holders = self.holders(&targets, &tool.name);
            holders.extend(self.dormant_named(&names, &tool.name));
            let others = holders.iter().filter(|s| **s != msg.source);
            let touched: Vec<&str> = others.map(String::as_str).collect();
            if touched.is_empty() {
                tools.push(Arc::new(tool));
                continue;
            }
            match self.owners.authorize(who, touched, None) {
                Ok(_) => tools.push(Arc::new(tool)),
                Err(e) => refused.push((tool.name, e)),
            }
        }
        let mut dormant = Vec::new();
        if msg.owner.is_some() {
            dormant.extend(self.dormant.take_mcp(&as_strs(&names), &msg.source));
        }
        for tool in &tools {
            dormant.extend(self.dormant.take_named(&as_strs(&names), &tool.name));
        }
        let registered: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
        let change = Change::ReplaceSource {
            source: msg.source,
            tools: tools.into(),
            owner: msg.owner,
        };
        let mut ops = vec![Op::of(&change, names, None)];
        ops.extend(record.map(|record| record(&registered)).unwrap_or_default());
        let subject = Subject::of(&change);
        let undo = Undo {
            dormant,
            ..Undo::default()
        };
        let report = self.route_to(targets, unknown, change, ops, subject, undo);
        (report, refused)
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
