//! The words of a refusal: what each violation of a schema says to the model, with the place in
//! the arguments, what was expected and what was found, within the fix-it text's budget.

use jsonschema::ValidationError;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use serde_json::Value;

use super::{
    MAX_LISTED_ALTERNATIVES, MAX_LISTED_OPTIONS, MAX_QUOTED_CHARS, MAX_VIOLATIONS_PER_ALTERNATIVE,
};

/// What one validation error says, as violations: each starts with the JSON pointer of the
/// value it is about and says what was expected, and what was there. `additionalProperties`
/// gives one violation per unexpected property.
///
/// `budget` is the bytes of text still to be written: each text written is taken from it, and
/// once it is spent, alternatives and unexpected properties are no longer described (the text
/// says so). Nested alternatives recurse, as deep as the schema's subschemas nest
/// ([`schema_limits::MAX_SUBSCHEMA_DEPTH`]).
pub(super) fn describe(error: &ValidationError<'_>, root: &str, budget: &mut usize) -> Vec<String> {
    let at = error.instance_path().as_str();
    let here = if at.is_empty() { root } else { at };
    let got = || quote_back(error.instance());
    let one = |text: String| vec![text];
    let texts = match error.kind() {
        ValidationErrorKind::Required { property } => one(format!(
            "{at}/{} is required",
            pointer_token(&plain_text(property))
        )),
        ValidationErrorKind::Type { kind } => one(format!(
            "{here} must be {} (got {})",
            expected_types(kind),
            got()
        )),
        ValidationErrorKind::Enum { options } => one(format!(
            "{here} must be one of {} (got {})",
            list_options(options),
            got()
        )),
        ValidationErrorKind::Constant { expected_value } => one(format!(
            "{here} must be {} (got {})",
            quote(expected_value),
            got()
        )),
        ValidationErrorKind::Minimum { limit } => {
            one(format!("{here} must be at least {limit} (got {})", got()))
        }
        ValidationErrorKind::Maximum { limit } => {
            one(format!("{here} must be at most {limit} (got {})", got()))
        }
        ValidationErrorKind::ExclusiveMinimum { limit } => one(format!(
            "{here} must be greater than {limit} (got {})",
            got()
        )),
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            one(format!("{here} must be less than {limit} (got {})", got()))
        }
        ValidationErrorKind::MultipleOf { multiple_of } => one(format!(
            "{here} must be a multiple of {multiple_of} (got {})",
            got()
        )),
        ValidationErrorKind::MinLength { limit } => one(format!(
            "{here} must be at least {limit} {} long (got {})",
            plural(*limit, "character", "characters"),
            length_of(error.instance())
        )),
        ValidationErrorKind::MaxLength { limit } => one(format!(
            "{here} must be at most {limit} {} long (got {})",
            plural(*limit, "character", "characters"),
            length_of(error.instance())
        )),
        ValidationErrorKind::Pattern { pattern } => one(format!(
            "{here} must match the regular expression {} (got {})",
            Value::String(pattern.clone()),
            got()
        )),
        ValidationErrorKind::Format { format } if format == "regex" => one(format!(
            "{here} must be a valid regular expression (got {})",
            got()
        )),
        ValidationErrorKind::Format { format } => one(format!(
            "{here} must be in the {} format (got {})",
            Value::String(format.clone()),
            got()
        )),
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            let mut texts = Vec::new();
            for (i, name) in unexpected.iter().enumerate() {
                if *budget == 0 {
                    texts.push(format!(
                        "{here}: {} more unknown properties are not allowed",
                        unexpected.len() - i
                    ));
                    break;
                }
                let text = format!(
                    "{at}/{} is not allowed (unknown property)",
                    pointer_token(name)
                );
                spend(budget, &text);
                texts.push(text);
            }
            return texts;
        }
        ValidationErrorKind::MinItems { limit } => one(format!(
            "{here} must have at least {limit} {} (got {})",
            plural(*limit, "item", "items"),
            count_of(error.instance())
        )),
        ValidationErrorKind::MaxItems { limit } => one(format!(
            "{here} must have at most {limit} {} (got {})",
            plural(*limit, "item", "items"),
            count_of(error.instance())
        )),
        ValidationErrorKind::UniqueItems => {
            one(format!("{here} must not contain the same item twice"))
        }
        ValidationErrorKind::Contains => one(format!(
            "{here} must contain at least one item that matches its schema"
        )),
        ValidationErrorKind::MinProperties { limit } => one(format!(
            "{here} must have at least {limit} {} (got {})",
            plural(*limit, "property", "properties"),
            count_of(error.instance())
        )),
        ValidationErrorKind::MaxProperties { limit } => one(format!(
            "{here} must have at most {limit} {} (got {})",
            plural(*limit, "property", "properties"),
            count_of(error.instance())
        )),
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            // The alternatives' texts are taken from the budget as they are written.
            let opening = format!("{here} must match one of its allowed forms: ");
            spend(budget, &opening);
            return one(opening + &alternatives(context, root, budget));
        }
        ValidationErrorKind::OneOfMultipleValid { .. } => one(format!(
            "{here} must match exactly one of its allowed forms, but matches more than one"
        )),
        ValidationErrorKind::Not { schema } => {
            one(format!("{here} must not match {}", quote(schema)))
        }
        ValidationErrorKind::FalseSchema => one(format!("{here} is not allowed")),
        // Anything rarer (content encodings, property names, a regular expression that gave up)
        // keeps the validator's own words, still located.
        _ => one(format!("{here}: {error}")),
    };
    for text in &texts {
        spend(budget, text);
    }
    texts
}

/// Takes `text` from the bytes still to be written.
fn spend(budget: &mut usize, text: &str) {
    *budget = budget.saturating_sub(text.len());
}

/// How many violations [`describe`] gives for `error`, without describing it.
pub(super) fn violation_count(error: &ValidationError<'_>) -> usize {
    match error.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => unexpected.len(),
        _ => 1,
    }
}

/// `either A, or B` for the alternatives of an `anyOf` / `oneOf`, each by its first violations;
/// only what `budget` leaves room for is described (`…` marks where describing stopped).
fn alternatives(
    context: &[Vec<ValidationError<'static>>],
    root: &str,
    budget: &mut usize,
) -> String {
    let mut described: Vec<String> = Vec::new();
    for branch in context.iter().take(MAX_LISTED_ALTERNATIVES) {
        if *budget == 0 {
            described.push("…".to_owned());
            break;
        }
        let total: usize = branch.iter().map(violation_count).sum();
        let mut violations: Vec<String> = Vec::new();
        for error in branch {
            if violations.len() >= MAX_VIOLATIONS_PER_ALTERNATIVE || *budget == 0 {
                break;
            }
            violations.extend(describe(error, root, budget));
        }
        violations.truncate(MAX_VIOLATIONS_PER_ALTERNATIVE);
        let mut text = violations.join(" and ");
        if total > violations.len() {
            text.push_str(&format!(" (and {} more)", total - violations.len()));
        }
        described.push(text);
    }
    if context.len() > MAX_LISTED_ALTERNATIVES {
        described.push(format!(
            "{} other forms",
            context.len() - MAX_LISTED_ALTERNATIVES
        ));
    }
    format!("either {}", described.join(", or "))
}

/// `"c", "f"`: the options of an `enum`, as JSON.
fn list_options(options: &Value) -> String {
    let Value::Array(options) = options else {
        return quote(options);
    };
    let mut listed: Vec<String> = options.iter().take(MAX_LISTED_OPTIONS).map(quote).collect();
    if options.len() > MAX_LISTED_OPTIONS {
        listed.push(format!("or {} more", options.len() - MAX_LISTED_OPTIONS));
    }
    listed.join(", ")
}

/// `a string`, `an integer or null`: the types a `type` keyword allows.
fn expected_types(kind: &TypeKind) -> String {
    let names: Vec<&str> = match kind {
        TypeKind::Single(t) => vec![type_phrase(&t.to_string())],
        TypeKind::Multiple(set) => set.iter().map(|t| type_phrase(&t.to_string())).collect(),
    };
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => (*last).to_owned(),
        None => "of no type".to_owned(),
    }
}

fn type_phrase(name: &str) -> &'static str {
    match name {
        "array" => "an array",
        "boolean" => "a boolean",
        "integer" => "an integer",
        "null" => "null",
        "number" => "a number",
        "object" => "an object",
        _ => "a string",
    }
}

/// What a value is, with an article: `an array`, `a string`.
pub(super) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A value of the schema quoted: its JSON text, cut at [`MAX_QUOTED_CHARS`] characters.
fn quote(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// A value of the arguments quoted back: like [`quote`], but arrays and objects are named only
/// (their text could be long, and the pointer already says where they are).
fn quote_back(value: &Value) -> String {
    match value {
        Value::Array(_) | Value::Object(_) => kind_of(value).to_owned(),
        _ => quote(value),
    }
}

/// A string's length in characters, as JSON Schema counts them (code points).
fn length_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.chars().count().to_string(),
        other => kind_of(other).to_owned(),
    }
}

/// How many items (or properties) a value has.
fn count_of(value: &Value) -> String {
    match value {
        Value::Array(a) => a.len().to_string(),
        Value::Object(o) => o.len().to_string(),
        other => kind_of(other).to_owned(),
    }
}

fn plural(n: u64, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
}

/// A property name as JSON text would show it, without quotes when it is a string.
fn plain_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A property name as one JSON pointer token (RFC 6901: `~` is `~0`, `/` is `~1`).
fn pointer_token(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}
