//! Why a callback exchange failed, in the words the model reads, and what the failure says about
//! the callback's origin (a connection that could not be made counts towards auto-removal;
//! anything after it was made does not).

use std::fmt;
use std::io;
use std::net::IpAddr;

use actix_web::rt::net::TcpStream;
use url::{Host, Url};

use super::{CALLBACK_CONNECT_TIMEOUT, client};
use crate::domain::failures::Liveness;
use crate::domain::tool::RemoteEndpoint;

/// A body that broke off after the head arrived.
pub(super) fn body_failure(e: &hyper::Error, received: u64, declared: Option<u64>) -> CallFailure {
    let cut_short = e.is_incomplete_message()
        || io_kind(e).is_some_and(|kind| {
            matches!(
                kind,
                io::ErrorKind::UnexpectedEof
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
            )
        });
    if !cut_short {
        return CallFailure::reachable(format!(
            "remote tool callback response could not be read: {}",
            error_chain(e)
        ));
    }
    let got = match declared {
        Some(total) => format!("{received} of {total} bytes received"),
        None => format!("{received} bytes received"),
    };
    CallFailure::reachable(format!(
        "remote tool callback closed the connection in the middle of its answer ({got})"
    ))
}

/// The kind of the I/O error somewhere under `e`, if there is one.
fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<io::ErrorKind> {
    let mut source = Some(e);
    while let Some(error) = source {
        if let Some(io) = error.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        source = error.source();
    }
    None
}

/// `e` and its sources, `: `-separated, as one line.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(error) = source {
        let next = error.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = error.source();
    }
    text
}

/// Why an exchange produced no response to map, and what it says about the callback's origin.
pub(super) struct CallFailure {
    pub(super) liveness: Liveness,
    pub(super) error: String,
}

impl CallFailure {
    pub(super) fn reachable(error: String) -> Self {
        Self {
            liveness: Liveness::Reachable,
            error,
        }
    }

    fn connect_failed(endpoint: &RemoteEndpoint, detail: impl fmt::Display) -> Self {
        Self {
            liveness: Liveness::ConnectFailed,
            error: format!(
                "could not connect to remote tool callback {}: {detail}",
                endpoint.callback_url.origin()
            ),
        }
    }
}

/// Classifies a request that got no response.
pub(super) async fn send_failure(
    endpoint: &RemoteEndpoint,
    error: client::SendError,
) -> CallFailure {
    let e = match error {
        client::SendError::Connect(e) => {
            return CallFailure::connect_failed(endpoint, error_chain(&*e));
        }
        client::SendError::Exchange(e) => e,
    };
    if e.is_parse() {
        CallFailure::reachable(format!(
            "remote tool callback failed: its answer is not HTTP/1.1 ({})",
            error_chain(&e)
        ))
    } else if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
        // The connection was made and then ended before the response head: the plugin may have
        // died since it was kept alive, or it closed on this call.
        connection_lost(endpoint, "closed the connection without answering").await
    } else if io_kind(&e).is_some() {
        connection_lost(
            endpoint,
            format!("connection failed before answering ({})", error_chain(&e)),
        )
        .await
    } else {
        CallFailure::reachable(format!("remote tool callback failed: {}", error_chain(&e)))
    }
}

/// An exchange broke on a connection that had been made. It may have been a kept-alive
/// connection whose plugin has since exited, so a fresh connection attempt (no request is sent
/// on it) tells a dead plugin, whose failure counts towards removal, from a live one that
/// misbehaved.
async fn connection_lost(endpoint: &RemoteEndpoint, what: impl fmt::Display) -> CallFailure {
    match probe(endpoint.callback_url.url()).await {
        Ok(()) => CallFailure::reachable(format!(
            "remote tool callback {} {what}",
            endpoint.callback_url.origin()
        )),
        Err(e) => CallFailure::connect_failed(
            endpoint,
            format!("the callback {what}, and a new connection failed: {e}"),
        ),
    }
}

/// Opens (and at once closes) a TCP connection to `url`'s host and port.
pub(crate) async fn probe(url: &Url) -> io::Result<()> {
    let port = url.port_or_known_default().unwrap_or(80);
    let connect = async {
        match url.host() {
            Some(Host::Ipv4(ip)) => TcpStream::connect((IpAddr::V4(ip), port)).await,
            Some(Host::Ipv6(ip)) => TcpStream::connect((IpAddr::V6(ip), port)).await,
            Some(Host::Domain(name)) => TcpStream::connect((name, port)).await,
            None => Err(io::Error::new(io::ErrorKind::InvalidInput, "no host")),
        }
    };
    match tokio::time::timeout(CALLBACK_CONNECT_TIMEOUT, connect).await {
        Ok(stream) => stream.map(drop),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "timeout while establishing connection",
        )),
    }
}
