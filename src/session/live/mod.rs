//! The Gemini Live actors: the server's own connection ([`client`], `mode = "client"`), and
//! what both do to move a session to a new connection ([`moving`]).

mod client;
mod moving;

pub(crate) use client::GeminiSession;
