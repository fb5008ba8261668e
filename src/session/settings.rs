//! `[character.session]`: how a character's live model session is reached, and what attaching
//! to its calls may do (which hosts, which keys, how many at once).

use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::domain::call_url::CallUrl;
use crate::domain::secrets;

/// How long a change waits for `session.updated` unless configured.
pub(crate) const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest configurable sync wait: a change request must answer within a human-scale time.
pub(crate) const MAX_SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// Tool calls a session runs per window before the runaway guard answers for the plugin.
pub(crate) const DEFAULT_MAX_TOOL_CALLS_PER_WINDOW: usize = 8;

/// The runaway guard's window.
pub(crate) const DEFAULT_TOOL_CALL_WINDOW: Duration = Duration::from_secs(15);

/// Live calls a character may be attached to at once, by default. Each holds a websocket, a
/// session and its calls; eight covers a handful of parallel calls of one character (a phone
/// line and a browser or two) while keeping a caller from opening hundreds.
pub const DEFAULT_MAX_ATTACHMENTS: usize = 8;

/// Most attachments a configuration may allow one character: each is a connection to a
/// provider, and a thousand is far past any one character's calls.
pub(crate) const MAX_ATTACHMENTS: usize = 1000;

/// The hosts a `wss://` attachment may go to by default: OpenAI's Realtime API, whose calls
/// (WebRTC, SIP) take a second websocket with `?call_id=`.
pub(crate) const DEFAULT_ATTACH_HOSTS: &[&str] = &["api.openai.com"];

/// Which flavour of the OpenAI Realtime protocol the endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// OpenAI Realtime, GA protocol.
    Openai,
    /// Qwen-Omni realtime: nested function tools, `enable_search: false`.
    Qwen,
    /// GLM realtime: flat tools, explicit server VAD.
    Glm,
}

impl Dialect {
    /// Whether the session takes images in the conversation (`input_image` content).
    pub fn takes_images(self) -> bool {
        matches!(self, Dialect::Openai)
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Dialect::Openai => "openai",
            Dialect::Qwen => "qwen",
            Dialect::Glm => "glm",
        }
    }
}

/// Which wire protocol the session speaks (`kind` in `[character.session]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum SessionProtocol {
    /// The OpenAI Realtime family (`openai-realtime`), in one of its [`Dialect`]s.
    #[default]
    #[serde(rename = "openai-realtime")]
    OpenaiRealtime,
    /// The Gemini Live API (`gemini-live`, `BidiGenerateContent`): tools in the setup, a new
    /// tool list on a connection resumed from the session's handle.
    #[serde(rename = "gemini-live")]
    GeminiLive,
}

impl SessionProtocol {
    /// The name the configuration uses.
    pub fn name(self) -> &'static str {
        match self {
            SessionProtocol::OpenaiRealtime => "openai-realtime",
            SessionProtocol::GeminiLive => "gemini-live",
        }
    }
}

/// Whether the server opens its own connection to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionMode {
    /// The server keeps its own connection open (headless use, the demo); apps may still
    /// connect through the relay.
    #[default]
    Client,
    /// Only apps connect, through the relay (`GET /v1/realtime`), or calls are attached.
    Relay,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSettings {
    /// The wire protocol.
    pub protocol: SessionProtocol,
    /// `ws://` or `wss://` endpoint.
    pub url: String,
    /// The model a Gemini Live session's setup names (`models/...`); an app's own setup names
    /// its own in relay mode.
    pub model: Option<String>,
    pub mode: SessionMode,
    /// Name of the environment variable holding the bearer token, if any.
    pub api_key_env: Option<String>,
    pub dialect: Dialect,
    pub sync_timeout: Duration,
    pub max_tool_calls_per_window: usize,
    pub tool_call_window: Duration,
    /// A new user turn (the person speaks, types, or the app cancels the response), or the
    /// provider's cancellation of a response, cancels the calls still running of the turns it
    /// abandons.
    pub cancel_on_interruption: bool,
    /// What attaching to this character's calls may do.
    pub attach: AttachSettings,
}

/// What attaching to a character's live calls may do (`POST /api/sessions/attach`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachSettings {
    /// Environment variables besides the session's `api_key_env` whose key an attach may send.
    pub api_key_envs: Vec<String>,
    /// Hosts a `wss://` attachment may go to (lower case).
    pub hosts: Vec<String>,
    /// Attachments open at once.
    pub max_attachments: usize,
}

impl Default for AttachSettings {
    fn default() -> Self {
        Self {
            api_key_envs: Vec::new(),
            hosts: DEFAULT_ATTACH_HOSTS
                .iter()
                .map(|h| (*h).to_owned())
                .collect(),
            max_attachments: DEFAULT_MAX_ATTACHMENTS,
        }
    }
}

/// Why an attach is refused: the request field at fault, and why, in words that are the same
/// whether or not a variable it names exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AttachRefusal {
    pub field: &'static str,
    pub reason: String,
}

/// The key an attach to `url` for a character with `session` (if it has one) sends: none when
/// the request names none (`key_env`); otherwise the key of a variable the configuration allows
/// for it, and only to a place the configuration names (a `wss://` provider host, or the
/// character's own session endpoint). `wss://` goes only to the configured hosts.
pub(crate) fn attach_key(
    session: Option<&SessionSettings>,
    url: &CallUrl,
    key_env: Option<&str>,
) -> Result<Option<String>, AttachRefusal> {
    let defaults = AttachSettings::default();
    let attach = session.map_or(&defaults, |s| &s.attach);
    let own_endpoint = session.is_some_and(|s| url.same_origin_as(&s.url));
    if url.is_secure() && !own_endpoint && !attach.hosts.iter().any(|h| h == url.host()) {
        return Err(AttachRefusal {
            field: "url",
            reason: format!(
                "{:?} is wss:// to {}, which is not a provider host this character may attach to \
                 (the character's attach_hosts: {})",
                url.as_written(),
                url.host(),
                attach.hosts.join(", ")
            ),
        });
    }
    let Some(name) = key_env.filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let allowed = session.is_some_and(|s| s.api_key_env.as_deref() == Some(name))
        || attach.api_key_envs.iter().any(|n| n == name);
    if !allowed {
        // Said the same way whether the variable exists or not: a caller learns nothing about
        // the server's environment.
        return Err(AttachRefusal {
            field: "api_key_env",
            reason: format!(
                "{name:?} is not a key this character may attach with: the configuration names \
                 them ([character.session] api_key_env and attach_api_key_envs)"
            ),
        });
    }
    if !url.is_secure() && !own_endpoint {
        return Err(AttachRefusal {
            field: "api_key_env",
            reason: format!(
                "a key is sent only over wss:// to a provider host, or to the character's own \
                 session endpoint; {:?} is neither",
                url.as_written()
            ),
        });
    }
    match secrets::key_from_env(name) {
        Ok(key) => Ok(Some(key)),
        Err(_) => Err(AttachRefusal {
            field: "api_key_env",
            reason: format!("environment variable {name} is not set on the server"),
        }),
    }
}

impl SessionSettings {
    /// A session at `url` with every other setting at its default.
    pub fn new(url: impl Into<String>, dialect: Dialect) -> Self {
        Self {
            protocol: SessionProtocol::OpenaiRealtime,
            url: url.into(),
            model: None,
            mode: SessionMode::Client,
            api_key_env: None,
            dialect,
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
            max_tool_calls_per_window: DEFAULT_MAX_TOOL_CALLS_PER_WINDOW,
            tool_call_window: DEFAULT_TOOL_CALL_WINDOW,
            cancel_on_interruption: true,
            attach: AttachSettings::default(),
        }
    }

    /// Checks that every variable the configuration names for a key is set (`api_key_env`, then
    /// `attach_api_key_envs`), so a missing one stops start-up rather than fail a later attach.
    pub fn check_keys(&self) -> anyhow::Result<()> {
        self.api_key()?;
        for name in &self.attach.api_key_envs {
            secrets::key_from_env(name).with_context(|| {
                format!("environment variable {name} (session.attach_api_key_envs) is not set")
            })?;
        }
        Ok(())
    }

    /// A Gemini Live session at `url` (the public endpoint when `None`) with `model`, every
    /// other setting at its default.
    pub fn gemini(url: Option<&str>, model: Option<&str>) -> Self {
        let mut settings = Self::new(url.unwrap_or(GEMINI_URL), Dialect::Openai);
        settings.protocol = SessionProtocol::GeminiLive;
        settings.model = model.map(gemini_model);
        settings
    }

    /// The bearer token, read from the environment variable the configuration names.
    pub fn api_key(&self) -> anyhow::Result<Option<String>> {
        match &self.api_key_env {
            None => Ok(None),
            Some(var) => secrets::key_from_env(var).map(Some).with_context(|| {
                format!("environment variable {var} (session.api_key_env) is not set")
            }),
        }
    }
}

/// The public Gemini Live endpoint, the default `url` of a `gemini-live` session.
pub(crate) const GEMINI_URL: &str = "wss://generativelanguage.googleapis.com/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent";

/// A model name as Gemini's setup takes it: `models/<name>` (the prefix added when left out,
/// as the SDKs do).
fn gemini_model(model: &str) -> String {
    if model.contains('/') {
        model.to_owned()
    } else {
        format!("models/{model}")
    }
}

/// `[character.session]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileSession {
    kind: SessionProtocol,
    url: Option<String>,
    model: Option<String>,
    mode: Option<SessionMode>,
    api_key_env: Option<String>,
    dialect: Option<Dialect>,
    sync_timeout_seconds: Option<f64>,
    max_tool_calls_per_window: Option<i64>,
    tool_call_window_seconds: Option<f64>,
    cancel_on_interruption: Option<bool>,
    attach_api_key_envs: Option<Vec<String>>,
    attach_hosts: Option<Vec<String>>,
    max_attachments: Option<i64>,
}

impl FileSession {
    /// Checks the values; errors name the key (relative to `[character.session]`).
    pub(crate) fn into_settings(self) -> anyhow::Result<SessionSettings> {
        let written = match (self.kind, self.url) {
            (_, Some(url)) => url,
            (SessionProtocol::GeminiLive, None) => GEMINI_URL.to_owned(),
            (SessionProtocol::OpenaiRealtime, None) => bail!("key `url` is missing"),
        };
        let url = url::Url::parse(&written)
            .with_context(|| format!("key `url`: {written:?} is not a URL"))?;
        if !matches!(url.scheme(), "ws" | "wss") {
            bail!("key `url`: must start with ws:// or wss://, got {written:?}");
        }
        let mode = self.mode.unwrap_or_default();
        let mut settings = match self.kind {
            SessionProtocol::OpenaiRealtime => {
                if self.model.is_some() {
                    bail!(
                        "key `model`: an openai-realtime session names its model in its url \
                         (`?model=`); `model` is for gemini-live"
                    );
                }
                SessionSettings::new(written, self.dialect.unwrap_or(Dialect::Openai))
            }
            SessionProtocol::GeminiLive => {
                if self.dialect.is_some() {
                    bail!("key `dialect`: is for openai-realtime sessions, not gemini-live");
                }
                let model = self.model.as_deref().map(str::trim);
                if model.is_some_and(str::is_empty) {
                    bail!("key `model`: must not be empty");
                }
                if model.is_none() && mode == SessionMode::Client {
                    bail!(
                        "key `model`: a gemini-live session in client mode needs the model its \
                         setup names, e.g. model = \"gemini-live-2.5-flash-preview\""
                    );
                }
                SessionSettings::gemini(Some(&written), model)
            }
        };
        settings.api_key_env = self.api_key_env;
        settings.mode = mode;
        if let Some(s) = self.sync_timeout_seconds {
            settings.sync_timeout = seconds("sync_timeout_seconds", s, MAX_SYNC_TIMEOUT)?;
        }
        if let Some(n) = self.max_tool_calls_per_window {
            if n < 1 {
                bail!("key `max_tool_calls_per_window`: must be at least 1, got {n}");
            }
            settings.max_tool_calls_per_window =
                usize::try_from(n).context("key `max_tool_calls_per_window`: too large")?;
        }
        if let Some(s) = self.tool_call_window_seconds {
            settings.tool_call_window =
                seconds("tool_call_window_seconds", s, Duration::from_secs(3600))?;
        }
        if let Some(cancel) = self.cancel_on_interruption {
            settings.cancel_on_interruption = cancel;
        }
        if let Some(names) = self.attach_api_key_envs {
            if let Some(bad) = names.iter().find(|n| n.is_empty() || n.contains('=')) {
                bail!("key `attach_api_key_envs`: {bad:?} is not an environment variable name");
            }
            settings.attach.api_key_envs = names;
        }
        if let Some(hosts) = self.attach_hosts {
            settings.attach.hosts = Vec::with_capacity(hosts.len());
            for host in hosts {
                // Written as a URL's host is: a name, or an IP address (IPv6 in brackets); kept
                // as a parsed URL's host reads, so the two compare.
                let parsed = url::Host::parse(&host)
                    .ok()
                    .filter(|_| !host.is_empty())
                    .with_context(|| format!("key `attach_hosts`: {host:?} is not a host name"))?;
                settings.attach.hosts.push(parsed.to_string());
            }
        }
        if let Some(n) = self.max_attachments {
            if !(0..=MAX_ATTACHMENTS as i64).contains(&n) {
                bail!("key `max_attachments`: must be between 0 and {MAX_ATTACHMENTS}, got {n}");
            }
            settings.attach.max_attachments = n as usize;
        }
        Ok(settings)
    }
}

fn seconds(key: &str, value: f64, max: Duration) -> anyhow::Result<Duration> {
    if !(value > 0.0 && value <= max.as_secs_f64()) {
        bail!(
            "key `{key}`: must be greater than 0 and at most {}, got {value}",
            max.as_secs()
        );
    }
    Ok(Duration::from_secs_f64(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> CallUrl {
        CallUrl::parse(text).unwrap()
    }

    fn session(url: &str, key: Option<&str>, allowed: &[&str]) -> SessionSettings {
        let mut s = SessionSettings::new(url, Dialect::Openai);
        s.api_key_env = key.map(str::to_owned);
        s.attach.api_key_envs = allowed.iter().map(|n| (*n).to_owned()).collect();
        s
    }

    #[test]
    fn a_request_names_no_key_and_gets_none() {
        let openai = url("wss://api.openai.com/v1/realtime?call_id=c");
        assert_eq!(attach_key(None, &openai, None), Ok(None));
        assert_eq!(attach_key(None, &openai, Some("")), Ok(None));
        let loopback = url("ws://127.0.0.1:9/v1/realtime");
        let mio = session("wss://api.openai.com/v1/realtime", Some("PATH"), &[]);
        assert_eq!(attach_key(Some(&mio), &loopback, None), Ok(None));
    }

    #[test]
    fn a_name_the_configuration_does_not_allow_is_refused_alike_whether_set_or_not() {
        let openai = url("wss://api.openai.com/v1/realtime?call_id=c");
        let mio = session("wss://api.openai.com/v1/realtime", Some("PATH"), &["CALLS"]);
        let refusal = |name: &str| attach_key(Some(&mio), &openai, Some(name)).unwrap_err();
        for name in ["HOME", "RUNTIME_TOOLS_TEST_NEVER_SET"] {
            assert_eq!(
                refusal(name),
                AttachRefusal {
                    field: "api_key_env",
                    reason: format!(
                        "{name:?} is not a key this character may attach with: the configuration \
                         names them ([character.session] api_key_env and attach_api_key_envs)"
                    )
                }
            );
        }
        // Without a session, no name is allowed.
        assert_eq!(
            attach_key(None, &openai, Some("HOME")).unwrap_err().field,
            "api_key_env"
        );
        // The character's own key, and an allowed one, are read.
        assert_eq!(
            attach_key(Some(&mio), &openai, Some("PATH")),
            Ok(Some(std::env::var("PATH").unwrap()))
        );
        assert_eq!(
            refusal("CALLS").reason,
            "environment variable CALLS is not set on the server"
        );
    }

    #[test]
    fn keys_go_only_where_the_configuration_points() {
        let mio = session("ws://127.0.0.1:9000/v1/realtime", Some("PATH"), &[]);
        // The character's own endpoint takes its key, another loopback port does not.
        let own = url("ws://127.0.0.1:9000/v1/realtime?call_id=c");
        assert!(
            attach_key(Some(&mio), &own, Some("PATH"))
                .unwrap()
                .is_some()
        );
        let other = url("ws://127.0.0.1:9001/v1/realtime?call_id=c");
        assert_eq!(
            attach_key(Some(&mio), &other, Some("PATH"))
                .unwrap_err()
                .reason,
            "a key is sent only over wss:// to a provider host, or to the character's own \
             session endpoint; \"ws://127.0.0.1:9001/v1/realtime?call_id=c\" is neither"
        );
        // wss:// goes only to the configured hosts.
        let evil = url("wss://evil.example/v1/realtime");
        assert_eq!(
            attach_key(Some(&mio), &evil, None),
            Err(AttachRefusal {
                field: "url",
                reason: "\"wss://evil.example/v1/realtime\" is wss:// to evil.example, which is \
                         not a provider host this character may attach to (the character's \
                         attach_hosts: api.openai.com)"
                    .into()
            })
        );
        assert!(attach_key(None, &evil, None).is_err());
        // The character's own endpoint is allowed, wss:// or not, without being listed.
        let provider = session("wss://realtime.example/v1", Some("PATH"), &[]);
        let own = url("wss://realtime.example/v1?call_id=c");
        assert!(
            attach_key(Some(&provider), &own, Some("PATH"))
                .unwrap()
                .is_some()
        );
        let mut listed = mio.clone();
        listed.attach.hosts.push("evil.example".into());
        assert!(
            attach_key(Some(&listed), &evil, Some("PATH"))
                .unwrap()
                .is_some()
        );
    }
}
