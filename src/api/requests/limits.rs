//! The limits fields of a registration (a tool's, an MCP server's for each of its tools):
//! `max_concurrent`, `rate` and `dedupe_seconds`, each checked like the other fields (a 422 that
//! names the field, `rate`'s own fields by their path).

use serde_json::Value;

use super::Fields;
use crate::api::error::FieldError;
use crate::domain::limits::{
    CallLimits, MAX_CONCURRENT, MAX_DEDUPE_SECONDS, MAX_RATE_CALLS, MAX_RATE_SECONDS, Rate,
};

impl Fields<'_> {
    /// `max_concurrent` (1 to 1,024, or null: none), `rate` (`{"calls": 1 to 100,000,
    /// "per_seconds": 1 to 86,400}`, or null: none) and `dedupe_seconds` (0 to 300, default 0).
    pub(super) fn limits(&mut self) -> Option<CallLimits> {
        let max_concurrent = match self.body.get("max_concurrent") {
            None | Some(Value::Null) => Some(None),
            Some(value) => self
                .whole(&["max_concurrent"], value, 1, MAX_CONCURRENT)
                .map(Some),
        };
        let rate = match self.body.get("rate") {
            None | Some(Value::Null) => Some(None),
            Some(Value::Object(rate)) => {
                let calls = self.member(&["rate", "calls"], rate.get("calls"), MAX_RATE_CALLS);
                let per = self.member(
                    &["rate", "per_seconds"],
                    rate.get("per_seconds"),
                    MAX_RATE_SECONDS,
                );
                for field in rate.keys() {
                    if field != "calls" && field != "per_seconds" {
                        self.fail_at(
                            &["rate", field],
                            "extra_forbidden",
                            "Extra inputs are not permitted",
                        );
                    }
                }
                match (calls, per) {
                    (Some(calls), Some(per_seconds)) => Some(Some(Rate { calls, per_seconds })),
                    _ => None,
                }
            }
            Some(_) => {
                self.fail(
                    "rate",
                    "dict_type",
                    "Input should be an object {\"calls\": N, \"per_seconds\": S} or null",
                );
                None
            }
        };
        let dedupe_seconds = match self.body.get("dedupe_seconds") {
            None => Some(0),
            Some(value) => self.whole(&["dedupe_seconds"], value, 0, MAX_DEDUPE_SECONDS),
        };
        Some(CallLimits {
            max_concurrent: max_concurrent?,
            rate: rate?,
            dedupe_seconds: dedupe_seconds?,
        })
    }

    /// A required whole-number member of `rate`, from 1 to `max`.
    fn member(&mut self, path: &[&str], value: Option<&Value>, max: u32) -> Option<u32> {
        match value {
            Some(value) => self.whole(path, value, 1, max),
            None => {
                self.fail_at(path, "missing", "Field required");
                None
            }
        }
    }

    /// A whole number from `min` to `max` at `path`.
    fn whole(&mut self, path: &[&str], value: &Value, min: u32, max: u32) -> Option<u32> {
        let n = match (value.as_u64(), value.as_i64()) {
            (Some(n), _) => n,
            // A negative whole number is out of range, not of the wrong type.
            (None, Some(_)) => 0,
            (None, None) => {
                self.fail_at(path, "int_type", "Input should be a valid integer");
                return None;
            }
        };
        if n < u64::from(min) || value.as_i64().is_some_and(|n| n < 0) {
            self.fail_at(
                path,
                "greater_than_equal",
                format!("Input should be greater than or equal to {min}"),
            );
            return None;
        }
        if n > u64::from(max) {
            self.fail_at(
                path,
                "less_than_equal",
                format!("Input should be less than or equal to {max}"),
            );
            return None;
        }
        u32::try_from(n).ok()
    }

    fn fail_at(&mut self, path: &[&str], kind: &'static str, msg: impl Into<String>) {
        let mut error = FieldError::body(path[0], kind, msg);
        error.loc.extend(path[1..].iter().map(|p| (*p).to_owned()));
        self.errors.push(error);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn limits(v: Value) -> Result<CallLimits, Vec<(String, &'static str, String)>> {
        let Value::Object(body) = v else {
            panic!("an object")
        };
        let mut f = Fields::new(&body);
        let limits = f.limits();
        match f.finish() {
            Ok(()) => Ok(limits.unwrap()),
            Err(errors) => Err(errors
                .into_iter()
                .map(|e| (e.loc.join("."), e.kind, e.msg))
                .collect()),
        }
    }

    #[test]
    fn absent_fields_are_no_limits() {
        assert_eq!(limits(json!({})), Ok(CallLimits::default()));
        assert_eq!(
            limits(json!({"max_concurrent": null, "rate": null})),
            Ok(CallLimits::default())
        );
        assert_eq!(
            limits(
                json!({"max_concurrent": 1024, "rate": {"calls": 100000, "per_seconds": 86400},
                          "dedupe_seconds": 300})
            ),
            Ok(CallLimits {
                max_concurrent: Some(1024),
                rate: Some(Rate {
                    calls: 100_000,
                    per_seconds: 86_400
                }),
                dedupe_seconds: 300,
            })
        );
    }

    #[test]
    fn each_bad_field_is_named() {
        let errors = limits(json!({
            "max_concurrent": 0, "rate": {"calls": 1.5, "per": 3}, "dedupe_seconds": 301
        }))
        .unwrap_err();
        let named: Vec<(&str, &str)> = errors
            .iter()
            .map(|(loc, kind, _)| (loc.as_str(), *kind))
            .collect();
        assert_eq!(
            named,
            [
                ("body.max_concurrent", "greater_than_equal"),
                ("body.rate.calls", "int_type"),
                ("body.rate.per_seconds", "missing"),
                ("body.rate.per", "extra_forbidden"),
                ("body.dedupe_seconds", "less_than_equal"),
            ]
        );
        let more =
            limits(json!({"max_concurrent": 1025, "rate": 5, "dedupe_seconds": -1})).unwrap_err();
        assert_eq!(
            more.iter().map(|e| e.1).collect::<Vec<_>>(),
            ["less_than_equal", "dict_type", "greater_than_equal"]
        );
        assert_eq!(more[0].2, "Input should be less than or equal to 1024");
        let negative = limits(json!({"max_concurrent": -3})).unwrap_err();
        assert_eq!(negative[0].1, "greater_than_equal");
        let text = limits(json!({"rate": {"calls": "2", "per_seconds": 0}})).unwrap_err();
        assert_eq!(
            text.iter().map(|e| (e.0.as_str(), e.1)).collect::<Vec<_>>(),
            [
                ("body.rate.calls", "int_type"),
                ("body.rate.per_seconds", "greater_than_equal")
            ]
        );
    }
}
