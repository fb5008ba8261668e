//! Plain domain logic: tools, their parameters (and the check of a call's arguments, with the
//! bounds a schema must keep), registries and their published snapshots, the callback-URL rule,
//! call results, images, failure counting, a character's shared name, the bounds on text a peer
//! sends and on the ids and names a model invents, and the keys kept out of what the server
//! repeats. Nothing here imports the actor system or the web framework; the actors and the HTTP
//! layer hold these types and do the messaging.

pub(crate) mod approval;
pub(crate) mod arguments;
pub(crate) mod budget;
pub(crate) mod call;
pub(crate) mod call_url;
pub(crate) mod callback_url;
pub(crate) mod connection;
pub(crate) mod dormant;
pub(crate) mod event_stream;
pub(crate) mod failures;
pub(crate) mod images;
pub(crate) mod json_text;
pub(crate) mod limits;
pub(crate) mod loopback;
pub(crate) mod operator;
pub(crate) mod outcome;
pub(crate) mod ownership;
pub(crate) mod peer_id;
pub(crate) mod peer_text;
pub(crate) mod registry;
pub(crate) mod role;
pub(crate) mod schema_limits;
pub(crate) mod search;
pub(crate) mod secrets;
pub(crate) mod snapshot;
pub(crate) mod sources;
pub(crate) mod tool;
pub(crate) mod tool_index;
