//! runtime-tools: turns local plugins' HTTP callbacks into tools a live AI model session can
//! call.
//!
//! A plugin registers a tool over `POST /api/tools/register`; the [`actors::router::Router`]
//! fans it out to each target character's [`actors::manager::SessionManager`], which owns that
//! character's registry. The [`dispatch::Dispatcher`] runs calls against plugin callbacks.
//! [`events::EventHub`] numbers and fans out the change events of `GET /api/events`.
//! [`startup::Application`] is the seam that builds and runs the server.

pub mod actors;
pub mod api;
pub mod chat;
pub mod config;
pub mod demo;
pub mod dispatch;
pub mod domain;
pub mod events;
pub mod mcp;
pub mod session;
pub mod startup;
pub mod telemetry;
