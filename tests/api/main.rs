//! Black-box tests of the whole server over real sockets on loopback: the real server on port 0,
//! real callback servers, and (for sessions) a real websocket peer.

mod helpers;

mod answers;
mod arguments;
mod attach;
mod auto_removal;
mod browser;
mod callback_server;
mod callback_urls;
mod child;
mod cli;
mod concurrency;
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
mod relay;
mod roles;
mod schema;
mod sdk_app;
mod self_calls;
mod sessions;
mod smoke;
mod stress;
mod validation;
mod who_gets_in;
