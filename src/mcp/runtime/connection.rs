//! One connection to a registered MCP server: opening it (connect, initialize, list), probing
//! its origin after a failed call, closing it, and the client side that hears `list_changed`.

use std::net::IpAddr;
use std::sync::Arc;

use actix::prelude::*;
use rmcp::model::{ClientCapabilities, ClientInfo, Implementation};
use rmcp::service::{NotificationContext, RunningService, RunningServiceCancellationToken};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::sync::watch;
use url::Host;

use crate::domain::call::seconds;
use crate::domain::callback_url::CallbackUrl;
use crate::mcp::http_client;
use crate::mcp::listing::{Listing, list_every_tool};

use super::messages::{McpRegistration, McpStage, ToolListChanged};
use super::{CLOSE_TIMEOUT, CONNECT_TIMEOUT, McpPlugins};

/// Cancels a connection (its MCP session is ended with `DELETE`) and waits until it has closed,
/// at most [`CLOSE_TIMEOUT`].
pub(super) async fn close(
    cancel: RunningServiceCancellationToken,
    mut closed: watch::Receiver<bool>,
) {
    cancel.cancel();
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, closed.wait_for(|c| *c)).await;
}

/// A connected, initialized server and its listing.
pub(super) struct Opened {
    pub(super) service: RunningService<RoleClient, Listener>,
    pub(super) listing: Listing,
}

/// Why a registration's connection attempt failed.
pub(super) struct OpenFailure {
    pub(super) stage: McpStage,
    pub(super) error: String,
}

impl OpenFailure {
    fn at(stage: McpStage, error: impl Into<String>) -> Self {
        Self {
            stage,
            error: error.into(),
        }
    }
}

/// Connects, initializes and lists every page of tools, all within the registration's timeout.
pub(super) async fn open(
    registration: Arc<McpRegistration>,
    listener: Listener,
    max_result_bytes: usize,
) -> Result<Opened, OpenFailure> {
    let deadline = tokio::time::Instant::now() + registration.timeout;
    let url = registration.url.as_written();
    let late = |stage: McpStage| {
        OpenFailure::at(
            stage,
            format!(
                "no answer within {} s (timeout_seconds)",
                seconds(registration.timeout)
            ),
        )
    };
    match tokio::time::timeout_at(deadline, probe(&registration.url)).await {
        Err(_) => return Err(late(McpStage::Connect)),
        Ok(Err(e)) => {
            return Err(OpenFailure::at(
                McpStage::Connect,
                format!("could not connect to {}: {e}", registration.url.origin()),
            ));
        }
        Ok(Ok(())) => {}
    }
    let transport = http_client::transport(url, max_result_bytes)
        .map_err(|e| OpenFailure::at(McpStage::Connect, e))?;
    let service = match tokio::time::timeout_at(deadline, listener.serve(transport)).await {
        Err(_) => return Err(late(McpStage::Initialize)),
        Ok(Err(e)) => {
            return Err(OpenFailure::at(
                McpStage::Initialize,
                format!("{url} did not complete MCP's initialize handshake: {e}"),
            ));
        }
        Ok(Ok(service)) => service,
    };
    // On failure from here the service is dropped, which ends its session.
    let listing = match tokio::time::timeout_at(deadline, list_every_tool(service.peer())).await {
        Err(_) => return Err(late(McpStage::ToolsList)),
        Ok(Err(e)) => return Err(OpenFailure::at(McpStage::ToolsList, e.to_string())),
        Ok(Ok(listing)) => listing,
    };
    Ok(Opened { service, listing })
}

/// Opens (and at once closes) a TCP connection to `url`'s host and port.
pub(super) async fn probe(url: &CallbackUrl) -> std::io::Result<()> {
    let url = url.url();
    let port = url.port_or_known_default().unwrap_or(80);
    let connect = async {
        match url.host() {
            Some(Host::Ipv4(ip)) => tokio::net::TcpStream::connect((IpAddr::V4(ip), port)).await,
            Some(Host::Ipv6(ip)) => tokio::net::TcpStream::connect((IpAddr::V6(ip), port)).await,
            Some(Host::Domain(name)) => tokio::net::TcpStream::connect((name, port)).await,
            None => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no host",
            )),
        }
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(stream) => stream.map(drop),
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no connection within {} s", CONNECT_TIMEOUT.as_secs()),
        )),
    }
}

/// The client side of one connection: tells the actor when the tool list changed.
pub(super) struct Listener {
    pub(super) plugins: Addr<McpPlugins>,
    pub(super) name: String,
    pub(super) generation: u64,
}

impl ClientHandler for Listener {
    fn get_info(&self) -> ClientInfo {
        ClientInfo::new(
            ClientCapabilities::default(),
            Implementation::new("runtime-tools", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.plugins.do_send(ToolListChanged {
            name: self.name.clone(),
            generation: self.generation,
        });
    }
}
