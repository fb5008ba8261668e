//! MCP (the Model Context Protocol), both ways, through the official Rust SDK (`rmcp`):
//!
//! - [`serve`]: `runtime-tools mcp`, a stdio MCP server that exposes one character's tools to any
//!   MCP client, by way of this server's HTTP API (`GET /api/tools`, `POST /api/tools/invoke`,
//!   `GET /api/events`).
//! - [`http_serve`]: a character's tools over MCP's Streamable HTTP transport, at `/mcp` on the
//!   main server: `tools/list` and `tools/call` straight from the published tools and through
//!   the dispatcher, `notifications/tools/list_changed` from the event hub; [`http_sessions`]:
//!   its sessions, at most `[mcp_endpoint] max_sessions` per character.
//! - [`client`]: an MCP server of the configuration (`[[mcp_server]]`) as a tool source: one
//!   supervised actor per server registers its tools with the router (source `mcp:<name>`) and
//!   runs the model's calls as `tools/call` ([`call`]: with `notifications/cancelled` when a call
//!   is cancelled or times out).
//! - [`runtime`]: MCP servers plugins register at run time (`POST /api/mcp/register`) as tool
//!   sources, with the lifecycle of an HTTP plugin's callbacks (replacement, clear, auto-removal).
//! - [`bounds`], [`http_client`]: what is taken from an MCP server this server calls, bounded
//!   while it is read (each message, a listing, a `tools/call` result), and the Streamable HTTP
//!   client that applies them and answers a request whose answer it cannot take at once.
//! - [`settings`], [`mapping`], [`listing`], [`status`], [`exact`]: the configuration, the plain
//!   conversions between MCP and this server's tools and results, the bounded listing of a
//!   server's tools, the state `GET /api/mcp` reports (and `mcp.state` events announce), and a
//!   call's argument text as the client wrote it.

pub(crate) mod bounds;
mod call;
pub(crate) mod client;
pub(crate) mod exact;
pub(crate) mod http_client;
pub(crate) mod http_serve;
pub(crate) mod http_sessions;
pub(crate) mod listing;
pub(crate) mod mapping;
pub(crate) mod runtime;
pub(crate) mod serve;
pub(crate) mod settings;
pub(crate) mod status;
