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

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{Map, Value};

/// Largest schema accepted, as compact JSON text. A schema goes to the model in every tool
/// update; real tool schemas are a few KiB, and this also bounds what measuring and compiling a
/// registration costs.
pub const MAX_SCHEMA_BYTES: usize = 256 * 1024;

/// Deepest nesting of JSON values in a schema document. Real schemas nest a handful of levels
/// (each object property is two); 64 leaves room for generated ones, and keeps every later walk
/// of the document (the meta-schema check, serialising) shallow.
pub const MAX_SCHEMA_NESTING: usize = 64;

/// Most subschemas one check may be nested in at once, `$ref`s followed: the validator recurses
/// once per subschema, and building the text of a mismatch once more per `anyOf` / `oneOf`. At
/// about 600 bytes of stack per level (measured), 256 levels take well under a tenth of the
/// 2 MiB stack of a server thread; a nest of 1 250 `anyOf` / `$ref` levels overflowed it.
pub const MAX_SUBSCHEMA_DEPTH: u32 = 256;

/// Most subschemas an argument value, and every value on the way to it from the top, may be
/// checked against together, `$ref`s followed. A schema whose levels each branch into two
/// `$ref`s to the level below doubles this with every level: without a bound, 17 levels gave a
/// 10 MB answer and 24 exhausted the memory. Real schemas stay in the tens or hundreds.
pub const MAX_SUBSCHEMAS_PER_PATH: u64 = 10_000;

/// Deepest arguments checked against a schema that reaches deeper (a recursive one, such as a
/// tree of nodes): the bounds above are measured for arguments up to this depth, so deeper ones
/// are refused rather than checked past what was measured. Far beyond what a model sends.
pub const MAX_CHECKED_ARGUMENT_DEPTH: usize = 64;

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
pub struct SchemaCost {
    /// The most subschemas along one path into the arguments (at most
    /// [`MAX_SUBSCHEMAS_PER_PATH`]): each argument value is checked against at most this many.
    pub per_path: u64,
    /// The schema applies subschemas deeper than [`MAX_CHECKED_ARGUMENT_DEPTH`] levels into the
    /// arguments, so deeper arguments are refused.
    pub reaches_deeper: bool,
}

impl SchemaCost {
    /// An upper bound of the subschema checks a call with `shape` arguments makes.
    pub fn work(&self, shape: ArgumentShape) -> u64 {
        shape.values.saturating_mul(self.per_path)
    }
}

/// The size of a call's arguments, as the check meets them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgumentShape {
    /// Every JSON value, property names included (`propertyNames` checks them).
    pub values: u64,
    /// Levels below the top: `{}` is 0, `{"a": 1}` is 1.
    pub depth: usize,
}

impl ArgumentShape {
    /// Measures `arguments` without recursing.
    pub fn of(arguments: &Value) -> Self {
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
pub struct Measured {
    pub cost: SchemaCost,
    /// The first `$ref` the measure could not follow. Compiling the schema says why when it
    /// cannot be resolved at all; if it compiles, the reference leads to another document, which
    /// is refused ([`LimitError::ForeignRef`]).
    pub unresolved: Option<LimitError>,
}

/// Checks the nesting of `schema` (without recursing, whatever its depth): the first check, so
/// that everything after it (serialising, measuring, compiling) meets a shallow document.
pub fn check_nesting(schema: &Value) -> Result<(), LimitError> {
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
pub fn measure(schema: &Value) -> Result<Measured, LimitError> {
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

/// Keywords whose value is a map of subschemas by name, and those whose value is a subschema or
/// a list of them: the places a schema keeps subschemas (applied or not), as the resolver of
/// `$ref`s indexes them.
const SUBSCHEMA_MAPS: &[&str] = &[
    "$defs",
    "definitions",
    "properties",
    "patternProperties",
    "dependentSchemas",
    "dependencies",
];
const SUBSCHEMA_LISTS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
const SUBSCHEMA_VALUES: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "items",
    "additionalItems",
    "additionalProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
    "contains",
    "contentSchema",
];

/// The subschemas that name themselves with `$anchor` (or `$dynamicAnchor`), by that name, with
/// their pointers.
type Anchors<'s> = HashMap<&'s str, Vec<(&'s Value, String)>>;

/// Keywords whose reference target depends on where the check came from (the dynamic scope):
/// the measure cannot bound where they lead, so they are refused.
const DYNAMIC_REFS: &[&str] = &["$dynamicRef", "$recursiveRef"];

/// Walks every place of `schema` that holds a subschema, refusing what the measure cannot follow
/// (dynamic references, and a `$id` or `$schema` below the top, which would change how the
/// references inside resolve), and returns the anchors by name.
fn scan(schema: &Value) -> Result<Anchors<'_>, LimitError> {
    let mut anchors = Anchors::new();
    let mut stack = vec![(schema, "the top level".to_owned())];
    while let Some((value, at)) = stack.pop() {
        let Value::Object(map) = value else { continue };
        check_keywords(map, &at, std::ptr::eq(value, schema))?;
        for key in ["$anchor", "$dynamicAnchor"] {
            if let Some(Value::String(name)) = map.get(key) {
                anchors.entry(name).or_default().push((value, at.clone()));
            }
        }
        for (key, child) in map {
            let here = child_pointer(&at, Token::Key(key));
            if SUBSCHEMA_MAPS.contains(&key.as_str())
                && let Value::Object(named) = child
            {
                for (name, sub) in named {
                    stack.push((sub, child_pointer(&here, Token::Key(name))));
                }
            }
            if SUBSCHEMA_LISTS.contains(&key.as_str())
                && let Value::Array(list) = child
            {
                for (i, sub) in list.iter().enumerate() {
                    stack.push((sub, child_pointer(&here, Token::Index(i))));
                }
            }
            if SUBSCHEMA_VALUES.contains(&key.as_str()) && child.is_object() {
                stack.push((child, here));
            }
        }
    }
    Ok(anchors)
}

/// Refuses a dynamic reference anywhere, and `$id` / `$schema` below the top.
fn check_keywords(map: &Map<String, Value>, at: &str, top: bool) -> Result<(), LimitError> {
    for &keyword in DYNAMIC_REFS {
        if map.contains_key(keyword) {
            return Err(LimitError::Unsupported {
                keyword,
                at: child_pointer(at, Token::Key(keyword)),
            });
        }
    }
    if !top {
        for keyword in ["$id", "$schema"] {
            if map.contains_key(keyword) {
                return Err(LimitError::Unsupported {
                    keyword,
                    at: child_pointer(at, Token::Key(keyword)),
                });
            }
        }
    }
    Ok(())
}

/// Where a consuming edge leads in the arguments: to the value under one property name, to any
/// property's value, to one item, or to any item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Slot<'s> {
    Name(&'s str),
    AnyName,
    Index(usize),
    AnyIndex,
}

/// A subschema, and the subschemas the check applies from it.
struct Node<'s> {
    pointer: String,
    /// Applied to the same value (`allOf`, `anyOf`, `oneOf`, `not`, `if` / `then` / `else`,
    /// `dependentSchemas`, `$ref`); `true` marks the `$ref`.
    in_place: Vec<(u32, bool)>,
    /// Applied to a value one level down, sorted by slot.
    consuming: Vec<(Slot<'s>, u32)>,
}

struct Graph<'s> {
    root: &'s Value,
    anchors: Anchors<'s>,
    nodes: Vec<Node<'s>>,
    values: Vec<&'s Value>,
    /// Nodes by the address of their value in the schema.
    index: HashMap<*const Value, u32>,
    unresolved: Option<LimitError>,
}

impl<'s> Graph<'s> {
    fn build(root: &'s Value, anchors: Anchors<'s>) -> Result<Self, LimitError> {
        let mut graph = Graph {
            root,
            anchors,
            nodes: Vec::new(),
            values: Vec::new(),
            index: HashMap::new(),
            unresolved: None,
        };
        graph.node(root, "the top level".to_owned());
        let mut next = 0;
        while next < graph.nodes.len() {
            graph.expand(next)?;
            next += 1;
        }
        Ok(graph)
    }

    /// The node of `value`, added if new.
    fn node(&mut self, value: &'s Value, pointer: String) -> u32 {
        let key: *const Value = value;
        if let Some(&id) = self.index.get(&key) {
            return id;
        }
        let id = self.nodes.len() as u32;
        self.index.insert(key, id);
        self.values.push(value);
        self.nodes.push(Node {
            pointer,
            in_place: Vec::new(),
            consuming: Vec::new(),
        });
        id
    }

    /// Adds the edges of node `id`.
    fn expand(&mut self, id: usize) -> Result<(), LimitError> {
        let Value::Object(map) = self.values[id] else {
            return Ok(());
        };
        let at = self.nodes[id].pointer.clone();
        // A `$ref` target that is not where subschemas are kept was not scanned.
        check_keywords(map, &at, std::ptr::eq(self.values[id], self.root))?;
        let mut in_place = Vec::new();
        let mut consuming = Vec::new();
        for (key, child) in map {
            let here = child_pointer(&at, Token::Key(key));
            match key.as_str() {
                "allOf" | "anyOf" | "oneOf" => {
                    for (i, sub) in list(child) {
                        in_place.push((self.child(sub, &here, Token::Index(i)), false));
                    }
                }
                "not" | "if" | "then" | "else" if is_schema(child) => {
                    in_place.push((self.node(child, here), false));
                }
                "dependentSchemas" | "dependencies" => {
                    for (name, sub) in named(child) {
                        in_place.push((self.child(sub, &here, Token::Key(name)), false));
                    }
                }
                "$ref" => {
                    if let Value::String(reference) = child
                        && let Some((target, pointer)) = self.resolve(reference, &here)
                    {
                        in_place.push((self.node(target, pointer), true));
                    }
                }
                "properties" => {
                    for (name, sub) in named(child) {
                        let node = self.child(sub, &here, Token::Key(name));
                        consuming.push((Slot::Name(name), node));
                    }
                }
                "patternProperties" => {
                    for (name, sub) in named(child) {
                        let node = self.child(sub, &here, Token::Key(name));
                        consuming.push((Slot::AnyName, node));
                    }
                }
                "additionalProperties" | "unevaluatedProperties" | "propertyNames"
                    if is_schema(child) =>
                {
                    consuming.push((Slot::AnyName, self.node(child, here)));
                }
                "prefixItems" => {
                    for (i, sub) in list(child) {
                        consuming.push((Slot::Index(i), self.child(sub, &here, Token::Index(i))));
                    }
                }
                // The array form is the tuple of drafts before 2020-12, refused when compiled
                // but measured like `prefixItems` meanwhile.
                "items" if child.is_array() => {
                    for (i, sub) in list(child) {
                        consuming.push((Slot::Index(i), self.child(sub, &here, Token::Index(i))));
                    }
                }
                "items" | "additionalItems" | "contains" | "unevaluatedItems"
                    if is_schema(child) =>
                {
                    consuming.push((Slot::AnyIndex, self.node(child, here)));
                }
                _ => {}
            }
        }
        consuming.sort_unstable();
        let node = &mut self.nodes[id];
        node.in_place = in_place;
        node.consuming = consuming;
        Ok(())
    }

    /// The node of a subschema found at `token` under `parent`, if it is a schema at all (the
    /// meta-schema check refuses anything else when the schema is compiled).
    fn child(&mut self, value: &'s Value, parent: &str, token: Token<'_>) -> u32 {
        let pointer = child_pointer(parent, token);
        self.node(value, pointer)
    }

    /// The subschema `reference` (found at `at`) points at, and its pointer; `None` (noted in
    /// `unresolved`) when it is not a reference within the schema that this measure can follow.
    fn resolve(&mut self, reference: &str, at: &str) -> Option<(&'s Value, String)> {
        let found = self.lookup(reference);
        if found.is_none() && self.unresolved.is_none() {
            self.unresolved = Some(LimitError::ForeignRef {
                reference: reference.to_owned(),
                at: at.to_owned(),
            });
        }
        found
    }

    fn lookup(&self, reference: &str) -> Option<(&'s Value, String)> {
        let (document, fragment) = reference.split_once('#').unwrap_or((reference, ""));
        // The schema itself, by its own `$id` or by the empty reference.
        let own_id = self.root.get("$id").and_then(Value::as_str);
        if !document.is_empty() && Some(document) != own_id.map(|id| id.trim_end_matches('#')) {
            return None;
        }
        let fragment = percent_decoded(fragment)?;
        if fragment.is_empty() {
            return Some((self.root, "the top level".to_owned()));
        }
        if let Some(pointer) = fragment.strip_prefix('/') {
            let mut value = self.root;
            let mut written = String::new();
            for token in pointer.split('/') {
                let token = token.replace("~1", "/").replace("~0", "~");
                value = match value {
                    Value::Object(map) => map.get(&token)?,
                    Value::Array(items) => items.get(array_index(&token)?)?,
                    _ => return None,
                };
                push_token(&mut written, Token::Key(&token));
            }
            return is_schema(value).then_some((value, written));
        }
        // A plain name is an anchor; two subschemas with the same one are ambiguous.
        match self.anchors.get(fragment.as_str())?.as_slice() {
            [(value, pointer)] => Some((*value, pointer.clone())),
            _ => None,
        }
    }

    /// The nodes in an order that puts every in-place child before its parent; a loop of
    /// in-place edges (which only `$ref`s can make) is refused.
    fn children_first(&self) -> Result<Vec<u32>, LimitError> {
        let n = self.nodes.len();
        let mut parents: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut pending: Vec<usize> = vec![0; n];
        for (id, node) in self.nodes.iter().enumerate() {
            pending[id] = node.in_place.len();
            for &(child, _) in &node.in_place {
                parents[child as usize].push(id as u32);
            }
        }
        let mut order: Vec<u32> = (0..n as u32)
            .filter(|&i| pending[i as usize] == 0)
            .collect();
        let mut next = 0;
        while next < order.len() {
            let done = order[next] as usize;
            next += 1;
            for &parent in &parents[done] {
                pending[parent as usize] -= 1;
                if pending[parent as usize] == 0 {
                    order.push(parent);
                }
            }
        }
        if order.len() == n {
            return Ok(order);
        }
        // Every node left has a child left: following them must come round to a loop.
        let mut seen = vec![false; n];
        let mut at = (0..n)
            .find(|&i| pending[i] > 0)
            .expect("a node is left when the order is short");
        while !seen[at] {
            seen[at] = true;
            at = self.nodes[at]
                .in_place
                .iter()
                .map(|&(child, _)| child as usize)
                .find(|&child| pending[child] > 0)
                .expect("a node left has a child left");
        }
        // `at` is on the loop: go round it once to find a `$ref` in it.
        let start = at;
        loop {
            let (child, is_ref) = self.nodes[at]
                .in_place
                .iter()
                .map(|&(child, is_ref)| (child as usize, is_ref))
                .find(|&(child, _)| pending[child] > 0)
                .expect("a node left has a child left");
            if is_ref {
                return Err(LimitError::RefLoop {
                    at: child_pointer(&self.nodes[at].pointer, Token::Key("$ref")),
                    target: self.nodes[child].pointer.clone(),
                });
            }
            at = child;
            if at == start {
                unreachable!("a loop in a JSON document goes through a $ref");
            }
        }
    }

    /// Refuses a schema whose subschemas, `$ref`s followed, nest deeper than
    /// [`MAX_SUBSCHEMA_DEPTH`] in any order: compiling follows every reference once, depth
    /// first, and recurses as deep as the longest path through them, where a loop (a recursive
    /// schema) counts each of its subschemas once. Checked on the graph's loops taken as one
    /// (strongly connected components), each weighing as many subschemas as it holds.
    fn check_nesting_of_subschemas(&self) -> Result<(), LimitError> {
        let n = self.nodes.len();
        let successors: Vec<Vec<u32>> = self
            .nodes
            .iter()
            .map(|node| {
                let in_place = node.in_place.iter().map(|&(child, _)| child);
                in_place
                    .chain(node.consuming.iter().map(|&(_, child)| child))
                    .collect()
            })
            .collect();
        let mut predecessors: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (id, next) in successors.iter().enumerate() {
            for &child in next {
                predecessors[child as usize].push(id as u32);
            }
        }
        // Kosaraju's two passes, without recursion: the order in which nodes are finished on
        // the graph, then the components found on the reversed graph in the reverse of that
        // order, which come out sources first.
        let mut finished = Vec::with_capacity(n);
        let mut seen = vec![false; n];
        for start in 0..n {
            if seen[start] {
                continue;
            }
            seen[start] = true;
            let mut stack = vec![(start, 0usize)];
            while let Some((node, next)) = stack.last_mut() {
                match successors[*node].get(*next) {
                    Some(&child) => {
                        *next += 1;
                        if !seen[child as usize] {
                            seen[child as usize] = true;
                            stack.push((child as usize, 0));
                        }
                    }
                    None => {
                        finished.push(*node);
                        stack.pop();
                    }
                }
            }
        }
        let mut component = vec![usize::MAX; n];
        let mut members: Vec<Vec<usize>> = Vec::new();
        for &start in finished.iter().rev() {
            if component[start] != usize::MAX {
                continue;
            }
            let id = members.len();
            component[start] = id;
            let mut found = vec![start];
            let mut stack = vec![start];
            while let Some(node) = stack.pop() {
                for &parent in &predecessors[node] {
                    if component[parent as usize] == usize::MAX {
                        component[parent as usize] = id;
                        found.push(parent as usize);
                        stack.push(parent as usize);
                    }
                }
            }
            members.push(found);
        }
        // Sinks first: each component's longest path down is its size and the longest below.
        let mut longest = vec![0usize; members.len()];
        for id in (0..members.len()).rev() {
            let below = members[id]
                .iter()
                .flat_map(|&node| &successors[node])
                .map(|&child| component[child as usize])
                .filter(|&other| other != id)
                .map(|other| longest[other])
                .max()
                .unwrap_or(0);
            longest[id] = members[id].len() + below;
            if longest[id] > MAX_SUBSCHEMA_DEPTH as usize {
                let first = members[id].iter().min().copied().unwrap_or(0);
                return Err(LimitError::SubschemasTooDeep {
                    at: self.nodes[first].pointer.clone(),
                });
            }
        }
        Ok(())
    }

    /// The cost of the schema: for each number of levels the arguments may still go down, and
    /// each node, the subschemas along one path from it and how deeply they nest; refused at the
    /// first node over a bound (its own children are within it, so that is where it is hit).
    fn cost(&self, order: &[u32]) -> Result<SchemaCost, LimitError> {
        let n = self.nodes.len();
        // Values are capped just past their bound, so sums cannot overflow.
        let cap = MAX_SUBSCHEMAS_PER_PATH + 1;
        let mut previous_path = vec![0u64; n];
        let mut previous_depth = vec![0u32; n];
        let mut path = vec![0u64; n];
        let mut depth = vec![0u32; n];
        for level in 0..=MAX_CHECKED_ARGUMENT_DEPTH {
            for &id in order {
                let node = &self.nodes[id as usize];
                let mut along = 1u64;
                let mut deepest = 0u32;
                for &(child, _) in &node.in_place {
                    along = (along + path[child as usize]).min(cap);
                    deepest = deepest.max(depth[child as usize]);
                }
                if level > 0 {
                    along = (along + below(&node.consuming, &previous_path)).min(cap);
                    for &(_, child) in &node.consuming {
                        deepest = deepest.max(previous_depth[child as usize]);
                    }
                }
                path[id as usize] = along;
                depth[id as usize] = deepest + 1;
                if along > MAX_SUBSCHEMAS_PER_PATH {
                    return Err(LimitError::TooManySubschemas {
                        at: node.pointer.clone(),
                    });
                }
                if deepest + 1 > MAX_SUBSCHEMA_DEPTH {
                    return Err(LimitError::SubschemasTooDeep {
                        at: node.pointer.clone(),
                    });
                }
            }
            // Nothing more is reached one level further down: deeper arguments cost the same.
            if level > 0 && path == previous_path {
                return Ok(SchemaCost {
                    per_path: path[0],
                    reaches_deeper: false,
                });
            }
            std::mem::swap(&mut path, &mut previous_path);
            std::mem::swap(&mut depth, &mut previous_depth);
        }
        // The last level computed is in `previous_*`, the one before it in `path`.
        Ok(SchemaCost {
            per_path: previous_path[0],
            reaches_deeper: previous_path[0] > path[0],
        })
    }
}

/// The most subschemas one value one level down meets from a node's consuming edges (sorted by
/// slot): the value under one name gets that name's subschemas and those for any name; an item,
/// its index's and those for any item. A value is an object or an array, not both.
fn below(consuming: &[(Slot<'_>, u32)], path: &[u64]) -> u64 {
    let mut any_name = 0u64;
    let mut any_index = 0u64;
    for &(slot, child) in consuming {
        match slot {
            Slot::AnyName => any_name += path[child as usize],
            Slot::AnyIndex => any_index += path[child as usize],
            _ => {}
        }
    }
    let mut most = any_name.max(any_index);
    let mut run: Option<(Slot<'_>, u64)> = None;
    for &(slot, child) in consuming {
        let extra = match slot {
            Slot::Name(_) => any_name,
            Slot::Index(_) => any_index,
            _ => continue,
        };
        let sum = match run {
            Some((same, sum)) if same == slot => sum + path[child as usize],
            _ => extra + path[child as usize],
        };
        run = Some((slot, sum));
        most = most.max(sum);
    }
    most
}

fn is_schema(value: &Value) -> bool {
    matches!(value, Value::Object(_) | Value::Bool(_))
}

/// The subschemas of a list keyword.
fn list(value: &Value) -> impl Iterator<Item = (usize, &Value)> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, v)| is_schema(v))
}

/// The subschemas of a map keyword, by name.
fn named(value: &Value) -> impl Iterator<Item = (&str, &Value)> {
    value
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| is_schema(v))
        .map(|(k, v)| (k.as_str(), v))
}

/// An array index in a JSON pointer: digits, no leading zero.
fn array_index(token: &str) -> Option<usize> {
    if token.is_empty()
        || !token.bytes().all(|b| b.is_ascii_digit())
        || (token.len() > 1 && token.starts_with('0'))
    {
        return None;
    }
    token.parse().ok()
}

/// A URI fragment with its `%XX` escapes decoded; `None` when it is not UTF-8 after decoding or
/// an escape is malformed.
fn percent_decoded(fragment: &str) -> Option<String> {
    if !fragment.contains('%') {
        return Some(fragment.to_owned());
    }
    let bytes = fragment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = fragment.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The shape of the schemas that attack the check, for tests: `l0` a string, and `l{i}` built
/// by `level` from a reference to `l{i-1}`; the arguments' `x` is `l{n-1}`.
#[cfg(test)]
pub(crate) fn levels(n: usize, level: impl Fn(Value) -> Value) -> Value {
    let mut defs = Map::new();
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
    use serde_json::json;

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
