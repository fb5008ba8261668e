//! The Gemini Live actors: the server's own connection ([`client`], `mode = "client"`), an
//! app's connection relayed through the server ([`relay`]), and what both do to move a session
//! to a new connection ([`moving`]).

mod client;
mod moving;
mod relay;

pub(crate) use client::GeminiSession;
pub(crate) use relay::{GeminiRelay, connect_gemini};
