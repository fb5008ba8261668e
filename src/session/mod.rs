//! Live model sessions: one supervised [`RealtimeSession`] actor per character that has a
//! `[character.session]`. It keeps an OpenAI-Realtime-style websocket open, pushes the
//! character's tool list into it (acknowledged by `session.updated`), and runs the model's
//! function calls through the dispatcher.
//!
//! The character's [`SessionManager`](crate::actors::manager::SessionManager) owns the session's
//! address and is the only one that sends it tool lists.

mod actor;
pub mod calls;
pub mod protocol;
pub mod settings;
pub mod sync;

pub use actor::{
    CloseSession, ConnectionState, MAX_EVENT_BYTES, RealtimeSession, SessionReport, SessionStatus,
    SyncOutcome, SyncTools,
};
