//! A tool's own bounds on how its calls run — `max_concurrent`, `rate`, `dedupe_seconds` of a
//! registration (or of an MCP server, for each of its tools) — what the model is told when one
//! holds a call back, and the canonical form of a call's arguments that a repeated call is
//! recognised by. Plain values and texts: the state they keep (each tool's queue and recent
//! calls, each session's recent calls) is `policy::limits`.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

/// Largest `max_concurrent`: a tool that takes more calls at once than this has no use for the
/// bound (the dispatcher's own bound on callbacks in flight is higher).
pub const MAX_CONCURRENT: u32 = 1024;

/// Largest `rate.calls`: the log of a tool's calls in its window holds at most this many
/// instants (16 bytes each: 1.6 MB at most per tool).
pub const MAX_RATE_CALLS: u32 = 100_000;

/// Largest `rate.per_seconds`: a day, the longest quota window of the paid APIs a tool fronts.
pub const MAX_RATE_SECONDS: u32 = 86_400;

/// Largest `dedupe_seconds`: five minutes, the longest a model's repeat of a call is plausibly
/// a repeat rather than a request of its own.
pub const MAX_DEDUPE_SECONDS: u32 = 300;

/// A tool's bounds on its calls; the default is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallLimits {
    /// At most this many calls run at once (1 to [`MAX_CONCURRENT`]), across every character
    /// and session; later calls wait in arrival order, each at most its timeout.
    pub max_concurrent: Option<u32>,
    /// At most so many calls in any window of so many seconds; a call beyond it is answered at
    /// once.
    pub rate: Option<Rate>,
    /// A model's call repeated with the same arguments in the same session or conversation,
    /// while the first runs or within this many seconds after it ended (0 to
    /// [`MAX_DEDUPE_SECONDS`]; 0: never), gets the first call's result.
    pub dedupe_seconds: u32,
}

/// `rate`: at most `calls` calls in any `per_seconds` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rate {
    /// 1 to [`MAX_RATE_CALLS`].
    pub calls: u32,
    /// 1 to [`MAX_RATE_SECONDS`].
    pub per_seconds: u32,
}

impl CallLimits {
    /// Whether the tool has no bound at all: its calls pass the limits without a look.
    pub fn is_none(&self) -> bool {
        self.max_concurrent.is_none() && self.rate.is_none() && self.dedupe_seconds == 0
    }

    /// Whether its bounds keep state of the tool's own (a queue, a count of recent calls).
    pub(crate) fn counts_calls(&self) -> bool {
        self.max_concurrent.is_some() || self.rate.is_some()
    }

    /// How long after a call ended a repeat of it gets its result; `None`: never.
    pub(crate) fn dedupe(&self) -> Option<Duration> {
        (self.dedupe_seconds > 0).then(|| Duration::from_secs(u64::from(self.dedupe_seconds)))
    }
}

impl Rate {
    /// The window, in time.
    pub(crate) fn window(&self) -> Duration {
        Duration::from_secs(u64::from(self.per_seconds.max(1)))
    }
}

/// What the model is told of a call that did not get its turn: the tool was busy, not broken.
pub(crate) fn busy_text(tool: &str, max_concurrent: u32, waited: Duration) -> String {
    let at_once = if max_concurrent == 1 {
        "1 call at a time".to_owned()
    } else {
        format!("at most {max_concurrent} calls at once")
    };
    format!(
        "the tool {tool} was busy: it takes {at_once}, and this call did not get its turn \
         within {} s, so it was not run (the tool did not fail; it may be called again later)",
        whole_seconds_up(waited)
    )
}

/// What the model is told of a call that found no place to wait: the tool's waiting line is full.
pub(crate) fn queue_full_text(tool: &str, max_concurrent: u32) -> String {
    format!(
        "the tool {tool} was busy: it takes at most {max_concurrent} calls at once and too many \
         calls already wait for it, so this one was not run (the tool did not fail; it may be \
         called again later)"
    )
}

/// What the model is told of a call beyond the tool's rate: when it may call again.
pub(crate) fn rate_limited_text(tool: &str, rate: Rate, next: Duration) -> String {
    let times = if rate.calls == 1 { "time" } else { "times" };
    format!(
        "the tool {tool} may be called at most {} {times} per {} s; the next call is possible \
         in {} s",
        rate.calls,
        rate.per_seconds,
        whole_seconds_up(next)
    )
}

/// `duration` in whole seconds, rounded up, at least 1 (a model told "in 0 s" calls at once).
fn whole_seconds_up(duration: Duration) -> u64 {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    seconds.max(1)
}

/// The canonical JSON text of an arguments object: keys sorted, no white space, strings with
/// serde_json's escapes, numbers as their value (an integral float within 2^53 as an integer, so
/// `1.0` and `1` are one value, as RFC 8785 has it). Two argument texts are the same arguments
/// exactly when their canonical texts are equal.
pub(crate) fn canonical_json(arguments: &Map<String, Value>) -> String {
    let mut out = String::new();
    write_object(arguments, &mut out);
    out
}

fn write_object(map: &Map<String, Value>, out: &mut String) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_unstable();
    out.push('{');
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(key, out);
        out.push(':');
        write_value(&map[key.as_str()], out);
    }
    out.push('}');
}

fn write_value(value: &Value, out: &mut String) {
    /// Integers up to this magnitude are exact in a float.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Object(map) => write_object(map, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        Value::String(s) => write_string(s, out),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < EXACT => {
                let _ = write!(out, "{}", f as i64);
            }
            _ => {
                let _ = write!(out, "{n}");
            }
        },
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Null => out.push_str("null"),
    }
}

fn write_string(s: &str, out: &mut String) {
    // Serialising a string cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn canonical(v: Value) -> String {
        let Value::Object(map) = v else {
            panic!("an object")
        };
        canonical_json(&map)
    }

    #[test]
    fn the_canonical_text_ignores_key_order_space_and_number_spelling() {
        let a: Map<String, Value> =
            serde_json::from_str(r#"{"b": [1, {"y": 2, "x": 1.0}], "a": "é\n"}"#).unwrap();
        let b: Map<String, Value> =
            serde_json::from_str(r#"{"a":"\u00e9\n","b":[1.0,{"x":1,"y":2e0}]}"#).unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&a), r#"{"a":"é\n","b":[1,{"x":1,"y":2}]}"#);
        assert_ne!(canonical(json!({"a": 1})), canonical(json!({"a": "1"})));
        assert_ne!(canonical(json!({"a": 1.5})), canonical(json!({"a": 1})));
        assert_eq!(canonical(json!({})), "{}");
    }

    #[test]
    fn the_texts_say_what_held_the_call_back() {
        assert_eq!(
            rate_limited_text(
                "lights",
                Rate {
                    calls: 2,
                    per_seconds: 60
                },
                Duration::from_millis(57_100)
            ),
            "the tool lights may be called at most 2 times per 60 s; the next call is possible \
             in 58 s"
        );
        assert!(
            rate_limited_text(
                "x",
                Rate {
                    calls: 1,
                    per_seconds: 5
                },
                Duration::ZERO
            )
            .ends_with("at most 1 time per 5 s; the next call is possible in 1 s")
        );
        assert_eq!(
            busy_text("arm", 1, Duration::from_secs(2)),
            "the tool arm was busy: it takes 1 call at a time, and this call did not get its \
             turn within 2 s, so it was not run (the tool did not fail; it may be called again \
             later)"
        );
        assert!(busy_text("arm", 3, Duration::from_secs(2)).contains("at most 3 calls at once"));
        assert_eq!(
            queue_full_text("arm", 2),
            "the tool arm was busy: it takes at most 2 calls at once and too many calls already \
             wait for it, so this one was not run (the tool did not fail; it may be called again \
             later)"
        );
    }

    #[test]
    fn no_bound_is_the_default() {
        assert!(CallLimits::default().is_none());
        let dedupe = CallLimits {
            dedupe_seconds: 5,
            ..CallLimits::default()
        };
        assert!(!dedupe.is_none() && !dedupe.counts_calls());
        assert_eq!(dedupe.dedupe(), Some(Duration::from_secs(5)));
    }
}
