//! What counts as loopback: for callers (their socket address and `Host` header) and for
//! callback URLs (their host as written).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// 127.0.0.0/8, `::1`, or an IPv4-mapped IPv6 address of 127.0.0.0/8.
pub(crate) fn is_loopback_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => is_loopback_v6(&v6),
    }
}

/// `::1`, or an IPv4-mapped address (`::ffff:a.b.c.d`) whose IPv4 part is loopback.
pub(crate) fn is_loopback_v6(ip: &Ipv6Addr) -> bool {
    ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
}

/// True for a host written as `localhost` in any letter case, a strict dotted-quad in
/// 127.0.0.0/8, or (without brackets) `::1` / IPv4-mapped loopback. Everything else — other
/// names, short or numeric IPv4 forms, leading zeros, zone ids, percent-encoding, a trailing
/// dot — is refused.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    if host.contains(':') {
        // A zone id (`%eth0`) makes the parse fail.
        return host.parse::<Ipv6Addr>().is_ok_and(|ip| is_loopback_v6(&ip));
    }
    is_strict_dotted_quad(host) && host.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// Four decimal octets with no leading zeros: the only IPv4 spelling accepted.
fn is_strict_dotted_quad(host: &str) -> bool {
    let mut octets = 0;
    for octet in host.split('.') {
        octets += 1;
        let plain = !octet.is_empty()
            && octet.len() <= 3
            && octet.bytes().all(|b| b.is_ascii_digit())
            && (octet.len() == 1 || !octet.starts_with('0'));
        if !plain {
            return false;
        }
    }
    octets == 4
}

/// Whether a `Host` header names loopback: `localhost`, `127.x.y.z` or `[::1]`, with any port.
/// A browser page that reaches us through DNS rebinding carries its own domain here.
pub(crate) fn is_loopback_host_header(value: &str) -> bool {
    let (host, port) = match value.strip_prefix('[') {
        Some(inner) => match inner.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, rest)) => match rest.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return false,
            },
            None => return false,
        },
        None => match value.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (value, None),
        },
    };
    let port_ok = port.is_none_or(is_port);
    // Unbracketed IPv6 is not a valid Host; `split_once` above leaves a colon in `port` then.
    let bracketed = value.starts_with('[');
    port_ok && (bracketed == host.contains(':')) && is_loopback_host(host)
}

/// A TCP port as written in a `Host` or `Origin`: 1 to 65535, decimal digits only.
fn is_port(text: &str) -> bool {
    text.len() <= 5
        && text.bytes().all(|b| b.is_ascii_digit())
        && text.parse::<u16>().is_ok_and(|port| port != 0)
}

/// Whether a browser's `Origin` header names a page served from loopback:
/// `http(s)://` + a loopback `Host` form (`localhost`, `127.x.y.z`, `[::1]`, any port), nothing
/// after it. `null` (sandboxed frames, `file:` pages, redirects) and every other origin are not.
pub(crate) fn is_loopback_origin(value: &str) -> bool {
    let Some((scheme, authority)) = value.split_once("://") else {
        return false;
    };
    (scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https"))
        && !authority.contains(['/', '?', '#', '@', '\\'])
        && is_loopback_host_header(authority)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_ips() {
        for ip in ["127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback_ip(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "10.0.0.1",
            "0.0.0.0",
            "::",
            "::ffff:10.0.0.1",
            "192.168.1.2",
            "2001:db8::1",
        ] {
            assert!(!is_loopback_ip(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn origins() {
        for o in [
            "http://localhost:5173",
            "http://localhost",
            "https://127.0.0.1:8443",
            "http://[::1]:3000",
            "HTTP://LocalHost:1",
        ] {
            assert!(is_loopback_origin(o), "{o} should pass");
        }
        for o in [
            "null",
            "",
            "https://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.nip.io",
            "http://127.1:80",
            "file://",
            "chrome-extension://abcdef",
            "ftp://localhost",
            "http://localhost:5173/",
            "http://user@localhost",
            "localhost:5173",
            "http://localhost:99999",
        ] {
            assert!(!is_loopback_origin(o), "{o} should fail");
        }
    }

    #[test]
    fn host_headers() {
        for h in [
            "localhost",
            "LocalHost:48911",
            "127.0.0.1",
            "127.0.0.1:80",
            "127.0.0.1:65535",
            "127.3.4.5:1",
            "[::1]",
            "[::1]:48911",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert!(is_loopback_host_header(h), "{h} should pass");
        }
        for h in [
            "evil.example",
            "evil.example:48911",
            "localhost.",
            "localhost.evil.example",
            "127.1",
            "2130706433",
            "10.0.0.1:80",
            "::1",
            "[::1",
            "[::1]x",
            "127.0.0.1:",
            "127.0.0.1:abc",
            "localhost:99999",
            "127.0.0.1:65536",
            "localhost:0",
            "localhost:+80",
            "[2001:db8::1]:80",
            "",
        ] {
            assert!(!is_loopback_host_header(h), "{h} should fail");
        }
    }
}
