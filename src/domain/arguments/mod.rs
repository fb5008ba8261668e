//! A tool's parameters: the JSON Schema a registration gives, checked once (draft 2020-12, and it
//! must describe a JSON object) and compiled once, and the check of each call's arguments against
//! it, with the text the model gets when they do not match.
//!
//! [`Parameters`] is what a [`ToolSpec`](super::tool::ToolSpec) holds: the schema as the model
//! sees it and the compiled validator, shared by every character the tool applies to. The
//! register route and in-process plugins build it with [`Parameters::new`], which first holds
//! the schema to the bounds of [`schema_limits`](super::schema_limits); the dispatcher calls
//! [`Parameters::check_call`] before every call. Whatever the schema and the arguments, a check
//! does bounded work and the text the model gets is at most [`MAX_FIX_IT_BYTES`]. Plain code, no
//! actor or HTTP types.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};

use indexmap::IndexSet;
use jsonschema::error::ValidationErrorKind;
use jsonschema::{ValidationError, Validator};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

mod describe;

use self::describe::{describe, kind_of, violation_count};
use super::json_text::{JsonText, text_of};
use super::schema_limits::{
    self, ArgumentShape, LimitError, MAX_CHECKED_ARGUMENT_DEPTH, MAX_SCHEMA_BYTES, SchemaCost,
};

/// Violations of one call listed in the model's text. Enough for a model to fix every mistake
/// of a realistic call in one retry; bounded so a wildly wrong argument (a long array of wrong
/// items) cannot flood the model's context.
pub(crate) const MAX_LISTED_VIOLATIONS: usize = 10;

/// Violations of one call put in order before the first [`MAX_LISTED_VIOLATIONS`] are listed;
/// any beyond are only counted. Bounds the work a pathological argument (a huge array of wrong
/// items) can cause, far above what a model's call has.
pub(crate) const MAX_SORTED_VIOLATIONS: usize = 1000;

/// Problems of one schema listed in a 422: the same bound, for the same reason (a plugin author
/// fixes a schema from the first few problems, then registers again).
pub(crate) const MAX_LISTED_SCHEMA_PROBLEMS: usize = 10;

/// Characters of a value quoted in a violation (`got "..."`, an `enum` option): enough to
/// recognise it, short enough that a long string argument does not repeat itself into the
/// model's context.
pub(crate) const MAX_QUOTED_CHARS: usize = 60;

/// `enum` options listed in a violation; longer lists end with how many were left out.
pub(crate) const MAX_LISTED_OPTIONS: usize = 20;

/// Alternatives of an `anyOf` / `oneOf` described in a violation, each by its first few
/// violations: enough to show the model the shapes it may use, bounded for deep schemas.
pub(crate) const MAX_LISTED_ALTERNATIVES: usize = 5;

/// Violations quoted per alternative of an `anyOf` / `oneOf`.
pub(crate) const MAX_VIOLATIONS_PER_ALTERNATIVE: usize = 3;

/// Longest text the model gets for arguments that do not match, in bytes: ten violations with
/// their alternatives fit, and per-level caps alone do not bound a nest of alternatives (each
/// level multiplies the text). Past it the text is cut and says how much was left out.
pub const MAX_FIX_IT_BYTES: usize = 8 * 1024;

/// Bytes of text one violation is described in, its alternatives included; describing stops
/// there (and says so), which bounds the work of describing as well as the text.
pub(crate) const MAX_VIOLATION_BYTES: usize = 2 * 1024;

/// Most subschema checks one call's check may make (argument values times the subschemas one
/// value can meet, [`SchemaCost::work`]): a few milliseconds of checking. Arguments past it are
/// refused as too large to check, rather than hold a server thread.
pub(crate) const MAX_CHECK_WORK: u64 = 1_000_000;

/// Most subschema checks past which a mismatch is reported without listing what is wrong: the
/// validator builds every violation before the first can be read (a few hundred bytes each), so
/// this bounds that memory to a few megabytes.
pub(crate) const MAX_EXPLAINED_WORK: u64 = 20_000;

/// Deepest arguments checked against a schema that does not reach deeper: serde_json's own
/// limit when it reads text, so only arguments built in-process can meet it. The validator
/// compares values (`const`, `enum`, `uniqueItems`) by recursing into them.
pub(crate) const MAX_ARGUMENT_DEPTH: usize = 128;

/// A tool's parameters schema: what the model sees, and the compiled check of its arguments.
///
/// Cheap to clone: the validator is shared, with every tool whose schema is the same.
#[derive(Clone)]
pub struct Parameters {
    /// The schema as the model sees it: the registered one, with `"type": "object"` and
    /// `"properties": {}` added when absent.
    schema: Map<String, Value>,
    compiled: Arc<Compiled>,
}

/// A schema compiled, with what checking a call against it may cost.
struct Compiled {
    validator: Validator,
    cost: SchemaCost,
}

/// Why a registration's `parameters` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The top-level `type` is something other than `"object"`.
    #[error(
        "parameters must describe a JSON object: the top-level \"type\" is {found}; use \"type\": \
         \"object\" or leave \"type\" out (a tool's arguments are always a JSON object)"
    )]
    NotAnObject { found: String },
    /// The schema is not valid JSON Schema (draft 2020-12), or cannot be compiled: each problem
    /// names where it is in the schema and what is wrong (at most
    /// [`MAX_LISTED_SCHEMA_PROBLEMS`], then how many more).
    #[error("{}", problems.join("; "))]
    Invalid { problems: Vec<String> },
    /// The schema exceeds a bound that keeps checking a call bounded; the text names the bound
    /// and where in the schema it was hit.
    #[error("{0}")]
    Limit(#[from] LimitError),
}

/// Why a call's arguments were refused. [`ArgumentError::message`] is what the model reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgumentError {
    /// The argument text is not JSON; `reason` says where parsing failed (line and column).
    NotJson { reason: String },
    /// The argument text is JSON, but not an object; `found` is what it is ("an array").
    NotAnObject { found: &'static str },
    /// The arguments break the schema: the first violations in the order of their JSON
    /// pointers, each saying what was expected, and how many more there are.
    Mismatch {
        violations: Vec<String>,
        unlisted: usize,
    },
    /// The arguments break the schema, but listing the violations would take more than
    /// [`MAX_EXPLAINED_WORK`]: `values` JSON values, each checked against up to `per_path`
    /// subschemas.
    Unexplained { values: u64, per_path: u64 },
    /// The arguments nest deeper than the check goes (`limit` levels).
    TooDeep { depth: usize, limit: usize },
    /// Checking the arguments would take more than [`MAX_CHECK_WORK`] subschema checks.
    TooLarge { values: u64, per_path: u64 },
}

impl Parameters {
    /// Checks `schema` (draft 2020-12, describing an object, within the bounds of
    /// the schema limits (docs/reliability.md)), adds what the model needs to see (`"type": "object"`,
    /// `"properties": {}`) and compiles it. Never fetches anything: a `$ref` outside the schema
    /// is an error.
    pub fn new(schema: Map<String, Value>) -> Result<Self, SchemaError> {
        if let Some(found) = schema.get("type").filter(|t| t.as_str() != Some("object")) {
            return Err(SchemaError::NotAnObject {
                found: found.to_string(),
            });
        }
        let schema = Value::Object(for_the_model(schema));
        // First, without recursing: everything after it walks the document recursively.
        schema_limits::check_nesting(&schema)?;
        let compiled = COMPILED.get_or_compile(&schema)?;
        let Value::Object(schema) = schema else {
            unreachable!("built from a map")
        };
        Ok(Self { schema, compiled })
    }

    /// The schema as the model sees it.
    pub fn schema(&self) -> &Map<String, Value> {
        &self.schema
    }

    /// Whether `other` is the same schema (one compiled validator is shared by every tool of
    /// the same schema text, so this is mostly a pointer comparison).
    pub(crate) fn same_schema(&self, other: &Parameters) -> bool {
        Arc::ptr_eq(&self.compiled, &other.compiled) || self.schema == other.schema
    }

    /// Checks a call's argument text, read as `read_arguments` says: text that is not a JSON
    /// object is refused, an object is checked against the schema.
    pub fn check(&self, raw_arguments: &str) -> Result<(), ArgumentError> {
        let (mut arguments, _, read) = read_arguments(raw_arguments);
        read.as_object()?;
        self.check_object_map(&mut arguments)
    }

    /// Checks an arguments object; the validator reads a `Value`, so the map is moved in and
    /// back, not copied.
    pub(crate) fn check_object_map(
        &self,
        arguments: &mut Map<String, Value>,
    ) -> Result<(), ArgumentError> {
        let value = Value::Object(std::mem::take(arguments));
        let verdict = self.check_object(&value);
        if let Value::Object(map) = value {
            *arguments = map;
        }
        verdict
    }

    /// Checks arguments known to be a JSON object: first that the check stays within its
    /// bounds for arguments of this size, then the schema.
    fn check_object(&self, arguments: &Value) -> Result<(), ArgumentError> {
        let Compiled { validator, cost } = &*self.compiled;
        let shape = ArgumentShape::of(arguments);
        let limit = if cost.reaches_deeper {
            MAX_CHECKED_ARGUMENT_DEPTH
        } else {
            MAX_ARGUMENT_DEPTH
        };
        if shape.depth > limit {
            return Err(ArgumentError::TooDeep {
                depth: shape.depth,
                limit,
            });
        }
        let work = cost.work(shape);
        if work > MAX_CHECK_WORK {
            return Err(ArgumentError::TooLarge {
                values: shape.values,
                per_path: cost.per_path,
            });
        }
        if validator.is_valid(arguments) {
            return Ok(());
        }
        if work > MAX_EXPLAINED_WORK {
            return Err(ArgumentError::Unexplained {
                values: shape.values,
                per_path: cost.per_path,
            });
        }
        let mut violations = Vec::new();
        let mut uncollected = 0;
        for error in validator.iter_errors(arguments) {
            if violations.len() >= MAX_SORTED_VIOLATIONS {
                uncollected += violation_count(&error);
                continue;
            }
            let mut budget = MAX_VIOLATION_BYTES;
            for violation in describe(&error, "the arguments", &mut budget) {
                if violations.len() < MAX_SORTED_VIOLATIONS {
                    violations.push(violation);
                } else {
                    uncollected += 1;
                }
            }
        }
        // Each violation starts with its JSON pointer, so sorting the texts lists them in the
        // order of the arguments (a parent before its children), whatever order the validator
        // checked the keywords in; a violation reached along two paths of the schema is one.
        violations.sort();
        violations.dedup();
        let unlisted = violations.len().saturating_sub(MAX_LISTED_VIOLATIONS) + uncollected;
        violations.truncate(MAX_LISTED_VIOLATIONS);
        Err(ArgumentError::Mismatch {
            violations,
            unlisted,
        })
    }
}

impl fmt::Debug for Parameters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parameters")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl ArgumentError {
    /// The tool error the model reads: what is wrong, and that it should call `tool` again.
    /// Written as sentences to the model (capitalised, with full stops), unlike log errors.
    pub fn message(&self, tool: &str) -> String {
        match self {
            ArgumentError::NotJson { reason } => format!(
                "arguments for {tool} are not valid JSON ({reason}); {tool} takes a JSON object \
                 of its parameters. Call {tool} again with a JSON object that matches its \
                 parameters."
            ),
            ArgumentError::NotAnObject { found } => format!(
                "arguments for {tool} must be a JSON object of its parameters, not {found}. \
                 Call {tool} again with a JSON object that matches its parameters."
            ),
            ArgumentError::Mismatch {
                violations,
                unlisted,
            } => {
                let mut listed = violations.join("; ");
                if *unlisted > 0 {
                    listed.push_str(&format!("; and {unlisted} more"));
                }
                let opening = format!("arguments for {tool} do not match its parameters: ");
                let closing = format!(". Call {tool} again with arguments that match.");
                let room = MAX_FIX_IT_BYTES.saturating_sub(opening.len() + closing.len());
                format!("{opening}{}{closing}", cut_to(listed, room))
            }
            ArgumentError::Unexplained { values, per_path } => format!(
                "arguments for {tool} do not match its parameters; listing what is wrong would \
                 take more than one call may ({values} values, each checked against up to \
                 {per_path} subschemas). Call {tool} again with arguments that match."
            ),
            ArgumentError::TooDeep { depth, limit } => format!(
                "arguments for {tool} are nested {depth} levels deep; its parameters are checked \
                 to at most {limit} levels. Call {tool} again with arguments nested less deeply."
            ),
            ArgumentError::TooLarge { values, per_path } => format!(
                "arguments for {tool} are too large to check against its parameters: {values} \
                 values, each checked against up to {per_path} subschemas, is more than the \
                 {MAX_CHECK_WORK} checks one call may take. Call {tool} again with fewer values."
            ),
        }
    }
}

/// `text` cut to at most `room` bytes (at a character boundary), ending with a note of how much
/// was left out when it is cut.
fn cut_to(text: String, room: usize) -> String {
    if text.len() <= room {
        return text;
    }
    // The note is at most this long: "… (" + 20 digits + " more bytes left out)".
    const NOTE: usize = 48;
    let mut end = room.saturating_sub(NOTE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let left_out = text.len() - end;
    let mut cut = text;
    cut.truncate(end);
    cut.push_str(&format!("… ({left_out} more bytes left out)"));
    cut
}

/// Checks `schema` against the draft 2020-12 meta-schema and compiles it.
fn compile(schema: &Value) -> Result<Validator, SchemaError> {
    // Building checks the schema against the meta-schema first and stops at the first problem;
    // only then is the schema checked again for every problem, so a valid schema (nearly every
    // registration) is checked once.
    jsonschema::draft202012::options()
        // `format` is only an annotation in 2020-12 unless asked for; a tool that names a format
        // wants it (a date that is not a date is a mistake the model can fix).
        .should_validate_formats(true)
        // Registrations are local and must never reach out: no remote or file `$ref`.
        .offline()
        .build(schema)
        .map_err(|error| {
            let meta = jsonschema::draft202012::meta::validator();
            let problems = schema_problems(meta.iter_errors(schema))
                .unwrap_or_else(|| vec![schema_problem(&error)]);
            SchemaError::Invalid { problems }
        })
}

/// Entries the compiled-schema table holds before it first drops those no tool uses any more.
/// Past it, the table is pruned each time it doubles, so it stays within twice the schemas in
/// use (plus this), at an amortised constant cost per registration.
pub(crate) const COMPILED_PRUNE_AT: usize = 64;

/// The compiled schemas tools use now, by the schema's JSON text. Plugins register the
/// same schema again and again (after a restart, for each of their roles, while they watch the
/// listing), and compiling one allocates a whole tree that some other thread later frees; a
/// schema already in use is compiled once and shared. Holds only weak references: a validator
/// lives as long as a tool that uses it.
static COMPILED: LazyLock<CompiledSchemas> = LazyLock::new(CompiledSchemas::default);

#[derive(Default)]
struct CompiledSchemas {
    table: Mutex<CompiledTable>,
}

#[derive(Default)]
struct CompiledTable {
    validators: HashMap<String, Weak<Compiled>>,
    prune_at: usize,
}

impl CompiledSchemas {
    /// The compiled `schema` (its nesting checked): shared when some tool uses it already,
    /// otherwise measured against the bounds, then compiled.
    fn get_or_compile(&self, schema: &Value) -> Result<Arc<Compiled>, SchemaError> {
        // Written straight to a buffer: `Display` goes through the formatter piece by piece.
        let key = serde_json::to_string(schema).expect("a JSON value serialises");
        if key.len() > MAX_SCHEMA_BYTES {
            return Err(LimitError::TooLarge { bytes: key.len() }.into());
        }
        if let Some(compiled) = self.table().validators.get(&key).and_then(Weak::upgrade) {
            return Ok(compiled);
        }
        // Measured before it is compiled: compiling follows the `$ref`s too, recursively. A
        // reference the measure cannot follow is left to the compiler to explain when it cannot
        // be resolved at all.
        let measured = schema_limits::measure(schema)?;
        // Compiled outside the lock: two threads compiling the same new schema at once both
        // succeed, and the table keeps one of them.
        let validator = compile(schema)?;
        if let Some(unresolved) = measured.unresolved {
            return Err(unresolved.into());
        }
        let compiled = Arc::new(Compiled {
            validator,
            cost: measured.cost,
        });
        let mut table = self.table();
        table.validators.insert(key, Arc::downgrade(&compiled));
        if table.validators.len() > table.prune_at.max(COMPILED_PRUNE_AT) {
            table.validators.retain(|_, v| v.strong_count() > 0);
            table.prune_at = 2 * table.validators.len();
        }
        Ok(compiled)
    }

    fn table(&self) -> MutexGuard<'_, CompiledTable> {
        // The table holds no invariant a panicking holder could break halfway.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The schema as the model sees it: `"type": "object"` first when absent (the only shape
/// OpenAI-compatible sessions accept), and `"properties": {}` when absent.
fn for_the_model(mut schema: Map<String, Value>) -> Map<String, Value> {
    if !schema.contains_key("properties") {
        schema.insert("properties".into(), Value::Object(Map::new()));
    }
    if schema.contains_key("type") {
        return schema;
    }
    // `type` goes first: the map is rebuilt around it.
    let mut out = Map::with_capacity(schema.len() + 1);
    out.insert("type".into(), Value::String("object".into()));
    out.extend(schema);
    out
}

/// The distinct problems of a schema, as listed in a 422 (the meta-schema can report one problem
/// along several of its own paths); `None` when there are none.
fn schema_problems<'a>(errors: impl Iterator<Item = ValidationError<'a>>) -> Option<Vec<String>> {
    let distinct: IndexSet<String> = errors.map(|e| schema_problem(&e)).collect();
    if distinct.is_empty() {
        return None;
    }
    let unlisted = distinct.len().saturating_sub(MAX_LISTED_SCHEMA_PROBLEMS);
    let mut listed: Vec<String> = distinct
        .into_iter()
        .take(MAX_LISTED_SCHEMA_PROBLEMS)
        .collect();
    if unlisted > 0 {
        listed.push(format!("and {unlisted} more problems"));
    }
    Some(listed)
}

/// One problem of a schema, located by its JSON pointer in the schema (a meta-schema violation
/// is about a value of the schema: the schema is the instance). A compile error, which the
/// meta-schema could not see, keeps the validator's words: a `$ref` that cannot be resolved says
/// which reference.
fn schema_problem(error: &ValidationError<'_>) -> String {
    let mut budget = MAX_VIOLATION_BYTES;
    let what = match error.kind() {
        ValidationErrorKind::Referencing(e) => format!(
            "a \"$ref\" cannot be resolved ({e}); only references inside the schema are followed"
        ),
        _ => describe(error, "the schema", &mut budget).join("; "),
    };
    format!("not a valid JSON Schema (draft 2020-12): {what}")
}

/// How a call's argument text read as JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ArgumentsRead {
    /// Empty, or a JSON object: the call's `arguments` are its parse.
    Object,
    /// JSON, but not an object; `found` says what it is ("an array").
    NotAnObject { found: &'static str },
    /// Not JSON; `reason` is the parser's.
    NotJson { reason: String },
}

impl ArgumentsRead {
    /// `Ok` when the text read as an object; otherwise the check's refusal.
    pub(crate) fn as_object(&self) -> Result<(), ArgumentError> {
        match self {
            ArgumentsRead::Object => Ok(()),
            ArgumentsRead::NotAnObject { found } => Err(ArgumentError::NotAnObject { found }),
            ArgumentsRead::NotJson { reason } => Err(ArgumentError::NotJson {
                reason: reason.clone(),
            }),
        }
    }
}

/// The one reader of a call's argument text. It gives the text as a JSON object — empty text is
/// `{}`, a JSON value that is not an object is `{"value": it}`, and text that is not JSON is
/// `{"_raw": text}` — with that object's exact JSON text (the model's own text whenever it is an
/// object) and how the text read.
pub(crate) fn read_arguments(raw: &str) -> (Map<String, Value>, JsonText, ArgumentsRead) {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return (Map::new(), text_of("{}".to_owned()), ArgumentsRead::Object);
    }
    // The whole text, not the trimmed one, so a parse error's column counts from its start.
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(map)) => {
            let text = RawValue::from_string(trimmed.to_owned()).unwrap_or_else(|_| {
                text_of(serde_json::to_string(&map).unwrap_or_else(|_| "{}".into()))
            });
            (map, text, ArgumentsRead::Object)
        }
        Ok(other) => {
            let text = text_of(format!("{{\"value\":{trimmed}}}"));
            let found = kind_of(&other);
            (
                Map::from_iter([("value".to_owned(), other)]),
                text,
                ArgumentsRead::NotAnObject { found },
            )
        }
        Err(error) => {
            let map = Map::from_iter([("_raw".to_owned(), Value::String(raw.to_owned()))]);
            let text = text_of(serde_json::to_string(&map).unwrap_or_default());
            let reason = error.to_string();
            (map, text, ArgumentsRead::NotJson { reason })
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::call::ToolCall;
    use crate::domain::tool::empty_parameters;

    fn object(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            other => panic!("not an object: {other}"),
        }
    }

    fn parameters(v: Value) -> Parameters {
        Parameters::new(object(v)).unwrap_or_else(|e| panic!("schema refused: {e}"))
    }

    fn weather() -> Parameters {
        parameters(json!({
            "type": "object",
            "properties": {
                "location": {"type": "string"},
                "unit": {"type": "string", "enum": ["c", "f"]}
            },
            "required": ["location"]
        }))
    }

    #[test]
    fn a_call_is_checked_from_its_parse_with_the_verdict_of_its_text() {
        let p = weather();
        for raw in [
            r#"{"location": "Tokyo"}"#,
            "  {\"location\": \"Tokyo\", \"unit\": \"c\"}\n",
            r#"{"unit": "k"}"#,
            r#"{"location": 1e400}"#,
            "",
            "   ",
            "[1, 2]",
            "\"Tokyo\"",
            "null",
            "  {location: Tokyo}",
            "{\"location\": \"Tok",
        ] {
            let mut call = ToolCall::from_raw("call_1".into(), "get_weather".into(), raw.into());
            let arguments = call.arguments.clone();
            assert_eq!(call.check_arguments(&p), p.check(raw), "{raw:?}");
            assert_eq!(
                call.arguments, arguments,
                "{raw:?}: the call keeps its arguments"
            );
        }
        let map = object(json!({"location": "Tokyo", "unit": "x"}));
        let text = serde_json::value::RawValue::from_string(
            r#"{"location": "Tokyo", "unit": "x"}"#.into(),
        )
        .unwrap();
        let mut call = ToolCall::from_text("call_2".into(), "get_weather".into(), text, map);
        assert_eq!(
            call.check_arguments(&p),
            p.check(r#"{"location": "Tokyo", "unit": "x"}"#)
        );
    }

    fn refusal(p: &Parameters, raw: &str) -> String {
        p.check(raw)
            .expect_err("the arguments must be refused")
            .message("get_weather")
    }

    /// The violations only, between the fixed opening and closing of the message.
    fn violations(p: &Parameters, raw: &str) -> String {
        let text = refusal(p, raw);
        let body = text
            .strip_prefix("arguments for get_weather do not match its parameters: ")
            .unwrap_or_else(|| panic!("not a mismatch: {text}"));
        body.strip_suffix(". Call get_weather again with arguments that match.")
            .unwrap_or_else(|| panic!("no closing: {text}"))
            .to_owned()
    }

    /// Each case's arguments are refused with exactly its violations.
    fn assert_violations(p: &Parameters, cases: &[(Value, &str)]) {
        for (arguments, expected) in cases {
            assert_eq!(
                violations(p, &arguments.to_string()),
                *expected,
                "{arguments}"
            );
        }
    }

    #[test]
    fn the_models_text_for_the_weather_example() {
        assert_eq!(
            refusal(&weather(), r#"{"unit": "kelvin"}"#),
            "arguments for get_weather do not match its parameters: /location is required; \
             /unit must be one of \"c\", \"f\" (got \"kelvin\"). Call get_weather again with \
             arguments that match."
        );
        assert_eq!(
            weather().check(r#"{"location": "Tokyo", "unit": "c"}"#),
            Ok(())
        );
    }

    #[test]
    fn empty_text_is_an_empty_object() {
        assert_eq!(empty_parameters().check(""), Ok(()));
        assert_eq!(empty_parameters().check("  \n"), Ok(()));
        assert_eq!(violations(&weather(), ""), "/location is required");
    }

    #[test]
    fn text_that_is_not_json_says_where() {
        assert_eq!(
            refusal(&weather(), r#"{"location": "Tokyo""#),
            "arguments for get_weather are not valid JSON (EOF while parsing an object at line \
             1 column 20); get_weather takes a JSON object of its parameters. Call get_weather \
             again with a JSON object that matches its parameters."
        );
        assert_eq!(
            refusal(&weather(), "{\n  location: 1}"),
            "arguments for get_weather are not valid JSON (key must be a string at line 2 \
             column 3); get_weather takes a JSON object of its parameters. Call get_weather \
             again with a JSON object that matches its parameters."
        );
    }

    #[test]
    fn json_that_is_not_an_object_says_what_it_is() {
        for (raw, found) in [
            ("[1, 2]", "an array"),
            ("\"Tokyo\"", "a string"),
            ("7", "a number"),
            ("null", "null"),
            ("true", "a boolean"),
        ] {
            assert_eq!(
                refusal(&weather(), raw),
                format!(
                    "arguments for get_weather must be a JSON object of its parameters, not \
                     {found}. Call get_weather again with a JSON object that matches its \
                     parameters."
                )
            );
        }
    }

    #[test]
    fn each_kind_of_violation_has_its_words() {
        let p = parameters(json!({
            "properties": {
                "count": {"type": "integer", "minimum": 1, "maximum": 10},
                "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                "step": {"type": "integer", "multipleOf": 5},
                "code": {"type": "string", "minLength": 3, "maxLength": 3, "pattern": "^[A-Z]+$"},
                "when": {"type": "string", "format": "date"},
                "mode": {"const": "fast"},
                "tags": {"type": "array", "minItems": 1, "maxItems": 2, "uniqueItems": true},
                "maybe": {"type": ["string", "null"]},
                "opts": {"type": "object", "additionalProperties": false,
                         "properties": {"a": {"type": "boolean"}}},
                "nothing": false
            }
        }));
        let cases = [
            (
                json!({"count": "5"}),
                "/count must be an integer (got \"5\")",
            ),
            (json!({"count": 0}), "/count must be at least 1 (got 0)"),
            (json!({"count": 11}), "/count must be at most 10 (got 11)"),
            (json!({"ratio": 0}), "/ratio must be greater than 0 (got 0)"),
            (json!({"ratio": 1}), "/ratio must be less than 1 (got 1)"),
            (json!({"step": 7}), "/step must be a multiple of 5 (got 7)"),
            (
                json!({"code": "AB"}),
                "/code must be at least 3 characters long (got 2)",
            ),
            (
                json!({"code": "ABCD"}),
                "/code must be at most 3 characters long (got 4)",
            ),
            (
                json!({"code": "abc"}),
                "/code must match the regular expression \"^[A-Z]+$\" (got \"abc\")",
            ),
            (
                json!({"when": "tomorrow"}),
                "/when must be in the \"date\" format (got \"tomorrow\")",
            ),
            (
                json!({"mode": "slow"}),
                "/mode must be \"fast\" (got \"slow\")",
            ),
            (
                json!({"tags": []}),
                "/tags must have at least 1 item (got 0)",
            ),
            (
                json!({"tags": [1, 2, 3]}),
                "/tags must have at most 2 items (got 3)",
            ),
            (
                json!({"tags": [1, 1]}),
                "/tags must not contain the same item twice",
            ),
            (
                json!({"maybe": 3}),
                "/maybe must be null or a string (got 3)",
            ),
            (
                json!({"opts": {"a": true, "b": 1, "c/d": 2}}),
                "/opts/b is not allowed (unknown property); /opts/c~1d is not allowed (unknown \
                 property)",
            ),
            (
                json!({"opts": {"a": "yes"}}),
                "/opts/a must be a boolean (got \"yes\")",
            ),
            (json!({"nothing": 1}), "/nothing is not allowed"),
        ];
        assert_violations(&p, &cases);
    }

    #[test]
    fn rarer_keywords_have_their_words_and_the_rest_the_validators() {
        let p = parameters(json!({
            "properties": {
                "opts": {"type": "object", "minProperties": 1, "maxProperties": 2},
                "list": {"type": "array", "contains": {"type": "integer"}},
                "name": {"not": {"const": "admin"}},
                "pick": {"oneOf": [{"type": "integer"}, {"minimum": 0}]},
                "keys": {"type": "object", "propertyNames": {"maxLength": 2}}
            }
        }));
        let cases = [
            (
                json!({"opts": {}}),
                "/opts must have at least 1 property (got 0)",
            ),
            (
                json!({"opts": {"a": 1, "b": 2, "c": 3}}),
                "/opts must have at most 2 properties (got 3)",
            ),
            (
                json!({"list": ["a"]}),
                "/list must contain at least one item that matches its schema",
            ),
            (
                json!({"name": "admin"}),
                "/name must not match {\"const\":\"admin\"}",
            ),
            (
                json!({"pick": 3}),
                "/pick must match exactly one of its allowed forms, but matches more than one",
            ),
            (
                json!({"keys": {"abc": 1}}),
                "/keys: \"abc\" is longer than 2 characters",
            ),
        ];
        assert_violations(&p, &cases);
    }

    #[test]
    fn unknown_formats_are_ignored_and_drafts_are_2020_12() {
        let p = parameters(json!({"properties": {"c": {"type": "string", "format": "colour"}}}));
        assert_eq!(p.check(r#"{"c": "anything"}"#), Ok(()));
        // Draft 7's array form of `items` is not draft 2020-12, whatever `$schema` says.
        let SchemaError::Invalid { problems } = schema_error(json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "properties": {"pair": {"type": "array", "items": [{"type": "string"}]}}
        })) else {
            panic!("a draft 7 tuple is refused")
        };
        assert_eq!(
            problems,
            [
                "not a valid JSON Schema (draft 2020-12): /properties/pair/items must be a boolean \
              or an object (got an array)"
            ]
        );
    }

    #[test]
    fn alternatives_are_described() {
        let p = parameters(json!({
            "properties": {"at": {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]}}
        }));
        assert_eq!(
            violations(&p, r#"{"at": -1}"#),
            "/at must match one of its allowed forms: either /at must be a string (got -1), or \
             /at must be at least 0 (got -1)"
        );
    }

    #[test]
    fn long_values_are_cut_and_containers_named() {
        let p = parameters(json!({"properties": {"unit": {"enum": ["c", "f"]}}}));
        let long = "x".repeat(200);
        assert_eq!(
            violations(&p, &json!({"unit": long}).to_string()),
            format!(
                "/unit must be one of \"c\", \"f\" (got \"{}…)",
                "x".repeat(MAX_QUOTED_CHARS - 1)
            )
        );
        assert_eq!(
            violations(&p, r#"{"unit": [1]}"#),
            "/unit must be one of \"c\", \"f\" (got an array)"
        );
    }

    #[test]
    fn at_most_ten_violations_then_how_many_more() {
        let p = parameters(json!({"additionalProperties": false}));
        let arguments: Map<String, Value> =
            (0..13).map(|i| (format!("k{i:02}"), json!(i))).collect();
        let text = violations(&p, &Value::Object(arguments).to_string());
        let listed: Vec<&str> = text.split("; ").collect();
        assert_eq!(listed.len(), MAX_LISTED_VIOLATIONS + 1, "{text}");
        assert_eq!(listed[0], "/k00 is not allowed (unknown property)");
        assert_eq!(listed[MAX_LISTED_VIOLATIONS], "and 3 more");
    }

    #[test]
    fn a_schema_in_use_is_compiled_once_and_forgotten_with_its_last_tool() {
        let schema = json!({"properties": {"shared_once": {"type": "string"}}});
        let a = parameters(schema.clone());
        let b = parameters(schema.clone());
        assert!(Arc::ptr_eq(&a.compiled, &b.compiled));
        let other = parameters(json!({"properties": {"shared_once": {"type": "integer"}}}));
        assert!(!Arc::ptr_eq(&a.compiled, &other.compiled));
        let key = Value::Object(a.schema().clone()).to_string();
        drop((a, b));
        let entry = COMPILED.table().validators.get(&key).cloned();
        // Pruning by another test may have dropped the dead entry already.
        assert!(entry.is_none_or(|weak| weak.strong_count() == 0));
    }

    #[test]
    fn the_table_of_compiled_schemas_drops_what_no_tool_uses() {
        for i in 0..3 * COMPILED_PRUNE_AT {
            parameters(json!({"properties": {format!("pruned_{i}"): {"type": "string"}}}));
        }
        let table = COMPILED.table();
        let dead = table
            .validators
            .iter()
            .filter(|(key, v)| key.contains("pruned_") && v.strong_count() == 0)
            .count();
        assert!(
            dead <= table.prune_at.max(COMPILED_PRUNE_AT),
            "{dead} dead entries"
        );
        assert!(table.validators.len() < 3 * COMPILED_PRUNE_AT);
    }

    #[test]
    fn the_model_sees_an_object_schema() {
        assert_eq!(
            Value::Object(empty_parameters().schema().clone()),
            json!({"type": "object", "properties": {}})
        );
        let p = parameters(json!({"properties": {"a": {"type": "string"}}, "required": ["a"]}));
        assert_eq!(
            Value::Object(p.schema().clone()),
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]})
        );
        // Written keys keep their order, after the added `type`.
        let keys: Vec<&String> = p.schema().keys().collect();
        assert_eq!(keys, ["type", "properties", "required"]);
        let p = parameters(json!({"type": "object"}));
        assert_eq!(
            Value::Object(p.schema().clone()),
            json!({"type": "object", "properties": {}})
        );
        // An added `properties` goes last, whether or not `type` had to be added first.
        let p = parameters(json!({"description": "d", "additionalProperties": false}));
        let keys: Vec<&String> = p.schema().keys().collect();
        assert_eq!(
            keys,
            ["type", "description", "additionalProperties", "properties"]
        );
        let p = parameters(json!({"description": "d", "type": "object"}));
        let keys: Vec<&String> = p.schema().keys().collect();
        assert_eq!(keys, ["description", "type", "properties"]);
    }

    #[test]
    fn the_text_for_the_model_is_cut_to_its_bound_with_a_note() {
        // Ten levels of two alternatives each: 2^10 leaves if nothing bounded the text.
        let p = parameters(schema_limits::levels(
            10,
            |r| json!({"anyOf": [r.clone(), r]}),
        ));
        let message = p.check(r#"{"x": 1}"#).unwrap_err().message("t");
        assert!(message.len() <= MAX_FIX_IT_BYTES, "{}", message.len());
        assert!(message.starts_with(
            "arguments for t do not match its parameters: /x must match one of its allowed \
             forms: either /x must match one of its allowed forms: either"
        ));
        assert!(message.contains("…"), "{message}");
        assert!(message.ends_with(". Call t again with arguments that match."));
        // Many long violations: the list is cut, and says how much it left out.
        let long = ArgumentError::Mismatch {
            violations: vec!["v".repeat(MAX_VIOLATION_BYTES); MAX_LISTED_VIOLATIONS],
            unlisted: 3,
        };
        let message = long.message("t");
        assert!(message.len() <= MAX_FIX_IT_BYTES, "{}", message.len());
        let note = regex_free_note(&message);
        assert!(note.ends_with(" more bytes left out)"), "{note}");
        // Multi-byte characters are cut at a character boundary.
        let wide = ArgumentError::Mismatch {
            violations: vec!["雪".repeat(MAX_FIX_IT_BYTES)],
            unlisted: 0,
        };
        assert!(wide.message("t").len() <= MAX_FIX_IT_BYTES);
    }

    /// The part of a cut text from its `…` on.
    fn regex_free_note(message: &str) -> &str {
        let start = message.rfind('…').expect("a cut text has a note");
        let end = message.rfind(". Call").expect("the closing sentence");
        &message[start..end]
    }

    /// The largest schema of a family the bounds let through.
    fn largest_accepted(family: &dyn Fn(usize) -> Value) -> (usize, Parameters) {
        let (mut accepted, mut refused) = (1, 20_000);
        while refused - accepted > 1 {
            let n = (accepted + refused) / 2;
            match Parameters::new(object(family(n))) {
                Ok(_) => accepted = n,
                Err(SchemaError::Limit(_)) => refused = n,
                Err(e) => panic!("{n}: {e}"),
            }
        }
        (accepted, parameters(family(accepted)))
    }

    #[test]
    fn the_largest_schemas_allowed_are_checked_on_a_small_stack() {
        type Family = Box<dyn Fn(usize) -> Value>;
        // An eighth of a server thread's 2 MiB: what the bounds allow fits with room to spare.
        let checked = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let families: [(&str, Family); 5] = [
                    ("chain", Box::new(|n| schema_limits::levels(n, |r| r))),
                    (
                        "nest",
                        Box::new(|n| schema_limits::levels(n, |r| json!({"anyOf": [r]}))),
                    ),
                    (
                        "oneOf nest",
                        Box::new(|n| {
                            schema_limits::levels(n, |r| json!({"oneOf": [r, {"type": "null"}]}))
                        }),
                    ),
                    (
                        "doubling",
                        Box::new(|n| {
                            schema_limits::levels(n, |r| json!({"anyOf": [r.clone(), r]}))
                        }),
                    ),
                    (
                        "properties",
                        Box::new(|n| schema_limits::levels(n, |r| json!({"properties": {"x": r}}))),
                    ),
                ];
                let mut largest = Vec::new();
                for (name, family) in &families {
                    let (n, p) = largest_accepted(family.as_ref());
                    let verdict = if *name == "properties" {
                        // As deep as arguments are checked: each level is an object, so the
                        // string at the bottom is never reached.
                        let mut arguments = json!(1);
                        for _ in 0..MAX_CHECKED_ARGUMENT_DEPTH {
                            arguments = json!({"x": arguments});
                        }
                        p.check(&arguments.to_string())
                    } else {
                        p.check(r#"{"x": 1}"#)
                    };
                    match verdict {
                        Ok(()) => assert_eq!(*name, "properties"),
                        Err(refused) => {
                            let message = refused.message("t");
                            assert!(message.len() <= MAX_FIX_IT_BYTES, "{name}: {message}");
                        }
                    }
                    largest.push((*name, n));
                }
                largest
            })
            .unwrap()
            .join()
            .expect("no stack overflow");
        assert_eq!(
            checked,
            [
                ("chain", 254),
                ("nest", 127),
                ("oneOf nest", 127),
                ("doubling", 12),
                ("properties", 127)
            ]
        );
    }

    #[test]
    fn a_recursive_schema_checks_arguments_to_its_measured_depth() {
        let tree = parameters(json!({
            "$defs": {"node": {"type": "object", "properties": {
                "name": {"type": "string"},
                "child": {"$ref": "#/$defs/node"}
            }}},
            "$ref": "#/$defs/node"
        }));
        let nested = |levels: usize, leaf: Value| {
            let mut v = json!({"name": leaf});
            for _ in 1..levels {
                v = json!({"child": v});
            }
            v.to_string()
        };
        // 64 levels below the top: checked, and the wrong leaf found.
        let deepest = nested(MAX_CHECKED_ARGUMENT_DEPTH, json!(5));
        let Err(ArgumentError::Mismatch { violations, .. }) = tree.check(&deepest) else {
            panic!("the leaf is wrong")
        };
        assert!(violations[0].ends_with("/name must be a string (got 5)"));
        assert_eq!(
            tree.check(&nested(MAX_CHECKED_ARGUMENT_DEPTH + 1, json!("a"))),
            Err(ArgumentError::TooDeep {
                depth: MAX_CHECKED_ARGUMENT_DEPTH + 1,
                limit: MAX_CHECKED_ARGUMENT_DEPTH
            })
        );
        // A schema that does not reach that deep leaves deeper arguments alone.
        let mut deep = json!(1);
        for _ in 0..100 {
            deep = json!([deep]);
        }
        assert_eq!(
            weather().check(&json!({"location": "x", "extra": deep}).to_string()),
            Ok(())
        );
    }

    #[test]
    fn arguments_too_large_to_check_or_to_explain_are_answered_plainly() {
        let p = parameters(json!({"properties": {"n": {"type": "array", "items": {
            "anyOf": [{"type": "integer"}, {"type": "string"}]}}}}));
        // Each item meets five subschemas on its way: the top, `n`, `items` and its two
        // alternatives. 3 003 values (the top, `n`'s name, the array and its items) make 15 015
        // checks at most; 5 003, 25 015.
        let items = |n: usize, item: Value| json!({"n": vec![item; n]}).to_string();
        assert_eq!(p.check(&items(3_000, json!(1))), Ok(()));
        let Err(ArgumentError::Mismatch { unlisted, .. }) = p.check(&items(3_000, json!(null)))
        else {
            panic!("nulls are neither integers nor strings")
        };
        assert_eq!(unlisted, 3_000 - MAX_LISTED_VIOLATIONS);
        assert_eq!(
            p.check(&items(5_000, json!(null))),
            Err(ArgumentError::Unexplained {
                values: 5_003,
                per_path: 5
            })
        );
        assert!(matches!(
            p.check(&items(300_000, json!(1))),
            Err(ArgumentError::TooLarge {
                values: 300_003,
                ..
            })
        ));
        assert_eq!(
            ArgumentError::TooLarge {
                values: 300_003,
                per_path: 5
            }
            .message("t"),
            "arguments for t are too large to check against its parameters: 300003 values, \
             each checked against up to 5 subschemas, is more than the 1000000 checks one call \
             may take. Call t again with fewer values."
        );
        assert_eq!(
            ArgumentError::Unexplained {
                values: 5_003,
                per_path: 5
            }
            .message("t"),
            "arguments for t do not match its parameters; listing what is wrong would take more \
             than one call may (5003 values, each checked against up to 5 subschemas). Call t \
             again with arguments that match."
        );
    }

    fn schema_error(v: Value) -> SchemaError {
        Parameters::new(object(v)).expect_err("the schema must be refused")
    }

    #[test]
    fn a_top_level_type_other_than_object_is_refused() {
        assert_eq!(
            schema_error(json!({"type": "array", "items": {"type": "string"}})),
            SchemaError::NotAnObject {
                found: "\"array\"".into()
            }
        );
        assert_eq!(
            schema_error(json!({"type": ["object", "null"]})).to_string(),
            "parameters must describe a JSON object: the top-level \"type\" is \
             [\"object\",\"null\"]; use \"type\": \"object\" or leave \"type\" out (a tool's \
             arguments are always a JSON object)"
        );
    }

    #[test]
    fn invalid_schemas_name_the_path_and_the_problem() {
        let cases = [
            (
                json!({"properties": {"unit": {"type": "strng"}}}),
                "not a valid JSON Schema (draft 2020-12): /properties/unit/type must match one of its allowed forms: either \
                 /properties/unit/type must be one of \"array\", \"boolean\", \"integer\", \
                 \"null\", \"number\", \"object\", \"string\" (got \"strng\"), or \
                 /properties/unit/type must be an array (got \"strng\")",
            ),
            (
                json!({"required": "location"}),
                "not a valid JSON Schema (draft 2020-12): /required must be an array (got \
                 \"location\")",
            ),
            (
                json!({"properties": {"n": {"minimum": "5"}}}),
                "not a valid JSON Schema (draft 2020-12): /properties/n/minimum must be a \
                 number (got \"5\")",
            ),
            (
                json!({"properties": {"code": {"pattern": "(unclosed"}}}),
                "not a valid JSON Schema (draft 2020-12): /properties/code/pattern must be a \
                 valid regular expression (got \"(unclosed\")",
            ),
            (
                json!({"properties": []}),
                "not a valid JSON Schema (draft 2020-12): /properties must be an object (got \
                 an array)",
            ),
        ];
        for (schema, expected) in cases {
            assert_eq!(
                schema_error(schema.clone()),
                SchemaError::Invalid {
                    problems: vec![expected.to_owned()]
                },
                "{schema}"
            );
        }
    }

    #[test]
    fn every_problem_is_listed_up_to_the_bound() {
        let SchemaError::Invalid { problems } = schema_error(json!({
            "required": "a",
            "minProperties": -1,
            "properties": {"b": {"type": "text"}}
        })) else {
            panic!("three problems")
        };
        assert_eq!(problems.len(), 3, "{problems:?}");
        let properties: Map<String, Value> = (0..13)
            .map(|i| (format!("p{i:02}"), json!({"minLength": "1"})))
            .collect();
        let SchemaError::Invalid { problems } = schema_error(json!({"properties": properties}))
        else {
            panic!("thirteen problems")
        };
        assert_eq!(problems.len(), MAX_LISTED_SCHEMA_PROBLEMS + 1);
        assert_eq!(
            problems[0],
            "not a valid JSON Schema (draft 2020-12): /properties/p00/minLength must be an \
             integer (got \"1\")"
        );
        assert_eq!(problems[MAX_LISTED_SCHEMA_PROBLEMS], "and 3 more problems");
    }

    #[test]
    fn references_inside_the_schema_are_followed() {
        let p = parameters(json!({
            "$defs": {"unit": {"enum": ["c", "f"]}},
            "properties": {"unit": {"$ref": "#/$defs/unit"}}
        }));
        assert_eq!(p.check(r#"{"unit": "c"}"#), Ok(()));
        assert_eq!(
            violations(&p, r#"{"unit": "k"}"#),
            "/unit must be one of \"c\", \"f\" (got \"k\")"
        );
    }

    #[test]
    fn schemas_that_cannot_compile_are_refused() {
        for (schema, expected) in [
            (
                json!({"properties": {"a": {"$ref": "#/$defs/missing"}}}),
                "not a valid JSON Schema (draft 2020-12): a \"$ref\" cannot be resolved \
                 (Pointer '/$defs/missing' does not exist); only references inside the schema \
                 are followed",
            ),
            (
                json!({"properties": {"a": {"$ref": "https://example.com/a.json"}}}),
                "not a valid JSON Schema (draft 2020-12): a \"$ref\" cannot be resolved \
                 (Resource 'https://example.com/a.json' is not present in a registry and \
                 retrieving it failed: Retrieval is disabled, cannot fetch \
                 https://example.com/a.json); only references inside the schema are followed",
            ),
        ] {
            assert_eq!(
                schema_error(schema.clone()),
                SchemaError::Invalid {
                    problems: vec![expected.to_owned()]
                },
                "{schema}"
            );
        }
    }
}
