//! Plain domain logic: tools, their parameters (and the check of a call's arguments, with the
//! bounds a schema must keep), registries and their published snapshots, the callback-URL rule,
//! call results, images, failure counting, a character's shared name, and the bound on text a
//! peer sends. Nothing here imports the actor system or the web framework;
//! the actors and the HTTP layer hold these types and do the messaging.

pub mod arguments;
pub mod call;
pub mod call_url;
pub mod callback_url;
pub mod failures;
pub mod images;
pub mod loopback;
pub mod peer_text;
pub mod registry;
pub mod role;
pub mod schema_limits;
pub mod snapshot;
pub mod tool;
