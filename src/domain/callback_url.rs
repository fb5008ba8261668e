//! The callback-URL rule: which URLs a plugin may register as a tool's callback.
//!
//! A callback must be `http` or `https` on loopback, written plainly. The check reads the host
//! exactly as the caller wrote it, because the `url` crate (like every WHATWG parser) rewrites
//! `127.1`, `2130706433` and `0x7f000001` into `127.0.0.1`, which would let obfuscated spellings
//! through. Only after the written form passes is the URL parsed, to send requests to and to
//! derive its [`CallbackOrigin`]. The rules of the written form that every URL from a caller
//! keeps are shared with the URL of an attached call (`call_url`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use url::Url;

use super::loopback::{is_loopback_host, is_loopback_v6};

/// The accepted forms, quoted by every rejection so a plugin author knows what to write instead.
pub const ACCEPTED_FORMS: &str = "use http:// or https:// with host localhost, 127.x.x.x, [::1] \
     or [::ffff:127.x.x.x], e.g. http://127.0.0.1:9333/tools/get_weather";

/// Longest callback URL accepted, in bytes. Common HTTP servers refuse request targets much
/// past 8 KiB (and awc builds the whole request head in memory): a URL nobody can call must be
/// refused when it is registered, not fail every call. 2 048 is the limit browsers and most
/// tooling have long respected, far above any real callback path.
pub const MAX_CALLBACK_URL_BYTES: usize = 2048;

/// A callback URL that passed the loopback rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackUrl {
    /// Exactly what the plugin registered; listings show this.
    written: String,
    /// The parsed form requests are sent to.
    parsed: Url,
    origin: CallbackOrigin,
    /// The parsed URL with its query's values redacted and without its fragment
    /// ([`for_spans`]), and its host, as shared text: what every call's CLIENT span names
    /// (`url.full`, `server.address`) for a reference count, not a copy.
    shared_url: Arc<str>,
    shared_host: Arc<str>,
}

/// `scheme://host:port` of a callback, the default port filled in: the unit of auto-removal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallbackOrigin(String);

/// Why a callback URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallbackUrlError {
    #[error("callback_url is {0} bytes long; at most {MAX_CALLBACK_URL_BYTES} bytes are accepted")]
    TooLong(usize),
    #[error("callback_url must not contain whitespace, control characters or backslashes")]
    ForbiddenCharacter,
    #[error("callback_url must start with http:// or https://")]
    Scheme,
    #[error("callback_url must name a host")]
    MissingHost,
    #[error("callback_url must not carry user information (user@)")]
    UserInfo,
    #[error("callback_url has an invalid port")]
    Port,
    #[error("callback_url host {0:?} is not loopback")]
    NotLoopback(String),
    #[error("callback_url is not a valid URL: {0}")]
    Invalid(String),
}

impl CallbackUrl {
    /// Checks `written` against the loopback rule.
    pub fn parse(written: &str) -> Result<Self, CallbackUrlError> {
        let (_, host) = written_parts(written, &["http", "https"]).map_err(|e| match e {
            WrittenError::TooLong(n) => CallbackUrlError::TooLong(n),
            WrittenError::ForbiddenCharacter => CallbackUrlError::ForbiddenCharacter,
            WrittenError::Scheme => CallbackUrlError::Scheme,
            WrittenError::MissingHost => CallbackUrlError::MissingHost,
            WrittenError::UserInfo => CallbackUrlError::UserInfo,
            WrittenError::Port => CallbackUrlError::Port,
        })?;
        if !is_loopback_host(host) {
            return Err(CallbackUrlError::NotLoopback(host.to_owned()));
        }

        let parsed = Url::parse(written).map_err(|e| CallbackUrlError::Invalid(e.to_string()))?;
        // Defence in depth: the parser must agree that the host is loopback.
        let parsed_host_ok = match parsed.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => is_loopback_v6(&ip),
            None => false,
        };
        if !parsed_host_ok {
            return Err(CallbackUrlError::NotLoopback(host.to_owned()));
        }
        let origin = CallbackOrigin::of(&parsed);
        Ok(Self {
            written: written.to_owned(),
            shared_url: for_spans(&parsed).into(),
            shared_host: parsed.host_str().unwrap_or_default().into(),
            parsed,
            origin,
        })
    }

    /// The URL exactly as registered.
    pub fn as_written(&self) -> &str {
        &self.written
    }

    /// The parsed URL requests go to.
    pub fn url(&self) -> &Url {
        &self.parsed
    }

    /// The URL as spans name it (`for_spans`: no query value, no fragment) and its host,
    /// shared.
    pub fn shared_text(&self) -> (&Arc<str>, &Arc<str>) {
        (&self.shared_url, &self.shared_host)
    }

    pub fn origin(&self) -> &CallbackOrigin {
        &self.origin
    }

    /// Whether a request to this URL lands on a server listening on `bound`: the same port, and
    /// a host that is the bound address (or, for a wildcard bind, any loopback host, since every
    /// one of them reaches a wildcard listener). `localhost` is both loopback addresses.
    pub fn reaches(&self, bound: SocketAddr) -> bool {
        if self.parsed.port_or_known_default() != Some(bound.port()) {
            return false;
        }
        if bound.ip().is_unspecified() {
            return true;
        }
        let bound_ip = bound.ip().to_canonical();
        match self.parsed.host() {
            Some(url::Host::Domain(_)) => {
                bound_ip == IpAddr::V4(Ipv4Addr::LOCALHOST)
                    || bound_ip == IpAddr::V6(Ipv6Addr::LOCALHOST)
            }
            Some(url::Host::Ipv4(ip)) => bound_ip == IpAddr::V4(ip),
            Some(url::Host::Ipv6(ip)) => bound_ip == IpAddr::V6(ip).to_canonical(),
            None => false,
        }
    }
}

/// What a query value is exported as, as OpenTelemetry's semantic conventions redact the values
/// of sensitive query parameters.
pub(crate) const REDACTED_QUERY_VALUE: &str = "REDACTED";

/// `url` as a span's `url.full` names it: each query parameter keeps its name and has its value
/// replaced by [`REDACTED_QUERY_VALUE`] (a parameter without `=` is all value, so all
/// redacted), and the fragment, which is never sent, is left out. A callback URL's query may
/// carry a token, and spans leave the machine.
pub(crate) fn for_spans(url: &Url) -> String {
    let mut shown = url.clone();
    shown.set_fragment(None);
    if let Some(query) = url.query() {
        let redacted: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) => format!("{name}={REDACTED_QUERY_VALUE}"),
                None if pair.is_empty() => String::new(),
                None => REDACTED_QUERY_VALUE.to_owned(),
            })
            .collect();
        shown.set_query(Some(&redacted.join("&")));
    }
    shown.into()
}

impl CallbackOrigin {
    fn of(url: &Url) -> Self {
        let host = url.host_str().unwrap_or_default();
        let port = url.port_or_known_default().unwrap_or_default();
        Self(format!("{}://{}:{}", url.scheme(), host, port))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CallbackOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How the written form of a URL breaks the rules callback URLs and call URLs share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WrittenError {
    TooLong(usize),
    ForbiddenCharacter,
    Scheme,
    MissingHost,
    UserInfo,
    Port,
}

/// The scheme and host of `written` as written (the host without IPv6 brackets), once it passes
/// the rules every URL a caller gives the server must keep: at most
/// [`MAX_CALLBACK_URL_BYTES`], no whitespace, control character or backslash, one of `schemes`
/// (any letter case), a host, no user information, and a port (if any) of 1 to 65535 in plain
/// digits. Read from the text, not from a parse, which would rewrite what it reads.
pub(crate) fn written_parts<'a>(
    written: &'a str,
    schemes: &[&str],
) -> Result<(&'a str, &'a str), WrittenError> {
    if written.len() > MAX_CALLBACK_URL_BYTES {
        return Err(WrittenError::TooLong(written.len()));
    }
    if written
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
    {
        return Err(WrittenError::ForbiddenCharacter);
    }
    let (scheme, rest) = written.split_once("://").ok_or(WrittenError::Scheme)?;
    if !schemes.iter().any(|s| scheme.eq_ignore_ascii_case(s)) {
        return Err(WrittenError::Scheme);
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    if authority.contains('@') {
        return Err(WrittenError::UserInfo);
    }
    let (host, port) = split_host_port(authority).map_err(|_| WrittenError::Port)?;
    if host.is_empty() {
        return Err(WrittenError::MissingHost);
    }
    if let Some(port) = port {
        let valid = !port.is_empty()
            && port.len() <= 5
            && port.bytes().all(|b| b.is_ascii_digit())
            && matches!(port.parse::<u16>(), Ok(p) if p != 0);
        if !valid {
            return Err(WrittenError::Port);
        }
    }
    Ok((scheme, host))
}

/// Splits an authority into host and optional port text, keeping IPv6 brackets out of the host.
fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), CallbackUrlError> {
    if let Some(inner) = authority.strip_prefix('[') {
        let (host, after) = inner.split_once(']').ok_or(CallbackUrlError::Port)?;
        return match after {
            "" => Ok((host, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(CallbackUrlError::Port),
            },
        };
    }
    Ok(match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACCEPTED: &[&str] = &[
        "http://127.0.0.1:9000/cb",
        "HTTP://127.0.0.1/cb",
        "http://localhost:9000/cb",
        "http://LOCALHOST/cb",
        "http://[::1]:9000/cb",
        "http://127.0.0.5/cb",
        "https://localhost/cb",
        "http://[::ffff:127.0.0.1]:9000/cb",
        "http://127.255.255.254:65535/a/b?c=d#e",
        "http://[0:0:0:0:0:0:0:1]/cb",
        "http://127.0.0.1",
    ];

    const REJECTED: &[&str] = &[
        "http://8.8.8.8/cb",
        "http://192.168.1.5/cb",
        "http://10.0.0.1/cb",
        "http://example.com/cb",
        "ftp://127.0.0.1/cb",
        "http:///cb",
        "http://[2001:db8::1]/cb",
        "http://[::ffff:8.8.8.8]/cb",
        "http://localhost./cb",
        "http://127.1/cb",
        "http://2130706433/cb",
        "http://0x7f000001/cb",
        "http://127.0.0.1@evil.example/cb",
        "http://0.0.0.0/cb",
        "http://[::]/cb",
        "http://user:pw@127.0.0.1/cb",
        "http://user@localhost/cb",
        "http://0177.0.0.1/cb",
        "http://127.000.000.001/cb",
        "http://127.0.0.1./cb",
        "http://[::1%25eth0]/cb",
        "http://[fe80::1%eth0]/cb",
        "http://127%2e0.0.1/cb",
        "http://%6c%6fcalhost/cb",
        "http://localhost\\@evil.example/cb",
        "http://127.0.0.1\\cb",
        " http://127.0.0.1/cb",
        "http://127.0.0.1/cb ",
        "http://127.0.0.1/c\tb",
        "http://127.0.0.1:0/cb",
        "http://127.0.0.1:99999/cb",
        "http://127.0.0.1:/cb",
        "http://127.0.0.1:80x/cb",
        "http://[::127.0.0.1]/cb",
        "http://[::1/cb",
        "http:/127.0.0.1/cb",
        "127.0.0.1:9000/cb",
        "javascript://127.0.0.1/cb",
        "",
        "http://localhost.evil.example/cb",
        "http://127.0.0.1.nip.io/cb",
        "http://①②⑦.0.0.1/cb",
    ];

    #[test]
    fn accepts_the_loopback_forms() {
        for url in ACCEPTED {
            assert!(CallbackUrl::parse(url).is_ok(), "{url} should be accepted");
        }
    }

    #[test]
    fn spans_name_the_url_without_its_query_values_or_fragment() {
        for (written, shown) in [
            ("http://127.0.0.1:9000/cb", "http://127.0.0.1:9000/cb"),
            (
                "http://127.0.0.1:9000/cb?token=s3cret&tool=x&bare&&a=b=c#frag",
                "http://127.0.0.1:9000/cb?token=REDACTED&tool=REDACTED&REDACTED&&a=REDACTED",
            ),
            ("http://localhost/cb?", "http://localhost/cb?"),
            ("http://localhost/cb#only-a-fragment", "http://localhost/cb"),
        ] {
            let url = CallbackUrl::parse(written).unwrap();
            assert_eq!(&**url.shared_text().0, shown, "{written}");
            // Requests still go to the URL as registered.
            assert_eq!(url.url().query(), Url::parse(written).unwrap().query());
        }
    }

    #[test]
    fn rejects_everything_else() {
        for url in REJECTED {
            assert!(CallbackUrl::parse(url).is_err(), "{url} should be rejected");
        }
    }

    #[test]
    fn rejection_names_the_problem() {
        assert_eq!(
            CallbackUrl::parse("http://user@localhost/cb"),
            Err(CallbackUrlError::UserInfo)
        );
        assert_eq!(
            CallbackUrl::parse("http://127.1/cb"),
            Err(CallbackUrlError::NotLoopback("127.1".into()))
        );
        assert_eq!(
            CallbackUrl::parse("ftp://127.0.0.1/cb"),
            Err(CallbackUrlError::Scheme)
        );
        assert_eq!(
            CallbackUrl::parse("http:///cb"),
            Err(CallbackUrlError::MissingHost)
        );
    }

    #[test]
    fn refuses_what_no_server_would_take() {
        let longest = format!(
            "http://127.0.0.1:9/{}",
            "a".repeat(MAX_CALLBACK_URL_BYTES - 19)
        );
        assert_eq!(longest.len(), MAX_CALLBACK_URL_BYTES);
        assert!(CallbackUrl::parse(&longest).is_ok());
        let over = format!("{longest}b");
        assert_eq!(
            CallbackUrl::parse(&over),
            Err(CallbackUrlError::TooLong(MAX_CALLBACK_URL_BYTES + 1))
        );
    }

    #[test]
    fn which_urls_reach_a_server() {
        let reaches = |url: &str, bound: &str| {
            CallbackUrl::parse(url)
                .unwrap()
                .reaches(bound.parse().unwrap())
        };
        let bound = "127.0.0.1:9000";
        assert!(reaches("http://127.0.0.1:9000/api/tools/invoke", bound));
        assert!(reaches("http://LOCALHOST:9000/x", bound));
        assert!(reaches("http://[::ffff:127.0.0.1]:9000/x", bound));
        assert!(!reaches("http://127.0.0.1:9001/x", bound));
        assert!(!reaches("http://127.0.0.2:9000/x", bound));
        assert!(!reaches("http://[::1]:9000/x", bound));
        assert!(!reaches("https://127.0.0.1/x", bound));
        assert!(reaches("https://127.0.0.1/x", "127.0.0.1:443"));
        assert!(reaches("http://[::1]:9000/x", "[::1]:9000"));
        assert!(reaches("http://localhost:9000/x", "[::1]:9000"));
        for wildcard in ["0.0.0.0:9000", "[::]:9000"] {
            assert!(reaches("http://127.0.0.9:9000/x", wildcard));
            assert!(reaches("http://[::1]:9000/x", wildcard));
            assert!(!reaches("http://127.0.0.9:9001/x", wildcard));
        }
        assert!(!reaches("http://127.0.0.1:9000/x", "192.168.1.5:9000"));
    }

    #[test]
    fn keeps_the_written_form() {
        let url = CallbackUrl::parse("HTTP://LOCALHOST:9000/Cb").unwrap();
        assert_eq!(url.as_written(), "HTTP://LOCALHOST:9000/Cb");
    }

    #[test]
    fn origin_fills_in_the_default_port() {
        let origin = |u: &str| CallbackUrl::parse(u).unwrap().origin().as_str().to_owned();
        assert_eq!(origin("http://127.0.0.1/a"), "http://127.0.0.1:80");
        assert_eq!(origin("https://localhost/a"), "https://localhost:443");
        assert_eq!(origin("HTTP://LocalHost:9000/x"), "http://localhost:9000");
        assert_eq!(origin("http://[::1]:9/x"), "http://[::1]:9");
        assert_eq!(
            origin("http://127.0.0.1:5/a"),
            origin("http://127.0.0.1:5/b?q")
        );
        assert_ne!(
            origin("http://127.0.0.1:5/a"),
            origin("http://127.0.0.1:6/a")
        );
    }
}
