//! The URL rule of a live call the server attaches to (`POST /api/sessions/attach`).
//!
//! `ws://` is unencrypted, so it is accepted on loopback only, written as plainly as a callback
//! URL must be (`ws://127.1`, `ws://0x7f000001` and `ws://localhost.` are refused, as they are
//! for callbacks); `wss://` names any host here, and the character's settings decide which
//! hosts it may be (`session::settings::AttachSettings`). Both keep the rules every URL from a
//! caller keeps: no user information, no whitespace, control characters or backslashes, a port
//! of 1 to 65535, at most 2 048 bytes.

use url::Url;

use super::callback_url::{WrittenError, written_parts};
use super::loopback::{is_loopback_host, is_loopback_v6};

/// The forms accepted, quoted by every refusal.
pub(crate) const ACCEPTED_CALL_URLS: &str = "the call's URL must be wss:// to a provider the \
     configuration names, or ws:// on loopback (localhost, 127.x.x.x or [::1]), e.g. \
     wss://api.openai.com/v1/realtime?call_id=rtc_123";

/// A call URL that passed the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallUrl {
    written: String,
    parsed: Url,
}

/// Why a call URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallUrlError {
    #[error("url is {0} bytes long; at most 2048 bytes are accepted")]
    TooLong(usize),
    #[error("{0:?} contains whitespace, a control character or a backslash")]
    ForbiddenCharacter(String),
    #[error("{0:?} is not a websocket URL")]
    Scheme(String),
    #[error("{0:?} names no host")]
    MissingHost(String),
    #[error("{0:?} carries user information (user@)")]
    UserInfo(String),
    #[error("{0:?} has an invalid port")]
    Port(String),
    #[error("{0:?} is ws:// to a host that is not loopback, or not written plainly")]
    NotLoopback(String),
    #[error("{0:?} is not a URL ({1})")]
    Invalid(String, String),
}

impl CallUrl {
    /// Checks `written` against the rule.
    pub fn parse(written: &str) -> Result<Self, CallUrlError> {
        let quoted = || written.to_owned();
        let (scheme, host) = written_parts(written, &["ws", "wss"]).map_err(|e| match e {
            WrittenError::TooLong(n) => CallUrlError::TooLong(n),
            WrittenError::ForbiddenCharacter => CallUrlError::ForbiddenCharacter(quoted()),
            WrittenError::Scheme => CallUrlError::Scheme(quoted()),
            WrittenError::MissingHost => CallUrlError::MissingHost(quoted()),
            WrittenError::UserInfo => CallUrlError::UserInfo(quoted()),
            WrittenError::Port => CallUrlError::Port(quoted()),
        })?;
        let secure = scheme.eq_ignore_ascii_case("wss");
        if !secure && !is_loopback_host(host) {
            return Err(CallUrlError::NotLoopback(quoted()));
        }
        let parsed =
            Url::parse(written).map_err(|e| CallUrlError::Invalid(quoted(), e.to_string()))?;
        // Defence in depth: the parser must agree that a ws:// host is loopback.
        let loopback = match parsed.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => is_loopback_v6(&ip),
            None => false,
        };
        if !secure && !loopback {
            return Err(CallUrlError::NotLoopback(quoted()));
        }
        Ok(Self {
            written: written.to_owned(),
            parsed,
        })
    }

    /// The URL exactly as given.
    pub fn as_written(&self) -> &str {
        &self.written
    }

    /// `wss://`: encrypted, to any host the configuration allows.
    pub fn is_secure(&self) -> bool {
        self.parsed.scheme() == "wss"
    }

    /// The host as parsed (domain names in lower case, IPv6 in brackets).
    pub fn host(&self) -> &str {
        self.parsed.host_str().unwrap_or_default()
    }

    /// Whether this URL reaches the same `scheme://host:port` as `other`, a URL of the
    /// configuration (default ports filled in).
    pub fn same_origin_as(&self, other: &str) -> bool {
        let Ok(other) = Url::parse(other) else {
            return false;
        };
        self.parsed.scheme() == other.scheme()
            && self.parsed.host() == other.host()
            && self.parsed.port_or_known_default() == other.port_or_known_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wss_to_any_host_and_plain_loopback_ws_pass() {
        for url in [
            "wss://api.openai.com/v1/realtime?call_id=rtc_1",
            "WSS://API.OPENAI.COM/v1/realtime",
            "ws://127.0.0.1:9000/v1/realtime",
            "ws://localhost:9000/v1/realtime",
            "ws://[::1]:9000/v1/realtime",
            "ws://[::ffff:127.0.0.1]:9000/",
        ] {
            assert!(CallUrl::parse(url).is_ok(), "{url}");
        }
        let url = CallUrl::parse("WSS://API.OPENAI.COM/v1/realtime").unwrap();
        assert!(url.is_secure());
        assert_eq!(url.host(), "api.openai.com");
        assert_eq!(url.as_written(), "WSS://API.OPENAI.COM/v1/realtime");
    }

    #[test]
    fn the_spellings_callbacks_refuse_are_refused_for_ws() {
        for url in [
            "ws://127.1/v1/realtime",
            "ws://0x7f000001/v1/realtime",
            "ws://2130706433/v1/realtime",
            "ws://0177.0.0.1/v1/realtime",
            "ws://localhost./v1/realtime",
            "ws://10.0.0.2/v1/realtime",
            "ws://example.com/v1/realtime",
        ] {
            assert_eq!(
                CallUrl::parse(url),
                Err(CallUrlError::NotLoopback(url.to_owned())),
                "{url}"
            );
        }
    }

    #[test]
    fn every_url_keeps_the_shared_rules() {
        for (url, error) in [
            (
                "wss://user:pw@api.openai.com/",
                CallUrlError::UserInfo("wss://user:pw@api.openai.com/".into()),
            ),
            (
                "ws://127.0.0.1@evil.example/",
                CallUrlError::UserInfo("ws://127.0.0.1@evil.example/".into()),
            ),
            (
                "https://api.openai.com/",
                CallUrlError::Scheme("https://api.openai.com/".into()),
            ),
            (
                "wss://api.openai.com:99999/",
                CallUrlError::Port("wss://api.openai.com:99999/".into()),
            ),
            (
                "wss://api.openai.com/ x",
                CallUrlError::ForbiddenCharacter("wss://api.openai.com/ x".into()),
            ),
            ("wss:///v1", CallUrlError::MissingHost("wss:///v1".into())),
        ] {
            assert_eq!(CallUrl::parse(url), Err(error), "{url}");
        }
        let long = format!("wss://api.openai.com/{}", "a".repeat(2048));
        assert_eq!(CallUrl::parse(&long), Err(CallUrlError::TooLong(2069)));
    }

    #[test]
    fn origins_compare_with_default_ports() {
        let url = CallUrl::parse("ws://127.0.0.1:9000/v1/realtime?call_id=c").unwrap();
        assert!(url.same_origin_as("ws://127.0.0.1:9000/v1/realtime?model=m"));
        assert!(!url.same_origin_as("ws://127.0.0.1:9001/v1/realtime"));
        assert!(!url.same_origin_as("ws://localhost:9000/v1/realtime"));
        let secure = CallUrl::parse("wss://api.openai.com/v1/realtime?call_id=c").unwrap();
        assert!(secure.same_origin_as("wss://api.openai.com:443/v1/realtime"));
    }
}
