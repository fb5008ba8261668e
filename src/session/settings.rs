//! `[character.session]`: how a character's live model session is reached.

use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use super::realtime::Dialect;

/// How long a change waits for `session.updated` unless configured.
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest configurable sync wait: a change request must answer within a human-scale time.
pub const MAX_SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// Tool calls a session runs per window before the runaway guard answers for the plugin.
pub const DEFAULT_MAX_TOOL_CALLS_PER_WINDOW: usize = 8;

/// The runaway guard's window.
pub const DEFAULT_TOOL_CALL_WINDOW: Duration = Duration::from_secs(15);

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
    /// `ws://` or `wss://` endpoint.
    pub url: String,
    pub mode: SessionMode,
    /// Name of the environment variable holding the bearer token, if any.
    pub api_key_env: Option<String>,
    pub dialect: Dialect,
    pub sync_timeout: Duration,
    pub max_tool_calls_per_window: usize,
    pub tool_call_window: Duration,
}

impl SessionSettings {
    /// A session at `url` with every other setting at its default.
    pub fn new(url: impl Into<String>, dialect: Dialect) -> Self {
        Self {
            url: url.into(),
            mode: SessionMode::Client,
            api_key_env: None,
            dialect,
            sync_timeout: DEFAULT_SYNC_TIMEOUT,
            max_tool_calls_per_window: DEFAULT_MAX_TOOL_CALLS_PER_WINDOW,
            tool_call_window: DEFAULT_TOOL_CALL_WINDOW,
        }
    }

    /// The bearer token, read from the environment variable the configuration names.
    pub fn api_key(&self) -> anyhow::Result<Option<String>> {
        match &self.api_key_env {
            None => Ok(None),
            Some(var) => std::env::var(var).map(Some).with_context(|| {
                format!("environment variable {var} (session.api_key_env) is not set")
            }),
        }
    }
}

/// The only session kind there is today; named so configurations stay explicit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum SessionKind {
    #[serde(rename = "openai-realtime")]
    OpenaiRealtime,
}

/// `[character.session]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSession {
    kind: SessionKind,
    url: String,
    mode: Option<SessionMode>,
    api_key_env: Option<String>,
    dialect: Option<Dialect>,
    sync_timeout_seconds: Option<f64>,
    max_tool_calls_per_window: Option<i64>,
    tool_call_window_seconds: Option<f64>,
}

impl FileSession {
    /// Checks the values; errors name the key (relative to `[character.session]`).
    pub fn into_settings(self) -> anyhow::Result<SessionSettings> {
        let SessionKind::OpenaiRealtime = self.kind;
        let url = url::Url::parse(&self.url)
            .with_context(|| format!("key `url`: {:?} is not a URL", self.url))?;
        if !matches!(url.scheme(), "ws" | "wss") {
            bail!(
                "key `url`: must start with ws:// or wss://, got {:?}",
                self.url
            );
        }
        let mut settings = SessionSettings::new(self.url, self.dialect.unwrap_or(Dialect::Openai));
        settings.api_key_env = self.api_key_env;
        settings.mode = self.mode.unwrap_or_default();
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
