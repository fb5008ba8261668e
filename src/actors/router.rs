//! `Router`: the front door for every user — HTTP handlers, in-process plugins and benchmarks.
//!
//! It holds the characters in configuration order, each with its [`SessionManager`], and is the
//! only writer of their ledgers (the [`Directory`]: the tools that apply to each character).
//! Changes fan out to the target managers and their per-character outcomes are gathered into
//! `affected_roles` and `failed_roles`. A ledger is what a rebuilt (or restarted) manager gets
//! back, so no registration is lost with a manager.

use std::time::Duration;

use std::future::Future;
use std::task::Poll;

use actix::prelude::*;
use futures_util::future::join_all;
use serde::Serialize;
use tokio::sync::oneshot;

use super::directory::{Directory, Ledger};
use super::manager::{
    AddSession, ApplyChange, Change, ChangeOutcome, InjectPanic, JoinCall, LeaveCall, ManagerGone,
    ReportSession, SessionManager, Watcher,
};
use crate::config::{CharacterSettings, DispatchSettings};
use crate::dispatch::Dispatcher;
use crate::domain::callback_url::CallbackOrigin;
use crate::domain::registry::ToolRegistry;
use crate::domain::tool::{SharedTool, ToolSpec};
use crate::events::{ChangeOp, EventHub, ToolsChanged};
use crate::session::attach::Joined;
use crate::session::settings::SessionSettings;
use crate::session::{SessionHandle, SessionReport};

/// How long the router waits for a manager that has no live session to sync. Managers answer
/// at once unless they wait on a session, so this only catches a stuck or overloaded actor.
pub const MANAGER_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Extra time a manager with a session gets beyond its session's sync timeout, so the session's
/// own, more precise timeout is the one that reports.
pub const SYNC_REPLY_MARGIN: Duration = Duration::from_secs(1);

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
}

/// The tools of one character or of every character, in configuration order.
#[derive(Message, Debug)]
#[rtype(result = "Result<Vec<RoleTools>, RouterError>")]
pub struct ListTools {
    pub role: Option<String>,
}

/// Find the tool a call names: in `role`, or (for `None`) in the first character, in
/// configuration order, that has it.
#[derive(Message, Debug)]
#[rtype(result = "Result<ResolvedTool, RouterError>")]
pub struct ResolveTool {
    pub name: String,
    pub role: Option<String>,
}

/// Add a character. It starts with no tools: earlier global registrations applied only to the
/// characters that existed then.
#[derive(Message, Debug)]
#[rtype(result = "Result<(), RouterError>")]
pub struct AddCharacter {
    pub name: String,
    /// Its live model session, if it has one.
    pub session: Option<SessionSettings>,
}

/// Remove a character and forget its tools.
#[derive(Message, Debug)]
#[rtype(result = "Result<(), RouterError>")]
pub struct RemoveCharacter {
    pub name: String,
}

/// Replace a character's manager with a new one that gets back every tool that applied to it.
#[derive(Message, Debug)]
#[rtype(result = "Result<(), RouterError>")]
pub struct RebuildCharacter {
    pub name: String,
    /// The character's session settings from now on (`None`: no session).
    pub session: Option<SessionSettings>,
}

/// Fault injection for tests of panic containment: makes a character's manager panic.
#[doc(hidden)]
#[derive(Message, Debug)]
#[rtype(result = "Result<(), RouterError>")]
pub struct InjectManagerPanic {
    pub role: String,
}

/// Fault injection for tests of the 503 path: stops the router, as a panic in it would.
#[doc(hidden)]
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct InjectRouterStop;

/// Each character's model-session state, in configuration order.
#[derive(Message, Debug)]
#[rtype(result = "Vec<(String, SessionReport)>")]
pub struct ListSessions;

/// A read handle on every character's ledger, for callers that resolve tools on their own
/// thread (the invoke route) instead of asking the router each time.
#[derive(Message, Debug)]
#[rtype(result = "Directory")]
pub struct ShareDirectory;

/// The characters, in configuration order.
#[derive(Message, Debug)]
#[rtype(result = "Vec<String>")]
pub struct ListCharacters;

/// The character an app's relay serves and how its model is reached: `character`, or (for
/// `None`) the only character that has a session.
#[derive(Message, Debug)]
#[rtype(result = "Result<RelayTarget, RouterError>")]
pub struct ResolveRelay {
    pub character: Option<String>,
}

/// Make `session` one of `role`'s active sessions (a relay, or an application's in-process
/// session): from now on every change to the character's tools is sent to it and waits for
/// it. It gets the current tool list at once, before this is answered. It stays until it
/// stops.
#[derive(Message, Debug)]
#[rtype(result = "Result<(), RouterError>")]
pub struct JoinSession {
    pub role: String,
    pub session: SessionHandle,
}

/// Join the live call at `url` for `role`; see [`Joined`].
#[derive(Message, Debug)]
#[rtype(result = "Result<Joined, RouterError>")]
pub struct AttachCall {
    pub role: String,
    pub url: String,
    /// Sent as `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
}

/// Leave the live call at `url` that `role` joined; `true` if it had.
#[derive(Message, Debug)]
#[rtype(result = "Result<bool, RouterError>")]
pub struct DetachCall {
    pub role: String,
    pub url: String,
}

/// Where a relay goes.
#[derive(Debug, Clone)]
pub struct RelayTarget {
    pub character: String,
    pub settings: SessionSettings,
}

/// Per-character outcome of a change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ChangeReport {
    /// Characters whose tools changed and whose session took the new list.
    pub affected_roles: Vec<String>,
    /// Characters that could not take the change (or its sync), and why.
    pub failed_roles: Vec<RoleFailure>,
    /// Registry entries removed, summed over characters (unregister, clear, auto-removal).
    pub removed: usize,
}

/// A character that could not take a change, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RoleFailure {
    pub role: String,
    pub error: String,
}

#[derive(Debug, Clone)]
pub struct RoleTools {
    pub role: String,
    pub tools: Vec<SharedTool>,
}

#[derive(Debug, Clone)]
pub struct ResolvedTool {
    pub role: String,
    pub tool: SharedTool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouterError {
    #[error("unknown role: {0}")]
    UnknownRole(String),
    #[error("character already exists: {0}")]
    DuplicateCharacter(String),
    #[error("session of character {character}: {reason}")]
    InvalidSession { character: String, reason: String },
    #[error("character {0} has no [character.session]: a relay needs its model's URL")]
    NoSession(String),
    #[error("{}", character_required_text(.0))]
    CharacterRequired(Vec<String>),
    #[error("the session manager of {0} is not running; retry")]
    ManagerUnavailable(String),
    #[error("{}", not_registered_text(name, role.as_deref(), available))]
    ToolNotFound {
        name: String,
        role: Option<String>,
        available: Vec<String>,
    },
}

fn character_required_text(with_sessions: &[String]) -> String {
    if with_sessions.is_empty() {
        "no character has a [character.session]: a relay needs its model's URL".to_owned()
    } else {
        format!(
            "more than one character has a session ({}): name one with ?character=NAME",
            with_sessions.join(", ")
        )
    }
}

fn not_registered_text(name: &str, role: Option<&str>, available: &[String]) -> String {
    let scope = match role {
        Some(role) => format!(" for role {role}"),
        None => String::new(),
    };
    let names = if available.is_empty() {
        "none".to_owned()
    } else {
        available.join(", ")
    };
    format!("tool '{name}' is not registered{scope}; available tools: {names}")
}

struct Character {
    name: String,
    session: Option<SessionSettings>,
    manager: Addr<SessionManager>,
    /// Incarnation of `manager`; a [`ManagerGone`] for an older one is stale.
    generation: u64,
}

impl Character {
    /// How long to wait for this character's manager to take a change (and its session to
    /// acknowledge it).
    fn reply_timeout(&self) -> Duration {
        match &self.session {
            Some(s) => s.sync_timeout + SYNC_REPLY_MARGIN,
            None => MANAGER_REPLY_TIMEOUT,
        }
    }
}

pub struct Router {
    /// The characters, in configuration order; `directory` holds their ledgers at the same
    /// positions.
    characters: Vec<Character>,
    /// Every tool that applies to each character, last writer wins: what a rebuilt manager
    /// starts from, and what listings and lookups read.
    directory: Directory,
    dispatcher: Dispatcher,
    /// Where each change request is announced (`tools.changed`), and what sessions announce on.
    events: EventHub,
    /// This router, as managers' watcher.
    me: Recipient<ManagerGone>,
    next_generation: u64,
}

impl Router {
    /// Starts the router, one manager (and session) per character, and the dispatcher that
    /// runs tool calls and reports dead plugin origins back to this router. Changes, sessions and
    /// their calls are announced on `events`.
    pub fn launch(
        characters: Vec<CharacterSettings>,
        dispatch: &DispatchSettings,
        events: EventHub,
    ) -> (Addr<Self>, Dispatcher) {
        let mut shared = None;
        let router = Router::create(|ctx| {
            // HTTP handlers on every worker send here; backpressure comes from the HTTP
            // connection limit, and an unbounded mailbox keeps each sender's order.
            ctx.set_mailbox_capacity(0);
            let dispatcher = Dispatcher::new(dispatch, ctx.address().recipient());
            shared = Some(dispatcher.clone());
            let mut router = Router {
                characters: Vec::with_capacity(characters.len()),
                directory: Directory::new(),
                dispatcher,
                events,
                me: ctx.address().recipient(),
                next_generation: 0,
            };
            for c in characters {
                router.push_character(c.name, c.session);
            }
            router
        });
        let dispatcher = shared.expect("the router's factory ran");
        (router, dispatcher)
    }

    fn push_character(&mut self, name: String, session: Option<SessionSettings>) {
        let (manager, generation) = self.start_manager(&name, session.clone(), ToolRegistry::new());
        self.characters.push(Character {
            name,
            session,
            manager,
            generation,
        });
        self.directory.write().push(Ledger {
            character: self
                .characters
                .last()
                .map(|c| c.name.clone())
                .unwrap_or_default(),
            tools: ToolRegistry::new(),
        });
    }

    fn start_manager(
        &mut self,
        name: &str,
        session: Option<SessionSettings>,
        tools: ToolRegistry,
    ) -> (Addr<SessionManager>, u64) {
        self.next_generation += 1;
        let watcher = Watcher {
            recipient: self.me.clone(),
            generation: self.next_generation,
        };
        let manager = SessionManager::launch(
            name.to_owned(),
            tools,
            session,
            self.dispatcher.clone(),
            self.events.clone(),
            Some(watcher),
        );
        (manager, self.next_generation)
    }

    /// Indices of the characters a request targets; `None` and `""` mean all of them.
    fn targets(&self, role: Option<&str>) -> Result<Vec<usize>, RouterError> {
        match role.filter(|r| !r.is_empty()) {
            None => Ok((0..self.characters.len()).collect()),
            Some(role) => self
                .position(role)
                .map(|i| vec![i])
                .ok_or_else(|| RouterError::UnknownRole(role.to_owned())),
        }
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.characters.iter().position(|c| c.name == name)
    }

    /// Applies `change` to the ledgers of `targets` and sends it to their managers; the future
    /// gathers the outcomes. `removed` counts what the ledgers dropped, so it is exact even when
    /// a manager is gone.
    fn fan_out(&mut self, targets: Vec<usize>, change: Change) -> ResponseFuture<ChangeReport> {
        let mut removed = 0;
        let mut pending = Vec::with_capacity(targets.len());
        // One deadline for the whole fan-out: the longest any target may take.
        let mut wait = Duration::ZERO;
        let mut changed_targets = Vec::with_capacity(targets.len());
        {
            let mut ledgers = self.directory.write();
            for i in targets {
                let ledger = &mut ledgers[i].tools;
                let dropped = match &change {
                    Change::Register(tool) => {
                        ledger.insert(tool.clone());
                        0
                    }
                    Change::Unregister(name) => usize::from(ledger.remove(name).is_some()),
                    Change::ClearSource(source) => ledger.remove_source(source),
                    Change::RemoveOrigin { source, origin } => ledger.remove_origin(source, origin),
                    Change::ReplaceSource { source, tools } => ledger.replace_source(source, tools),
                };
                removed += dropped;
                let adds = match &change {
                    Change::Register(_) => true,
                    Change::ReplaceSource { tools, .. } => !tools.is_empty(),
                    _ => false,
                };
                if adds || dropped > 0 {
                    changed_targets.push(i);
                }
            }
        }
        for i in changed_targets {
            let character = &self.characters[i];
            let role = character.name.clone();
            if !character.manager.connected() {
                // The manager died (a panic): report it, then bring it back with its tools.
                tracing::warn!(character = %role, "session manager had stopped; restarting it with its tools");
                self.restart_manager(i);
                let error = "session manager had stopped; it was restarted with its tools";
                pending.push((role, Reply::Done(Err(error.to_owned()))));
                continue;
            }
            wait = wait.max(character.reply_timeout());
            let (reply, outcome) = oneshot::channel();
            character.manager.do_send(ApplyChange {
                change: change.clone(),
                reply,
            });
            pending.push((role, Reply::Waiting(outcome)));
        }
        let deadline = tokio::time::Instant::now() + wait;
        Box::pin(async move {
            gather(&mut pending, deadline, wait).await;
            let mut report = ChangeReport {
                removed,
                ..ChangeReport::default()
            };
            for (role, reply) in pending {
                match reply {
                    Reply::Done(Ok(())) => report.affected_roles.push(role),
                    Reply::Done(Err(error)) => {
                        report.failed_roles.push(RoleFailure { role, error })
                    }
                    Reply::Waiting(_) => unreachable!("gather settles every reply"),
                }
            }
            report
        })
    }

    /// Replaces character `i`'s manager with a new one holding its ledger.
    fn restart_manager(&mut self, i: usize) {
        let c = &self.characters[i];
        let (name, session) = (c.name.clone(), c.session.clone());
        let ledger = self.directory.read()[i].tools.clone();
        let (manager, generation) = self.start_manager(&name, session, ledger);
        let c = &mut self.characters[i];
        c.manager = manager;
        c.generation = generation;
    }
}

impl Actor for Router {
    type Context = Context<Self>;
}

impl Handler<RegisterTool> for Router {
    type Result = ResponseFuture<Result<ChangeReport, RouterError>>;

    fn handle(&mut self, msg: RegisterTool, _: &mut Self::Context) -> Self::Result {
        let targets = match self.targets(msg.role.as_deref()) {
            Ok(targets) => targets,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let name = msg.tool.name.clone();
        let source = msg.tool.source.clone();
        let report = self.fan_out(targets, Change::Register(std::sync::Arc::new(msg.tool)));
        let events = self.events.clone();
        Box::pin(async move {
            let report = report.await;
            log_change("register", &name, &source, &report);
            announce(
                &events,
                ChangeOp::Register,
                Some(&name),
                Some(&source),
                &report,
            );
            Ok(report)
        })
    }
}

impl Handler<UnregisterTool> for Router {
    type Result = ResponseFuture<Result<ChangeReport, RouterError>>;

    fn handle(&mut self, msg: UnregisterTool, _: &mut Self::Context) -> Self::Result {
        let targets = match self.targets(msg.role.as_deref()) {
            Ok(targets) => targets,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let report = self.fan_out(targets, Change::Unregister(msg.name.clone()));
        let events = self.events.clone();
        Box::pin(async move {
            let report = report.await;
            log_change("unregister", &msg.name, "", &report);
            announce(
                &events,
                ChangeOp::Unregister,
                Some(&msg.name),
                None,
                &report,
            );
            Ok(report)
        })
    }
}

impl Handler<ClearSource> for Router {
    type Result = ResponseFuture<Result<ChangeReport, RouterError>>;

    fn handle(&mut self, msg: ClearSource, _: &mut Self::Context) -> Self::Result {
        let targets = match self.targets(msg.role.as_deref()) {
            Ok(targets) => targets,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        let report = self.fan_out(targets, Change::ClearSource(msg.source.clone()));
        let events = self.events.clone();
        Box::pin(async move {
            let report = report.await;
            log_change("clear", "", &msg.source, &report);
            announce(&events, ChangeOp::Clear, None, Some(&msg.source), &report);
            Ok(report)
        })
    }
}

impl Handler<RemoveDeadOrigin> for Router {
    type Result = ResponseFuture<ChangeReport>;

    fn handle(&mut self, msg: RemoveDeadOrigin, _: &mut Self::Context) -> Self::Result {
        let targets = (0..self.characters.len()).collect();
        let report = self.fan_out(
            targets,
            Change::RemoveOrigin {
                source: msg.source.clone(),
                origin: msg.origin.clone(),
            },
        );
        let events = self.events.clone();
        Box::pin(async move {
            let report = report.await;
            // Concurrent calls to a dead plugin can each reach the threshold; only the removal
            // that found tools to remove is worth a warning (and an event).
            if report.removed == 0 {
                tracing::debug!(source = %msg.source, origin = %msg.origin, "dead plugin origin already removed");
                return report;
            }
            announce(
                &events,
                ChangeOp::AutoRemoved,
                None,
                Some(&msg.source),
                &report,
            );
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
                            error: RouterError::UnknownRole(role.clone()).to_string(),
                        });
                    }
                    found
                })
                .collect(),
        };
        let tools: std::sync::Arc<[SharedTool]> =
            msg.tools.into_iter().map(std::sync::Arc::new).collect();
        let report = self.fan_out(
            targets,
            Change::ReplaceSource {
                source: msg.source.clone(),
                tools,
            },
        );
        let events = self.events.clone();
        Box::pin(async move {
            let mut report = report.await;
            report.failed_roles.extend(unknown);
            log_change("mcp", "", &msg.source, &report);
            announce(&events, ChangeOp::Mcp, None, Some(&msg.source), &report);
            report
        })
    }
}

impl Handler<ListTools> for Router {
    type Result = Result<Vec<RoleTools>, RouterError>;

    /// Answered from the ledgers, which hold exactly what each manager was told, in the same
    /// order: no manager round trip, and a busy or restarting manager never blocks a listing.
    fn handle(&mut self, msg: ListTools, _: &mut Self::Context) -> Self::Result {
        self.directory.list(msg.role.as_deref())
    }
}

impl Handler<ResolveTool> for Router {
    type Result = Result<ResolvedTool, RouterError>;

    /// Answered from the ledgers, like [`ListTools`].
    fn handle(&mut self, msg: ResolveTool, _: &mut Self::Context) -> Self::Result {
        self.directory.resolve(msg.role.as_deref(), &msg.name)
    }
}

impl Handler<ShareDirectory> for Router {
    type Result = MessageResult<ShareDirectory>;

    fn handle(&mut self, _: ShareDirectory, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.directory.clone())
    }
}

impl Handler<AddCharacter> for Router {
    type Result = Result<(), RouterError>;

    fn handle(&mut self, msg: AddCharacter, _: &mut Self::Context) -> Self::Result {
        if self.position(&msg.name).is_some() {
            return Err(RouterError::DuplicateCharacter(msg.name));
        }
        check_session(&msg.name, msg.session.as_ref())?;
        tracing::info!(character = %msg.name, session = msg.session.is_some(), "character added");
        self.push_character(msg.name, msg.session);
        Ok(())
    }
}

impl Handler<RemoveCharacter> for Router {
    type Result = Result<(), RouterError>;

    fn handle(&mut self, msg: RemoveCharacter, _: &mut Self::Context) -> Self::Result {
        let i = self
            .position(&msg.name)
            .ok_or_else(|| RouterError::UnknownRole(msg.name.clone()))?;
        // Dropping the last address stops the manager once its queued messages are handled.
        let removed = self.characters.remove(i);
        let forgotten = self.directory.write().remove(i);
        tracing::info!(character = %removed.name, forgotten_tools = forgotten.tools.len(), "character removed");
        Ok(())
    }
}

impl Handler<RebuildCharacter> for Router {
    type Result = Result<(), RouterError>;

    fn handle(&mut self, msg: RebuildCharacter, _: &mut Self::Context) -> Self::Result {
        let i = self
            .position(&msg.name)
            .ok_or_else(|| RouterError::UnknownRole(msg.name.clone()))?;
        check_session(&msg.name, msg.session.as_ref())?;
        tracing::info!(character = %msg.name, tools = self.directory.read()[i].tools.len(), "rebuilding session manager");
        self.characters[i].session = msg.session;
        self.restart_manager(i);
        Ok(())
    }
}

impl Handler<ManagerGone> for Router {
    type Result = ();

    /// A manager ended. When it is still the character's current one it died unexpectedly (a
    /// panic): bring it back at once with every tool that applies to the character.
    fn handle(&mut self, msg: ManagerGone, _: &mut Self::Context) {
        let Some(i) = self.position(&msg.character) else {
            return;
        };
        if self.characters[i].generation == msg.generation {
            tracing::warn!(character = %msg.character, tools = self.directory.read()[i].tools.len(), "session manager stopped unexpectedly; restarting it with its tools");
            self.restart_manager(i);
        }
    }
}

impl Handler<InjectManagerPanic> for Router {
    type Result = Result<(), RouterError>;

    fn handle(&mut self, msg: InjectManagerPanic, _: &mut Self::Context) -> Self::Result {
        let i = self
            .position(&msg.role)
            .ok_or(RouterError::UnknownRole(msg.role))?;
        self.characters[i].manager.do_send(InjectPanic);
        Ok(())
    }
}

impl Handler<InjectRouterStop> for Router {
    type Result = ();

    fn handle(&mut self, _: InjectRouterStop, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<ListSessions> for Router {
    type Result = ResponseFuture<Vec<(String, SessionReport)>>;

    fn handle(&mut self, _: ListSessions, _: &mut Self::Context) -> Self::Result {
        let reports: Vec<_> = self
            .characters
            .iter()
            .map(|c| {
                let role = c.name.clone();
                let reply = c.manager.send(ReportSession).timeout(MANAGER_REPLY_TIMEOUT);
                async move { (role, reply.await.unwrap_or_else(|_| SessionReport::none())) }
            })
            .collect();
        Box::pin(join_all(reports))
    }
}

impl Handler<ListCharacters> for Router {
    type Result = Vec<String>;

    fn handle(&mut self, _: ListCharacters, _: &mut Self::Context) -> Self::Result {
        self.characters.iter().map(|c| c.name.clone()).collect()
    }
}

impl Handler<ResolveRelay> for Router {
    type Result = Result<RelayTarget, RouterError>;

    fn handle(&mut self, msg: ResolveRelay, _: &mut Self::Context) -> Self::Result {
        let character = match msg.character.filter(|c| !c.is_empty()) {
            Some(name) => {
                let i = self
                    .position(&name)
                    .ok_or_else(|| RouterError::UnknownRole(name.clone()))?;
                &self.characters[i]
            }
            None => {
                let with: Vec<&Character> = self
                    .characters
                    .iter()
                    .filter(|c| c.session.is_some())
                    .collect();
                match with.as_slice() {
                    [only] => *only,
                    _ => {
                        return Err(RouterError::CharacterRequired(
                            with.iter().map(|c| c.name.clone()).collect(),
                        ));
                    }
                }
            }
        };
        let settings = character
            .session
            .clone()
            .ok_or_else(|| RouterError::NoSession(character.name.clone()))?;
        Ok(RelayTarget {
            character: character.name.clone(),
            settings,
        })
    }
}

impl Handler<JoinSession> for Router {
    type Result = ResponseFuture<Result<(), RouterError>>;

    fn handle(&mut self, msg: JoinSession, _: &mut Self::Context) -> Self::Result {
        let Some(i) = self.position(&msg.role) else {
            return Box::pin(async move { Err(RouterError::UnknownRole(msg.role)) });
        };
        let added = self.characters[i]
            .manager
            .send(AddSession(msg.session))
            .timeout(MANAGER_REPLY_TIMEOUT);
        Box::pin(async move {
            added
                .await
                .map_err(|_| RouterError::ManagerUnavailable(msg.role))
        })
    }
}

impl Handler<AttachCall> for Router {
    type Result = ResponseFuture<Result<Joined, RouterError>>;

    fn handle(&mut self, msg: AttachCall, _: &mut Self::Context) -> Self::Result {
        let Some(i) = self.position(&msg.role) else {
            return Box::pin(async move { Err(RouterError::UnknownRole(msg.role)) });
        };
        let character = &self.characters[i];
        // The manager bounds the handshake and the first tool update to this, less the margin.
        let wait = crate::session::shell::CONNECT_TIMEOUT + character.reply_timeout();
        let joined = character
            .manager
            .send(JoinCall {
                url: msg.url,
                api_key: msg.api_key,
            })
            .timeout(wait);
        Box::pin(async move {
            joined
                .await
                .map_err(|_| RouterError::ManagerUnavailable(msg.role))
        })
    }
}

impl Handler<DetachCall> for Router {
    type Result = ResponseFuture<Result<bool, RouterError>>;

    fn handle(&mut self, msg: DetachCall, _: &mut Self::Context) -> Self::Result {
        let Some(i) = self.position(&msg.role) else {
            return Box::pin(async move { Err(RouterError::UnknownRole(msg.role)) });
        };
        let left = self.characters[i]
            .manager
            .send(LeaveCall { url: msg.url })
            .timeout(MANAGER_REPLY_TIMEOUT);
        Box::pin(async move {
            left.await
                .map_err(|_| RouterError::ManagerUnavailable(msg.role))
        })
    }
}

/// Refuses session settings that cannot work, as start-up does: a named API-key variable that
/// is not set.
fn check_session(character: &str, session: Option<&SessionSettings>) -> Result<(), RouterError> {
    match session.map(SessionSettings::api_key) {
        Some(Err(e)) => Err(RouterError::InvalidSession {
            character: character.to_owned(),
            reason: format!("{e:#}"),
        }),
        _ => Ok(()),
    }
}

/// A manager's answer to a change: still awaited, or settled with its sync outcome.
enum Reply {
    Waiting(oneshot::Receiver<ChangeOutcome>),
    Done(Result<(), String>),
}

/// Waits for every reply, up to `deadline`; a manager that is gone or late is settled with the
/// reason. One timer serves the whole fan-out, and each wake-up polls only what is still open.
async fn gather(replies: &mut [(String, Reply)], deadline: tokio::time::Instant, wait: Duration) {
    let mut timer = std::pin::pin!(tokio::time::sleep_until(deadline));
    std::future::poll_fn(|cx| {
        let mut open = false;
        for (_, reply) in replies.iter_mut() {
            if let Reply::Waiting(rx) = reply {
                match std::pin::Pin::new(rx).poll(cx) {
                    Poll::Ready(Ok(outcome)) => *reply = Reply::Done(outcome.sync),
                    Poll::Ready(Err(_)) => {
                        *reply = Reply::Done(Err("session manager stopped before answering".into()))
                    }
                    Poll::Pending => open = true,
                }
            }
        }
        if !open {
            return Poll::Ready(());
        }
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        for (_, reply) in replies.iter_mut() {
            if matches!(reply, Reply::Waiting(_)) {
                *reply = Reply::Done(Err(format!(
                    "session manager did not answer within {} s",
                    wait.as_secs_f64()
                )));
            }
        }
        Poll::Ready(())
    })
    .await
}

/// The `tools.changed` event of one change request, for the roles its report names.
fn announce(
    events: &EventHub,
    op: ChangeOp,
    name: Option<&str>,
    source: Option<&str>,
    report: &ChangeReport,
) {
    let failed: Vec<&str> = report
        .failed_roles
        .iter()
        .map(|f| f.role.as_str())
        .collect();
    let change = ToolsChanged {
        op,
        name,
        source,
        affected_roles: &report.affected_roles,
        failed_roles: &report.failed_roles,
    };
    events.tools_changed(&change, &failed);
}

/// One info line per change request; never the tool's arguments or payloads.
fn log_change(route: &str, name: &str, source: &str, report: &ChangeReport) {
    let failed: Vec<&str> = report
        .failed_roles
        .iter()
        .map(|f| f.role.as_str())
        .collect();
    tracing::info!(
        route,
        name,
        source,
        removed = report.removed,
        affected_roles = ?report.affected_roles,
        failed_roles = ?failed,
        "tool change"
    );
    for failure in &report.failed_roles {
        tracing::warn!(route, role = %failure.role, error = %failure.error, "character did not take the change");
    }
}
