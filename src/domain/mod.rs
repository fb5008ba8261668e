//! Plain domain logic: tools, their parameters (and the check of a call's arguments), registries
//! and their published snapshots, the callback-URL rule, call results, images, failure counting
//! and a character's shared name. Nothing here imports the actor system or the web framework;
//! the actors and the HTTP layer hold these types and do the messaging.

pub mod arguments;
pub mod call;
pub mod callback_url;
pub mod failures;
pub mod images;
pub mod loopback;
pub mod registry;
pub mod role;
pub mod snapshot;
pub mod tool;
