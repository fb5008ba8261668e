//! The actors: the [`router::Router`] every user talks to, one [`manager::SessionManager`] per
//! character, and the glue that lets an in-process actor be a tool ([`local_tool`]).

pub mod directory;
pub mod local_tool;
pub mod manager;
pub mod router;
