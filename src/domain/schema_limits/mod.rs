//! The bounds a tool's parameters schema must keep, so that checking a call's arguments against
//! it is bounded in stack, time and memory whatever the schema says.
//!
//! The validator checks a call by walking the schema's subschemas along the arguments, following
//! each `$ref`; a schema is a graph, and a small one can stand for a very deep or very wide walk
//! (a `$ref` chain thousands of links long, or `anyOf` of two `$ref`s to the level below, which
//! doubles at every level). [`measure`] builds that graph when a schema is registered — before it
//! is compiled, since compiling follows the same `$ref`s — and refuses what exceeds a bound with
//! a [`LimitError`] naming the bound and the JSON pointer where it was hit. What a call's check
//! then needs is the [`SchemaCost`] it returns.
//!
//! `arguments` (which compiles and checks) is the only user. Plain code: no actor, no HTTP.

use std::fmt::Write as _;

use serde_json::Value;

use self::graph::{Graph, scan};

mod graph;

/// Largest schema accepted, as compact JSON text. A schema goes to the model in every tool
/// update; real tool schemas are a few KiB, and this also bounds what measuring and compiling a
/// registration costs.
pub(crate) const MAX_SCHEMA_BYTES: usize = 256 * 1024;

/// Deepest nesting of JSON values in a schema document. Real schemas nest a handful of levels
/// (each object property is two); 64 leaves room for generated ones, and keeps every later walk
/// of the document (the meta-schema check, serialising) shallow.
pub(crate) const MAX_SCHEMA_NESTING: usize = 64;

/// Most subschemas one check may be nested in at once, `$ref`s followed: the validator recurses
/// once per subschema, and building the text of a mismatch once more per `anyOf` / `oneOf`. At
/// about 600 bytes of stack per level (measured), 256 levels take well under a tenth of the
/// 2 MiB stack of a server thread; a nest of 1 250 `anyOf` / `$ref` levels overflowed it.
pub(crate) const MAX_SUBSCHEMA_DEPTH: u32 = 256;

/// Most subschemas an argument value, and every value on the way to it from the top, may be
/// checked against together, `$ref`s followed. A schema whose levels each branch into two
/// `$ref`s to the level below doubles this with every level: without a bound, 17 levels gave a
/// 10 MB answer and 24 exhausted the memory. Real schemas stay in the tens or hundreds.
pub(crate) const MAX_SUBSCHEMAS_PER_PATH: u64 = 10_000;

/// Deepest arguments checked against a schema that reaches deeper (a recursive one, such as a
/// tree of nodes): the bounds above are measured for arguments up to this depth, so deeper ones
/// are refused rather than checked past what was measured. Far beyond what a model sends.
pub(crate) const MAX_CHECKED_ARGUMENT_DEPTH: usize = 64;

/// Why a schema is refused: which bound it exceeds, and where in the schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("parameters are {bytes} bytes of JSON; at most {MAX_SCHEMA_BYTES} bytes are accepted")]
    TooLarge { bytes: usize },
    #[error(
        "parameters nest deeper than {MAX_SCHEMA_NESTING} levels (at {at}); at most \
         {MAX_SCHEMA_NESTING} levels are accepted"
    )]
    NestedTooDeep { at: String },
    #[error(
        "parameters nest more than {MAX_SUBSCHEMA_DEPTH} subschemas deep, their \"$ref\"s \
         followed (at {at}); at most {MAX_SUBSCHEMA_DEPTH} are accepted, so that checking a call \
         stays bounded"
    )]
    SubschemasTooDeep { at: String },
    #[error(
        "parameters expand to more than {MAX_SUBSCHEMAS_PER_PATH} subschemas along one path into \
         the arguments, their \"$ref\"s followed (at {at}); at most {MAX_SUBSCHEMAS_PER_PATH} are \
         accepted, so that checking a call stays bounded"
    )]
    TooManySubschemas { at: String },
    #[error(
        "parameters loop: the \"$ref\" at {at} leads back to {target} without descending into \
         the arguments, so checking a call would never end"
    )]
    RefLoop { at: String, target: String },
    #[error(
        "parameters use \"{keyword}\" (at {at}), which is not accepted: the server follows only \
         \"$ref\"s within the schema, to bound the check of a call"
    )]
    Unsupported { keyword: &'static str, at: String },
    #[error(
        "parameters refer to another document ({reference:?} at {at}); only references inside \
         the schema are followed"
    )]
    ForeignRef { reference: String, at: String },
}

/// What checking one call against a schema may cost, measured at registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SchemaCost {
    /// The most subschemas along one path into the arguments (at most
    /// [`MAX_SUBSCHEMAS_PER_PATH`]): each argument value is checked against at most this many.
    pub per_path: u64,
    /// The schema applies subschemas deeper than [`MAX_CHECKED_ARGUMENT_DEPTH`] levels into the
    /// arguments, so deeper arguments are refused.
    pub reaches_deeper: bool,
}

impl SchemaCost {
    /// An upper bound of the subschema checks a call with `shape` arguments makes.
    pub(crate) fn work(&self, shape: ArgumentShape) -> u64 {
        shape.values.saturating_mul(self.per_path)
    }
}

/// The size of a call's arguments, as the check meets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ArgumentShape {
    /// Every JSON value, property names included (`propertyNames` checks them).
    pub values: u64,
    /// Levels below the top: `{}` is 0, `{"a": 1}` is 1.
    pub depth: usize,
}

impl ArgumentShape {
    /// Measures `arguments` without recursing.
    pub(crate) fn of(arguments: &Value) -> Self {
        let mut shape = ArgumentShape {
            values: 0,
            depth: 0,
        };
        let mut stack = vec![(arguments, 0usize)];
        while let Some((value, depth)) = stack.pop() {
            shape.values += 1;
            shape.depth = shape.depth.max(depth);
            match value {
                Value::Array(items) => stack.extend(items.iter().map(|v| (v, depth + 1))),
                Value::Object(map) => {
                    shape.values += map.len() as u64;
                    stack.extend(map.values().map(|v| (v, depth + 1)));
                }
                _ => {}
            }
        }
        shape
    }
}

/// What [`measure`] found within the bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Measured {
    pub cost: SchemaCost,
    /// The first `$ref` the measure could not follow. Compiling the schema says why when it
    /// cannot be resolved at all; if it compiles, the reference leads to another document, which
    /// is refused ([`LimitError::ForeignRef`]).
    pub unresolved: Option<LimitError>,
}

/// Checks the nesting of `schema` (without recursing, whatever its depth): the first check, so
/// that everything after it (serialising, measuring, compiling) meets a shallow document.
pub(crate) fn check_nesting(schema: &Value) -> Result<(), LimitError> {
    // Each entry: the value, its depth, and its place in `path` (parent, token) for a pointer.
    let mut path: Vec<(usize, Token<'_>)> = Vec::new();
    let mut stack = vec![(schema, 0usize, usize::MAX)];
    while let Some((value, depth, at)) = stack.pop() {
        if depth > MAX_SCHEMA_NESTING {
            return Err(LimitError::NestedTooDeep {
                at: pointer_of(&path, at),
            });
        }
        match value {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    path.push((at, Token::Index(i)));
                    stack.push((item, depth + 1, path.len() - 1));
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    path.push((at, Token::Key(key)));
                    stack.push((item, depth + 1, path.len() - 1));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Builds the graph of `schema`'s subschemas (its `$ref`s followed within the schema) and checks
/// the bounds on it. `schema` has passed [`check_nesting`].
pub(crate) fn measure(schema: &Value) -> Result<Measured, LimitError> {
    let anchors = scan(schema)?;
    let graph = Graph::build(schema, anchors)?;
    let order = graph.children_first()?;
    graph.check_nesting_of_subschemas()?;
    let cost = graph.cost(&order)?;
    Ok(Measured {
        cost,
        unresolved: graph.unresolved,
    })
}

/// One step of a JSON pointer.
#[derive(Debug, Clone, Copy)]
enum Token<'s> {
    Key(&'s str),
    Index(usize),
}

/// The pointer of entry `at` of `path` (`usize::MAX` is the top), written for a person: the top
/// is "the top level".
fn pointer_of(path: &[(usize, Token<'_>)], mut at: usize) -> String {
    let mut tokens = Vec::new();
    while at != usize::MAX {
        let (parent, token) = path[at];
        tokens.push(token);
        at = parent;
    }
    if tokens.is_empty() {
        return "the top level".to_owned();
    }
    let mut pointer = String::new();
    for token in tokens.iter().rev() {
        push_token(&mut pointer, *token);
    }
    pointer
}

fn push_token(pointer: &mut String, token: Token<'_>) {
    pointer.push('/');
    match token {
        Token::Key(key) => pointer.push_str(&key.replace('~', "~0").replace('/', "~1")),
        Token::Index(i) => {
            let _ = write!(pointer, "{i}");
        }
    }
}

/// A child pointer, written for a person.
fn child_pointer(parent: &str, token: Token<'_>) -> String {
    let mut pointer = if parent == "the top level" {
        String::new()
    } else {
        parent.to_owned()
    };
    push_token(&mut pointer, token);
    pointer
}

/// The shape of the schemas that attack the check, for tests: `l0` a string, and `l{i}` built
/// by `level` from a reference to `l{i-1}`; the arguments' `x` is `l{n-1}`.
#[cfg(test)]
pub(crate) fn levels(n: usize, level: impl Fn(Value) -> Value) -> Value {
    let mut defs = serde_json::Map::new();
    defs.insert("l0".into(), serde_json::json!({"type": "string"}));
    for i in 1..n {
        defs.insert(
            format!("l{i}"),
            level(serde_json::json!({"$ref": format!("#/$defs/l{}", i - 1)})),
        );
    }
    serde_json::json!({
        "type": "object",
        "$defs": defs,
        "properties": {"x": {"$ref": format!("#/$defs/l{}", n - 1)}}
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::*;

    fn cost(schema: &Value) -> Result<SchemaCost, LimitError> {
        check_nesting(schema)?;
        measure(schema).map(|m| m.cost)
    }

    #[test]
    fn ordinary_schemas_are_cheap() {
        let weather = json!({
            "type": "object",
            "properties": {"location": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["location"]
        });
        // The top, then one property's subschema.
        assert_eq!(
            cost(&weather),
            Ok(SchemaCost {
                per_path: 2,
                reaches_deeper: false
            })
        );
        // Each value meets one subschema per level of the tree it is in, whatever the width.
        let properties: Map<String, Value> = (0..500)
            .map(|i| (format!("p{i}"), json!({"type": "integer"})))
            .collect();
        assert_eq!(
            cost(&json!({"properties": properties})).unwrap().per_path,
            2
        );
    }

    #[test]
    fn a_recursive_tree_is_measured_to_the_checked_depth() {
        let tree = json!({
            "$defs": {"node": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}
                }
            }},
            "$ref": "#/$defs/node"
        });
        let cost = cost(&tree).unwrap();
        assert!(cost.reaches_deeper);
        // About three subschemas for every two levels of arguments.
        assert!(cost.per_path < 200, "{cost:?}");
    }

    #[test]
    fn the_nest_of_anyof_and_ref_is_refused_where_it_gets_too_deep() {
        let nest = levels(1250, |r| json!({"anyOf": [r]}));
        assert_eq!(
            cost(&nest),
            Err(LimitError::SubschemasTooDeep {
                at: "/$defs/l128".to_owned()
            })
        );
        let chain = levels(14_000, |r| r);
        assert!(matches!(
            cost(&chain),
            Err(LimitError::SubschemasTooDeep { .. })
        ));
    }

    #[test]
    fn doubling_schemas_are_refused_where_they_pass_the_bound() {
        for (n, form) in [(22, "anyOf"), (24, "anyOf"), (22, "allOf"), (24, "oneOf")] {
            let doubling = levels(n, |r| json!({form: [r.clone(), r]}));
            assert_eq!(
                cost(&doubling),
                Err(LimitError::TooManySubschemas {
                    at: "/$defs/l12".to_owned()
                }),
                "{form} {n}"
            );
        }
        // `l{i}` is 2^(i+2) - 3 subschemas: `l11` (8 189) is within the bound, with the top and
        // the `$ref` of `x` 8 191.
        let within = levels(12, |r| json!({"anyOf": [r.clone(), r]}));
        assert_eq!(cost(&within).unwrap().per_path, 8191);
    }

    #[test]
    fn consuming_edges_to_the_same_value_add_up() {
        // Two `items` under `allOf` meet the same item; `properties` of different names do not.
        let both = json!({"allOf": [{"items": {"type": "string"}}, {"items": {"minLength": 1}}]});
        assert_eq!(cost(&both).unwrap().per_path, 5);
        let named = json!({
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "additionalProperties": {"type": "integer"}
        });
        assert_eq!(cost(&named).unwrap().per_path, 3);
    }

    #[test]
    fn loops_that_never_descend_are_refused() {
        let looped = json!({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]},
                                      "b": {"$ref": "#/$defs/a"}},
                            "properties": {"x": {"$ref": "#/$defs/a"}}});
        let Err(LimitError::RefLoop { at, target }) = cost(&looped) else {
            panic!("a loop is refused")
        };
        assert!(at.ends_with("/$ref"), "{at}");
        assert!(target.starts_with("/$defs/"), "{target}");
        assert_eq!(
            cost(&json!({"$ref": "#"})),
            Err(LimitError::RefLoop {
                at: "/$ref".to_owned(),
                target: "the top level".to_owned()
            })
        );
    }

    #[test]
    fn deep_documents_are_refused_without_recursing() {
        // Built by hand: `json!` serialises a value it is given, recursively.
        let mut deep = json!({"type": "string"});
        for _ in 0..100_000 {
            deep = Value::Object(Map::from_iter([("not".to_owned(), deep)]));
        }
        let Err(LimitError::NestedTooDeep { at }) = check_nesting(&deep) else {
            panic!("too deep")
        };
        assert_eq!(at, "/not".repeat(MAX_SCHEMA_NESTING + 1));
        // serde_json drops values recursively: take it apart by hand.
        let mut stack = vec![deep];
        while let Some(mut value) = stack.pop() {
            if let Some(inner) = value.get_mut("not") {
                stack.push(inner.take());
            }
        }
    }

    #[test]
    fn references_are_followed_by_pointer_and_anchor_only() {
        let anchored = json!({"$defs": {"u": {"$anchor": "unit", "enum": ["c"]}},
                              "properties": {"a": {"$ref": "#unit"}, "b": {"$ref": "#/$defs/u"},
                                             "c": {"$ref": "#/properties/a"}}});
        let measured = measure(&anchored).unwrap();
        assert_eq!(measured.unresolved, None);
        let foreign = json!({"properties": {"a": {"$ref": "other.json#/x"}}});
        assert_eq!(
            measure(&foreign).unwrap().unresolved,
            Some(LimitError::ForeignRef {
                reference: "other.json#/x".to_owned(),
                at: "/properties/a/$ref".to_owned()
            })
        );
        for (schema, keyword, at) in [
            (
                json!({"properties": {"a": {"$dynamicRef": "#x"}}}),
                "$dynamicRef",
                "/properties/a/$dynamicRef",
            ),
            (
                json!({"$defs": {"a": {"$id": "a.json"}}}),
                "$id",
                "/$defs/a/$id",
            ),
        ] {
            assert_eq!(
                measure(&schema),
                Err(LimitError::Unsupported {
                    keyword,
                    at: at.to_owned()
                })
            );
        }
        // The schema's own `$id` names the schema itself.
        let own = json!({"$id": "https://example.com/p", "$defs": {"u": {"type": "string"}},
                         "properties": {"a": {"$ref": "https://example.com/p#/$defs/u"}}});
        assert_eq!(measure(&own).unwrap().unresolved, None);
    }

    #[test]
    fn argument_shapes_count_values_and_levels() {
        assert_eq!(
            ArgumentShape::of(&json!({})),
            ArgumentShape {
                values: 1,
                depth: 0
            }
        );
        assert_eq!(
            ArgumentShape::of(&json!({"a": [1, 2], "b": {"c": null}})),
            ArgumentShape {
                values: 9,
                depth: 2
            }
        );
    }
}
