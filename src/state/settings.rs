//! `[state]` (and `--state FILE`): where the registrations are kept across restarts, and how
//! long a restored tool whose callback never comes back is kept.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use serde::Deserialize;

/// How long a restored tool whose callback origin never accepts a connection stays listed
/// (dormant) before it is removed: a day covers a plugin that comes back after a night off.
pub(crate) const DEFAULT_DORMANT_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest configurable dormancy: a month; past that a tool is not coming back.
pub(crate) const MAX_DORMANT_TTL: Duration = Duration::from_secs(31 * 24 * 60 * 60);

#[derive(Debug, Clone, PartialEq)]
pub struct StateSettings {
    /// The store file; `None`: nothing survives a restart (the contract's behaviour).
    pub path: Option<PathBuf>,
    /// How long a restored tool stays dormant before it is removed.
    pub dormant_ttl: Duration,
    /// An existing empty (0-byte) file starts a new store (`--state-new`, `[state] new`);
    /// otherwise it is a start-up error: a store cut to nothing is not taken for a new one.
    pub new: bool,
}

impl Default for StateSettings {
    fn default() -> Self {
        Self {
            path: None,
            dormant_ttl: DEFAULT_DORMANT_TTL,
            new: false,
        }
    }
}

/// `[state]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileState {
    path: Option<PathBuf>,
    dormant_ttl_seconds: Option<f64>,
    new: Option<bool>,
}

impl FileState {
    /// Checks the table; keys it leaves out keep their defaults.
    pub(crate) fn into_settings(self) -> anyhow::Result<StateSettings> {
        let mut settings = StateSettings {
            path: self.path,
            new: self.new.unwrap_or(false),
            ..StateSettings::default()
        };
        if let Some(seconds) = self.dormant_ttl_seconds {
            if !(seconds > 0.0 && seconds <= MAX_DORMANT_TTL.as_secs_f64()) {
                bail!(
                    "key `state.dormant_ttl_seconds`: must be greater than 0 and at most {}, got \
                     {seconds}",
                    MAX_DORMANT_TTL.as_secs()
                );
            }
            settings.dormant_ttl = Duration::from_secs_f64(seconds);
        }
        Ok(settings)
    }
}
