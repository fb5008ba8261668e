//! `SessionManager`: one actor per character. It owns that character's [`ToolRegistry`] and is
//! the one place a change to it is made and pushed to the character's live model session.
//!
//! Only the [`Router`](super::router::Router) talks to managers. Handlers change the registry
//! synchronously, in mailbox order (so changes to one character apply in the order they arrive),
//! and never await: waiting for the session's acknowledgement happens in the returned future.

use std::sync::Arc;

use actix::prelude::*;
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, ready};
use tokio::sync::oneshot;

use crate::dispatch::Dispatcher;
use crate::domain::callback_url::CallbackOrigin;
use crate::domain::registry::ToolRegistry;
use crate::domain::tool::SharedTool;
use crate::events::EventHub;
use crate::session::settings::SessionSettings;
use crate::session::{CloseSession, RealtimeSession, SessionReport, SessionStatus, SyncTools};

/// A change to one character's tools.
#[derive(Debug, Clone)]
pub enum Change {
    Register(SharedTool),
    Unregister(String),
    ClearSource(String),
    /// Auto-removal of a dead plugin origin.
    RemoveOrigin {
        source: String,
        origin: CallbackOrigin,
    },
    /// The tools of `source` become `tools` (an MCP server's listing).
    ReplaceSource {
        source: String,
        tools: Arc<[SharedTool]>,
    },
}

/// What a change did to one character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeOutcome {
    /// Tools removed (or replaced-and-gone for none: a register reports 0).
    pub removed: usize,
    /// Whether the registry changed at all.
    pub changed: bool,
    /// The session sync: `Err` says why the live session did not take the new list.
    pub sync: Result<(), String>,
}

/// Apply one change to this character's registry and sync its session; the outcome (sync
/// included) goes to `reply`. A reply channel instead of a response future lets the router send
/// to hundreds of managers with no task, timer or allocation per manager beyond the channel,
/// and wait for them all against one deadline.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ApplyChange {
    pub change: Change,
    pub reply: oneshot::Sender<ChangeOutcome>,
}

/// The character's model-session state.
#[derive(Message, Debug)]
#[rtype(result = "SessionReport")]
pub struct ReportSession;

/// Fault injection for tests of panic containment: makes this manager panic.
#[doc(hidden)]
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct InjectPanic;

/// What a manager needs to run its character's live model session.
#[derive(Clone)]
pub struct SessionLink {
    pub settings: SessionSettings,
    pub dispatcher: Dispatcher,
    /// Where the session announces its state and the calls it answers.
    pub events: EventHub,
}

/// Sent by a manager as it goes away, so its owner can bring back one that died unexpectedly.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ManagerGone {
    pub character: String,
    /// Which incarnation of the character's manager ended.
    pub generation: u64,
}

/// Who to tell when a manager ends, and which incarnation it is.
#[derive(Clone)]
pub struct Watcher {
    pub recipient: Recipient<ManagerGone>,
    pub generation: u64,
}

pub struct SessionManager {
    character: String,
    registry: ToolRegistry,
    session: Option<Addr<RealtimeSession>>,
    watcher: Option<Watcher>,
}

impl SessionManager {
    /// Starts a manager for `character` holding `tools` (empty, or a rebuild's replay), and its
    /// model session when `session` says how to reach one.
    pub fn launch(
        character: String,
        tools: ToolRegistry,
        session: Option<SessionLink>,
        watcher: Option<Watcher>,
    ) -> Addr<Self> {
        let session = session.map(|link| {
            let api_key = link.settings.api_key().unwrap_or_else(|e| {
                tracing::warn!(character = %character, error = %format!("{e:#}"), "connecting without an API key");
                None
            });
            let current: Arc<[SharedTool]> = tools.tools().cloned().collect();
            RealtimeSession::launch(
                character.clone(),
                link.settings,
                api_key,
                link.dispatcher,
                link.events,
                current,
            )
        });
        SessionManager::create(|ctx| {
            // An unbounded mailbox never parks the router, so messages to one manager are queued
            // strictly in send order (a parked send is retried later and could overtake).
            ctx.set_mailbox_capacity(0);
            SessionManager {
                character,
                registry: tools,
                session,
                watcher,
            }
        })
    }

    /// The one place every registry change goes through: pushes the current tool list to the
    /// character's live model session and waits for its acknowledgement. A character with no
    /// session succeeds at once.
    ///
    /// `None`: nothing to wait for (no session). `Some`: resolves when the session settles.
    fn publish(&mut self) -> Option<BoxFuture<'static, Result<(), String>>> {
        let session = self.session.as_ref()?;
        let tools: Arc<[SharedTool]> = self.registry.tools().cloned().collect();
        let reply = session.send(SyncTools(tools));
        Some(
            async move {
                reply
                    .await
                    .unwrap_or_else(|_| Err("model session actor is not running".to_owned()))
            }
            .boxed(),
        )
    }
}

impl Actor for SessionManager {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Self::Context) {
        tracing::debug!(character = %self.character, tools = self.registry.len(), "session manager started");
    }
}

impl Drop for SessionManager {
    /// Closes the session however the manager ends — stopped, replaced, or unwound by a panic —
    /// so a restarted manager never leaves a second connection behind.
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            session.do_send(CloseSession);
        }
        if let Some(watcher) = self.watcher.take() {
            watcher.recipient.do_send(ManagerGone {
                character: std::mem::take(&mut self.character),
                generation: watcher.generation,
            });
        }
    }
}

impl Handler<ReportSession> for SessionManager {
    type Result = ResponseFuture<SessionReport>;

    fn handle(&mut self, _: ReportSession, _: &mut Self::Context) -> Self::Result {
        let Some(session) = &self.session else {
            return Box::pin(ready(SessionReport::none()));
        };
        let reply = session.send(SessionStatus);
        Box::pin(async move { reply.await.unwrap_or_else(|_| SessionReport::none()) })
    }
}

impl Handler<ApplyChange> for SessionManager {
    type Result = ();

    fn handle(&mut self, msg: ApplyChange, _: &mut Self::Context) {
        let (changed, removed) = match msg.change {
            Change::Register(tool) => {
                self.registry.insert(tool);
                (true, 0)
            }
            Change::Unregister(name) => {
                let removed = usize::from(self.registry.remove(&name).is_some());
                (removed > 0, removed)
            }
            Change::ClearSource(source) => {
                let removed = self.registry.remove_source(&source);
                (removed > 0, removed)
            }
            Change::RemoveOrigin { source, origin } => {
                let removed = self.registry.remove_origin(&source, &origin);
                (removed > 0, removed)
            }
            Change::ReplaceSource { source, tools } => {
                let removed = self.registry.replace_source(&source, &tools);
                (removed > 0 || !tools.is_empty(), removed)
            }
        };
        let outcome = move |sync| ChangeOutcome {
            removed,
            changed,
            sync,
        };
        match changed.then(|| self.publish()).flatten() {
            // The receiver may be gone (the router stopped waiting): nothing to tell then.
            None => drop(msg.reply.send(outcome(Ok(())))),
            Some(sync) => {
                actix::spawn(async move {
                    let _ = msg.reply.send(outcome(sync.await));
                });
            }
        }
    }
}

impl Handler<InjectPanic> for SessionManager {
    type Result = ();

    fn handle(&mut self, _: InjectPanic, _: &mut Self::Context) {
        panic!(
            "fault injected into the session manager of {}",
            self.character
        );
    }
}
