//! How a call ended: one word per outcome, the same in metrics labels, the recent-calls listing,
//! the `tool.call` event and a span's `error.type`. A new outcome is one line in the list below.

use serde::Serialize;

/// Declares [`Outcome`] from `Variant => "name"` lines, with its names and the list of all.
macro_rules! outcomes {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, )*) => {
        /// How a call ended.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
        #[serde(into = "&'static str")]
        pub enum Outcome {
            $( $(#[$doc])* $variant, )*
        }

        impl Outcome {
            /// Every outcome, in the order declared.
            pub const ALL: &'static [Outcome] = &[$(Outcome::$variant,)*];

            /// The outcome as the API, the metrics and the spans spell it.
            pub fn name(self) -> &'static str {
                match self {
                    $( Outcome::$variant => $name, )*
                }
            }
        }
    };
}

outcomes! {
    /// The tool answered with a result.
    Ok => "ok",
    /// The tool answered with an error: `is_error`, an HTTP status of 400 or more, or an answer
    /// that could not be read whole.
    ToolError => "tool_error",
    /// The arguments did not match the tool's schema; the tool was not called.
    InvalidArguments => "invalid_arguments",
    /// The tool did not answer within its timeout.
    Timeout => "timeout",
    /// The callback's connection could not be made.
    Unreachable => "unreachable",
    /// The call was cancelled before it finished: the person interrupted, its caller went away,
    /// its tool was removed, or its session ended.
    Cancelled => "cancelled",
    /// The character has no tool of that name.
    UnknownTool => "unknown_tool",
    /// The server did not run it: a limit (the runaway guard, callbacks in flight, calls per
    /// round) or a call from a tool callback.
    Refused => "refused",
    /// The server stopped before the call finished.
    Stopped => "stopped",
    /// The person declined the call when asked to approve it; the tool was not called.
    Denied => "denied",
    /// Nobody answered the call's approval request within its timeout; the tool was not called.
    Expired => "expired",
    /// The tool was running its `max_concurrent` calls, and the call did not get its turn
    /// within its timeout; the tool was not called.
    Busy => "busy",
    /// The tool had been called its `rate` of calls in the window; the tool was not called.
    RateLimited => "rate_limited",
    /// The model repeated a call of its session or conversation (`dedupe_seconds`): it got the
    /// first call's result, and the tool was not called again. Only reported (the event, the
    /// metrics, the recent calls, the span): the result itself keeps the first call's outcome,
    /// and is an error exactly when that one was.
    Deduplicated => "deduplicated",
}

impl Outcome {
    /// Whether the model sees the call as failed. A deduplicated call is an error exactly when
    /// its first call was: its result's `is_error` says, not this.
    pub fn is_error(self) -> bool {
        self != Outcome::Ok
    }
}

impl From<Outcome> for &'static str {
    fn from(outcome: Outcome) -> Self {
        outcome.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_snake_case_words() {
        let names: Vec<&str> = Outcome::ALL.iter().map(|o| o.name()).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        );
        assert_eq!(
            serde_json::to_value(Outcome::ToolError).unwrap(),
            "tool_error"
        );
        assert!(!Outcome::Ok.is_error() && Outcome::Cancelled.is_error());
    }
}
