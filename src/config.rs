//! Settings: the embedded default, the TOML configuration file and command-line overrides.
//!
//! Every problem stops start-up with an error that names the key and the file.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::actors::settings::CharacterSettings;
use crate::chat::settings::FileChat;
use crate::dispatch::settings::{DispatchSettings, FileDispatch};
use crate::domain::budget::{Budget, DEFAULT_BUDGET, MAX_BUDGET, SearchMode};
use crate::domain::operator::{Decisions, OperatorToken};
use crate::domain::ownership::{ConfiguredSource, TokenPolicy};
use crate::events::EventSettings;
use crate::mcp::settings::{
    FileMcpEndpoint, FileMcpServer, McpEndpointSettings, McpServerSettings, servers_from_file,
};
use crate::observe::trace::TraceSettings;
use crate::session::settings::FileSession;
use crate::state::settings::{FileState, StateSettings};

/// Where the server listens unless told otherwise: loopback only, a fixed port plugins know.
pub(crate) const DEFAULT_BIND: &str = "127.0.0.1:48911";

/// The one character of the embedded default configuration.
pub(crate) const DEFAULT_CHARACTER: &str = "Lanlan";

/// How long a graceful stop (SIGTERM, SIGINT) lets running tool calls finish before they are
/// answered with a tool error: long enough for the usual tool, short enough for a supervisor's
/// stop timeout (systemd's default is 90 s, Docker's 10 s after which it kills: 8 s leaves the
/// answers time to go out).
pub(crate) const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(8);

/// Longest configurable grace period: no call runs longer than a tool's own timeout may be.
pub(crate) const MAX_STOP_GRACE: Duration = crate::domain::tool::MAX_TIMEOUT;

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub bind: SocketAddr,
    pub dispatch: DispatchSettings,
    /// Characters in configuration order.
    pub characters: Vec<CharacterSettings>,
    /// HTTP worker threads; `None` is one per CPU.
    pub workers: Option<usize>,
    /// How long a graceful stop lets running calls finish (see `DEFAULT_STOP_GRACE`, 8 s).
    pub stop_grace: Duration,
    /// The event stream's tunables (not in the file: the defaults suit every deployment).
    pub events: EventSettings,
    /// MCP servers whose tools the characters get, in configuration order.
    pub mcp_servers: Vec<McpServerSettings>,
    /// The sessions of `/mcp`.
    pub mcp_endpoint: McpEndpointSettings,
    /// Span export (not in the file: the standard `OTEL_*` variables, which the binary reads
    /// with [`TraceSettings::from_env`]); off by default.
    pub trace: TraceSettings,
    /// `[security] plugin_tokens`: whether every change a plugin makes needs an
    /// `X-Plugin-Token` (`required`) or only changes to sources bound to one (`optional`).
    pub plugin_tokens: TokenPolicy,
    /// `[security] operator_token_env`: the person's credential (`domain::operator`); `None`
    /// makes one at start ([`crate::Application::operator_token`] gives it).
    pub operator_token: Option<OperatorToken>,
    /// `[security] decisions`: whether deciding an approval needs the operator token.
    pub decisions: Decisions,
    /// `[state]` (or `--state FILE`): where registrations are kept across restarts; off by
    /// default.
    pub state: StateSettings,
    /// `[[security.source]]`: sources bound to a token before any plugin runs, in
    /// configuration order.
    pub configured_sources: Vec<ConfiguredSource>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            bind: DEFAULT_BIND
                .parse()
                .expect("the default bind address is valid"),
            dispatch: DispatchSettings::default(),
            characters: vec![CharacterSettings::new(DEFAULT_CHARACTER)],
            workers: None,
            stop_grace: DEFAULT_STOP_GRACE,
            events: EventSettings::default(),
            mcp_servers: Vec::new(),
            mcp_endpoint: McpEndpointSettings::default(),
            trace: TraceSettings::default(),
            plugin_tokens: TokenPolicy::default(),
            operator_token: None,
            decisions: Decisions::default(),
            state: StateSettings::default(),
            configured_sources: Vec::new(),
        }
    }
}

/// The configuration file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    bind: Option<String>,
    stop_grace_seconds: Option<f64>,
    #[serde(default)]
    dispatch: FileDispatch,
    #[serde(default)]
    character: Vec<FileCharacter>,
    #[serde(default)]
    mcp_server: Vec<FileMcpServer>,
    #[serde(default)]
    mcp_endpoint: FileMcpEndpoint,
    #[serde(default)]
    security: FileSecurity,
    #[serde(default)]
    state: FileState,
}

/// `[security]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSecurity {
    /// `"optional"` (the default) or `"required"`.
    #[serde(default)]
    plugin_tokens: TokenPolicy,
    /// `[[security.source]]`: sources bound from start-up on.
    #[serde(default)]
    source: Vec<FileConfiguredSource>,
    /// The environment variable that holds the operator token; without it one is made at start.
    operator_token_env: Option<String>,
    /// `"operator"` (the default) or `"loopback"`.
    #[serde(default)]
    decisions: Decisions,
}

/// One `[[security.source]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfiguredSource {
    source: String,
    token_env: String,
}

/// The `[[security.source]]` entries, checked: each names a source once, and a variable.
fn configured_sources(file: Vec<FileConfiguredSource>) -> anyhow::Result<Vec<ConfiguredSource>> {
    let mut sources: Vec<ConfiguredSource> = Vec::with_capacity(file.len());
    for (i, entry) in file.into_iter().enumerate() {
        if entry.source.is_empty() {
            bail!("key `security.source[{i}].source`: a source must not be empty");
        }
        if sources.iter().any(|s| s.source == entry.source) {
            bail!(
                "key `security.source[{i}].source`: source {:?} is configured twice",
                entry.source
            );
        }
        if entry.token_env.is_empty() || entry.token_env.contains(['=', '\0']) {
            bail!(
                "key `security.source[{i}].token_env`: must name an environment variable, got \
                 {:?}",
                entry.token_env
            );
        }
        sources.push(ConfiguredSource {
            source: entry.source,
            token_env: entry.token_env,
        });
    }
    Ok(sources)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileCharacter {
    name: String,
    session: Option<FileSession>,
    chat: Option<FileChat>,
    approval: Option<FileApproval>,
    tools: Option<FileTools>,
}

/// `[character.tools]`: how many of the character's tools one model session is given at once.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTools {
    budget: Option<usize>,
    #[serde(default)]
    pinned: Vec<String>,
    #[serde(default)]
    search: SearchMode,
}

impl FileTools {
    fn into_budget(self) -> anyhow::Result<Budget> {
        let budget = self.budget.unwrap_or(DEFAULT_BUDGET);
        if !(1..=MAX_BUDGET).contains(&budget) {
            bail!("key `budget`: must be 1 to {MAX_BUDGET}, got {budget}");
        }
        if let Some(empty) = self.pinned.iter().position(String::is_empty) {
            bail!("key `pinned[{empty}]`: a tool name must not be empty");
        }
        Ok(Budget {
            budget,
            pinned: self.pinned,
            search: self.search,
        })
    }
}

/// `[character.approval]`: tools whose calls always wait for a person's approval, whatever
/// their registration says.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileApproval {
    #[serde(default)]
    always: Vec<String>,
}

impl Settings {
    /// Reads a configuration file. Keys it leaves out keep their defaults; a file with no
    /// `[[character]]` has no characters.
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read configuration file {}", path.display()))?;
        Self::from_toml(&text).with_context(|| format!("in configuration file {}", path.display()))
    }

    /// Parses configuration text.
    pub fn from_toml(text: &str) -> anyhow::Result<Self> {
        let file: FileConfig = toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut settings = Settings::default();
        if let Some(bind) = file.bind {
            settings.bind = parse_bind(&bind).context("key `bind`")?;
        }
        if let Some(grace) = file.stop_grace_seconds {
            if !(grace > 0.0 && grace <= MAX_STOP_GRACE.as_secs_f64()) {
                bail!(
                    "key `stop_grace_seconds`: must be greater than 0 and at most {}, got {grace}",
                    MAX_STOP_GRACE.as_secs()
                );
            }
            settings.stop_grace = Duration::from_secs_f64(grace);
        }
        settings.dispatch = file.dispatch.into_settings()?;
        settings.mcp_endpoint = file.mcp_endpoint.into_settings()?;
        settings.plugin_tokens = file.security.plugin_tokens;
        if let Some(name) = &file.security.operator_token_env {
            let token = OperatorToken::from_env(name)
                .map_err(|e| anyhow::anyhow!("key `security.operator_token_env`: {e}"))?;
            settings.operator_token = Some(token);
        }
        settings.decisions = file.security.decisions;
        settings.configured_sources = configured_sources(file.security.source)?;
        settings.state = file.state.into_settings()?;
        settings.characters = Vec::with_capacity(file.character.len());
        for (i, c) in file.character.into_iter().enumerate() {
            settings
                .add_character(c.name)
                .with_context(|| format!("key `character[{i}].name`"))?;
            if let Some(session) = c.session {
                let session = session
                    .into_settings()
                    .with_context(|| format!("in `character[{i}].session`"))?;
                settings.characters[i].session = Some(session);
            }
            if let Some(chat) = c.chat {
                let chat = chat
                    .into_settings()
                    .with_context(|| format!("in `character[{i}].chat`"))?;
                settings.characters[i].chat = Some(chat);
            }
            if let Some(approval) = c.approval {
                if let Some(empty) = approval.always.iter().position(String::is_empty) {
                    bail!(
                        "key `character[{i}].approval.always[{empty}]`: a tool name must not be empty"
                    );
                }
                settings.characters[i].approval_always = approval.always;
            }
            if let Some(tools) = c.tools {
                settings.characters[i].tools = tools
                    .into_budget()
                    .with_context(|| format!("in `character[{i}].tools`"))?;
            }
        }
        settings.mcp_servers = servers_from_file(file.mcp_server, &settings.character_names())?;
        Ok(settings)
    }

    fn character_names(&self) -> Vec<&str> {
        self.characters.iter().map(|c| c.name.as_str()).collect()
    }

    /// Replaces the character list (the `--character` options).
    pub fn set_characters(&mut self, names: Vec<String>) -> anyhow::Result<()> {
        self.characters.clear();
        for name in names {
            self.add_character(name).context("option --character")?;
        }
        let names = self.character_names();
        for server in &self.mcp_servers {
            for role in server.roles.iter().flatten() {
                if !names.contains(&role.as_str()) {
                    bail!(
                        "option --character: MCP server {:?} gives its tools to {role:?}, which is \
                         no longer a character",
                        server.name
                    );
                }
            }
        }
        Ok(())
    }

    fn add_character(&mut self, name: String) -> anyhow::Result<()> {
        validate_character_name(&name)?;
        if self.characters.iter().any(|c| c.name == name) {
            bail!("duplicate character name {name:?}");
        }
        self.characters.push(CharacterSettings::new(name));
        Ok(())
    }
}

/// Parses `ADDR:PORT`, IPv6 in brackets (`[::]:48911`).
pub fn parse_bind(text: &str) -> anyhow::Result<SocketAddr> {
    text.parse().with_context(|| {
        format!("{text:?} is not an ADDR:PORT socket address (e.g. 127.0.0.1:48911 or [::1]:48911)")
    })
}

/// A character name is what `role` fields carry: non-empty, without control characters.
pub(crate) fn validate_character_name(name: &str) -> anyhow::Result<()> {
    if name.is_empty() {
        bail!("character name must not be empty");
    }
    if name.chars().any(char::is_control) {
        bail!("character name {name:?} must not contain control characters");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::settings::{DEFAULT_MAX_CALLBACKS_IN_FLIGHT, DEFAULT_MAX_RESPONSE_BYTES};

    #[test]
    fn full_file() {
        let s = Settings::from_toml(
            r#"
            bind = "127.0.0.1:0"
            stop_grace_seconds = 2.5
            [dispatch]
            max_response_bytes = 1024
            max_callbacks_in_flight = 16
            validate_arguments = false
            [mcp_endpoint]
            max_sessions = 3
            session_idle_seconds = 90
            [[character]]
            name = "Lanlan"
            [[character]]
            name = "Mio"
            "#,
        )
        .unwrap();
        assert_eq!(s.bind, "127.0.0.1:0".parse().unwrap());
        assert_eq!(s.dispatch.max_response_bytes, 1024);
        assert_eq!(s.stop_grace, Duration::from_millis(2500));
        assert_eq!(s.dispatch.max_callbacks_in_flight, 16);
        assert!(!s.dispatch.validate_arguments);
        assert_eq!(
            s.mcp_endpoint,
            McpEndpointSettings {
                max_sessions: 3,
                session_idle: Duration::from_secs(90)
            }
        );
        let names: Vec<_> = s.characters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["Lanlan", "Mio"]);
    }

    #[test]
    fn defaults_fill_missing_keys() {
        let s = Settings::from_toml("[[character]]\nname = \"A\"\n").unwrap();
        assert_eq!(s.bind, DEFAULT_BIND.parse().unwrap());
        assert_eq!(s.dispatch.max_response_bytes, DEFAULT_MAX_RESPONSE_BYTES);
        assert_eq!(
            s.dispatch.max_callbacks_in_flight,
            DEFAULT_MAX_CALLBACKS_IN_FLIGHT
        );
        assert!(s.dispatch.validate_arguments);
        assert_eq!(s.mcp_endpoint, McpEndpointSettings::default());
        assert!(error_of("[mcp_endpoint]\nmax_sessions = 0").contains("mcp_endpoint.max_sessions"));
        assert!(
            error_of("[mcp_endpoint]\nsession_idle_seconds = -1")
                .contains("mcp_endpoint.session_idle_seconds")
        );
    }

    fn error_of(text: &str) -> String {
        format!("{:#}", Settings::from_toml(text).unwrap_err())
    }

    #[test]
    fn security_and_state() {
        let s = Settings::from_toml(
            "[security]\nplugin_tokens = \"required\"\n[state]\npath = \"s.redb\"\n\
             dormant_ttl_seconds = 2.5\nnew = true\n",
        )
        .unwrap();
        assert_eq!(s.plugin_tokens, TokenPolicy::Required);
        assert_eq!(s.state.path.as_deref(), Some(Path::new("s.redb")));
        assert_eq!(s.state.dormant_ttl, Duration::from_millis(2500));
        assert!(s.state.new);
        let d = Settings::from_toml("").unwrap();
        assert_eq!(d.plugin_tokens, TokenPolicy::Optional);
        assert_eq!(d.state, StateSettings::default());
        assert!(error_of("[security]\nplugin_tokens = \"sometimes\"").contains("plugin_tokens"));
        let bound = Settings::from_toml(
            "[[security.source]]\nsource = \"plugin:notes\"\ntoken_env = \"NOTES_TOKEN\"\n",
        )
        .unwrap();
        assert_eq!(
            bound.configured_sources,
            [ConfiguredSource {
                source: "plugin:notes".into(),
                token_env: "NOTES_TOKEN".into()
            }]
        );
        let twice = "[[security.source]]\nsource = \"a\"\ntoken_env = \"A\"\n\
                     [[security.source]]\nsource = \"a\"\ntoken_env = \"B\"\n";
        assert_eq!(
            error_of(twice),
            "key `security.source[1].source`: source \"a\" is configured twice"
        );
        assert!(
            error_of("[[security.source]]\nsource = \"a\"\ntoken_env = \"\"\n")
                .contains("security.source[0].token_env")
        );
        assert!(error_of("[[security.source]]\nsource = \"a\"\n").contains("token_env"));
        assert!(error_of("[state]\ndormant_ttl_seconds = 0").contains("state.dormant_ttl_seconds"));
    }

    #[test]
    fn the_operator_token_and_who_decides() {
        let d = Settings::from_toml("").unwrap();
        assert_eq!(d.operator_token, None, "made at start, not read");
        assert_eq!(d.decisions, Decisions::Operator);
        let s = Settings::from_toml("[security]\ndecisions = \"loopback\"\n").unwrap();
        assert_eq!(s.decisions, Decisions::Loopback);
        assert!(error_of("[security]\ndecisions = \"anyone\"").contains("decisions"));
        // SAFETY: no other test reads or writes these variables.
        unsafe {
            std::env::set_var("RT_CONFIG_TEST_OPERATOR", "0123456789abcdef0123");
            std::env::set_var("RT_CONFIG_TEST_OPERATOR_SHORT", "too short");
        }
        let s = Settings::from_toml("[security]\noperator_token_env = \"RT_CONFIG_TEST_OPERATOR\"")
            .unwrap();
        let token = s.operator_token.unwrap();
        assert_eq!(token.expose(), "0123456789abcdef0123");
        let missing = error_of("[security]\noperator_token_env = \"RT_CONFIG_TEST_NOT_SET\"");
        assert_eq!(
            missing,
            "key `security.operator_token_env`: environment variable RT_CONFIG_TEST_NOT_SET is \
             not set"
        );
        let short = error_of("[security]\noperator_token_env = \"RT_CONFIG_TEST_OPERATOR_SHORT\"");
        assert!(
            short.contains("RT_CONFIG_TEST_OPERATOR_SHORT") && short.contains("16 to 256"),
            "{short}"
        );
        assert!(
            !short.contains("too short"),
            "the value is never repeated: {short}"
        );
    }

    #[test]
    fn a_characters_tool_budget() {
        let s = Settings::from_toml(
            "[[character]]\nname = \"A\"\n[character.tools]\nbudget = 8\npinned = [\"lights\"]\n\
             search = \"off\"\n[[character]]\nname = \"B\"\n",
        )
        .unwrap();
        assert_eq!(
            s.characters[0].tools,
            Budget {
                budget: 8,
                pinned: vec!["lights".into()],
                search: SearchMode::Off
            }
        );
        assert_eq!(s.characters[1].tools, Budget::default());
        assert_eq!(Budget::default().budget, 128);
        for (text, why) in [
            ("budget = 0", "key `budget`: must be 1 to 1024, got 0"),
            ("budget = 1025", "key `budget`: must be 1 to 1024, got 1025"),
            (
                "pinned = [\"\"]",
                "key `pinned[0]`: a tool name must not be empty",
            ),
        ] {
            let e = error_of(&format!(
                "[[character]]\nname = \"A\"\n[character.tools]\n{text}"
            ));
            assert_eq!(e, format!("in `character[0].tools`: {why}"));
        }
        assert!(
            error_of("[[character]]\nname = \"A\"\n[character.tools]\nsearch = \"never\"")
                .contains("search")
        );
    }

    #[test]
    fn unknown_key_is_named() {
        assert!(error_of("bindd = \"x\"").contains("bindd"));
        assert!(error_of("[dispatch]\nmax_bytes = 1").contains("max_bytes"));
        assert!(error_of("[[character]]\nname = \"A\"\nmood = 1").contains("mood"));
    }

    #[test]
    fn duplicate_character_is_named() {
        let e = error_of("[[character]]\nname = \"A\"\n[[character]]\nname = \"A\"\n");
        assert!(
            e.contains("character[1].name") && e.contains("duplicate"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_are_named() {
        assert!(error_of("bind = \"nowhere\"").contains("`bind`"));
        assert!(error_of("[dispatch]\nmax_response_bytes = 0").contains("max_response_bytes"));
        assert!(
            error_of("[dispatch]\nmax_response_bytes = \"big\"").contains("max_response_bytes")
        );
        assert!(error_of("[dispatch]\nvalidate_arguments = 1").contains("validate_arguments"));
        assert!(error_of("[[character]]\nname = \"\"").contains("character[0].name"));
        assert!(error_of("stop_grace_seconds = 0").contains("`stop_grace_seconds`"));
        assert!(error_of("stop_grace_seconds = 301").contains("at most 300"));
        assert!(
            error_of("[dispatch]\nmax_callbacks_in_flight = 0").contains("max_callbacks_in_flight")
        );
    }

    #[test]
    fn session_mode_is_client_unless_relay_is_asked_for() {
        use crate::session::settings::SessionMode;
        let session = |extra: &str| {
            format!(
                "[[character]]\nname = \"Mio\"\n[character.session]\nkind = \"openai-realtime\"\n\
                 url = \"ws://127.0.0.1:9/v1/realtime\"\n{extra}"
            )
        };
        let mode = |extra: &str| {
            Settings::from_toml(&session(extra)).unwrap().characters[0]
                .session
                .as_ref()
                .unwrap()
                .mode
        };
        assert_eq!(mode(""), SessionMode::Client);
        assert_eq!(mode("mode = \"client\"\n"), SessionMode::Client);
        assert_eq!(mode("mode = \"relay\"\n"), SessionMode::Relay);
        let e = error_of(&session("mode = \"proxy\"\n"));
        assert!(e.contains("mode") && e.contains("proxy"), "{e}");
    }

    #[test]
    fn a_gemini_live_session_is_read_and_its_mistakes_named() {
        use crate::session::settings::{GEMINI_URL, SessionProtocol};
        let session = |extra: &str| {
            format!(
                "[[character]]\nname = \"Mio\"\n[character.session]\nkind = \"gemini-live\"\n\
                 {extra}"
            )
        };
        let settings = Settings::from_toml(&session("model = \"gemini-live-2.5-flash\"\n"))
            .unwrap()
            .characters
            .remove(0)
            .session
            .unwrap();
        assert_eq!(settings.protocol, SessionProtocol::GeminiLive);
        assert_eq!(settings.url, GEMINI_URL);
        assert_eq!(
            settings.model.as_deref(),
            Some("models/gemini-live-2.5-flash")
        );
        let own = Settings::from_toml(&session(
            "model = \"tunedModels/mine\"\nurl = \"ws://127.0.0.1:9/live\"\n",
        ))
        .unwrap()
        .characters
        .remove(0)
        .session
        .unwrap();
        assert_eq!(
            (own.url.as_str(), own.model.as_deref()),
            ("ws://127.0.0.1:9/live", Some("tunedModels/mine"))
        );
        let e = error_of(&session(""));
        assert!(e.contains("key `model`"), "{e}");
        let e = error_of(&session("model = \"m\"\ndialect = \"qwen\"\n"));
        assert!(e.contains("key `dialect`"), "{e}");
        // In relay mode the app's own setup names the model.
        let relayed = Settings::from_toml(&session("mode = \"relay\"\n")).unwrap();
        assert_eq!(relayed.characters[0].session.as_ref().unwrap().model, None);
        let e = error_of(
            "[[character]]\nname = \"Mio\"\n[character.session]\nkind = \"openai-realtime\"\n\
             url = \"ws://127.0.0.1:9/v1/realtime\"\nmodel = \"m\"\n",
        );
        assert!(
            e.contains("key `model`") && e.contains("gemini-live"),
            "{e}"
        );
        let e = error_of(
            "[[character]]\nname = \"Mio\"\n[character.session]\nkind = \"openai-realtime\"\n",
        );
        assert!(e.contains("key `url`"), "{e}");
    }

    #[test]
    fn calls_are_cancelled_on_interruption_unless_switched_off() {
        let session = |extra: &str| {
            format!(
                "[[character]]\nname = \"Mio\"\n[character.session]\nkind = \"openai-realtime\"\n\
                 url = \"ws://127.0.0.1:9/v1/realtime\"\n{extra}"
            )
        };
        let cancels = |extra: &str| {
            Settings::from_toml(&session(extra)).unwrap().characters[0]
                .session
                .as_ref()
                .unwrap()
                .cancel_on_interruption
        };
        assert!(cancels(""));
        assert!(cancels("cancel_on_interruption = true\n"));
        assert!(!cancels("cancel_on_interruption = false\n"));
        let e = error_of(&session("cancel_on_interruption = \"no\"\n"));
        assert!(
            e.contains("cancel_on_interruption") && e.contains("line 6"),
            "{e}"
        );
    }

    #[test]
    fn a_characters_chat_is_read_and_its_mistakes_named() {
        let chat = |extra: &str| {
            format!(
                "[[character]]\nname = \"Mio\"\n[character.chat]\nurl = \"http://127.0.0.1:11434/v1\"\n{extra}"
            )
        };
        let s = Settings::from_toml(&chat("model = \"qwen2.5\"\n")).unwrap();
        let settings = s.characters[0].chat.as_ref().unwrap();
        assert_eq!(settings.model.as_deref(), Some("qwen2.5"));
        assert_eq!(settings.max_tool_rounds, 3);
        let e = error_of(&chat("max_tool_rounds = 40\n"));
        assert!(
            e.contains("character[0].chat") && e.contains("max_tool_rounds"),
            "{e}"
        );
        let e = error_of(&chat("colour = 1\n"));
        assert!(e.contains("colour"), "{e}");
    }

    #[test]
    fn attach_keys_take_their_defaults_and_name_themselves_when_wrong() {
        use crate::session::settings::{AttachSettings, DEFAULT_MAX_ATTACHMENTS};
        let session = |extra: &str| {
            format!(
                "[[character]]\nname = \"Mio\"\n[character.session]\nkind = \"openai-realtime\"\n\
                 url = \"wss://api.openai.com/v1/realtime\"\n{extra}"
            )
        };
        let attach = |extra: &str| {
            Settings::from_toml(&session(extra)).unwrap().characters[0]
                .session
                .as_ref()
                .unwrap()
                .attach
                .clone()
        };
        assert_eq!(attach(""), AttachSettings::default());
        assert_eq!(attach("").hosts, ["api.openai.com"]);
        assert_eq!(attach("").max_attachments, DEFAULT_MAX_ATTACHMENTS);
        assert_eq!(
            attach(
                "attach_api_key_envs = [\"CALLS_KEY\"]\nattach_hosts = [\"API.Example.COM\", \
                 \"[::1]\"]\nmax_attachments = 2\n"
            ),
            AttachSettings {
                api_key_envs: vec!["CALLS_KEY".into()],
                hosts: vec!["api.example.com".into(), "[::1]".into()],
                max_attachments: 2,
            }
        );
        for (extra, key) in [
            ("attach_hosts = [\"a b\"]\n", "`attach_hosts`"),
            ("attach_hosts = [\"\"]\n", "`attach_hosts`"),
            ("attach_api_key_envs = [\"\"]\n", "`attach_api_key_envs`"),
            ("max_attachments = -1\n", "`max_attachments`"),
            ("max_attachments = 1001\n", "`max_attachments`"),
        ] {
            let e = error_of(&session(extra));
            assert!(e.contains(key) && e.contains("character[0].session"), "{e}");
        }
        // A value of the wrong type is named by the TOML reader, with its line.
        let e = error_of(&session("attach_hosts = \"api.openai.com\"\n"));
        assert!(e.contains("attach_hosts") && e.contains("line 6"), "{e}");
    }

    #[test]
    fn from_file_names_the_file() {
        let dir = std::env::temp_dir().join(format!("rt-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        std::fs::write(&path, "colour = 1\n").unwrap();
        let e = format!("{:#}", Settings::from_file(&path).unwrap_err());
        assert!(e.contains("bad.toml") && e.contains("colour"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
