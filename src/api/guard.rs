//! The loopback rule for callers, applied to every route before the body is read, and the CORS
//! answers for pages served from loopback.
//!
//! The peer's socket address decides (never a forwarded header); a `Host` header — and the
//! authority of an absolute-form request target (`GET http://host/path`), which stands for it —
//! that is not a loopback name or address is refused too, which stops browser pages that reach
//! this server through DNS rebinding, and so is a browser `Origin` that is not a loopback page,
//! which stops any web site the user visits from calling the API cross-origin (no CORS preflight
//! protects a "simple" POST). A header sent more than once is checked in every copy. Clients
//! that are not browsers send no `Origin` and are not affected. Pages served from loopback (any
//! port) may call the API: their preflights are answered and their answers carry
//! `Access-Control-Allow-Origin` ([`cors`]).

use std::net::SocketAddr;
use std::time::Duration;

use actix_cors::Cors;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HOST, HeaderValue, ORIGIN};
use actix_web::middleware::Next;

use super::error::{ApiError, McpHttpError, OpenAiError, is_mcp_path, is_openai_path};
use crate::domain::loopback::{is_loopback_host_header, is_loopback_ip, is_loopback_origin};

/// How long a browser may cache a preflight's answer: the rule never changes while the server
/// runs, so an hour spares a loopback page a preflight per request.
pub(crate) const CORS_MAX_AGE: Duration = Duration::from_secs(3600);

/// Middleware: 403 unless the caller is loopback, names a loopback host, and (when a browser
/// sent it) comes from a loopback origin.
pub(crate) async fn loopback_only(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    if let Err(e) = check_request(&req) {
        // The OpenAI-compatible routes answer in the shape their SDKs parse; `/mcp` as MCP
        // clients read it.
        if is_openai_path(req.path()) {
            return Ok(req
                .error_response(OpenAiError::from(e))
                .map_into_right_body());
        }
        if is_mcp_path(req.path()) {
            return Ok(req
                .error_response(McpHttpError::from(e))
                .map_into_right_body());
        }
        return Ok(req.error_response(e).map_into_right_body());
    }
    next.call(req)
        .await
        .map(ServiceResponse::map_into_left_body)
}

/// The CORS middleware: preflights and answers for pages served from loopback. Every other
/// origin is refused before it runs (by [`loopback_only`]).
pub(crate) fn cors() -> Cors {
    Cors::default()
        .allowed_origin_fn(|origin, _| origin.to_str().is_ok_and(is_loopback_origin))
        // DELETE ends an MCP session of `/mcp`.
        .allowed_methods(["GET", "HEAD", "POST", "DELETE"])
        // A loopback page's chat app sends its SDK's headers (`Authorization`, `X-Character`,
        // the SDK's own; an MCP client `Mcp-Session-Id`, `MCP-Protocol-Version`): whatever a
        // loopback page may send is allowed.
        .allow_any_header()
        // A browser MCP client must read the session id `/mcp` gives it.
        .expose_headers(["mcp-session-id"])
        .max_age(Some(CORS_MAX_AGE.as_secs() as usize))
}

/// Every claim a request makes about where it comes from and what it is addressed to.
fn check_request(req: &ServiceRequest) -> Result<(), ApiError> {
    check_peer(req.peer_addr())?;
    for host in req.headers().get_all(HOST) {
        check_host(header_text(host))?;
    }
    if let Some(authority) = req.uri().authority() {
        check_target_authority(authority.as_str())?;
    }
    for origin in req.headers().get_all(ORIGIN) {
        check_origin(header_text(origin))?;
    }
    Ok(())
}

/// A header's text; one that is not visible ASCII can match no loopback form.
fn header_text(value: &HeaderValue) -> &str {
    value.to_str().unwrap_or("\u{fffd}")
}

/// Decides whether a caller may use the API: `peer` is its socket address, `host` its `Host`
/// header (absent for HTTP/1.0 clients, which is allowed), `origin` its `Origin` header (absent
/// for every client but a browser, which is allowed).
#[cfg(test)]
fn check_caller(
    peer: Option<SocketAddr>,
    host: Option<&str>,
    origin: Option<&str>,
) -> Result<(), ApiError> {
    check_peer(peer)?;
    host.map_or(Ok(()), check_host)?;
    origin.map_or(Ok(()), check_origin)
}

fn check_peer(peer: Option<SocketAddr>) -> Result<(), ApiError> {
    match peer {
        Some(peer) if is_loopback_ip(peer.ip()) => Ok(()),
        Some(peer) => Err(ApiError::Forbidden(format!(
            "only loopback clients may use this API (caller {})",
            peer.ip()
        ))),
        None => Err(ApiError::Forbidden(
            "only loopback clients may use this API (caller address unknown)".into(),
        )),
    }
}

fn check_host(host: &str) -> Result<(), ApiError> {
    check_authority("Host header", host)
}

fn check_target_authority(authority: &str) -> Result<(), ApiError> {
    check_authority("request target authority", authority)
}

/// `what` (a `Host` or what stands for it) must name loopback.
fn check_authority(what: &str, value: &str) -> Result<(), ApiError> {
    if is_loopback_host_header(value) {
        Ok(())
    } else {
        Err(ApiError::Forbidden(format!(
            "{what} {value:?} is not a loopback name or address"
        )))
    }
}

fn check_origin(origin: &str) -> Result<(), ApiError> {
    if is_loopback_origin(origin) {
        Ok(())
    } else {
        Err(ApiError::Forbidden(format!(
            "Origin {origin:?} is not a loopback page: browsers may call this API only from \
             http://localhost or http://127.0.0.1 pages"
        )))
    }
}

#[cfg(test)]
mod tests {
    use actix_web::ResponseError;
    use serde_json::{Value, json};

    use super::*;

    fn peer(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn loopback_peers_pass() {
        assert!(check_caller(peer("127.0.0.1:5000"), Some("localhost:1"), None).is_ok());
        assert!(check_caller(peer("[::1]:5000"), Some("[::1]:1"), None).is_ok());
        assert!(check_caller(peer("[::ffff:127.0.0.1]:5000"), None, None).is_ok());
    }

    #[test]
    fn other_peers_are_forbidden() {
        for p in [
            "10.0.0.2:1",
            "192.168.1.5:1",
            "[2001:db8::1]:1",
            "[::ffff:10.0.0.1]:1",
        ] {
            let e = check_caller(peer(p), Some("127.0.0.1"), None).unwrap_err();
            assert!(
                matches!(e, ApiError::Forbidden(ref t) if t.contains("loopback")),
                "{p}"
            );
        }
        assert!(check_caller(None, None, None).is_err());
    }

    #[test]
    fn foreign_hosts_are_forbidden() {
        let e = check_caller(peer("127.0.0.1:1"), Some("evil.example"), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Host header \"evil.example\" is not a loopback name or address"
        );
    }

    #[test]
    fn browser_origins_must_be_loopback_pages() {
        let local = peer("127.0.0.1:1");
        assert!(check_caller(local, Some("localhost"), Some("http://localhost:5173")).is_ok());
        assert!(check_caller(local, Some("localhost"), Some("http://[::1]:8080")).is_ok());
        let e = check_caller(local, Some("localhost"), Some("null")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Origin \"null\" is not a loopback page: browsers may call this API only from \
             http://localhost or http://127.0.0.1 pages"
        );
        assert!(check_caller(local, Some("localhost"), Some("https://evil.example")).is_err());
    }

    fn foreign_host(host: &str) -> Value {
        json!({"ok": false, "detail": format!("Host header {host:?} is not a loopback name or address")})
    }

    fn foreign_peer(ip: &str) -> Value {
        json!({"ok": false, "detail": format!("only loopback clients may use this API (caller {ip})")})
    }

    async fn response_json(error: &ApiError) -> (u16, Value) {
        let response = error.error_response();
        let status = response.status().as_u16();
        let bytes = actix_web::body::to_bytes(response.into_body())
            .await
            .expect("error body");
        (
            status,
            serde_json::from_slice(&bytes).expect("JSON error body"),
        )
    }

    #[actix_web::test]
    async fn the_guard_seam_refuses_non_loopback_peers_with_a_403() {
        for (peer, ip) in [
            ("10.0.0.2:5000", "10.0.0.2"),
            ("192.168.1.5:80", "192.168.1.5"),
            ("8.8.8.8:443", "8.8.8.8"),
            ("0.0.0.0:1", "0.0.0.0"),
            ("[2001:db8::1]:5000", "2001:db8::1"),
            ("[::ffff:10.0.0.1]:5000", "::ffff:10.0.0.1"),
            ("[::]:1", "::"),
            ("[fe80::1]:1", "fe80::1"),
        ] {
            let peer: SocketAddr = peer.parse().unwrap();
            // Whatever the Host says, and whatever a forwarded header would have said.
            for host in [Some("127.0.0.1:48911"), Some("localhost"), None] {
                let error = check_caller(Some(peer), host, None).unwrap_err();
                assert_eq!(
                    response_json(&error).await,
                    (403, foreign_peer(ip)),
                    "{peer}"
                );
            }
        }
        let error = check_caller(None, Some("localhost"), None).unwrap_err();
        assert_eq!(
            response_json(&error).await,
            (
                403,
                json!({"ok": false, "detail": "only loopback clients may use this API (caller address unknown)"})
            )
        );
    }

    #[actix_web::test]
    async fn the_guard_seam_passes_loopback_peers_and_checks_their_host() {
        for peer in [
            "127.0.0.1:5000",
            "127.8.9.10:1",
            "[::1]:5000",
            "[::ffff:127.0.0.1]:5000",
            "[::ffff:127.2.3.4]:5000",
        ] {
            let peer: SocketAddr = peer.parse().unwrap();
            for host in [
                None,
                Some("localhost:1"),
                Some("127.0.0.1"),
                Some("[::1]:48911"),
            ] {
                assert!(
                    matches!(check_caller(Some(peer), host, None), Ok(())),
                    "{peer} {host:?}"
                );
            }
            let error = check_caller(Some(peer), Some("evil.example"), None).unwrap_err();
            assert_eq!(
                response_json(&error).await,
                (403, foreign_host("evil.example")),
                "{peer}"
            );
        }
    }
}
