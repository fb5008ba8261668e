//! Request-body rules over HTTP: field validation (every failing field at once), wrong JSON
//! types, unknown fields, bodies that are not a JSON object or not sent as JSON, and the 1 MiB
//! limit with and without `Content-Length`.

use serde_json::{Value, json};

use crate::helpers::{TestApp, chunked, listed_names, raw_head, spawn_app, without_instance_id};

/// The request-body limit the API promises.
const MIB: usize = 1024 * 1024;

/// The 413 answer.
fn too_large() -> Value {
    json!({"ok": false, "detail": format!("request body is larger than the {MIB}-byte limit")})
}

/// A 422 answer naming `errors` as `(field, type, msg)`; an empty field is the body itself.
fn invalid(errors: &[(&str, &str, &str)]) -> Value {
    let detail: Vec<Value> = errors
        .iter()
        .map(|(field, kind, msg)| {
            let loc = if field.is_empty() {
                json!(["body"])
            } else {
                json!(["body", field])
            };
            json!({"loc": loc, "msg": msg, "type": kind})
        })
        .collect();
    json!({"ok": false, "detail": detail})
}

fn registered(name: &str, roles: &[&str]) -> Value {
    json!({"ok": true, "registered": name, "affected_roles": roles, "failed_roles": []})
}

/// A valid register body for `name`, with `extra` fields merged in.
fn register_body(name: &str, extra: Value) -> Value {
    let mut body = json!({"name": name, "callback_url": "http://127.0.0.1:9000/cb"});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

async fn app() -> TestApp {
    spawn_app(&["Lanlan"]).await
}

#[actix_web::test]
async fn name_length_counts_characters_not_bytes() {
    let app = app().await;
    let han64 = "名".repeat(64);
    let ascii64 = "a".repeat(64);
    for name in [&han64, &ascii64, &"x".to_owned()] {
        let (status, body) = app.register(&register_body(name, json!({}))).await;
        assert_eq!(
            (status, body),
            (200, registered(name, &["Lanlan"])),
            "{name}"
        );
    }
    assert_eq!(
        listed_names(&app.listing(None).await, "Lanlan"),
        [han64.as_str(), ascii64.as_str(), "x"]
    );

    let too_long = invalid(&[(
        "name",
        "string_too_long",
        "String should have at most 64 characters",
    )]);
    for name in ["名".repeat(65), "a".repeat(65)] {
        let (status, body) = app.register(&register_body(&name, json!({}))).await;
        assert_eq!((status, body), (422, too_long.clone()), "{name}");
    }
    let (status, body) = app.register(&register_body("", json!({}))).await;
    assert_eq!(
        (status, body),
        (
            422,
            invalid(&[(
                "name",
                "string_too_short",
                "String should have at least 1 character"
            )])
        )
    );
    let (status, body) = app
        .register(&json!({"callback_url": "http://127.0.0.1:9000/cb"}))
        .await;
    assert_eq!(
        (status, body),
        (422, invalid(&[("name", "missing", "Field required")]))
    );
}

#[actix_web::test]
async fn the_server_s_own_find_tools_is_not_a_name_a_plugin_may_take() {
    let app = app().await;
    let (status, body) = app.register(&register_body("find_tools", json!({}))).await;
    assert_eq!(
        (status, body),
        (
            422,
            invalid(&[(
                "name",
                "value_error",
                "Value error, `find_tools` is the server's own tool; choose another name"
            )])
        )
    );
    // Only that exact name: a tool may still be called like it.
    let (status, _) = app.register(&register_body("find_tools2", json!({}))).await;
    assert_eq!(status, 200);
    assert_eq!(
        listed_names(&app.listing(None).await, "Lanlan"),
        ["find_tools2"]
    );
}

#[actix_web::test]
async fn timeout_seconds_is_above_zero_and_at_most_300() {
    let app = app().await;
    for (i, timeout) in [
        json!(300),
        json!(300.0),
        json!(0.001),
        json!(1),
        json!(30.5),
    ]
    .into_iter()
    .enumerate()
    {
        let name = format!("t{i}");
        let body = register_body(&name, json!({"timeout_seconds": timeout}));
        let (status, answer) = app.register(&body).await;
        assert_eq!(
            (status, answer),
            (200, registered(&name, &["Lanlan"])),
            "{timeout}"
        );
    }
    let cases = [
        (
            json!(300.5),
            "less_than_equal",
            "Input should be less than or equal to 300",
        ),
        (
            json!(301),
            "less_than_equal",
            "Input should be less than or equal to 300",
        ),
        (
            json!(1e9),
            "less_than_equal",
            "Input should be less than or equal to 300",
        ),
        (json!(0), "greater_than", "Input should be greater than 0"),
        (json!(0.0), "greater_than", "Input should be greater than 0"),
        (json!(-1), "greater_than", "Input should be greater than 0"),
        (json!("30"), "float_type", "Input should be a valid number"),
        (json!(null), "float_type", "Input should be a valid number"),
        (json!([30]), "float_type", "Input should be a valid number"),
    ];
    for (timeout, kind, msg) in cases {
        let body = register_body("late", json!({"timeout_seconds": timeout}));
        let (status, answer) = app.register(&body).await;
        assert_eq!(
            (status, answer),
            (422, invalid(&[("timeout_seconds", kind, msg)])),
            "{timeout}"
        );
    }
    assert_eq!(
        listed_names(&app.listing(None).await, "Lanlan"),
        ["t0", "t1", "t2", "t3", "t4"]
    );
}

#[actix_web::test]
async fn parameters_must_be_a_json_object() {
    let app = app().await;
    let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
    for (i, parameters) in [json!({}), schema].into_iter().enumerate() {
        let name = format!("p{i}");
        let (status, body) = app
            .register(&register_body(&name, json!({"parameters": parameters})))
            .await;
        assert_eq!((status, body), (200, registered(&name, &["Lanlan"])));
    }
    for parameters in [json!([]), json!("{}"), json!(1), json!(null), json!(true)] {
        let (status, body) = app
            .register(&register_body("p", json!({"parameters": parameters})))
            .await;
        assert_eq!(
            (status, body),
            (
                422,
                invalid(&[(
                    "parameters",
                    "dict_type",
                    "Input should be a valid dictionary (a JSON object)"
                )])
            ),
            "{parameters}"
        );
    }
}

#[actix_web::test]
async fn a_wrong_json_type_is_a_422_for_every_field() {
    let app = app().await;
    let string = "Input should be a valid string";
    let cases = [
        (json!({"description": 5}), "description", string),
        (json!({"description": null}), "description", string),
        (json!({"name": null}), "name", string),
        (json!({"name": 7}), "name", string),
        (json!({"callback_url": 5}), "callback_url", string),
        (json!({"callback_url": null}), "callback_url", string),
        (json!({"source": ["plugin:x"]}), "source", string),
        (
            json!({"role": 3}),
            "role",
            "Input should be a valid string or null",
        ),
        (
            json!({"role": ["Lanlan"]}),
            "role",
            "Input should be a valid string or null",
        ),
    ];
    for (extra, field, msg) in cases {
        let body = register_body("typed", extra.clone());
        let (status, answer) = app.register(&body).await;
        assert_eq!(
            (status, answer),
            (422, invalid(&[(field, "string_type", msg)])),
            "{extra}"
        );
    }
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": []}));
}

#[actix_web::test]
async fn a_422_lists_every_failing_field_at_once() {
    let app = app().await;
    let (status, body) = app
        .register(&json!({
            "name": "名".repeat(65),
            "description": 5,
            "parameters": [],
            "callback_url": "http://8.8.8.8/cb",
            "role": 3,
            "source": "",
            "timeout_seconds": 300.5
        }))
        .await;
    assert_eq!(status, 422, "{body}");
    let failing: Vec<(Value, Value)> = body["detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["loc"].clone(), e["type"].clone()))
        .collect();
    assert_eq!(
        failing,
        [
            (json!(["body", "name"]), json!("string_too_long")),
            (json!(["body", "description"]), json!("string_type")),
            (json!(["body", "parameters"]), json!("dict_type")),
            (json!(["body", "callback_url"]), json!("value_error")),
            (json!(["body", "role"]), json!("string_type")),
            (json!(["body", "source"]), json!("string_too_short")),
            (json!(["body", "timeout_seconds"]), json!("less_than_equal")),
        ]
    );
    assert_eq!(body["ok"], false);

    // Missing required fields are listed together too.
    let (status, body) = app.register(&json!({})).await;
    assert_eq!(
        (status, body),
        (
            422,
            invalid(&[
                ("name", "missing", "Field required"),
                ("callback_url", "missing", "Field required"),
            ])
        )
    );
}

#[actix_web::test]
async fn unknown_fields_are_ignored() {
    let app = app().await;
    let body = register_body(
        "extra",
        json!({"colour": "blue", "parameters_v2": [], "timeout": "never", "callback": 1}),
    );
    let (status, answer) = app.register(&body).await;
    assert_eq!((status, answer), (200, registered("extra", &["Lanlan"])));
    let (status, answer) = app
        .post(
            "/api/tools/unregister",
            &json!({"name": "extra", "force": true}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["removed"], true);
    let (status, answer) = app
        .post(
            "/api/tools/clear",
            &json!({"source": "external", "everything": true}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
}

#[actix_web::test]
async fn omitted_fields_take_their_defaults() {
    let app = app().await;
    let (status, _) = app.register(&register_body("bare", json!({}))).await;
    assert_eq!(status, 200);
    assert_eq!(
        app.listing(None).await,
        json!({"ok": true, "tools_by_role": {"Lanlan": [{
            "name": "bare", "description": "", "source": "external",
            "callback_url": "http://127.0.0.1:9000/cb", "is_remote": true
        }]}})
    );
}

#[actix_web::test]
async fn unregister_and_clear_validate_their_fields() {
    let app = app().await;
    let cases = [
        (
            "/api/tools/unregister",
            json!({}),
            invalid(&[("name", "missing", "Field required")]),
        ),
        (
            "/api/tools/unregister",
            json!({"name": ""}),
            invalid(&[(
                "name",
                "string_too_short",
                "String should have at least 1 character",
            )]),
        ),
        (
            "/api/tools/unregister",
            json!({"name": "名".repeat(65)}),
            invalid(&[(
                "name",
                "string_too_long",
                "String should have at most 64 characters",
            )]),
        ),
        (
            "/api/tools/unregister",
            json!({"name": null, "role": 1}),
            invalid(&[
                ("name", "string_type", "Input should be a valid string"),
                (
                    "role",
                    "string_type",
                    "Input should be a valid string or null",
                ),
            ]),
        ),
        (
            "/api/tools/clear",
            json!({}),
            invalid(&[("source", "missing", "Field required")]),
        ),
        (
            "/api/tools/clear",
            json!({"source": ""}),
            invalid(&[(
                "source",
                "string_too_short",
                "String should have at least 1 character",
            )]),
        ),
        (
            "/api/tools/clear",
            json!({"source": 5, "role": false}),
            invalid(&[
                ("source", "string_type", "Input should be a valid string"),
                (
                    "role",
                    "string_type",
                    "Input should be a valid string or null",
                ),
            ]),
        ),
    ];
    for (path, body, expected) in cases {
        let (status, answer) = app.post(path, &body).await;
        assert_eq!((status, answer), (422, expected), "{path} {body}");
    }
    // 64 characters is a valid name to unregister (and nothing is there to remove).
    let name = "名".repeat(64);
    let (status, answer) = app
        .post("/api/tools/unregister", &json!({"name": name}))
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "removed": false, "name": name, "affected_roles": [], "failed_roles": []})
        )
    );
}

const POST_ROUTES: [&str; 3] = [
    "/api/tools/register",
    "/api/tools/unregister",
    "/api/tools/clear",
];

#[actix_web::test]
async fn a_body_that_is_not_json_is_a_422() {
    let app = app().await;
    let cases: [(&[u8], &str); 4] = [
        (
            b"not json",
            "JSON decode error: expected ident at line 1 column 2",
        ),
        (
            b"{\"name\": ",
            "JSON decode error: EOF while parsing a value at line 1 column 9",
        ),
        (
            b"",
            "JSON decode error: EOF while parsing a value at line 1 column 0",
        ),
        (
            b"{} {}",
            "JSON decode error: trailing characters at line 1 column 4",
        ),
    ];
    for path in POST_ROUTES {
        for (body, msg) in cases {
            let (status, answer) = app
                .post_raw(path, Some("application/json"), body.to_vec())
                .await;
            assert_eq!(
                (status, answer),
                (422, invalid(&[("", "json_invalid", msg)])),
                "{path} {:?}",
                String::from_utf8_lossy(body)
            );
        }
    }
}

#[actix_web::test]
async fn a_body_that_is_not_a_json_object_is_a_422() {
    let app = app().await;
    let expected = invalid(&[(
        "",
        "model_attributes_type",
        "Input should be a valid dictionary or object to extract fields from",
    )]);
    for path in POST_ROUTES {
        for body in [
            json!([1, 2]),
            json!("name"),
            json!(null),
            json!(42),
            json!(true),
        ] {
            let (status, answer) = app.post(path, &body).await;
            assert_eq!((status, answer), (422, expected.clone()), "{path} {body}");
        }
    }
}

#[actix_web::test]
async fn a_body_not_sent_as_json_is_a_422() {
    let app = app().await;
    let body = serde_json::to_vec(&register_body("ct", json!({}))).unwrap();
    for path in POST_ROUTES {
        for content_type in [
            None,
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
        ] {
            let (status, answer) = app.post_raw(path, content_type, body.clone()).await;
            let got = content_type.unwrap_or("");
            assert_eq!(
                (status, answer),
                (
                    422,
                    invalid(&[(
                        "",
                        "content_type",
                        &format!("Content-Type must be application/json, got {got:?}")
                    )])
                ),
                "{path} {content_type:?}"
            );
        }
    }
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": []}));
    // JSON with parameters is JSON.
    let (status, answer) = app
        .post_raw(
            "/api/tools/register",
            Some("application/json; charset=utf-8"),
            body,
        )
        .await;
    assert_eq!((status, answer), (200, registered("ct", &["Lanlan"])));
}

/// A register body of exactly `len` bytes (padding the description).
fn register_bytes(len: usize) -> Vec<u8> {
    let empty = serde_json::to_vec(&register_body("big", json!({"description": ""}))).unwrap();
    let body = register_body("big", json!({"description": "x".repeat(len - empty.len())}));
    let bytes = serde_json::to_vec(&body).unwrap();
    assert_eq!(bytes.len(), len);
    bytes
}

#[actix_web::test]
async fn a_body_of_exactly_1_mib_is_accepted() {
    let app = app().await;
    let (status, answer) = app
        .post_raw(
            "/api/tools/register",
            Some("application/json"),
            register_bytes(MIB),
        )
        .await;
    assert_eq!((status, answer), (200, registered("big", &["Lanlan"])));

    // The same size without Content-Length (chunked) too.
    let host = app.host();
    let mut request = raw_head(
        "POST",
        "/api/tools/register",
        &[
            ("Host", &host),
            ("Content-Type", "application/json"),
            ("Transfer-Encoding", "chunked"),
        ],
    );
    request.extend(chunked(&register_bytes(MIB), 64 * 1024));
    let response = app.raw(request).await;
    let answer = without_instance_id("/api/tools/register", response.status, response.json());
    assert_eq!(
        (response.status, answer),
        (200, registered("big", &["Lanlan"]))
    );
}

#[actix_web::test]
async fn a_body_over_1_mib_with_content_length_is_a_413() {
    let app = app().await;
    let host = app.host();
    // The whole body sent.
    let (status, answer) = app
        .post_raw(
            "/api/tools/register",
            Some("application/json"),
            register_bytes(MIB + 1),
        )
        .await;
    assert_eq!((status, answer), (413, too_large()));

    // Refused on the declared length alone, before any of the body arrives.
    for path in POST_ROUTES {
        let length = (MIB + 1).to_string();
        let request = raw_head(
            "POST",
            path,
            &[
                ("Host", &host),
                ("Content-Type", "application/json"),
                ("Content-Length", &length),
            ],
        );
        let response = app.raw(request).await;
        assert_eq!(
            (response.status, response.json()),
            (413, too_large()),
            "{path}"
        );
    }
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": []}));
}

#[actix_web::test]
async fn a_chunked_body_over_1_mib_is_a_413() {
    let app = app().await;
    let host = app.host();
    for path in POST_ROUTES {
        let mut request = raw_head(
            "POST",
            path,
            &[
                ("Host", &host),
                ("Content-Type", "application/json"),
                ("Transfer-Encoding", "chunked"),
            ],
        );
        request.extend(chunked(&register_bytes(MIB + 1), 64 * 1024));
        let response = app.raw(request).await;
        assert_eq!(
            (response.status, response.json()),
            (413, too_large()),
            "{path}"
        );
    }
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": []}));
}

#[actix_web::test]
async fn other_methods_and_paths_answer_json() {
    let app = app().await;
    let (status, body) = app.get("/api/tools/register").await;
    assert_eq!(
        (status, body),
        (405, json!({"ok": false, "detail": "Method Not Allowed"}))
    );
    let (status, body) = app.post("/api/tools", &json!({})).await;
    assert_eq!(
        (status, body),
        (405, json!({"ok": false, "detail": "Method Not Allowed"}))
    );
    let (status, body) = app.get("/api/nothing").await;
    assert_eq!(
        (status, body),
        (404, json!({"ok": false, "detail": "Not Found"}))
    );
}
