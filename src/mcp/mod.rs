//! MCP (the Model Context Protocol), both ways, through the official Rust SDK (`rmcp`):
//!
//! - [`serve`]: `runtime-tools mcp`, a stdio MCP server that exposes one character's tools to any
//!   MCP client, by way of this server's HTTP API (`GET /api/tools`, `POST /api/tools/invoke`,
//!   `GET /api/events`).
//! - [`client`]: an MCP server of the configuration (`[[mcp_server]]`) as a tool source: one
//!   supervised actor per server registers its tools with the router (source `mcp:<name>`) and
//!   runs the model's calls as `tools/call` ([`call`]: with `notifications/cancelled` when a call
//!   is cancelled or times out).
//! - [`settings`], [`mapping`], [`status`]: the configuration, the plain conversions between MCP
//!   and this server's tools and results, and the state `GET /api/mcp` reports.

mod call;
pub(crate) mod client;
pub(crate) mod mapping;
pub(crate) mod serve;
pub(crate) mod settings;
pub(crate) mod status;
