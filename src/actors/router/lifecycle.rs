//! The character lifecycle: adding, removing and rebuilding characters, and bringing back a
//! manager that died. A new or rebuilt manager takes over the character's cell; a restarted or
//! rebuilt one starts from the last snapshot there plus the changes it lacks, in order.

use std::collections::VecDeque;
use std::sync::Arc;

use actix::prelude::*;

use super::{Router, RouterError};
use crate::actors::manager::ManagerGone;
use crate::chat::ChatEndpoint;
use crate::chat::settings::ChatSettings;
use crate::domain::budget::Budget;
use crate::domain::snapshot::empty_cell;
use crate::session::settings::SessionSettings;

/// Add a character. It starts with no tools: earlier global registrations applied only to the
/// characters that existed then.
#[derive(Message, Debug)]
#[rtype(result = "Result<(), RouterError>")]
pub struct AddCharacter {
    pub name: String,
    /// Its live model session, if it has one.
    pub session: Option<SessionSettings>,
    /// Its text chat upstream, if it has one.
    pub chat: Option<ChatSettings>,
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

impl Handler<AddCharacter> for Router {
    type Result = Result<(), RouterError>;

    fn handle(&mut self, msg: AddCharacter, _: &mut Self::Context) -> Self::Result {
        if self.position(&msg.name).is_some() {
            return Err(RouterError::DuplicateCharacter(msg.name));
        }
        check_session(&msg.name, msg.session.as_ref())?;
        let chat = msg
            .chat
            .map(|chat| {
                ChatEndpoint::new(chat).map_err(|e| RouterError::InvalidSession {
                    character: msg.name.clone(),
                    reason: format!("{e:#}"),
                })
            })
            .transpose()?
            .map(Arc::new);
        tracing::info!(character = %msg.name, session = msg.session.is_some(), chat = chat.is_some(), "character added");
        self.push_character(msg.name, msg.session, chat, Budget::default());
        Ok(())
    }
}

impl Handler<RemoveCharacter> for Router {
    type Result = Result<(), RouterError>;

    fn handle(&mut self, msg: RemoveCharacter, _: &mut Self::Context) -> Self::Result {
        let i = self
            .position(&msg.name)
            .ok_or_else(|| RouterError::UnknownRole(msg.name.clone()))?;
        // Dropping the last address stops the manager once its queued messages are handled;
        // whatever it still publishes goes to a cell nobody reads any more.
        let removed = self.characters.remove(i);
        self.publish_roster();
        tracing::info!(character = %removed.name, forgotten_tools = removed.tools.load().registry().len(), "character removed");
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
        let character = &mut self.characters[i];
        tracing::info!(character = %msg.name, tools = character.tools.load().registry().len(), "rebuilding session manager");
        character.session = msg.session;
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
        let character = &self.characters[i];
        if character.generation == msg.generation {
            tracing::warn!(character = %msg.character, tools = character.tools.load().registry().len(), "session manager stopped unexpectedly; restarting it with its tools");
            self.restart_manager(i);
        }
    }
}

impl Router {
    /// Appends a character with a fresh cell and its manager.
    pub(super) fn push_character(
        &mut self,
        name: String,
        session: Option<SessionSettings>,
        chat: Option<Arc<ChatEndpoint>>,
        budget: Budget,
    ) {
        let tools = empty_cell();
        let budget = Arc::new(budget);
        let (manager, generation) = self.start_manager(&name, &session, &budget, &tools, []);
        self.characters.push(super::Character {
            name: name.into(),
            session,
            chat,
            manager,
            generation,
            tools,
            budget,
            next_change: 1,
            unconfirmed: VecDeque::new(),
        });
        self.publish_roster();
    }
}

/// Refuses session settings that cannot work, as start-up does: a named API-key variable that
/// is not set (the session's, or one allowed for attaching).
fn check_session(character: &str, session: Option<&SessionSettings>) -> Result<(), RouterError> {
    match session.map(SessionSettings::check_keys) {
        Some(Err(e)) => Err(RouterError::InvalidSession {
            character: character.to_owned(),
            reason: format!("{e:#}"),
        }),
        _ => Ok(()),
    }
}
