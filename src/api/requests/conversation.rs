//! The bodies of what plugins add to a live conversation: a running call's progress and a
//! plugin's context.

use serde_json::{Map, Value};

use super::{Checked, Fields};
use crate::domain::call::Scheduling;

/// Longest progress message, in characters.
pub const MAX_PROGRESS_CHARS: usize = 2048;

/// Longest context text, in characters.
pub const MAX_CONTEXT_CHARS: usize = 8192;

/// `POST /api/tools/calls/{call_id}/progress`.
#[derive(Debug)]
pub(crate) struct ProgressRequest {
    pub message: String,
    pub speak: bool,
}

impl ProgressRequest {
    pub(crate) fn parse(body: &Map<String, Value>) -> Checked<Self> {
        let mut f = Fields::new(body);
        let message = f.text("message", MAX_PROGRESS_CHARS);
        let speak = f.flag("speak", false);
        f.finish()?;
        Ok(Self {
            message: message.unwrap_or_default(),
            speak: speak.unwrap_or_default(),
        })
    }
}

/// `POST /api/sessions/context`.
#[derive(Debug)]
pub(crate) struct ContextRequest {
    pub role: Option<String>,
    pub text: String,
    /// `None`: the model is not asked to answer.
    pub respond: Option<Scheduling>,
}

impl ContextRequest {
    pub(crate) fn parse(body: &Map<String, Value>) -> Checked<Self> {
        let mut f = Fields::new(body);
        let role = f.role();
        let text = f.text("text", MAX_CONTEXT_CHARS);
        let respond = f.flag("respond", false);
        let scheduling = f.scheduling("scheduling");
        f.finish()?;
        Ok(Self {
            role,
            text: text.unwrap_or_default(),
            respond: respond
                .unwrap_or_default()
                .then(|| scheduling.unwrap_or_default()),
        })
    }
}

impl Fields<'_> {
    /// `scheduling`: `"when_idle"` (the default), `"silent"` or `"interrupt"`.
    fn scheduling(&mut self, field: &str) -> Option<Scheduling> {
        let name = self.string(field, Some(Scheduling::WhenIdle.name()))?;
        let scheduling = Scheduling::from_name(&name);
        if scheduling.is_none() {
            self.fail(
                field,
                "enum",
                "Input should be 'when_idle', 'silent' or 'interrupt'",
            );
        }
        scheduling
    }
}
