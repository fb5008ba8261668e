//! The graph of a schema's subschemas, `$ref`s followed, and the walks that measure it: how deep
//! a check may nest, and how many subschemas a value may meet.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::{
    LimitError, MAX_CHECKED_ARGUMENT_DEPTH, MAX_SUBSCHEMA_DEPTH, MAX_SUBSCHEMAS_PER_PATH,
    SchemaCost, Token, child_pointer, push_token,
};

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
pub(super) fn scan(schema: &Value) -> Result<Anchors<'_>, LimitError> {
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

pub(super) struct Graph<'s> {
    root: &'s Value,
    anchors: Anchors<'s>,
    nodes: Vec<Node<'s>>,
    values: Vec<&'s Value>,
    /// Nodes by the address of their value in the schema.
    index: HashMap<*const Value, u32>,
    pub(super) unresolved: Option<LimitError>,
}

impl<'s> Graph<'s> {
    pub(super) fn build(root: &'s Value, anchors: Anchors<'s>) -> Result<Self, LimitError> {
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
    pub(super) fn children_first(&self) -> Result<Vec<u32>, LimitError> {
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
    pub(super) fn check_nesting_of_subschemas(&self) -> Result<(), LimitError> {
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
    pub(super) fn cost(&self, order: &[u32]) -> Result<SchemaCost, LimitError> {
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
