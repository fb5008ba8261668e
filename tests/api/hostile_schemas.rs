//! Hostile parameters schemas: the shapes that once took the server down or made it build
//! answers of megabytes, refused at registration with a 422 that names the bound and where in
//! the schema it was hit; the largest schemas the bounds allow, answered within the text bound
//! through the invoke route and a live session; and the fuzz corpus of schemas and arguments
//! replayed through the fuzz target's own check.

use std::path::Path;

use serde_json::{Map, Value, json};

use runtime_tools::limits::MAX_FIX_IT_BYTES;
use runtime_tools::{Dialect, SessionSettings};

use crate::arguments::model_calls;
use crate::callback_server::{error_text, invoke};
use crate::cli::{Child, get, post};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::helpers::{TestApp, settings, spawn_app, spawn_app_with, tool_body};

#[path = "../../fuzz/check/schema_arguments.rs"]
mod schema_arguments;

/// `l0` a string and `l{i}` built by `level` from a reference to `l{i-1}`; the arguments' `x` is
/// `l{n-1}`: the shape of every schema here.
fn levels(n: usize, level: impl Fn(Value) -> Value) -> Value {
    let mut defs = Map::new();
    defs.insert("l0".into(), json!({"type": "string"}));
    for i in 1..n {
        defs.insert(
            format!("l{i}"),
            level(json!({"$ref": format!("#/$defs/l{}", i - 1)})),
        );
    }
    json!({"type": "object", "$defs": defs,
           "properties": {"x": {"$ref": format!("#/$defs/l{}", n - 1)}}})
}

fn tool(name: &str, parameters: Value) -> Value {
    let mut body = tool_body(name, "http://127.0.0.1:9/cb", "plugin:hostile");
    body["parameters"] = parameters;
    body
}

/// The 422 of a refused schema.
fn refused(msg: &str) -> Value {
    json!({"ok": false, "detail": [{"loc": ["body", "parameters"], "type": "value_error",
                                   "msg": format!("Value error, {msg}")}]})
}

fn too_deep(at: &str) -> Value {
    refused(&format!(
        "parameters nest more than 256 subschemas deep, their \"$ref\"s followed (at {at}); at \
         most 256 are accepted, so that checking a call stays bounded"
    ))
}

fn too_many(at: &str) -> Value {
    refused(&format!(
        "parameters expand to more than 10000 subschemas along one path into the arguments, \
         their \"$ref\"s followed (at {at}); at most 10000 are accepted, so that checking a call \
         stays bounded"
    ))
}

#[test]
fn the_schemas_that_crashed_the_server_are_refused_and_it_keeps_serving() {
    // The real binary: a stack overflow would end the process, not a thread.
    let mut server = Child::start(&["serve", "--bind", "127.0.0.1:0", "--character", "Lanlan"]);
    let addr = server.listening("127.0.0.1");
    let keeper = json!({"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"]});
    let (status, body) = post(addr, "/api/tools/register", &tool("keeper", keeper));
    assert_eq!(status, 200, "{body}");

    // A 1 250-level nest of `anyOf` through `$ref`, and plain `$ref` chains 3 000 and 14 000
    // long: each registered, then called with a wrong argument (which once overflowed the
    // stack).
    let nest = levels(1250, |r| json!({"anyOf": [r]}));
    let chain = levels(3_000, |r| r);
    let long_chain = levels(14_000, |r| r);
    let mut answers = Vec::new();
    for (name, schema) in [("nest", nest), ("chain", chain), ("long", long_chain)] {
        let registered = post(addr, "/api/tools/register", &tool(name, schema));
        let called = post(
            addr,
            "/api/tools/invoke",
            &json!({"name": name, "arguments": {"x": 1}}),
        );
        answers.push((registered, called.0));
    }
    // Still serving, with its registrations.
    let (status, listing) = get(addr, "/api/tools");
    assert_eq!(status, 200);
    let names: Vec<&Value> = listing["tools_by_role"]["Lanlan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["name"])
        .collect();
    assert_eq!(names, [&json!("keeper")]);
    let (status, answer) = post(
        addr,
        "/api/tools/invoke",
        &json!({"name": "keeper", "arguments": {"x": 1}}),
    );
    assert_eq!(status, 200);
    assert_eq!(
        answer["error"],
        json!(
            "arguments for keeper do not match its parameters: /city is required. Call keeper \
               again with arguments that match."
        )
    );
    // Refused where the nesting passes the bound (the longest chain is too large first);
    // never registered, so never called.
    assert_eq!(
        answers,
        [
            ((422, too_deep("/$defs/l128")), 404),
            ((422, too_deep("/$defs/l256")), 404),
            (
                (
                    422,
                    refused(
                        "parameters are 467844 bytes of JSON; at most 262144 bytes are accepted"
                    )
                ),
                404
            )
        ]
    );
    server.signal("TERM");
    assert_eq!(server.wait().code(), Some(0));
}

#[actix_web::test]
async fn schemas_whose_check_multiplies_are_refused_where_they_pass_the_bound() {
    let app = spawn_app(&["Lanlan"]).await;
    // `l{i} = {anyOf: [{$ref: l{i-1}}, {$ref: l{i-1}}]}`, about 1.3 KB at 22 levels: each level
    // doubles what a wrong argument is checked against, and once the text of the answer. The
    // `allOf` and `oneOf` forms do the same.
    for (form, n) in [
        ("anyOf", 22),
        ("anyOf", 24),
        ("allOf", 20),
        ("allOf", 22),
        ("allOf", 24),
        ("oneOf", 22),
    ] {
        let schema = levels(n, |r| json!({form: [r.clone(), r]}));
        let (status, body) = app.register(&tool("doubling", schema)).await;
        assert_eq!((status, body), (422, too_many("/$defs/l12")), "{form} {n}");
    }
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": []}));
}

/// Registers `parameters` as `name`, asserting it was accepted.
async fn accepted(app: &TestApp, name: &str, parameters: Value) {
    let (status, body) = app.register(&tool(name, parameters)).await;
    assert_eq!(status, 200, "{name}: {body}");
}

#[actix_web::test]
async fn the_largest_schemas_allowed_answer_a_wrong_call_within_the_text_bound() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut settings = settings(&["Mio"]);
    let mut session = SessionSettings::new(&fake.url, Dialect::Openai);
    session.max_tool_calls_per_window = 1000;
    settings.characters[0].session = Some(session);
    let app = spawn_app_with(settings).await;
    fake.nth_update(1).await;

    accepted(&app, "nest", levels(127, |r| json!({"anyOf": [r]}))).await;
    accepted(
        &app,
        "doubling",
        levels(10, |r| json!({"anyOf": [r.clone(), r]})),
    )
    .await;
    accepted(
        &app,
        "widest",
        levels(12, |r| json!({"allOf": [r.clone(), r]})),
    )
    .await;
    for name in ["nest", "doubling"] {
        let (status, body) = invoke(&app, json!({"name": name, "arguments": {"x": 1}})).await;
        assert_eq!(status, 200);
        let text = error_text(&body);
        assert!(
            text.len() <= MAX_FIX_IT_BYTES,
            "{name}: {} bytes",
            text.len()
        );
        // Alternatives inside alternatives, described until the text's budget is spent.
        assert!(
            text.starts_with(&format!(
                "arguments for {name} do not match its parameters: /x must match one of its \
                 allowed forms: either /x must match one of its allowed forms: either"
            )),
            "{text}"
        );
        assert!(text.contains('…'), "{text}");
        // A live model's call of it is answered with the same text.
        let answer = model_calls(&fake, &format!("call_{name}"), name, r#"{"x": 1}"#).await;
        assert_eq!(answer, json!({"error": text, "is_error": true}));
    }
    // 8 191 subschemas on the way to `x`: a wrong call is refused without the list.
    let (_, body) = invoke(&app, json!({"name": "widest", "arguments": {"x": 1}})).await;
    assert_eq!(
        error_text(&body),
        "arguments for widest do not match its parameters; listing what is wrong would take \
         more than one call may (3 values, each checked against up to 8191 subschemas). Call \
         widest again with arguments that match."
    );
    // Right arguments pass the check and go to the callback (which is not listening).
    let (_, body) = invoke(&app, json!({"name": "widest", "arguments": {"x": "ok"}})).await;
    assert!(
        error_text(&body).starts_with("could not connect to remote tool callback"),
        "{body}"
    );
}

#[test]
fn the_fuzz_corpus_of_schemas_and_arguments_replays_within_the_bounds() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/schema_arguments");
    let mut inputs: Vec<_> = std::fs::read_dir(&corpus)
        .expect("the corpus is checked in")
        .map(|entry| entry.expect("a corpus entry").path())
        .collect();
    inputs.sort();
    // The attack shapes are among them.
    for shape in ["nest_anyof_1250", "doubling_anyof_24", "doubling_allof_22"] {
        assert!(
            inputs.iter().any(|p| p.ends_with(shape)),
            "{shape} is in the corpus"
        );
    }
    // A quarter of a server thread's stack: the check must not need more.
    let replayed = std::thread::Builder::new()
        .stack_size(512 * 1024)
        .spawn(move || {
            for input in &inputs {
                let data = std::fs::read(input).expect("a corpus file reads");
                schema_arguments::check(&data);
            }
            inputs.len()
        })
        .unwrap()
        .join()
        .expect("every input keeps the bounds");
    assert!(replayed >= 40, "{replayed} inputs");
}
