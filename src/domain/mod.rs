//! Plain domain logic: tools, registries and their published snapshots, the callback-URL rule,
//! call results and failure counting. Nothing here imports the actor system or the web framework; the actors and the HTTP
//! layer hold these types and do the messaging.

pub mod call;
pub mod callback_url;
pub mod failures;
pub mod loopback;
pub mod registry;
pub mod snapshot;
pub mod tool;
