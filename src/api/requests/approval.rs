//! The approval fields of a registration (a tool's, an MCP server's) and the body of a decision
//! on a pending approval.

use std::time::Duration;

use serde_json::{Map, Value};

use super::{Checked, Fields};
use crate::domain::approval::{
    Approval, DEFAULT_APPROVAL_TIMEOUT, MAX_APPROVAL_TIMEOUT_SECONDS, MAX_REASON_CHARS, McpApproval,
};

/// `POST /api/approvals/{id}`.
#[derive(Debug)]
pub(crate) struct DecisionRequest {
    pub approve: bool,
    pub reason: Option<String>,
}

impl DecisionRequest {
    /// `decision` (`"approve"` or `"deny"`) and an optional `reason` of at most 1,024
    /// characters; no other field (a decision names exactly what it decides).
    pub(crate) fn parse(body: &Map<String, Value>) -> Checked<Self> {
        let mut f = Fields::new(body);
        let decision = f.string("decision", None);
        let approve = match decision.as_deref() {
            Some("approve") => Some(true),
            Some("deny") => Some(false),
            Some(_) => {
                f.fail("decision", "enum", "Input should be 'approve' or 'deny'");
                None
            }
            None => None,
        };
        let reason = f.nullable_string("reason").flatten();
        if reason
            .as_ref()
            .is_some_and(|r| r.chars().count() > MAX_REASON_CHARS)
        {
            f.fail(
                "reason",
                "string_too_long",
                format!("String should have at most {MAX_REASON_CHARS} characters"),
            );
        }
        for field in body.keys() {
            if field != "decision" && field != "reason" {
                f.fail(field, "extra_forbidden", "Extra inputs are not permitted");
            }
        }
        f.finish()?;
        Ok(Self {
            approve: approve.unwrap_or_default(),
            reason,
        })
    }
}

impl Fields<'_> {
    /// `approval` (`"never"`, the default, or `"always"`) and `approval_timeout_seconds` (a
    /// whole number from 1 to 3,600, default 120).
    pub(super) fn approval(&mut self) -> Option<Approval> {
        let name = self.string("approval", Some("never"))?;
        let required = Approval::required_by_name(&name);
        if required.is_none() {
            self.fail("approval", "enum", "Input should be 'never' or 'always'");
        }
        let field = "approval_timeout_seconds";
        let timeout = match self.body.get(field) {
            None => Some(DEFAULT_APPROVAL_TIMEOUT),
            Some(Value::Number(n)) => {
                match n.as_u64() {
                    Some(0) => {
                        self.fail(
                            field,
                            "greater_than_equal",
                            "Input should be greater than or equal to 1",
                        );
                        None
                    }
                    Some(s) if s > MAX_APPROVAL_TIMEOUT_SECONDS => {
                        self.fail(
                        field,
                        "less_than_equal",
                        format!("Input should be less than or equal to {MAX_APPROVAL_TIMEOUT_SECONDS}"),
                    );
                        None
                    }
                    Some(s) => Some(Duration::from_secs(s)),
                    None => {
                        self.fail(
                            field,
                            "int_type",
                            "Input should be a valid whole number of seconds",
                        );
                        None
                    }
                }
            }
            Some(_) => {
                self.fail(
                    field,
                    "int_type",
                    "Input should be a valid whole number of seconds",
                );
                None
            }
        };
        Some(Approval {
            required: required?,
            timeout: timeout?,
        })
    }

    /// An MCP server's `approval`: `"never"` (the default), `"always"` or `"destructive"`.
    pub(super) fn mcp_approval(&mut self) -> Option<McpApproval> {
        let name = self.string("approval", Some("never"))?;
        let approval = McpApproval::from_name(&name);
        if approval.is_none() {
            self.fail(
                "approval",
                "enum",
                "Input should be 'never', 'always' or 'destructive'",
            );
        }
        approval
    }
}
