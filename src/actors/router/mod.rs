//! `Router`: the front door for every user — HTTP handlers, in-process plugins and benchmarks.
//!
//! It holds what routing needs and nothing more: the characters in configuration order, each
//! with its [`SessionManager`]'s address and incarnation, the cell that manager publishes the
//! character's tools to, and the changes sent to it that its published snapshot does not show
//! yet. The managers own the tools; the router never changes them. Its files, one per
//! responsibility:
//!
//! - [`routing`]: register / unregister / clear / dead-origin removal / an MCP source's
//!   replacement, numbered per character and fanned out to the target managers, each request
//!   announced as one `tools.changed` event once its answers are in (a clear of every character
//!   then told to the clear watcher);
//! - [`gather`]: the managers' answers gathered against one deadline into `affected_roles` and
//!   `failed_roles`;
//! - [`lifecycle`]: adding, removing and rebuilding characters, and restarting a manager that
//!   died from its last snapshot plus the changes that snapshot lacks;
//! - [`sessions`]: relays, in-process sessions and attachments joined to a character's
//!   manager, and all of them closed when the server stops;
//! - [`reads`] and [`directory`]: listings and lookups, read from the published snapshots;
//! - [`dormancy`]: the tools restored from the state store, given to the models when they wake
//!   (a bound source's once its owner's token is seen again, then its callback answers HTTP),
//!   removed when they never do; a wake and the operator's unbinding of a source;
//! - [`commit`]: with a state store, each change stored first and made after (or undone, not
//!   made, when its commit failed), in routing order: a tool change, a restored tool's waking,
//!   the operator's unbinding;
//! - [`faults`]: fault injection for the containment tests.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use super::manager::{ManagerGone, SessionManager, Watcher};
use crate::actors::settings::CharacterSettings;
use crate::chat::ChatEndpoint;
use crate::dispatch::Dispatcher;
use crate::dispatch::settings::DispatchSettings;
use crate::domain::budget::Budget;
use crate::domain::dormant::{Dormant, DormantTool};
use crate::domain::failures::SharedFailures;
use crate::domain::ownership::{OwnershipError, SharedOwners, UnbindError};
use crate::domain::registry::{Change, ToolRegistry};
use crate::domain::role::RoleName;
use crate::domain::snapshot::ToolCell;
use crate::domain::tool::SharedTool;
use crate::events::EventHub;
use crate::policy::Policy;
use crate::session::settings::{SessionProtocol, SessionSettings};
use crate::state::StateStore;

mod commit;
mod context;
mod directory;
mod dormancy;
mod faults;
mod gather;
mod lifecycle;
mod reads;
mod routing;
mod sessions;

pub(crate) use context::AddContextTo;
pub(crate) use directory::{ChatTarget, Directory};
pub use directory::{ResolvedTool, RoleTools};
pub(crate) use dormancy::SourceMayWake;
pub(crate) use dormancy::{UnbindSource, WakeSource, WatchWakes};
pub use faults::{InjectManagerPanic, InjectRouterStop};
pub use lifecycle::{AddCharacter, RebuildCharacter, RemoveCharacter};
pub(crate) use reads::ShareDirectory;
pub use reads::{ListCharacters, ListSessions, ListTools, ResolveTool};
pub(crate) use routing::{
    ChangeRequest, ListingRecord, McpListing, PluginChange, RemoveDeadOrigin, SourceCleared,
    SourceReplaced, WatchClears,
};
pub use routing::{ClearSource, RegisterTool, ReplaceSource, UnregisterTool};
pub(crate) use sessions::ResolveRelay;
pub use sessions::{AttachCall, CloseAllConnections, DetachCall, JoinSession};

/// How long the router waits for a manager that has no live session to sync. Managers answer
/// at once unless they wait on a session, so this only catches a stuck or overloaded actor.
pub(crate) const MANAGER_REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Extra time a manager with a session gets beyond its session's sync timeout, so the session's
/// own, more precise timeout is the one that reports.
pub(crate) const SYNC_REPLY_MARGIN: Duration = Duration::from_secs(1);

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
    /// The character's session speaks another protocol than the relay asked for.
    #[error("{}", other_protocol_text(character, protocol, *relay))]
    OtherProtocol {
        character: String,
        protocol: &'static str,
        relay: SessionProtocol,
    },
    #[error("{}", character_required_text(.0))]
    CharacterRequired(Vec<String>),
    #[error("the session manager of {0} is not running; retry")]
    ManagerUnavailable(String),
    /// A call or lookup named a tool that is not registered; the text lists those that are.
    #[error("{0}")]
    ToolNotFound(String),
    /// The server is stopping: its relays and attachments were closed, and no new one joins.
    #[error("the server is stopping: no new relay, attachment or session is joined")]
    Stopping,
    /// A chat request named no character, or one without `[character.chat]`.
    #[error("{0}")]
    NoChat(String),
    /// The character's configuration does not let this attach happen: `field` of the request
    /// is at fault.
    #[error("{reason}")]
    AttachRefused { field: &'static str, reason: String },
    /// The character is attached to as many calls as its configuration allows.
    #[error(
        "{character} is attached to {max} calls already, the most its configuration allows \
         ([character.session] max_attachments); detach one first"
    )]
    TooManyAttachments { character: String, max: usize },
    /// A plugin's change was refused by the ownership rule (`X-Plugin-Token`); nothing changed.
    #[error(transparent)]
    Ownership(#[from] OwnershipError),
    /// A wake named a source with no tool and no binding.
    #[error("unknown source: {0} (no tool and no binding)")]
    UnknownSource(String),
    /// The operator's unbinding of a source was refused.
    #[error(transparent)]
    Unbind(#[from] UnbindError),
    /// The state store could not keep the change, so it was not made.
    #[error(
        "the change could not be stored in the state file, so it was not made; try again once \
         the state file can be written: {0}"
    )]
    NotStored(String),
}

fn other_protocol_text(character: &str, protocol: &str, relay: SessionProtocol) -> String {
    let (route, serves) = match relay {
        SessionProtocol::OpenaiRealtime => ("GET /v1/realtime", "openai-realtime"),
        SessionProtocol::GeminiLive => ("the Gemini Live relay", "gemini-live"),
    };
    format!("character {character}'s session is {protocol}: {route} serves {serves} sessions only")
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

struct Character {
    name: RoleName,
    session: Option<SessionSettings>,
    /// Its text chat endpoint, if it has `[character.chat]`; kept across manager restarts.
    chat: Option<Arc<ChatEndpoint>>,
    manager: Addr<SessionManager>,
    /// Incarnation of `manager`; a [`ManagerGone`] for an older one is stale.
    generation: u64,
    /// Where the manager publishes the character's tools.
    tools: ToolCell,
    /// `[character.tools]`: how many of them one session (a live one, a chat request, an MCP
    /// session) is offered.
    budget: Arc<Budget>,
    /// The number the next change to this character gets.
    next_change: u64,
    /// Changes sent to the manager, numbered, that its published snapshot may not include yet:
    /// what a restarted manager must apply, in order, on top of that snapshot.
    unconfirmed: VecDeque<(u64, Arc<Change>)>,
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

    /// Forgets the changes the published snapshot includes.
    fn forget_confirmed(&mut self) {
        let applied = self.tools.load().applied();
        while self
            .unconfirmed
            .front()
            .is_some_and(|(number, _)| *number <= applied)
        {
            self.unconfirmed.pop_front();
        }
    }
}

pub struct Router {
    /// The characters, in configuration order.
    characters: Vec<Character>,
    /// The read side: the characters' names and cells, in the same order.
    directory: Directory,
    dispatcher: Dispatcher,
    /// The failure counts of the dispatcher, swept after changes that remove tools.
    failures: SharedFailures,
    /// Where each change request is announced (`tools.changed`), and what sessions announce on.
    events: EventHub,
    /// What the sessions' calls pass before they run: given to every manager, and the
    /// characters' approval rules set on it.
    policy: Policy,
    /// This router, as managers' watcher.
    me: Recipient<ManagerGone>,
    next_generation: u64,
    /// Set by [`CloseAllConnections`]: from then on no session joins a character, so none
    /// opens after the ones the stop closed.
    stopping: bool,
    /// Told about each clear of every character ([`WatchClears`]).
    clear_watcher: Option<Recipient<SourceCleared>>,
    /// Which sources are bound to a plugin's token: every plugin's change passes it.
    owners: SharedOwners,
    /// Where each change goes, in routing order, to be durable before it is answered
    /// (`--state`); `None`: nothing survives a restart.
    store: Option<StateStore>,
    /// Restored tools no model is given until they wake.
    dormant: Dormant,
    /// With a store: the changes decided and handed to it, made once their commit is durable.
    commits: commit::Commits,
    /// This router, as the store's commits' listener.
    committed: Recipient<commit::Committed>,
    /// Told whenever a source's restored tools may wake ([`WatchWakes`]).
    wake_watcher: Option<Recipient<SourceMayWake>>,
    /// The timer that removes the next dormant tool whose time is up.
    expiry_timer: Option<SpawnHandle>,
}

/// What a router keeps beyond its characters: the sources' owners (shared with the MCP
/// registry and the progress route), the state store, and the tools it restored from it.
#[derive(Debug, Default)]
pub(crate) struct Keeping {
    pub owners: SharedOwners,
    pub store: Option<StateStore>,
    /// Restored tools, dormant until they wake.
    pub dormant: Vec<DormantTool>,
    /// How long a restored tool stays dormant before it is removed.
    pub dormant_ttl: Duration,
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
        let policy = Policy::new(events.clone());
        Self::launch_keeping(characters, dispatch, events, policy, Keeping::default())
    }

    /// [`Router::launch`], with the server's call policy (shared with the HTTP handlers) and
    /// what the server keeps across restarts.
    pub(crate) fn launch_keeping(
        characters: Vec<CharacterSettings>,
        dispatch: &DispatchSettings,
        events: EventHub,
        policy: Policy,
        keeping: Keeping,
    ) -> (Addr<Self>, Dispatcher) {
        let mut shared = None;
        let router = Router::create(|ctx| {
            // HTTP handlers on every worker send here; backpressure comes from the HTTP
            // connection limit, and an unbounded mailbox keeps each sender's order.
            ctx.set_mailbox_capacity(0);
            let failures = SharedFailures::default();
            let removals = Arc::new(ctx.address().recipient::<RemoveDeadOrigin>());
            let dispatcher = Dispatcher::new(
                dispatch,
                failures.clone(),
                removals,
                events.observer().clone(),
            );
            shared = Some(dispatcher.clone());
            let mut router = Router {
                characters: Vec::with_capacity(characters.len()),
                directory: Directory::default(),
                dispatcher,
                failures,
                events,
                policy,
                me: ctx.address().recipient(),
                next_generation: 0,
                stopping: false,
                clear_watcher: None,
                owners: keeping.owners,
                store: keeping.store,
                dormant: Dormant::new(keeping.dormant, keeping.dormant_ttl),
                commits: commit::Commits::default(),
                committed: ctx.address().recipient(),
                wake_watcher: None,
                expiry_timer: None,
            };
            for c in characters {
                router.policy.set_approval_rules(&c.name, c.approval_always);
                let chat = c.chat.and_then(|chat| match ChatEndpoint::new(chat) {
                    Ok(endpoint) => Some(Arc::new(endpoint)),
                    // Start-up checked the key already; a variable unset since is reported.
                    Err(e) => {
                        tracing::error!(character = %c.name, "the character's chat is off: {e:#}");
                        None
                    }
                });
                router.push_character(c.name, c.session, chat, c.tools);
            }
            router
        });
        let dispatcher = shared.expect("the router's factory ran");
        (router, dispatcher)
    }

    /// Tells readers which characters exist now, in order.
    fn publish_roster(&self) {
        self.directory.publish(
            self.characters
                .iter()
                .map(|c| directory::Listed {
                    character: c.name.to_string(),
                    tools: c.tools.clone(),
                    chat: c.chat.clone(),
                    budget: c.budget.clone(),
                    dormant: self.dormant.of(&c.name).into(),
                })
                .collect(),
        );
    }

    /// Starts a manager that takes over `tools` with `replay` applied on top.
    fn start_manager<'a>(
        &mut self,
        name: &str,
        session: &Option<SessionSettings>,
        budget: &Arc<Budget>,
        tools: &ToolCell,
        replay: impl IntoIterator<Item = (u64, &'a Arc<Change>)>,
    ) -> (Addr<SessionManager>, u64) {
        self.next_generation += 1;
        let watcher = Watcher {
            recipient: self.me.clone(),
            generation: self.next_generation,
        };
        let manager = SessionManager::launch(
            name.to_owned(),
            tools.clone(),
            replay,
            session.clone(),
            budget.clone(),
            self.dispatcher.clone(),
            self.events.clone(),
            self.policy.clone(),
            Some(watcher),
        );
        (manager, self.next_generation)
    }

    /// Replaces character `i`'s manager with a new one that starts from the character's last
    /// snapshot and applies, in order, every change sent before that the snapshot lacks —
    /// before any later change reaches it.
    fn restart_manager(&mut self, i: usize) {
        self.characters[i].forget_confirmed();
        let c = &self.characters[i];
        let (name, session, tools) = (c.name.clone(), c.session.clone(), c.tools.clone());
        let budget = c.budget.clone();
        let replay: Vec<(u64, Arc<Change>)> = c.unconfirmed.iter().cloned().collect();
        let (manager, generation) = self.start_manager(
            &name,
            &session,
            &budget,
            &tools,
            replay.iter().map(|(n, c)| (*n, c)),
        );
        let c = &mut self.characters[i];
        c.manager = manager;
        c.generation = generation;
        // The new manager published all of them before `launch` returned.
        c.unconfirmed.clear();
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

    /// The tool named `name` that character `i` holds once every change sent to its manager,
    /// and every change waiting for its commit, is applied: its published snapshot's, with the
    /// changes that snapshot lacks applied, in order, to that one entry (a change's effect on a
    /// name depends on that name's entry alone).
    fn current_tool(&self, i: usize, name: &str) -> Option<SharedTool> {
        let character = &self.characters[i];
        let snapshot = character.tools.load();
        let applied = snapshot.applied();
        let mut waiting = self.commits.waiting_for(&character.name).peekable();
        if character
            .unconfirmed
            .back()
            .is_none_or(|(n, _)| *n <= applied)
            && waiting.peek().is_none()
        {
            return snapshot.registry().get(name).cloned();
        }
        let mut one = ToolRegistry::new();
        if let Some(tool) = snapshot.registry().get(name) {
            one.apply(&Change::Register(tool.clone()));
        }
        for (number, change) in &character.unconfirmed {
            if *number > applied {
                one.apply(change);
            }
        }
        for change in waiting {
            one.apply(change);
        }
        one.get(name).cloned()
    }

    /// The sources of the tools named `name` that `targets` hold, each once.
    fn holders(&self, targets: &[usize], name: &str) -> Vec<String> {
        let mut sources: Vec<String> = Vec::new();
        for &i in targets {
            if let Some(tool) = self.current_tool(i, name)
                && !sources.contains(&tool.source)
            {
                sources.push(tool.source.clone());
            }
        }
        sources
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.characters.iter().position(|c| c.name == name)
    }
}

impl Actor for Router {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.watch_dormant(ctx);
    }
}
