//! Black-box tests of the whole server over real sockets on loopback: the real server on port 0,
//! real callback servers, and (for sessions) a real websocket peer.

mod helpers;

mod auto_removal;
mod bounds;
mod browser;
mod callback_server;
mod callback_urls;
mod cli;
mod concurrency;
mod demo;
mod dispatch;
mod examples;
mod fake_realtime;
mod faults;
mod guard;
mod hostile_input;
mod invoke;
mod lifecycle;
mod listing;
mod local_tools;
mod openapi;
mod panics;
mod properties;
mod roles;
mod schema;
mod sessions;
mod smoke;
mod stopping;
mod stress;
mod validation;
mod who_gets_in;
