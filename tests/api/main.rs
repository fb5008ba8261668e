//! Black-box tests of the whole server over real sockets on loopback: the real server on port 0,
//! real callback servers, and (for sessions) a real websocket peer.

mod helpers;

mod answers;
mod arguments;
mod auto_removal;
mod bounds;
mod browser;
mod callback_server;
mod callback_urls;
mod child;
mod cli;
mod concurrency;
mod cors;
mod demo;
mod dispatch;
mod event_stream;
mod events;
mod examples;
mod fake_realtime;
mod faults;
mod guard;
mod hostile_input;
mod images;
mod inspector;
mod invoke;
mod lifecycle;
mod listing;
mod local_tools;
mod mcp_serve;
mod mcp_servers;
mod node;
mod openapi;
mod panics;
mod properties;
mod python;
mod roles;
mod schema;
mod self_calls;
mod sessions;
mod smoke;
mod stopping;
mod stress;
mod validation;
mod who_gets_in;
