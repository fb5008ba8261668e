//! `SessionManager`: one actor per character. It owns that character's tools — it is the only
//! writer of the character's [`ToolCell`], through its [`ToolWriter`] — and pushes every change
//! to the character's live model session.
//!
//! Only the [`Router`](super::router::Router) talks to managers. Handlers apply a change
//! synchronously, in mailbox order (so changes to one character apply in the order they arrive),
//! publish the new snapshot before answering, and never await: waiting for the session's
//! acknowledgement happens in a spawned future.

use std::sync::Arc;

use actix::prelude::*;
use tokio::sync::oneshot;

use crate::dispatch::Dispatcher;
use crate::domain::registry::Change;
use crate::domain::snapshot::{ToolCell, ToolWriter};
use crate::domain::tool::SharedTool;
use crate::events::EventHub;
use crate::session::settings::SessionSettings;
use crate::session::{CloseSession, RealtimeSession, SessionReport, SessionStatus, SyncTools};

/// Apply change number `number` to this character's tools, publish the result and sync the
/// session; the outcome (sync included) goes to `reply`. A reply channel instead of a response
/// future lets the router send to hundreds of managers with no task, timer or allocation per
/// manager beyond the channel, and wait for them all against one deadline.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct ApplyChange {
    /// The router numbers each character's changes from 1, in the order it sends them.
    pub number: u64,
    pub change: Arc<Change>,
    pub reply: oneshot::Sender<ChangeOutcome>,
}

/// What a change did to one character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeOutcome {
    /// Tools removed.
    pub removed: usize,
    /// `Err` says why the change did not reach the live session (or the character at all).
    pub sync: Result<(), String>,
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
    tools: ToolWriter,
    session: Option<Addr<RealtimeSession>>,
    watcher: Option<Watcher>,
}

impl SessionManager {
    /// Starts a manager for `character` that takes over `cell`: it starts from the snapshot
    /// there plus the numbered `replay` changes the snapshot lacks (a restart's or rebuild's),
    /// published before this returns; then its model session, when `session` says how to reach
    /// one.
    pub fn launch<'a>(
        character: String,
        cell: ToolCell,
        replay: impl IntoIterator<Item = (u64, &'a Arc<Change>)>,
        session: Option<SessionLink>,
        watcher: Option<Watcher>,
    ) -> Addr<Self> {
        let tools = ToolWriter::resume(cell, replay);
        let session = session.map(|link| {
            let api_key = link.settings.api_key().unwrap_or_else(|e| {
                tracing::warn!(character = %character, error = %format!("{e:#}"), "connecting without an API key");
                None
            });
            RealtimeSession::launch(
                character.clone(),
                link.settings,
                api_key,
                link.dispatcher,
                link.events,
                tool_list(&tools),
            )
        });
        SessionManager::create(|ctx| {
            // An unbounded mailbox never parks the router, so messages to one manager are queued
            // strictly in send order (a parked send is retried later and could overtake).
            ctx.set_mailbox_capacity(0);
            SessionManager {
                character,
                tools,
                session,
                watcher,
            }
        })
    }
}

/// The current tools as the session takes them.
fn tool_list(tools: &ToolWriter) -> Arc<[SharedTool]> {
    tools.current().tools().cloned().collect()
}

impl Actor for SessionManager {
    type Context = Context<Self>;

    fn started(&mut self, _: &mut Self::Context) {
        tracing::debug!(character = %self.character, tools = self.tools.current().registry().len(), "session manager started");
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
            return Box::pin(std::future::ready(SessionReport::none()));
        };
        let reply = session.send(SessionStatus);
        Box::pin(async move { reply.await.unwrap_or_else(|_| SessionReport::none()) })
    }
}

impl Handler<ApplyChange> for SessionManager {
    type Result = ();

    fn handle(&mut self, msg: ApplyChange, _: &mut Self::Context) {
        // The receiver may be gone (the router stopped waiting): nothing to tell then.
        let effect = match self.tools.apply(msg.number, &msg.change) {
            Ok(effect) => effect,
            Err(superseded) => {
                // A newer manager of this character took over its tools, this change included.
                let _ = msg.reply.send(ChangeOutcome {
                    removed: 0,
                    sync: Err(superseded.to_string()),
                });
                return;
            }
        };
        let removed = effect.removed;
        let session = self.session.as_ref().filter(|_| effect.changed);
        let Some(session) = session else {
            let _ = msg.reply.send(ChangeOutcome {
                removed,
                sync: Ok(()),
            });
            return;
        };
        // The one place a change leaves for the session: the whole current list, acknowledged.
        let sync = session.send(SyncTools(tool_list(&self.tools)));
        actix::spawn(async move {
            let sync = sync
                .await
                .unwrap_or_else(|_| Err("model session actor is not running".to_owned()));
            let _ = msg.reply.send(ChangeOutcome { removed, sync });
        });
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
