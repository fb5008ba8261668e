//! `[[mcp_server]]`: an MCP server whose tools the characters get; and `[mcp_endpoint]`, the
//! sessions of `/mcp`, where the server serves the characters' tools.
//!
//! Either a child process spoken to over stdio (`command`, `args`, `env`) or a Streamable HTTP
//! endpoint on loopback (`url`, under the same loopback rule as callback URLs). Every problem is
//! an error that names the key.

use std::time::Duration;

use anyhow::{Context, bail};
use indexmap::IndexMap;
use serde::Deserialize;

use crate::domain::approval::McpApproval;
use crate::domain::callback_url::CallbackUrl;
use crate::domain::limits::{
    CallLimits, MAX_CONCURRENT, MAX_DEDUPE_SECONDS, MAX_RATE_CALLS, MAX_RATE_SECONDS, Rate,
};
use crate::domain::tool::Behavior;

/// How long a call of an MCP server's tool may take unless configured: the default timeout of
/// a registered tool.
pub(crate) const DEFAULT_MCP_TIMEOUT: Duration = crate::domain::tool::DEFAULT_TIMEOUT;

/// Longest configurable call timeout: the longest a registered tool may ask for.
pub(crate) const MAX_MCP_TIMEOUT_SECONDS: f64 = crate::domain::tool::MAX_TIMEOUT.as_secs() as f64;

/// The `source` prefix of an MCP server's tools: `mcp:<name>`.
pub(crate) const MCP_SOURCE_PREFIX: &str = "mcp:";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerSettings {
    /// Names the server in `mcp:<name>`, the log and `GET /api/mcp`.
    pub name: String,
    pub transport: McpTransport,
    /// The characters that get its tools; `None`: every character that exists when its tools
    /// are (re)listed.
    pub roles: Option<Vec<String>>,
    /// How long one `tools/call` may take.
    pub timeout: Duration,
    /// Whether a live conversation waits for its tools' calls (`behavior`, for all of them).
    pub behavior: Behavior,
    /// Which of its tools' calls wait for a person's approval (`approval`).
    pub approval: McpApproval,
    /// Each of its tools' limits (`max_concurrent`, `rate`, `dedupe_seconds`).
    pub limits: CallLimits,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking MCP on its stdin / stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Added to the server's own environment.
        env: IndexMap<String, String>,
    },
    /// A Streamable HTTP endpoint on loopback.
    Http { url: String },
}

impl McpServerSettings {
    /// The `source` its tools are registered with.
    pub fn source(&self) -> String {
        format!("{MCP_SOURCE_PREFIX}{}", self.name)
    }

    /// `stdio` or `http`, for reports.
    pub fn transport_kind(&self) -> &'static str {
        match self.transport {
            McpTransport::Stdio { .. } => "stdio",
            McpTransport::Http { .. } => "http",
        }
    }
}

/// `[[mcp_server]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileMcpServer {
    name: String,
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<IndexMap<String, String>>,
    url: Option<String>,
    roles: Option<Vec<String>>,
    timeout_seconds: Option<f64>,
    behavior: Option<String>,
    approval: Option<String>,
    max_concurrent: Option<i64>,
    rate: Option<FileRate>,
    dedupe_seconds: Option<i64>,
}

/// `rate = { calls = N, per_seconds = S }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRate {
    calls: i64,
    per_seconds: i64,
}

/// `value` of `key` when it is from `min` to `max`, else the error that names the key.
fn bounded(key: &str, value: i64, min: u32, max: u32) -> anyhow::Result<u32> {
    u32::try_from(value)
        .ok()
        .filter(|v| (min..=max).contains(v))
        .ok_or_else(|| anyhow::anyhow!("key `{key}`: must be from {min} to {max}, got {value}"))
}

impl FileMcpServer {
    /// Each of its tools' limits: `max_concurrent`, `rate`, `dedupe_seconds`.
    fn limits(&self) -> anyhow::Result<CallLimits> {
        let max_concurrent = match self.max_concurrent {
            None => None,
            Some(n) => Some(bounded("max_concurrent", n, 1, MAX_CONCURRENT)?),
        };
        let rate = match &self.rate {
            None => None,
            Some(rate) => Some(Rate {
                calls: bounded("rate.calls", rate.calls, 1, MAX_RATE_CALLS)?,
                per_seconds: bounded("rate.per_seconds", rate.per_seconds, 1, MAX_RATE_SECONDS)?,
            }),
        };
        let dedupe_seconds = match self.dedupe_seconds {
            None => 0,
            Some(s) => bounded("dedupe_seconds", s, 0, MAX_DEDUPE_SECONDS)?,
        };
        Ok(CallLimits {
            max_concurrent,
            rate,
            dedupe_seconds,
        })
    }
}

impl FileMcpServer {
    /// Checks every key; `characters` are the configured character names.
    pub(crate) fn into_settings(self, characters: &[&str]) -> anyhow::Result<McpServerSettings> {
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            bail!(
                "key `name`: {:?} must be non-empty and use only letters, digits, `-`, `_` and `.`",
                self.name
            );
        }
        let limits = self.limits()?;
        let transport = match (self.command, self.url) {
            (Some(_), Some(_)) => bail!("keys `command` and `url`: give one, not both"),
            (None, None) => bail!(
                "keys `command` / `url`: give `command` (a program speaking MCP on stdio) or \
                 `url` (a Streamable HTTP endpoint on loopback)"
            ),
            (Some(command), None) => {
                if command.trim().is_empty() {
                    bail!("key `command`: must not be empty");
                }
                McpTransport::Stdio {
                    command,
                    args: self.args.unwrap_or_default(),
                    env: self.env.unwrap_or_default(),
                }
            }
            (None, Some(url)) => {
                if self.args.is_some() || self.env.is_some() {
                    bail!("keys `args` / `env`: only for a `command`, not a `url`");
                }
                let parsed = CallbackUrl::parse(&url).map_err(|e| {
                    anyhow::anyhow!(
                        "key `url`: {url:?}: {}",
                        e.to_string().replace("callback_url", "url")
                    )
                })?;
                if parsed.url().scheme() != "http" {
                    bail!(
                        "key `url`: {url:?}: only http:// is supported (the server is on loopback)"
                    );
                }
                McpTransport::Http { url }
            }
        };
        let roles = match self.roles {
            None => None,
            Some(roles) => {
                for role in &roles {
                    if !characters.contains(&role.as_str()) {
                        bail!("key `roles`: {role:?} is not a configured character");
                    }
                }
                Some(roles)
            }
        };
        let timeout = match self.timeout_seconds {
            None => DEFAULT_MCP_TIMEOUT,
            Some(t) if t > 0.0 && t <= MAX_MCP_TIMEOUT_SECONDS => Duration::from_secs_f64(t),
            Some(t) => bail!(
                "key `timeout_seconds`: must be greater than 0 and at most {MAX_MCP_TIMEOUT_SECONDS}, got {t}"
            ),
        };
        let behavior = match self.behavior.as_deref() {
            None => Behavior::default(),
            Some(name) => Behavior::from_name(name).ok_or_else(|| {
                anyhow::anyhow!(
                    "key `behavior`: must be \"blocking\" or \"non_blocking\", got {name:?}"
                )
            })?,
        };
        let approval = match self.approval.as_deref() {
            None => McpApproval::default(),
            Some(name) => McpApproval::from_name(name).ok_or_else(|| {
                anyhow::anyhow!(
                    "key `approval`: must be \"never\", \"always\" or \"destructive\", got {name:?}"
                )
            })?,
        };
        Ok(McpServerSettings {
            name: self.name,
            transport,
            roles,
            timeout,
            behavior,
            approval,
            limits,
        })
    }
}

/// Checks a list of servers: each as [`FileMcpServer::into_settings`], and no name twice.
pub(crate) fn servers_from_file(
    servers: Vec<FileMcpServer>,
    characters: &[&str],
) -> anyhow::Result<Vec<McpServerSettings>> {
    let mut out: Vec<McpServerSettings> = Vec::with_capacity(servers.len());
    for (i, server) in servers.into_iter().enumerate() {
        let settings = server
            .into_settings(characters)
            .with_context(|| format!("in `mcp_server[{i}]`"))?;
        if out.iter().any(|s| s.name == settings.name) {
            bail!(
                "in `mcp_server[{i}]`: key `name`: duplicate MCP server name {:?}",
                settings.name
            );
        }
        out.push(settings);
    }
    Ok(out)
}

/// `/mcp` sessions a character may have open at once, unless configured: a few MCP clients
/// (editors, agents) each with a session or two; a session costs its worker and buffers (about
/// 100 KiB) until it ends or expires.
pub const DEFAULT_MAX_MCP_SESSIONS: usize = 64;

/// Most configurable `/mcp` sessions per character.
pub(crate) const MAX_MCP_SESSIONS: usize = 10_000;

/// How long an `/mcp` session may go without a request (and without an open stream) before it
/// is let go, unless configured: an MCP client that comes back after it gets 404 and
/// initializes again, as the transport says; a session nobody ends (no `DELETE`) must not hold
/// its memory for long.
pub const DEFAULT_MCP_SESSION_IDLE: Duration = Duration::from_secs(5 * 60);

/// Longest configurable idle time of an `/mcp` session.
pub(crate) const MAX_MCP_SESSION_IDLE: Duration = Duration::from_secs(24 * 3600);

/// `[mcp_endpoint]`: the sessions of `/mcp`, where the server serves each character's tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpEndpointSettings {
    /// Sessions a character may have open at once; past it an idle one makes room, or the
    /// `initialize` is refused (503).
    pub max_sessions: usize,
    /// How long a session may go unused before it is let go.
    pub session_idle: Duration,
}

impl Default for McpEndpointSettings {
    fn default() -> Self {
        Self {
            max_sessions: DEFAULT_MAX_MCP_SESSIONS,
            session_idle: DEFAULT_MCP_SESSION_IDLE,
        }
    }
}

/// `[mcp_endpoint]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileMcpEndpoint {
    max_sessions: Option<i64>,
    session_idle_seconds: Option<f64>,
}

impl FileMcpEndpoint {
    /// Checks the table; keys it leaves out keep their defaults.
    pub(crate) fn into_settings(self) -> anyhow::Result<McpEndpointSettings> {
        let mut settings = McpEndpointSettings::default();
        if let Some(max) = self.max_sessions {
            if !(1..=MAX_MCP_SESSIONS as i64).contains(&max) {
                bail!(
                    "key `mcp_endpoint.max_sessions`: must be from 1 to {MAX_MCP_SESSIONS}, got {max}"
                );
            }
            settings.max_sessions = max as usize;
        }
        if let Some(seconds) = self.session_idle_seconds {
            if !(seconds > 0.0 && seconds <= MAX_MCP_SESSION_IDLE.as_secs_f64()) {
                bail!(
                    "key `mcp_endpoint.session_idle_seconds`: must be greater than 0 and at most \
                     {}, got {seconds}",
                    MAX_MCP_SESSION_IDLE.as_secs()
                );
            }
            settings.session_idle = Duration::from_secs_f64(seconds);
        }
        Ok(settings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<Vec<McpServerSettings>> {
        #[derive(Deserialize)]
        struct File {
            mcp_server: Vec<FileMcpServer>,
        }
        let file: File = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        servers_from_file(file.mcp_server, &["Lanlan", "Mio"])
    }

    fn error(text: &str) -> String {
        format!("{:#}", parse(text).unwrap_err())
    }

    #[test]
    fn stdio_and_http_servers() {
        let servers = parse(
            r#"
            [[mcp_server]]
            name = "time"
            command = "mcp-server-time"
            args = ["--local-timezone", "UTC"]
            env = { TZ = "UTC" }
            roles = ["Mio"]
            timeout_seconds = 5
            [[mcp_server]]
            name = "everything"
            url = "http://127.0.0.1:3001/mcp"
            behavior = "non_blocking"
            "#,
        )
        .unwrap();
        assert_eq!(
            servers[0],
            McpServerSettings {
                name: "time".into(),
                transport: McpTransport::Stdio {
                    command: "mcp-server-time".into(),
                    args: vec!["--local-timezone".into(), "UTC".into()],
                    env: IndexMap::from([("TZ".to_owned(), "UTC".to_owned())]),
                },
                roles: Some(vec!["Mio".into()]),
                timeout: Duration::from_secs(5),
                behavior: Behavior::Blocking,
                approval: McpApproval::Never,
                limits: CallLimits::default(),
            }
        );
        assert_eq!(servers[0].source(), "mcp:time");
        assert_eq!(servers[1].roles, None);
        assert_eq!(servers[1].timeout, DEFAULT_MCP_TIMEOUT);
        assert_eq!(servers[1].behavior, Behavior::NonBlocking);
        assert_eq!(servers[1].transport_kind(), "http");
        assert_eq!(servers[1].limits, CallLimits::default());
        let limited = parse(
            r#"
            [[mcp_server]]
            name = "arm"
            command = "robot-arm"
            max_concurrent = 1
            rate = { calls = 2, per_seconds = 60 }
            dedupe_seconds = 5
            "#,
        )
        .unwrap();
        assert_eq!(
            limited[0].limits,
            CallLimits {
                max_concurrent: Some(1),
                rate: Some(Rate {
                    calls: 2,
                    per_seconds: 60
                }),
                dedupe_seconds: 5,
            }
        );
    }

    #[test]
    fn every_problem_names_its_key() {
        let cases = [
            ("name = \"\"\ncommand = \"x\"", "mcp_server[0]`: key `name`"),
            ("name = \"a b\"\ncommand = \"x\"", "key `name`"),
            ("name = \"a\"", "keys `command` / `url`"),
            (
                "name = \"a\"\ncommand = \"x\"\nurl = \"http://127.0.0.1/\"",
                "give one, not both",
            ),
            (
                "name = \"a\"\nurl = \"http://example.com/mcp\"",
                "key `url`: \"http://example.com/mcp\": url host \"example.com\" is not loopback",
            ),
            (
                "name = \"a\"\nurl = \"https://127.0.0.1/mcp\"",
                "only http://",
            ),
            (
                "name = \"a\"\nurl = \"http://127.0.0.1/\"\nargs = []",
                "keys `args` / `env`",
            ),
            (
                "name = \"a\"\ncommand = \"x\"\nroles = [\"Nobody\"]",
                "key `roles`: \"Nobody\" is not a configured character",
            ),
            (
                "name = \"a\"\ncommand = \"x\"\ntimeout_seconds = 0",
                "key `timeout_seconds`",
            ),
            (
                "name = \"a\"\ncommand = \"x\"\nbehavior = \"later\"",
                "key `behavior`",
            ),
            (
                "name = \"a\"\ncommand = \"x\"\ntimeout_seconds = 301",
                "at most 300",
            ),
            ("name = \"a\"\ncommand = \"x\"\ncolour = 1", "colour"),
            (
                "name = \"a\"\ncommand = \"x\"\nmax_concurrent = 0",
                "key `max_concurrent`: must be from 1 to 1024, got 0",
            ),
            (
                "name = \"a\"\ncommand = \"x\"\nrate = { calls = 2, per_seconds = 86401 }",
                "key `rate.per_seconds`: must be from 1 to 86400, got 86401",
            ),
            (
                "name = \"a\"\ncommand = \"x\"\nrate = { calls = 2 }",
                "per_seconds",
            ),
            (
                "name = \"a\"\ncommand = \"x\"\ndedupe_seconds = -1",
                "key `dedupe_seconds`: must be from 0 to 300, got -1",
            ),
        ];
        for (body, expected) in cases {
            let e = error(&format!("[[mcp_server]]\n{body}\n"));
            assert!(e.contains(expected), "{body:?}: {e}");
        }
        let e = error(
            "[[mcp_server]]\nname = \"a\"\ncommand = \"x\"\n[[mcp_server]]\nname = \"a\"\ncommand = \"y\"\n",
        );
        assert!(
            e.contains("mcp_server[1]") && e.contains("duplicate"),
            "{e}"
        );
    }
}
