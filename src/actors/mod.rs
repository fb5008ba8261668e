//! The actors: the [`router::Router`] every user talks to (and its [`router::Directory`], the
//! read side of every character's tools), one [`manager::SessionManager`] per character, and
//! the glue that lets an in-process actor be a tool ([`local_tool`]).

pub(crate) mod change;
pub(crate) mod local_tool;
pub(crate) mod manager;
pub(crate) mod router;
pub(crate) mod settings;
