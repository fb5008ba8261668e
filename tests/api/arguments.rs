//! A tool's parameters schema and the arguments of its calls: schemas refused at registration
//! (422 naming the schema path and the problem), the object shape the model is shown, every kind
//! of argument violation answered with the fix-it text (through the invoke route and through a
//! live model session) without calling the plugin, the `[dispatch] validate_arguments` off
//! switch, auto-removal untouched by refused calls, and in-process tools checked alike. The
//! reference Python implementation of JSON Schema judges the same schemas and arguments.

use actix::prelude::*;
use runtime_tools::{
    CallLocalTool, Dialect, Parameters, RegisterTool, SessionSettings, ToolOutcome, ToolSpec,
    local_handler,
};
use serde_json::{Map, Value, json};

use crate::callback_server::{
    CallbackServer, ClosedPort, Reply, error_text, invoke, invoke_ok, register,
};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::helpers::{TestApp, settings, spawn_app, spawn_app_with, tool_body};
use crate::schema::json_schema_verdicts;
use crate::sessions::call_event;

/// The tool every call test uses: one property per kind of constraint.
fn booking_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "guests": {"type": "integer", "minimum": 1, "maximum": 12},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "step": {"type": "integer", "multipleOf": 5},
            "code": {"type": "string", "minLength": 3, "maxLength": 3, "pattern": "^[A-Z]+$"},
            "date": {"type": "string", "format": "date"},
            "mode": {"const": "fast"},
            "tags": {"type": "array", "items": {"type": "string"},
                     "minItems": 1, "maxItems": 2, "uniqueItems": true},
            "note": {"type": ["string", "null"]},
            "at": {"anyOf": [{"type": "string"}, {"type": "integer", "minimum": 0}]},
            "options": {"type": "object", "properties": {"quiet": {"type": "boolean"}},
                        "additionalProperties": false}
        },
        "required": ["city"],
        "additionalProperties": false
    })
}

/// Arguments that break the booking schema, and the violations the model is told, in order.
fn violation_cases() -> Vec<(Value, &'static str)> {
    vec![
        (json!({}), "/city is required"),
        (json!({"city": 5}), "/city must be a string (got 5)"),
        (
            json!({"city": "Tokyo", "unit": "kelvin"}),
            "/unit must be one of \"c\", \"f\" (got \"kelvin\")",
        ),
        (
            json!({"unit": "kelvin"}),
            "/city is required; /unit must be one of \"c\", \"f\" (got \"kelvin\")",
        ),
        (
            json!({"city": "Tokyo", "mode": "slow"}),
            "/mode must be \"fast\" (got \"slow\")",
        ),
        (
            json!({"city": "Tokyo", "guests": 0}),
            "/guests must be at least 1 (got 0)",
        ),
        (
            json!({"city": "Tokyo", "guests": 13}),
            "/guests must be at most 12 (got 13)",
        ),
        (
            json!({"city": "Tokyo", "guests": 2.5}),
            "/guests must be an integer (got 2.5)",
        ),
        (
            json!({"city": "Tokyo", "ratio": 0}),
            "/ratio must be greater than 0 (got 0)",
        ),
        (
            json!({"city": "Tokyo", "ratio": 1}),
            "/ratio must be less than 1 (got 1)",
        ),
        (
            json!({"city": "Tokyo", "step": 7}),
            "/step must be a multiple of 5 (got 7)",
        ),
        (
            json!({"city": "Tokyo", "code": "AB"}),
            "/code must be at least 3 characters long (got 2)",
        ),
        (
            json!({"city": "Tokyo", "code": "ABCD"}),
            "/code must be at most 3 characters long (got 4)",
        ),
        (
            json!({"city": "Tokyo", "code": "abc"}),
            "/code must match the regular expression \"^[A-Z]+$\" (got \"abc\")",
        ),
        (
            json!({"city": "Tokyo", "date": "next friday"}),
            "/date must be in the \"date\" format (got \"next friday\")",
        ),
        (
            json!({"city": "Tokyo", "colour": "red"}),
            "/colour is not allowed (unknown property)",
        ),
        (
            json!({"city": "Tokyo", "options": {"quiet": "yes", "loud": true}}),
            "/options/loud is not allowed (unknown property); /options/quiet must be a boolean \
             (got \"yes\")",
        ),
        (
            json!({"city": "Tokyo", "tags": []}),
            "/tags must have at least 1 item (got 0)",
        ),
        (
            json!({"city": "Tokyo", "tags": ["a", "b", "c"]}),
            "/tags must have at most 2 items (got 3)",
        ),
        (
            json!({"city": "Tokyo", "tags": ["a", "a"]}),
            "/tags must not contain the same item twice",
        ),
        (
            json!({"city": "Tokyo", "tags": ["a", 1]}),
            "/tags/1 must be a string (got 1)",
        ),
        (
            json!({"city": "Tokyo", "note": 3}),
            "/note must be null or a string (got 3)",
        ),
        (
            json!({"city": "Tokyo", "at": -1}),
            "/at must match one of its allowed forms: either /at must be a string (got -1), or \
             /at must be at least 0 (got -1)",
        ),
        (
            json!({"city": "Tokyo", "k00": 0, "k01": 1, "k02": 2, "k03": 3, "k04": 4, "k05": 5,
                   "k06": 6, "k07": 7, "k08": 8, "k09": 9, "k10": 10, "k11": 11}),
            "/k00 is not allowed (unknown property); /k01 is not allowed (unknown property); \
             /k02 is not allowed (unknown property); /k03 is not allowed (unknown property); \
             /k04 is not allowed (unknown property); /k05 is not allowed (unknown property); \
             /k06 is not allowed (unknown property); /k07 is not allowed (unknown property); \
             /k08 is not allowed (unknown property); /k09 is not allowed (unknown property); \
             and 2 more",
        ),
    ]
}

/// Arguments that use every property of the booking schema, validly.
fn valid_booking() -> Value {
    json!({"city": "Tokyo", "unit": "c", "guests": 2, "ratio": 0.5, "step": 10, "code": "ABC",
           "date": "2026-12-01", "mode": "fast", "tags": ["a"], "note": null, "at": 3,
           "options": {"quiet": true}})
}

/// The tool error the model reads for `violations` of `book_table`.
fn mismatch(violations: &str) -> String {
    format!(
        "arguments for book_table do not match its parameters: {violations}. Call book_table \
         again with arguments that match."
    )
}

/// A register body for `book_table` calling `url`.
fn booking_tool(url: &str) -> Value {
    let mut body = tool_body("book_table", url, "plugin:booking");
    body["parameters"] = booking_schema();
    body
}

/// The callback of `book_table`: answers every call with the same output.
fn booking_callback() -> CallbackServer {
    CallbackServer::with("/book", Reply::output(json!({"booked": true})))
}

/// A server whose one character, Mio, has a live session with `fake` (when given); calls are
/// checked unless `validate` is false. The runaway guard is opened wide: these tests make many
/// calls on purpose.
async fn app_with(fake: Option<&FakeRealtime>, validate: bool) -> TestApp {
    let mut settings = settings(&["Mio"]);
    settings.dispatch.validate_arguments = validate;
    if let Some(fake) = fake {
        let mut session = SessionSettings::new(&fake.url, Dialect::Openai);
        session.max_tool_calls_per_window = 1000;
        settings.characters[0].session = Some(session);
    }
    let app = spawn_app_with(settings).await;
    if let Some(fake) = fake {
        fake.nth_update(1).await;
    }
    app
}

/// The model plays `call_id` with this argument text; returns what it is answered (the
/// `function_call_output` text, parsed).
pub async fn model_calls(fake: &FakeRealtime, call_id: &str, name: &str, raw: &str) -> Value {
    fake.push(call_event(&format!("resp_{call_id}"), call_id, name, raw))
        .await;
    let item = fake
        .wait_for(&format!("the answer to {call_id}"), |events| {
            events
                .iter()
                .find(|e| {
                    e["type"] == "conversation.item.create" && e["item"]["call_id"] == call_id
                })
                .map(|e| e["item"].clone())
        })
        .await;
    assert_eq!(item["type"], "function_call_output", "{item}");
    let text = item["output"].as_str().expect("output is text");
    serde_json::from_str(text).unwrap_or_else(|e| panic!("output is not JSON ({e}): {text}"))
}

/// What the model reads for a refused call.
fn tool_error(text: &str) -> Value {
    json!({"error": text, "is_error": true})
}

// ---- registration ----------------------------------------------------------------------------

/// A 422 naming each message at `["body", "parameters"]`.
fn schema_refused(messages: &[&str]) -> Value {
    let detail: Vec<Value> = messages
        .iter()
        .map(|msg| {
            json!({"loc": ["body", "parameters"], "msg": format!("Value error, {msg}"),
                   "type": "value_error"})
        })
        .collect();
    json!({"ok": false, "detail": detail})
}

/// Schemas the register route refuses, and the message of each problem.
fn refused_schemas() -> Vec<(Value, Vec<&'static str>)> {
    vec![
        (
            json!({"type": "array", "items": {"type": "string"}}),
            vec![
                "parameters must describe a JSON object: the top-level \"type\" is \"array\"; use \
                 \"type\": \"object\" or leave \"type\" out (a tool's arguments are always a JSON \
                 object)",
            ],
        ),
        (
            json!({"type": ["object", "null"]}),
            vec![
                "parameters must describe a JSON object: the top-level \"type\" is \
                 [\"object\",\"null\"]; use \"type\": \"object\" or leave \"type\" out (a tool's \
                 arguments are always a JSON object)",
            ],
        ),
        (
            json!({"type": "object", "properties": {"unit": {"type": "strng"}}}),
            vec![
                "not a valid JSON Schema (draft 2020-12): /properties/unit/type must match one of \
                 its allowed forms: either /properties/unit/type must be one of \"array\", \
                 \"boolean\", \"integer\", \"null\", \"number\", \"object\", \"string\" (got \
                 \"strng\"), or /properties/unit/type must be an array (got \"strng\")",
            ],
        ),
        (
            json!({"type": "object", "required": "location"}),
            vec![
                "not a valid JSON Schema (draft 2020-12): /required must be an array (got \
                 \"location\")",
            ],
        ),
        (
            json!({"properties": {"n": {"minimum": "5"}, "s": {"maxLength": -1}}}),
            vec![
                "not a valid JSON Schema (draft 2020-12): /properties/n/minimum must be a number \
                 (got \"5\")",
                "not a valid JSON Schema (draft 2020-12): /properties/s/maxLength must be at \
                 least 0 (got -1)",
            ],
        ),
        (
            json!({"properties": {"code": {"type": "string", "pattern": "([A-Z]"}}}),
            vec![
                "not a valid JSON Schema (draft 2020-12): /properties/code/pattern must be a \
                 valid regular expression (got \"([A-Z]\")",
            ],
        ),
        (
            json!({"properties": {"unit": {"$ref": "#/$defs/unit"}}}),
            vec![
                "not a valid JSON Schema (draft 2020-12): a \"$ref\" cannot be resolved \
                 (Pointer '/$defs/unit' does not exist); only references inside the schema are \
                 followed",
            ],
        ),
        (
            json!({"properties": {"unit": {"$ref": "http://127.0.0.1:9/unit.json"}}}),
            vec![
                "not a valid JSON Schema (draft 2020-12): a \"$ref\" cannot be resolved \
                 (Resource 'http://127.0.0.1:9/unit.json' is not present in a registry and \
                 retrieving it failed: Retrieval is disabled, cannot fetch \
                 http://127.0.0.1:9/unit.json); only references inside the schema are followed",
            ],
        ),
    ]
}

#[actix_web::test]
async fn schemas_that_are_not_valid_object_schemas_are_refused_with_path_and_problem() {
    let app = spawn_app(&["Lanlan"]).await;
    for (parameters, messages) in refused_schemas() {
        let mut body = tool_body("refused", "http://127.0.0.1:9/cb", "plugin:x");
        body["parameters"] = parameters.clone();
        let (status, answer) = app.register(&body).await;
        assert_eq!(
            (status, answer),
            (422, schema_refused(&messages)),
            "{parameters}"
        );
    }
    // Nothing was registered.
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": []}));
}

#[actix_web::test]
async fn a_schema_problem_is_reported_beside_the_other_failing_fields() {
    let app = spawn_app(&["Lanlan"]).await;
    let (status, answer) = app
        .register(&json!({"name": "", "callback_url": "http://127.0.0.1:9/cb",
                          "parameters": {"type": "string"}}))
        .await;
    assert_eq!(status, 422);
    assert_eq!(
        answer,
        json!({"ok": false, "detail": [
            {"loc": ["body", "name"], "msg": "String should have at least 1 character",
             "type": "string_too_short"},
            {"loc": ["body", "parameters"], "msg": "Value error, parameters must describe a JSON \
              object: the top-level \"type\" is \"string\"; use \"type\": \"object\" or leave \
              \"type\" out (a tool's arguments are always a JSON object)", "type": "value_error"}
        ]})
    );
}

#[actix_web::test]
async fn the_model_is_shown_an_object_schema_whatever_was_left_out() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with(Some(&fake), true).await;
    for (name, parameters) in [
        ("empty", json!({})),
        (
            "untyped",
            json!({"properties": {"q": {"type": "string"}}, "required": ["q"]}),
        ),
        ("typed", json!({"type": "object"})),
    ] {
        let mut body = tool_body(name, "http://127.0.0.1:9/cb", "plugin:x");
        body["parameters"] = parameters;
        register(&app, body).await;
    }
    let mut body = tool_body("absent", "http://127.0.0.1:9/cb", "plugin:x");
    body.as_object_mut().unwrap().remove("parameters");
    register(&app, body).await;

    let update = fake
        .update_with_tools(&["empty", "untyped", "typed", "absent"])
        .await;
    let shown: Vec<Value> = update["session"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["parameters"].clone())
        .collect();
    assert_eq!(
        shown,
        [
            json!({"type": "object", "properties": {}}),
            json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
            json!({"type": "object", "properties": {}}),
            json!({"type": "object", "properties": {}}),
        ]
    );
    // `type` comes first, as written schemas have it.
    let keys: Vec<&String> = update["session"]["tools"][1]["parameters"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["type", "properties", "required"]);
}

#[actix_web::test]
async fn the_reference_implementation_agrees_with_what_is_refused_and_accepted() {
    // Schemas the meta-schema refuses (the top-level type rule and the no-fetch rule for `$ref`
    // are this server's own, so those are left out), then schemas it accepts.
    let mut requests: Vec<Value> = refused_schemas()
        .into_iter()
        .filter(|(_, messages)| {
            messages
                .iter()
                .all(|m| m.starts_with("not a valid JSON Schema") && !m.contains("$ref"))
        })
        .map(|(schema, _)| json!({"schema": schema}))
        .collect();
    let refused = requests.len();
    assert_eq!(refused, 4);
    for schema in [
        booking_schema(),
        json!({}),
        json!({"properties": {"q": {"type": "string"}}}),
    ] {
        requests.push(json!({"schema": schema}));
    }
    // Every refused call, then the valid one.
    for (arguments, _) in violation_cases() {
        requests.push(json!({"schema": booking_schema(), "instance": arguments}));
    }
    requests.push(json!({"schema": booking_schema(), "instance": valid_booking()}));

    let mut expected = vec!["schema-invalid"; refused];
    expected.extend(["valid"; 3]);
    expected.extend(vec!["invalid"; violation_cases().len()]);
    expected.push("valid");
    assert_eq!(json_schema_verdicts(requests).await, expected);
}

// ---- calls through the invoke route ----------------------------------------------------------

#[actix_web::test]
async fn invoke_reports_each_violation_as_the_model_would_see_it_without_calling_the_plugin() {
    let app = spawn_app(&["Lanlan"]).await;
    let callback = booking_callback();
    register(&app, booking_tool(&callback.url("/book"))).await;

    for (i, (arguments, violations)) in violation_cases().into_iter().enumerate() {
        let call_id = format!("call_{i}");
        let (status, answer) = invoke(
            &app,
            json!({"name": "book_table", "arguments": arguments, "call_id": call_id}),
        )
        .await;
        assert_eq!(
            (status, answer),
            (
                200,
                json!({"ok": true, "name": "book_table", "call_id": call_id, "output": null,
                       "is_error": true, "error": mismatch(violations)})
            ),
            "{arguments}"
        );
    }
    // Invoke answers after the callback exchange, so a call made would be recorded by now.
    assert_eq!(callback.received().len(), 0);

    // A call that matches reaches the callback unchanged.
    let arguments = valid_booking();
    let (status, answer) = invoke(
        &app,
        json!({"name": "book_table", "arguments": arguments, "call_id": "call_ok"}),
    )
    .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "name": "book_table", "call_id": "call_ok",
                   "output": {"booked": true}, "is_error": false})
        )
    );
    let received = callback.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].json(),
        json!({"name": "book_table", "arguments": arguments, "call_id": "call_ok",
               "raw_arguments": arguments.to_string()})
    );
}

// ---- calls of a live model session ------------------------------------------------------------

#[actix_web::test]
async fn the_model_gets_the_fix_it_text_for_each_violation_and_the_plugin_nothing() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = booking_callback();
    let app = app_with(Some(&fake), true).await;
    register(&app, booking_tool(&callback.url("/book"))).await;
    fake.update_with_tools(&["book_table"]).await;

    for (i, (arguments, violations)) in violation_cases().into_iter().enumerate() {
        let answer = model_calls(
            &fake,
            &format!("c{i}"),
            "book_table",
            &arguments.to_string(),
        )
        .await;
        assert_eq!(answer, tool_error(&mismatch(violations)), "{arguments}");
    }
    let not_json = [
        (
            "{\"city\": \"Tokyo\"",
            "EOF while parsing an object at line 1 column 16",
        ),
        (
            "{\n  \"city\": 'Tokyo'\n}",
            "expected value at line 2 column 11",
        ),
        ("city=Tokyo", "expected value at line 1 column 1"),
    ];
    for (i, (raw, reason)) in not_json.into_iter().enumerate() {
        let answer = model_calls(&fake, &format!("text{i}"), "book_table", raw).await;
        assert_eq!(
            answer,
            tool_error(&format!(
                "arguments for book_table are not valid JSON ({reason}); book_table takes a JSON \
                 object of its parameters. Call book_table again with a JSON object that \
                 matches its parameters."
            )),
            "{raw}"
        );
    }
    for (i, (raw, found)) in [
        ("[\"Tokyo\"]", "an array"),
        ("\"Tokyo\"", "a string"),
        ("42", "a number"),
        ("null", "null"),
    ]
    .into_iter()
    .enumerate()
    {
        let answer = model_calls(&fake, &format!("value{i}"), "book_table", raw).await;
        assert_eq!(
            answer,
            tool_error(&format!(
                "arguments for book_table must be a JSON object of its parameters, not {found}. \
                 Call book_table again with a JSON object that matches its parameters."
            )),
            "{raw}"
        );
    }
    // Empty argument text is `{}`: here it lacks the required city.
    let answer = model_calls(&fake, "empty", "book_table", "").await;
    assert_eq!(answer, tool_error(&mismatch("/city is required")));
    assert_eq!(callback.received().len(), 0);

    // The model's next, correct attempt reaches the plugin exactly as the model wrote it.
    let raw = "{ \"city\" : \"Tokyo\",\n  \"unit\": \"c\" }";
    let answer = model_calls(&fake, "fixed", "book_table", raw).await;
    assert_eq!(answer, json!({"booked": true}));
    let received = callback.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].json(),
        json!({"name": "book_table", "arguments": {"city": "Tokyo", "unit": "c"},
               "call_id": "fixed", "raw_arguments": raw})
    );
}

// ---- the off switch ---------------------------------------------------------------------------

#[actix_web::test]
async fn with_validation_off_arguments_pass_through_as_before() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = booking_callback();
    let app = app_with(Some(&fake), false).await;
    register(&app, booking_tool(&callback.url("/book"))).await;
    fake.update_with_tools(&["book_table"]).await;

    // From the model: whatever it wrote reaches the plugin, under the old arguments rule.
    let calls = [
        ("{\"unit\": \"kelvin\"}", json!({"unit": "kelvin"})),
        (
            "{\"city\": \"Tokyo\"",
            json!({"_raw": "{\"city\": \"Tokyo\""}),
        ),
        ("[1, 2]", json!({"value": [1, 2]})),
        ("", json!({})),
    ];
    for (i, (raw, arguments)) in calls.iter().enumerate() {
        let call_id = format!("off{i}");
        let answer = model_calls(&fake, &call_id, "book_table", raw).await;
        assert_eq!(answer, json!({"booked": true}), "{raw}");
        let received = callback.received();
        assert_eq!(
            received.last().expect("the plugin was called").json(),
            json!({"name": "book_table", "arguments": arguments, "call_id": call_id,
                   "raw_arguments": raw})
        );
    }
    // Through the invoke route too.
    let result = invoke_ok(&app, "book_table", json!({"colour": "red"})).await;
    assert_eq!(result["output"], json!({"booked": true}));
    let received = callback.received();
    assert_eq!(received.len(), calls.len() + 1);
    assert_eq!(
        received.last().unwrap().json()["arguments"],
        json!({"colour": "red"})
    );

    // Registration still checks the schema: the switch is about calls only.
    let mut body = tool_body("listy", "http://127.0.0.1:9/cb", "plugin:x");
    body["parameters"] = json!({"type": "array"});
    let (status, _) = app.register(&body).await;
    assert_eq!(status, 422);
}

// ---- auto-removal -----------------------------------------------------------------------------

#[actix_web::test]
async fn refused_calls_neither_count_towards_auto_removal_nor_reset_the_count() {
    let app = spawn_app(&["Lanlan"]).await;
    let dead = ClosedPort::new();
    register(&app, booking_tool(&dead.url("/book"))).await;
    let valid = json!({"city": "Tokyo"});

    for _ in 0..2 {
        let result = invoke_ok(&app, "book_table", valid.clone()).await;
        assert!(
            error_text(&result).contains("could not connect"),
            "{result}"
        );
    }
    // Refused calls never reach the dead origin: no failure counted, none forgotten.
    for _ in 0..3 {
        let result = invoke_ok(&app, "book_table", json!({"city": 1})).await;
        assert_eq!(
            error_text(&result),
            mismatch("/city must be a string (got 1)")
        );
    }
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["book_table"]})
    );
    // The third connection failure in a row removes the tool.
    let result = invoke_ok(&app, "book_table", valid).await;
    assert!(
        error_text(&result).contains("could not connect"),
        "{result}"
    );
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": []}));
}

// ---- in-process tools -------------------------------------------------------------------------

/// An in-process tool that counts the calls that reach it.
struct Counter {
    calls: u64,
}

impl Actor for Counter {
    type Context = Context<Self>;
}

impl Handler<CallLocalTool> for Counter {
    type Result = ToolOutcome;

    fn handle(&mut self, CallLocalTool(call): CallLocalTool, _: &mut Self::Context) -> ToolOutcome {
        self.calls += 1;
        Ok(json!({"calls": self.calls, "arguments": call.arguments}))
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

#[actix_web::test]
async fn in_process_tools_get_the_same_checks() {
    // A bad schema is an error to handle, with the register route's words, not a panic.
    let refused = Parameters::new(object(json!({"type": "object", "required": "count"})))
        .expect_err("a bad schema is refused");
    assert_eq!(
        refused.to_string(),
        "not a valid JSON Schema (draft 2020-12): /required must be an array (got \"count\")"
    );
    let refused = Parameters::new(object(json!({"type": "number"})))
        .expect_err("a non-object schema is refused");
    assert_eq!(
        refused.to_string(),
        "parameters must describe a JSON object: the top-level \"type\" is \"number\"; use \
         \"type\": \"object\" or leave \"type\" out (a tool's arguments are always a JSON object)"
    );

    let app = spawn_app(&["Lanlan"]).await;
    let parameters = Parameters::new(object(json!({
        "properties": {"sides": {"type": "integer", "minimum": 2}},
        "required": ["sides"]
    })))
    .expect("a valid schema");
    let tool = ToolSpec::local(
        "roll",
        "Roll a die.",
        parameters,
        "inproc:dice",
        local_handler(Counter { calls: 0 }.start().recipient()),
    );
    app.router
        .send(RegisterTool { tool, role: None })
        .await
        .expect("router answers")
        .expect("registered");

    let result = invoke_ok(&app, "roll", json!({"sides": 1})).await;
    assert_eq!(
        error_text(&result),
        "arguments for roll do not match its parameters: /sides must be at least 2 (got 1). \
         Call roll again with arguments that match."
    );
    let result = invoke_ok(&app, "roll", json!({"sides": 6})).await;
    assert_eq!(
        result["output"],
        json!({"calls": 1, "arguments": {"sides": 6}}),
        "the refused call never reached the actor"
    );
}
