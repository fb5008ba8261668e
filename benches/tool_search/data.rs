//! The evaluation's data: real tool definitions and real user requests from public
//! function-calling benchmarks, as their PyPI packages ship them, fetched at benchmark time with
//! pip (pinned version, SHA-256 checked) into `target/tool-search-data/`.
//!
//! - **BFCL** (`bfcl-eval` 2026.3.23, the Berkeley Function Calling Leaderboard v4): the
//!   single-turn categories with an answer (`simple_python`, `simple_java`,
//!   `simple_javascript`, `multiple`, `parallel`, `parallel_multiple`, `live_simple`,
//!   `live_multiple`, `live_parallel`, `live_parallel_multiple`): each request's user messages
//!   and the functions its answer calls. The corpus is every function of every single-turn
//!   category, `irrelevance`, `live_irrelevance` and `live_relevance` included, once per name
//!   (the first definition in the order above).
//! - **NESTFUL** (`nestful-wrapper` 0.1.7): its three sets of sequences of calls (`glaive`,
//!   `sgd`, `executable`) pooled: each request and the functions its sequence calls.
//! - **ComplexFuncBench** (as `nestful-wrapper` 0.1.7 ships it, converted by NESTFUL's authors):
//!   multi-step requests over 40 Booking.com functions.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// One wheel the data comes from.
struct Wheel {
    name: &'static str,
    version: &'static str,
    file: &'static str,
    sha256: &'static str,
}

const BFCL: Wheel = Wheel {
    name: "bfcl-eval",
    version: "2026.3.23",
    file: "bfcl_eval-2026.3.23-py3-none-any.whl",
    sha256: "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a",
};

const NESTFUL: Wheel = Wheel {
    name: "nestful-wrapper",
    version: "0.1.7",
    file: "nestful_wrapper-0.1.7-py3-none-any.whl",
    sha256: "7e7b34b0491d6fb26e9670d6fca93f39a7cc9475e25962d39633889a04e26fe4",
};

/// A tool definition.
pub struct Tool {
    pub name: String,
    pub description: String,
    /// As a JSON Schema object: `properties` with each one's `description` (what search reads).
    pub parameters: Map<String, Value>,
    /// The parameters as the JSON Schema a plugin would register: types (the set's own type
    /// words mapped to JSON Schema's), descriptions, `enum`, `default`, `items`, `required`
    /// ([`json_schema`]). What a model is sent: only benches/budget.rs reads it.
    #[allow(dead_code)]
    pub schema: Map<String, Value>,
    pub source: String,
}

/// A user request and the tools it needs.
pub struct Request {
    pub id: String,
    pub text: String,
    pub targets: Vec<String>,
}

/// One set: its tools, pooled, and its requests.
pub struct Set {
    pub name: &'static str,
    pub tools: Vec<Tool>,
    pub requests: Vec<Request>,
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tool-search-data")
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The wheel's unpacked directory, downloaded and checked first if it is not there yet.
fn unpacked(wheel: &Wheel) -> PathBuf {
    let dir = data_dir();
    let out = dir.join(format!("{}-{}", wheel.name, wheel.version));
    if out.join(".complete").exists() {
        return out;
    }
    std::fs::create_dir_all(&dir).expect("data directory");
    let file = dir.join(wheel.file);
    if !file.exists() {
        eprintln!("fetching {}=={} with pip", wheel.name, wheel.version);
        let status = Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
            ])
            .arg(&dir)
            .arg(format!("{}=={}", wheel.name, wheel.version))
            .status()
            .expect("python3 runs");
        assert!(status.success(), "pip download {} failed", wheel.name);
    }
    let bytes = std::fs::read(&file).expect("the wheel");
    let hash = sha256_hex(&bytes);
    assert_eq!(hash, wheel.sha256, "{} is not the pinned wheel", wheel.file);
    let status = Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&file)
        .arg(&out)
        .status()
        .expect("python3 runs");
    assert!(status.success(), "could not unpack {}", wheel.file);
    std::fs::write(out.join(".complete"), b"").expect("marker");
    out
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

fn text_of(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_owned()
}

/// A BFCL-style `parameters` (`{"type": "dict", "properties": {...}}`) as search reads it:
/// property names and descriptions, nested ones too.
fn schema_of(parameters: &Value) -> Map<String, Value> {
    let mut schema = Map::new();
    if let Some(properties) = parameters.get("properties").and_then(Value::as_object) {
        let mut kept = Map::new();
        for (name, property) in properties {
            let mut entry = schema_of(property);
            if let Some(description) = property.get("description").and_then(Value::as_str) {
                entry.insert("description".into(), json!(description));
            }
            kept.insert(name.clone(), Value::Object(entry));
        }
        schema.insert("properties".into(), Value::Object(kept));
    }
    if let Some(items) = parameters.get("items").filter(|i| i.is_object()) {
        schema.insert("items".into(), Value::Object(schema_of(items)));
    }
    schema
}

/// NESTFUL's `query_parameters` (`{name: {"description", ...}}`) as a schema.
fn schema_of_query_parameters(parameters: &Value) -> Map<String, Value> {
    schema_of(&json!({"properties": parameters.clone()}))
}

/// A set's type word as JSON Schema's, `None` for one it has no word for (`any`): BFCL writes
/// Python's and Java's (`dict`, `float`, `tuple`, `String`, `long`, ...).
fn json_type(word: &str) -> Option<&'static str> {
    Some(match word.to_ascii_lowercase().as_str() {
        "string" | "str" | "char" | "character" => "string",
        "integer" | "int" | "long" | "short" | "byte" => "integer",
        "number" | "float" | "double" => "number",
        "boolean" | "bool" => "boolean",
        "array" | "list" | "tuple" | "set" | "arraylist" => "array",
        "object" | "dict" | "map" | "hashmap" => "object",
        _ => return None,
    })
}

/// One schema node of a set as JSON Schema: its type mapped ([`json_type`]), `description`,
/// a non-empty `enum`, a non-null `default`, `items`, `properties` and `required`, the rest
/// left out. A property's own `"required": true` (NESTFUL's) goes into `required_names`.
fn json_node(node: &Value, name: &str, required_names: &mut Vec<Value>) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(word) = node.get("type").and_then(Value::as_str).and_then(json_type) {
        out.insert("type".into(), json!(word));
    }
    if let Some(description) = node.get("description").and_then(Value::as_str)
        && !description.is_empty()
    {
        out.insert("description".into(), json!(description));
    }
    if let Some(values) = node.get("enum").and_then(Value::as_array)
        && !values.is_empty()
    {
        out.insert("enum".into(), Value::Array(values.clone()));
    }
    if let Some(default) = node.get("default").filter(|d| !d.is_null()) {
        out.insert("default".into(), default.clone());
    }
    if let Some(items) = node.get("items").filter(|i| i.is_object()) {
        out.insert(
            "items".into(),
            Value::Object(json_node(items, "", &mut Vec::new())),
        );
    }
    if let Some(properties) = node.get("properties").and_then(Value::as_object)
        && !properties.is_empty()
    {
        let mut required = Vec::new();
        let mut kept = Map::new();
        for (key, property) in properties {
            kept.insert(
                key.clone(),
                Value::Object(json_node(property, key, &mut required)),
            );
        }
        out.insert("properties".into(), Value::Object(kept));
        if let Some(listed) = node.get("required").and_then(Value::as_array) {
            required.extend(listed.iter().filter(|r| r.is_string()).cloned());
        }
        if !required.is_empty() {
            out.insert("required".into(), Value::Array(required));
        }
    }
    if node.get("required") == Some(&Value::Bool(true)) {
        required_names.push(json!(name));
    }
    out
}

/// A BFCL `parameters` as the JSON Schema object a plugin registers.
pub fn json_schema(parameters: &Value) -> Map<String, Value> {
    let mut schema = json_node(parameters, "", &mut Vec::new());
    schema.insert("type".into(), json!("object"));
    schema
}

/// NESTFUL's `query_parameters` as the JSON Schema object a plugin registers.
fn json_schema_of_query_parameters(parameters: &Value) -> Map<String, Value> {
    json_schema(&json!({"properties": parameters.clone()}))
}

/// The single-turn categories of BFCL with an answer, in the order their definitions are taken.
const BFCL_ANSWERED: [&str; 10] = [
    "simple_python",
    "simple_java",
    "simple_javascript",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
];

/// Categories whose functions join the corpus only (no request has an answer there).
const BFCL_DISTRACTORS: [&str; 3] = ["irrelevance", "live_irrelevance", "live_relevance"];

pub fn bfcl() -> Set {
    let root = unpacked(&BFCL).join("bfcl_eval/data");
    let mut tools: Vec<Tool> = Vec::new();
    let mut names = std::collections::HashSet::new();
    let mut requests = Vec::new();
    for category in BFCL_ANSWERED.iter().chain(BFCL_DISTRACTORS.iter()) {
        let entries = read_lines(&root.join(format!("BFCL_v4_{category}.json")));
        let answers_path = root.join(format!("possible_answer/BFCL_v4_{category}.json"));
        let answers: std::collections::HashMap<String, Value> = if answers_path.exists() {
            read_lines(&answers_path)
                .into_iter()
                .map(|a| (text_of(&a["id"]), a))
                .collect()
        } else {
            Default::default()
        };
        for entry in &entries {
            for function in entry["function"].as_array().into_iter().flatten() {
                let name = text_of(&function["name"]);
                if names.insert(name.clone()) {
                    tools.push(Tool {
                        name,
                        description: text_of(&function["description"]),
                        parameters: schema_of(&function["parameters"]),
                        schema: json_schema(&function["parameters"]),
                        source: String::new(),
                    });
                }
            }
            let id = text_of(&entry["id"]);
            let Some(answer) = answers.get(&id) else {
                continue;
            };
            let mut targets: Vec<String> = Vec::new();
            for call in answer["ground_truth"].as_array().into_iter().flatten() {
                for name in call.as_object().into_iter().flat_map(|c| c.keys()) {
                    if !targets.contains(name) {
                        targets.push(name.clone());
                    }
                }
            }
            let first_turn = &entry["question"][0];
            let text: Vec<String> = first_turn
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["role"] == "user")
                .map(|m| text_of(&m["content"]))
                .collect();
            if targets.is_empty() {
                continue;
            }
            requests.push(Request {
                id,
                text: text.join("\n"),
                targets,
            });
        }
    }
    Set {
        name: "BFCL v4",
        tools,
        requests,
    }
}

/// One NESTFUL-format set: its spec (tools) and data (requests) files.
fn nestful_files(root: &Path, spec: &str, data: &str, prefix: &str, set: &mut Set) {
    for tool in read_json(&root.join(spec)).as_array().into_iter().flatten() {
        let name = text_of(&tool["name"]);
        if set.tools.iter().any(|t| t.name == name) {
            continue;
        }
        set.tools.push(Tool {
            name,
            description: text_of(&tool["description"]),
            parameters: schema_of_query_parameters(&tool["query_parameters"]),
            schema: json_schema_of_query_parameters(&tool["query_parameters"]),
            source: tool["host"].as_str().unwrap_or_default().to_owned(),
        });
    }
    for (i, request) in read_json(&root.join(data))
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let mut targets: Vec<String> = Vec::new();
        for call in request["output"].as_array().into_iter().flatten() {
            let name = text_of(&call["name"]);
            if name != "var_result" && !targets.contains(&name) {
                targets.push(name);
            }
        }
        if targets.is_empty() {
            continue;
        }
        set.requests.push(Request {
            id: format!("{prefix}-{i}"),
            text: text_of(&request["input"]).trim().to_owned(),
            targets,
        });
    }
}

pub fn nestful() -> Set {
    let root = unpacked(&NESTFUL).join("data_v1");
    let mut set = Set {
        name: "NESTFUL",
        tools: Vec::new(),
        requests: Vec::new(),
    };
    for (dir, prefix) in [
        ("non-executable/non-executable-glaive", "glaive"),
        ("non-executable/non-executable-sgd", "sgd"),
        ("executable/executable", "executable"),
    ] {
        nestful_files(
            &root,
            &format!("{dir}-spec.json"),
            &format!("{dir}-data.json"),
            prefix,
            &mut set,
        );
    }
    set
}

pub fn complex_func_bench() -> Set {
    let root = unpacked(&NESTFUL).join("data_v1/complexfuncbench");
    let mut set = Set {
        name: "ComplexFuncBench",
        tools: Vec::new(),
        requests: Vec::new(),
    };
    nestful_files(
        &root,
        "complexfuncbench-spec.json",
        "complexfuncbench-data.json",
        "cfb",
        &mut set,
    );
    set
}

/// Whether a request is in the tuning part: a fixed hash of its set and id, 3 in 10.
pub fn is_tuning(set: &str, id: &str) -> bool {
    // FNV-1a, 64 bits: the same split on every machine and every run.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in set.bytes().chain([b':']).chain(id.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash % 10 < 3
}
