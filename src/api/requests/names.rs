//! A tool's name in a request body: its length in characters, and the names only the server's
//! own tools may have.

use super::{Fields, MAX_NAME_CHARS};
use crate::domain::budget::is_reserved_name;

impl Fields<'_> {
    /// A tool name: 1 to 64 characters (not bytes), no control characters.
    pub(super) fn name(&mut self, field: &str) -> Option<String> {
        let name = self.string(field, None)?;
        let chars = name.chars().count();
        if chars == 0 {
            self.fail(
                field,
                "string_too_short",
                "String should have at least 1 character",
            );
            return None;
        }
        if chars > MAX_NAME_CHARS {
            self.fail(
                field,
                "string_too_long",
                format!("String should have at most {MAX_NAME_CHARS} characters"),
            );
            return None;
        }
        if name.chars().any(char::is_control) {
            self.fail(
                field,
                "string_pattern_mismatch",
                "String should not contain control characters",
            );
            return None;
        }
        Some(name)
    }

    /// The name of a tool being registered: a [`name`](Self::name) that is not one of the
    /// server's own tools (`find_tools`), which every session may be offered beside it.
    pub(super) fn new_tool_name(&mut self, field: &str) -> Option<String> {
        let name = self.name(field)?;
        if is_reserved_name(&name) {
            self.fail(
                field,
                "value_error",
                format!("Value error, `{name}` is the server's own tool; choose another name"),
            );
            return None;
        }
        Some(name)
    }
}
