//! Role scoping on all four routes (`role` set, `null`, `""`, absent), the 404 for an unknown
//! role, and the exact response shapes of register, unregister and clear.

use serde_json::{Value, json};

use crate::helpers::{TestApp, spawn_app, tool_body};

const CHARACTERS: [&str; 3] = ["Lanlan", "Mio", "Aoi"];

fn unknown_role(role: &str) -> Value {
    json!({"ok": false, "detail": format!("unknown role: {role}")})
}

/// Registers `name` (source `source`) for `role` and asserts the exact answer.
async fn register(app: &TestApp, name: &str, source: &str, role: Value, affected: &[&str]) {
    let mut body = tool_body(name, "http://127.0.0.1:9000/cb", source);
    body["role"] = role;
    let (status, answer) = app.register(&body).await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "registered": name, "affected_roles": affected, "failed_roles": []})
        ),
        "{body}"
    );
}

#[actix_web::test]
async fn register_targets_one_role_or_every_role() {
    let app = spawn_app(&CHARACTERS).await;
    register(&app, "only_mio", "s", json!("Mio"), &["Mio"]).await;
    register(&app, "null_role", "s", json!(null), &CHARACTERS).await;
    register(&app, "empty_role", "s", json!(""), &CHARACTERS).await;
    // No `role` key at all.
    let (status, answer) = app
        .register(&json!({"name": "no_role", "callback_url": "http://localhost/cb"}))
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "registered": "no_role", "affected_roles": CHARACTERS, "failed_roles": []})
        )
    );
    assert_eq!(
        app.tool_names(None).await,
        json!({
            "Lanlan": ["null_role", "empty_role", "no_role"],
            "Mio": ["only_mio", "null_role", "empty_role", "no_role"],
            "Aoi": ["null_role", "empty_role", "no_role"],
        })
    );
}

#[actix_web::test]
async fn an_unknown_role_is_a_404_on_every_route() {
    let app = spawn_app(&CHARACTERS).await;
    register(&app, "t", "s", json!(null), &CHARACTERS).await;
    for role in ["Nobody", "mio", "Mio ", "名"] {
        let mut body = tool_body("t2", "http://127.0.0.1:9000/cb", "s");
        body["role"] = json!(role);
        assert_eq!(app.register(&body).await, (404, unknown_role(role)));
        assert_eq!(
            app.post("/api/tools/unregister", &json!({"name": "t", "role": role}))
                .await,
            (404, unknown_role(role))
        );
        assert_eq!(
            app.post("/api/tools/clear", &json!({"source": "s", "role": role}))
                .await,
            (404, unknown_role(role))
        );
        let request = app
            .client
            .get(app.url("/api/tools"))
            .query(&[("role", role)]);
        assert_eq!(
            app.send(request.unwrap(), None).await,
            (404, unknown_role(role))
        );
    }
    // Nothing changed.
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["t"], "Mio": ["t"], "Aoi": ["t"]})
    );
}

#[actix_web::test]
async fn a_validation_error_comes_before_the_role_lookup() {
    let app = spawn_app(&CHARACTERS).await;
    let (status, body) = app
        .register(&json!({"name": "", "callback_url": "http://localhost/cb", "role": "Nobody"}))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["detail"][0]["loc"], json!(["body", "name"]));
}

#[actix_web::test]
async fn unregister_answers_removed_as_a_bool_and_the_roles_it_was_removed_from() {
    let app = spawn_app(&CHARACTERS).await;
    register(&app, "everywhere", "s", json!(null), &CHARACTERS).await;
    register(&app, "mio_and_aoi", "s", json!("Mio"), &["Mio"]).await;
    register(&app, "mio_and_aoi", "s", json!("Aoi"), &["Aoi"]).await;

    // One role.
    let (status, answer) = app
        .post(
            "/api/tools/unregister",
            &json!({"name": "everywhere", "role": "Mio"}),
        )
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "removed": true, "name": "everywhere", "affected_roles": ["Mio"], "failed_roles": []})
        )
    );
    // Again: nothing left there to remove.
    let (status, answer) = app
        .post(
            "/api/tools/unregister",
            &json!({"name": "everywhere", "role": "Mio"}),
        )
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "removed": false, "name": "everywhere", "affected_roles": [], "failed_roles": []})
        )
    );
    // Every role (null): only the roles that still had it are affected.
    let (status, answer) = app
        .post(
            "/api/tools/unregister",
            &json!({"name": "everywhere", "role": null}),
        )
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "removed": true, "name": "everywhere", "affected_roles": ["Lanlan", "Aoi"], "failed_roles": []})
        )
    );
    // Every role (""), removed from two roles at once: still `true`, not a count.
    let (status, answer) = app
        .post(
            "/api/tools/unregister",
            &json!({"name": "mio_and_aoi", "role": ""}),
        )
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "removed": true, "name": "mio_and_aoi", "affected_roles": ["Mio", "Aoi"], "failed_roles": []})
        )
    );
    // A name nobody has, role absent.
    let (status, answer) = app
        .post("/api/tools/unregister", &json!({"name": "ghost"}))
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "removed": false, "name": "ghost", "affected_roles": [], "failed_roles": []})
        )
    );
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": [], "Mio": [], "Aoi": []})
    );
}

#[actix_web::test]
async fn clear_answers_the_count_removed_per_source_and_role() {
    let app = spawn_app(&CHARACTERS).await;
    register(&app, "a", "plugin:x", json!(null), &CHARACTERS).await;
    register(&app, "b", "plugin:x", json!("Mio"), &["Mio"]).await;
    register(&app, "c", "plugin:y", json!(null), &CHARACTERS).await;
    register(&app, "d", "plugin:x", json!("Aoi"), &["Aoi"]).await;

    // One role.
    let (status, answer) = app
        .post(
            "/api/tools/clear",
            &json!({"source": "plugin:x", "role": "Mio"}),
        )
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "removed": 2, "source": "plugin:x", "affected_roles": ["Mio"], "failed_roles": []})
        )
    );
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["a", "c"], "Mio": ["c"], "Aoi": ["a", "c", "d"]})
    );
    // Every role (null): the count sums over roles.
    let (status, answer) = app
        .post(
            "/api/tools/clear",
            &json!({"source": "plugin:x", "role": null}),
        )
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "removed": 3, "source": "plugin:x", "affected_roles": ["Lanlan", "Aoi"], "failed_roles": []})
        )
    );
    // Nothing left of that source.
    let (status, answer) = app
        .post("/api/tools/clear", &json!({"source": "plugin:x"}))
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "removed": 0, "source": "plugin:x", "affected_roles": [], "failed_roles": []})
        )
    );
    // Every role (""), another source.
    let (status, answer) = app
        .post(
            "/api/tools/clear",
            &json!({"source": "plugin:y", "role": ""}),
        )
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "removed": 3, "source": "plugin:y", "affected_roles": CHARACTERS, "failed_roles": []})
        )
    );
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": [], "Mio": [], "Aoi": []})
    );
}

#[actix_web::test]
async fn clear_matches_the_source_exactly() {
    let app = spawn_app(&["Lanlan"]).await;
    register(&app, "a", "plugin:x", json!(null), &["Lanlan"]).await;
    register(&app, "b", "plugin:xy", json!(null), &["Lanlan"]).await;
    register(&app, "c", "Plugin:x", json!(null), &["Lanlan"]).await;
    let (status, answer) = app
        .post("/api/tools/clear", &json!({"source": "plugin:x"}))
        .await;
    assert_eq!((status, answer["removed"].clone()), (200, json!(1)));
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": ["b", "c"]}));
}

#[actix_web::test]
async fn list_selects_one_role_or_every_role() {
    let app = spawn_app(&CHARACTERS).await;
    register(&app, "g", "s", json!(null), &CHARACTERS).await;
    register(&app, "m", "s", json!("Mio"), &["Mio"]).await;
    let all = json!({"Lanlan": ["g"], "Mio": ["g", "m"], "Aoi": ["g"]});
    assert_eq!(app.tool_names(None).await, all);
    assert_eq!(app.tool_names(Some("")).await, all);
    assert_eq!(
        app.tool_names(Some("Mio")).await,
        json!({"Mio": ["g", "m"]})
    );
    assert_eq!(app.tool_names(Some("Aoi")).await, json!({"Aoi": ["g"]}));
}

#[actix_web::test]
async fn role_names_beyond_ascii_work_on_every_route() {
    let roles = ["藍", "Ai Chan"];
    let app = spawn_app(&roles).await;
    for role in roles {
        let name = format!("tool of {role}").replace(' ', "_");
        register(&app, &name, "s", json!(role), &[role]).await;
        let request = app
            .client
            .get(app.url("/api/tools"))
            .query(&[("role", role)]);
        let (status, listing) = app.send(request.unwrap(), None).await;
        assert_eq!(status, 200, "{listing}");
        assert_eq!(crate::helpers::keys(&listing["tools_by_role"]), [role]);
        assert_eq!(listing["tools_by_role"][role][0]["name"], json!(name));
    }
    let (status, answer) = app
        .post(
            "/api/tools/clear",
            &json!({"source": "s", "role": "Ai Chan"}),
        )
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "removed": 1, "source": "s", "affected_roles": ["Ai Chan"], "failed_roles": []})
        )
    );
    let (status, answer) = app
        .post(
            "/api/tools/unregister",
            &json!({"name": "tool_of_藍", "role": "藍"}),
        )
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "removed": true, "name": "tool_of_藍", "affected_roles": ["藍"], "failed_roles": []})
        )
    );
}

#[actix_web::test]
async fn with_no_characters_a_registration_is_not_ok() {
    let app = spawn_app(&[]).await;
    let (status, answer) = app
        .register(&tool_body("t", "http://127.0.0.1:9000/cb", "s"))
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({
                "ok": false, "registered": "t", "affected_roles": [], "failed_roles": [],
                "error": "no role accepted the registration"
            })
        )
    );
    assert_eq!(
        app.post("/api/tools/unregister", &json!({"name": "t"}))
            .await,
        (
            200,
            json!({"ok": true, "removed": false, "name": "t", "affected_roles": [], "failed_roles": []})
        )
    );
    assert_eq!(
        app.post("/api/tools/clear", &json!({"source": "s"})).await,
        (
            200,
            json!({"ok": true, "removed": 0, "source": "s", "affected_roles": [], "failed_roles": []})
        )
    );
    assert_eq!(
        app.listing(None).await,
        json!({"ok": true, "tools_by_role": {}})
    );
}
