//! `[dispatch]`: how tool calls reach plugins' callbacks — how much of an answer is read, how
//! many exchanges run at once, whether arguments are checked first.

use anyhow::{Context, bail};
use serde::Deserialize;

/// Largest callback response body accepted by default (after decompression): 4 MiB holds any
/// sensible tool output while bounding what a misbehaving plugin can make us buffer.
pub(crate) const DEFAULT_MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// Callback exchanges in flight at once, by default. Each holds a socket (an invoke holds two:
/// its client's and the callback's), so 4096 stays well inside the 20 000-descriptor limits of
/// common service setups while leaving room for thousands of slow tools at once; past it a call
/// is refused with a tool error instead of the process running out of descriptors.
pub(crate) const DEFAULT_MAX_CALLBACKS_IN_FLIGHT: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchSettings {
    pub max_response_bytes: usize,
    /// Callback exchanges in flight at once, over the whole server.
    pub max_callbacks_in_flight: usize,
    /// Check every call's arguments against the tool's schema before calling it (the
    /// default); `false` passes them through unchecked.
    pub validate_arguments: bool,
}

impl Default for DispatchSettings {
    fn default() -> Self {
        Self {
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_callbacks_in_flight: DEFAULT_MAX_CALLBACKS_IN_FLIGHT,
            validate_arguments: true,
        }
    }
}

/// `[dispatch]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileDispatch {
    max_response_bytes: Option<i64>,
    max_callbacks_in_flight: Option<i64>,
    validate_arguments: Option<bool>,
}

impl FileDispatch {
    /// Checks the table; keys it leaves out keep their defaults.
    pub(crate) fn into_settings(self) -> anyhow::Result<DispatchSettings> {
        let mut settings = DispatchSettings::default();
        if let Some(max) = self.max_response_bytes {
            if max <= 0 {
                bail!(
                    "key `dispatch.max_response_bytes`: must be a positive number of bytes, got {max}"
                );
            }
            settings.max_response_bytes =
                usize::try_from(max).context("key `dispatch.max_response_bytes`: too large")?;
        }
        if let Some(max) = self.max_callbacks_in_flight {
            if max <= 0 {
                bail!("key `dispatch.max_callbacks_in_flight`: must be at least 1, got {max}");
            }
            settings.max_callbacks_in_flight = usize::try_from(max)
                .context("key `dispatch.max_callbacks_in_flight`: too large")?;
        }
        if let Some(validate) = self.validate_arguments {
            settings.validate_arguments = validate;
        }
        Ok(settings)
    }
}
