//! Plugins that own their tools (`X-Plugin-Token`): the first tokened registration of a source
//! binds it; every change to that source — register or replace, unregister by name, clear, an
//! MCP server's registration and removal, progress for its calls — then needs the same token
//! (403 otherwise, and nothing changes); a source registered without one is anyone's, as the
//! contract says; `[security] plugin_tokens = "required"` makes a token mandatory (401); a
//! tool of a bound source is not taken over by another source's registration; the token is
//! never echoed, listed or logged.

use runtime_tools::TokenPolicy;
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, ClosedPort, Reply, spawn_invoke};
use crate::helpers::{TestApp, parse_json, settings, spawn_app, spawn_app_with};

pub const TOKEN_A: &str = "plugin-a-secret-token-0001";
pub const TOKEN_B: &str = "plugin-b-secret-token-0002";

/// The refusal of a change to a source another plugin's token owns.
pub fn not_owner(source: &str) -> Value {
    json!({
        "ok": false,
        "detail": format!(
            "source \"{source}\" belongs to another plugin: a change to its tools needs the \
             X-Plugin-Token it was registered with"
        )
    })
}

/// POSTs `body` to `path` with `token` as `X-Plugin-Token` (none when `None`).
pub async fn post_as(app: &TestApp, path: &str, body: &Value, token: Option<&str>) -> (u16, Value) {
    let mut request = app.client.post(app.url(path));
    if let Some(token) = token {
        request = request.insert_header(("X-Plugin-Token", token));
    }
    let mut response = request.send_json(body).await.expect("request sent");
    let status = response.status().as_u16();
    let bytes = response.body().limit(64 << 20).await.expect("body read");
    (status, parse_json(&bytes))
}

fn tool(name: &str, source: &str, url: &str) -> Value {
    json!({"name": name, "description": "d", "callback_url": url, "source": source})
}

/// `(name, source, callback_url)` of every listed tool, per role, in order.
async fn listing(app: &TestApp) -> Vec<(String, String, String, String)> {
    let (status, list) = app.get("/api/tools").await;
    assert_eq!(status, 200);
    let mut rows = Vec::new();
    for (role, tools) in list["tools_by_role"].as_object().unwrap() {
        for t in tools.as_array().unwrap() {
            rows.push((
                role.clone(),
                t["name"].as_str().unwrap().to_owned(),
                t["source"].as_str().unwrap().to_owned(),
                t["callback_url"].as_str().unwrap_or_default().to_owned(),
            ));
        }
    }
    rows
}

#[actix_web::test]
async fn a_bound_source_changes_only_with_its_token_and_a_refusal_changes_nothing() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let port = ClosedPort::new();
    let url = port.url("/weather");
    let other_url = port.url("/other");

    let (status, answer) = post_as(
        &app,
        "/api/tools/register",
        &tool("weather", "plugin:a", &url),
        Some(TOKEN_A),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["instance_id"].as_str().unwrap().len(), 32);
    let before = listing(&app).await;
    assert_eq!(before.len(), 2);

    // Register or replace under the bound source: wrong token, no token.
    for token in [Some(TOKEN_B), None] {
        let replace = tool("weather", "plugin:a", &other_url);
        let (status, answer) = post_as(&app, "/api/tools/register", &replace, token).await;
        assert_eq!((status, answer), (403, not_owner("plugin:a")));
        let another = tool("forecast", "plugin:a", &other_url);
        let (status, answer) = post_as(&app, "/api/tools/register", &another, token).await;
        assert_eq!((status, answer), (403, not_owner("plugin:a")));
        // Unregister by name, for every role and for one.
        for role in [Value::Null, json!("Mio")] {
            let body = json!({"name": "weather", "role": role});
            let (status, answer) = post_as(&app, "/api/tools/unregister", &body, token).await;
            assert_eq!((status, answer), (403, not_owner("plugin:a")));
        }
        let body = json!({"source": "plugin:a"});
        let (status, answer) = post_as(&app, "/api/tools/clear", &body, token).await;
        assert_eq!((status, answer), (403, not_owner("plugin:a")));
        // Takeover: another source's registration of the same name.
        let takeover = tool("weather", "plugin:b", &other_url);
        let (status, answer) = post_as(&app, "/api/tools/register", &takeover, token).await;
        assert_eq!((status, answer), (403, not_owner("plugin:a")));
    }
    assert_eq!(
        listing(&app).await,
        before,
        "a refused change changes nothing"
    );
    // The takeover attempt bound nothing: plugin:b is still anyone's.
    let (status, _) = post_as(
        &app,
        "/api/tools/register",
        &tool("b_tool", "plugin:b", &other_url),
        None,
    )
    .await;
    assert_eq!(status, 200);

    // The owner replaces, unregisters and clears.
    let (status, answer) = post_as(
        &app,
        "/api/tools/register",
        &tool("weather", "plugin:a", &other_url),
        Some(TOKEN_A),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = post_as(
        &app,
        "/api/tools/unregister",
        &json!({"name": "weather", "role": "Mio"}),
        Some(TOKEN_A),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["removed"], true);
    assert_eq!(answer["affected_roles"], json!(["Mio"]));
    let (status, answer) = post_as(
        &app,
        "/api/tools/clear",
        &json!({"source": "plugin:a"}),
        Some(TOKEN_A),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["removed"], 1);
    assert!(answer["instance_id"].is_string());
    // Still bound once its tools are gone.
    let (status, answer) = post_as(
        &app,
        "/api/tools/register",
        &tool("weather", "plugin:a", &url),
        None,
    )
    .await;
    assert_eq!((status, answer), (403, not_owner("plugin:a")));
}

#[actix_web::test]
async fn an_unbound_source_is_anyones_as_the_contract_says() {
    let app = spawn_app(&["Lanlan"]).await;
    let port = ClosedPort::new();
    let (status, _) = app
        .register(&tool("echo", "plugin:free", &port.url("/e")))
        .await;
    assert_eq!(status, 200);
    // Any token, or none, changes it; a token on a change that is not a registration binds
    // nothing.
    let (status, answer) = post_as(
        &app,
        "/api/tools/unregister",
        &json!({"name": "echo"}),
        Some(TOKEN_B),
    )
    .await;
    assert_eq!((status, answer["removed"].clone()), (200, json!(true)));
    let (status, _) = app
        .register(&tool("echo", "plugin:free", &port.url("/e")))
        .await;
    assert_eq!(status, 200);
    let (status, answer) = app
        .post("/api/tools/clear", &json!({"source": "plugin:free"}))
        .await;
    assert_eq!((status, answer["removed"].clone()), (200, json!(1)));
    // A tokened registration of an unbound source that holds tools binds it from then on.
    let (status, _) = app
        .register(&tool("echo", "plugin:free", &port.url("/e")))
        .await;
    assert_eq!(status, 200);
    let (status, _) = post_as(
        &app,
        "/api/tools/register",
        &tool("echo2", "plugin:free", &port.url("/e")),
        Some(TOKEN_A),
    )
    .await;
    assert_eq!(status, 200);
    let (status, answer) = app
        .post("/api/tools/clear", &json!({"source": "plugin:free"}))
        .await;
    assert_eq!((status, answer), (403, not_owner("plugin:free")));
}

#[actix_web::test]
async fn a_token_that_is_not_16_to_256_visible_characters_is_a_422_naming_the_header() {
    let app = spawn_app(&["Lanlan"]).await;
    let port = ClosedPort::new();
    let long = "x".repeat(257);
    for (token, msg) in [
        (
            "short",
            "X-Plugin-Token must be 16 to 256 visible ASCII characters, got 5",
        ),
        (
            long.as_str(),
            "X-Plugin-Token must be 16 to 256 visible ASCII characters, got 257",
        ),
        (
            "has spaces in the token",
            "X-Plugin-Token must be visible ASCII characters only (no spaces, control or \
             non-ASCII characters)",
        ),
    ] {
        for path in [
            "/api/tools/register",
            "/api/tools/unregister",
            "/api/tools/clear",
        ] {
            let body = json!({"name": "t", "source": "plugin:x", "callback_url": port.url("/t")});
            let (status, answer) = post_as(&app, path, &body, Some(token)).await;
            assert_eq!(status, 422, "{path}: {answer}");
            assert_eq!(
                answer,
                json!({"ok": false, "detail": [{"loc": ["header", "X-Plugin-Token"], "msg": msg, "type": "value_error"}]})
            );
        }
    }
    assert!(listing(&app).await.is_empty());
}

#[actix_web::test]
async fn required_mode_refuses_every_change_without_a_token_with_401() {
    let mut config = settings(&["Lanlan"]);
    config.plugin_tokens = TokenPolicy::Required;
    let app = spawn_app_with(config).await;
    let port = ClosedPort::new();
    let required = json!({
        "ok": false,
        "detail": "an X-Plugin-Token header is required for every change: the server is \
                   configured with [security] plugin_tokens = \"required\""
    });
    let register = tool("t", "plugin:x", &port.url("/t"));
    let changes = [
        ("/api/tools/register", register.clone()),
        ("/api/tools/unregister", json!({"name": "t"})),
        ("/api/tools/clear", json!({"source": "plugin:x"})),
        (
            "/api/mcp/register",
            json!({"name": "srv", "url": port.url("/mcp"), "source": "plugin:x"}),
        ),
        ("/api/mcp/unregister", json!({"name": "srv"})),
    ];
    for (path, body) in &changes {
        let (status, answer) = post_as(&app, path, body, None).await;
        assert_eq!((status, answer), (401, required.clone()), "{path}");
    }
    assert!(listing(&app).await.is_empty());
    let (status, answer) = post_as(&app, "/api/tools/register", &register, Some(TOKEN_A)).await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = post_as(&app, "/api/tools/register", &register, Some(TOKEN_B)).await;
    assert_eq!((status, answer), (403, not_owner("plugin:x")));
    let (status, answer) = post_as(
        &app,
        "/api/tools/clear",
        &json!({"source": "plugin:x"}),
        Some(TOKEN_A),
    )
    .await;
    assert_eq!((status, answer["removed"].clone()), (200, json!(1)));
}

#[actix_web::test]
async fn an_mcp_server_under_a_bound_source_needs_its_token() {
    let app = spawn_app(&["Lanlan"]).await;
    let port = ClosedPort::new();
    let (status, _) = post_as(
        &app,
        "/api/tools/register",
        &tool("t", "plugin:a", &port.url("/t")),
        Some(TOKEN_A),
    )
    .await;
    assert_eq!(status, 200);
    let server = json!({"name": "srv", "url": port.url("/mcp"), "source": "plugin:a"});
    for token in [None, Some(TOKEN_B)] {
        let (status, answer) = post_as(&app, "/api/mcp/register", &server, token).await;
        assert_eq!((status, answer), (403, not_owner("plugin:a")));
    }
    // With the owner's token it gets as far as connecting (nothing listens there).
    let (status, answer) = post_as(&app, "/api/mcp/register", &server, Some(TOKEN_A)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["stage"], "connect", "{answer}");
    assert!(answer["instance_id"].is_string());
    // A first tokened MCP registration binds its source too.
    let other = json!({"name": "srv2", "url": port.url("/mcp"), "source": "plugin:m"});
    let (status, _) = post_as(&app, "/api/mcp/register", &other, Some(TOKEN_B)).await;
    assert_eq!(status, 200);
    let (status, answer) = post_as(&app, "/api/mcp/register", &other, Some(TOKEN_A)).await;
    assert_eq!((status, answer), (403, not_owner("plugin:m")));
}

#[actix_web::test]
async fn progress_for_a_call_of_a_bound_source_needs_its_token() {
    let app = spawn_app(&["Lanlan"]).await;
    let callback = CallbackServer::with("/slow", Reply::after_gate(Reply::output(json!("done"))));
    let (status, _) = post_as(
        &app,
        "/api/tools/register",
        &tool("slow", "plugin:a", &callback.url("/slow")),
        Some(TOKEN_A),
    )
    .await;
    assert_eq!(status, 200);
    let invoke = spawn_invoke(&app, "slow");
    let received = callback.wait_for_requests(1).await;
    let call_id = received[0].json()["call_id"].as_str().unwrap().to_owned();
    let path = format!("/api/tools/calls/{call_id}/progress");
    let body = json!({"message": "halfway"});
    for token in [None, Some(TOKEN_B)] {
        let (status, answer) = post_as(&app, &path, &body, token).await;
        assert_eq!((status, answer), (403, not_owner("plugin:a")));
    }
    let (status, answer) = post_as(&app, &path, &body, Some(TOKEN_A)).await;
    assert_eq!(status, 200, "{answer}");
    callback.open_gate();
    let answer = invoke.await.unwrap();
    assert_eq!(answer["output"], "done", "{answer}");
}
