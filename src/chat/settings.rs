//! `[character.chat]`: the OpenAI-compatible chat-completions model a character's text chat
//! talks to. Every problem is an error that names the key (relative to `[character.chat]`).

use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::domain::secrets;

/// Model calls of one chat request that may run tools, unless configured: the reference's cap
/// (three rounds of tools, then one last call for words).
pub(crate) const DEFAULT_MAX_TOOL_ROUNDS: usize = 3;

/// Most configurable tool rounds: each round is a model call and a set of tool calls, so a
/// request past a few dozen rounds is a model looping, not a conversation.
pub(crate) const MAX_TOOL_ROUNDS: usize = 32;

/// How long the upstream may take to start its answer, and then between two parts of a
/// streamed answer, unless configured. A local model on a CPU can take minutes to read a long
/// history before its first token; five minutes leaves room for that and still ends a request
/// to a model that hung.
pub(crate) const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(300);

/// Longest configurable upstream timeout.
pub(crate) const MAX_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3600);

/// Chat requests of one character that may run at once, unless configured: one person's apps
/// rarely have more than a couple going; each may carry a 32 MiB body (several times that once
/// read) and hold an upstream connection and callbacks, so a runaway app is stopped at a few
/// hundred megabytes with a 429, not at the machine's memory.
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 8;

/// Most configurable concurrent requests per character.
pub(crate) const MAX_CONCURRENT_REQUESTS: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatSettings {
    /// The upstream's OpenAI-compatible base URL (`.../v1`), `http://` or `https://`, any host.
    pub url: String,
    /// Name of the environment variable holding the upstream's key, sent as a bearer token.
    /// Without it, an `Authorization` the app sends is passed upstream.
    pub api_key_env: Option<String>,
    /// The model used when the app's request names none.
    pub model: Option<String>,
    /// Model calls of one request that may run tools; the call after the last of them goes
    /// without tools, so the model answers in words.
    pub max_tool_rounds: usize,
    /// Whether the model takes images in user messages (tool result images are shown to it).
    pub vision: bool,
    /// Longest wait for the upstream's answer to begin, and between two parts of a stream.
    pub timeout: Duration,
    /// Chat requests of the character that may run at once; more are answered with a 429.
    pub max_concurrent_requests: usize,
}

impl ChatSettings {
    /// A chat upstream at `url` with every other setting at its default.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            api_key_env: None,
            model: None,
            max_tool_rounds: DEFAULT_MAX_TOOL_ROUNDS,
            vision: false,
            timeout: DEFAULT_UPSTREAM_TIMEOUT,
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
        }
    }

    /// The upstream's key, read from the environment variable the configuration names.
    pub fn api_key(&self) -> anyhow::Result<Option<String>> {
        match &self.api_key_env {
            None => Ok(None),
            Some(var) => secrets::key_from_env(var).map(Some).with_context(|| {
                format!("environment variable {var} (chat.api_key_env) is not set")
            }),
        }
    }
}

/// `[character.chat]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileChat {
    url: String,
    api_key_env: Option<String>,
    model: Option<String>,
    max_tool_rounds: Option<i64>,
    vision: Option<bool>,
    timeout_seconds: Option<f64>,
    max_concurrent_requests: Option<i64>,
}

impl FileChat {
    /// Checks the values; errors name the key.
    pub(crate) fn into_settings(self) -> anyhow::Result<ChatSettings> {
        let url = url::Url::parse(&self.url)
            .with_context(|| format!("key `url`: {:?} is not a URL", self.url))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            bail!(
                "key `url`: must be an http:// or https:// base URL with a host, e.g. \
                 http://127.0.0.1:11434/v1, got {:?}",
                self.url
            );
        }
        if url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
            bail!(
                "key `url`: must not carry a #fragment or user:password@ (use api_key_env for \
                 the key), got {:?}",
                self.url
            );
        }
        let mut settings = ChatSettings::new(self.url);
        settings.api_key_env = self.api_key_env;
        if let Some(model) = self.model {
            if model.is_empty() {
                bail!("key `model`: must not be empty (leave it out to use the app's model)");
            }
            settings.model = Some(model);
        }
        if let Some(rounds) = self.max_tool_rounds {
            if !(1..=MAX_TOOL_ROUNDS as i64).contains(&rounds) {
                bail!("key `max_tool_rounds`: must be from 1 to {MAX_TOOL_ROUNDS}, got {rounds}");
            }
            settings.max_tool_rounds = rounds as usize;
        }
        settings.vision = self.vision.unwrap_or(false);
        if let Some(seconds) = self.timeout_seconds {
            if !(seconds > 0.0 && seconds <= MAX_UPSTREAM_TIMEOUT.as_secs_f64()) {
                bail!(
                    "key `timeout_seconds`: must be greater than 0 and at most {}, got {seconds}",
                    MAX_UPSTREAM_TIMEOUT.as_secs()
                );
            }
            settings.timeout = Duration::from_secs_f64(seconds);
        }
        if let Some(max) = self.max_concurrent_requests {
            if !(1..=MAX_CONCURRENT_REQUESTS as i64).contains(&max) {
                bail!(
                    "key `max_concurrent_requests`: must be from 1 to {MAX_CONCURRENT_REQUESTS}, \
                     got {max}"
                );
            }
            settings.max_concurrent_requests = max as usize;
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(text: &str) -> anyhow::Result<ChatSettings> {
        toml::from_str::<FileChat>(text)
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .into_settings()
    }

    fn error_of(text: &str) -> String {
        format!("{:#}", settings(text).unwrap_err())
    }

    #[test]
    fn every_key_is_read_and_defaults_fill_the_rest() {
        let full = settings(
            "url = \"http://127.0.0.1:11434/v1\"\napi_key_env = \"K\"\nmodel = \"qwen2.5\"\n\
             max_tool_rounds = 5\nvision = true\ntimeout_seconds = 2.5\n\
             max_concurrent_requests = 2\n",
        )
        .unwrap();
        assert_eq!(full.url, "http://127.0.0.1:11434/v1");
        assert_eq!(full.api_key_env.as_deref(), Some("K"));
        assert_eq!(full.model.as_deref(), Some("qwen2.5"));
        assert_eq!(full.max_tool_rounds, 5);
        assert!(full.vision);
        assert_eq!(full.timeout, Duration::from_millis(2500));
        assert_eq!(full.max_concurrent_requests, 2);

        let plain = settings("url = \"https://api.openai.com/v1\"\n").unwrap();
        assert_eq!(plain, ChatSettings::new("https://api.openai.com/v1"));
        assert_eq!(plain.max_tool_rounds, DEFAULT_MAX_TOOL_ROUNDS);
    }

    #[test]
    fn bad_values_are_named() {
        assert!(error_of("url = \"ws://127.0.0.1:1/v1\"").contains("key `url`"));
        assert!(error_of("url = \"nowhere\"").contains("key `url`"));
        assert!(error_of("url = \"http://u:p@127.0.0.1:1/v1\"").contains("user:password"));
        let rounds = |n: i64| error_of(&format!("url = \"http://h/v1\"\nmax_tool_rounds = {n}"));
        assert!(rounds(0).contains("from 1 to 32"));
        assert!(rounds(33).contains("from 1 to 32"));
        assert!(error_of("url = \"http://h/v1\"\ntimeout_seconds = 0").contains("timeout_seconds"));
        assert!(error_of("url = \"http://h/v1\"\nmodel = \"\"").contains("key `model`"));
        let most = |n: i64| {
            error_of(&format!(
                "url = \"http://h/v1\"\nmax_concurrent_requests = {n}"
            ))
        };
        assert!(most(0).contains("from 1 to 1024"));
        assert!(most(1025).contains("key `max_concurrent_requests`"));
        assert!(error_of("url = \"http://h/v1\"\nvision = 1").contains("vision"));
        assert!(error_of("url = \"http://h/v1\"\ntemperature = 1").contains("temperature"));
    }
}
