//! What a character is made of: its name, its live model session and its text chat. The router
//! starts one manager per character from these.

use crate::chat::settings::ChatSettings;
use crate::domain::budget::Budget;
use crate::session::settings::SessionSettings;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CharacterSettings {
    pub name: String,
    /// The character's live model session, if it has one.
    pub session: Option<SessionSettings>,
    /// The character's text chat upstream (`POST /v1/chat/completions`), if it has one.
    pub chat: Option<ChatSettings>,
    /// The tools whose calls always wait for a person's approval on this character, whatever
    /// their registration says (`[character.approval] always`).
    pub approval_always: Vec<String>,
    /// How many of its tools one model session is given at once, and how it finds the rest
    /// (`[character.tools]`).
    pub tools: Budget,
}

impl CharacterSettings {
    /// A character without a model session.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            session: None,
            chat: None,
            approval_always: Vec::new(),
            tools: Budget::default(),
        }
    }
}
