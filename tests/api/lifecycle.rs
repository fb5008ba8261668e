//! The character lifecycle through the router's in-process API: rebuilding a manager gives back
//! every tool that applied to it, a character added later starts without earlier global
//! registrations, and a removed character's registrations are forgotten.

use runtime_tools::{
    AddCharacter, Dialect, ListCharacters, RebuildCharacter, RemoveCharacter, RouterError,
    SessionSettings,
};
use serde_json::json;

use crate::fake_realtime::{AckMode, FakeRealtime, update_tool_names};
use crate::helpers::{TestApp, spawn_app, tool_body};

/// Registers `name` for `role` (`None`: every character) with this description and source.
async fn register(app: &TestApp, name: &str, role: Option<&str>, description: &str, source: &str) {
    let mut body = tool_body(name, &format!("http://127.0.0.1:9000/{name}"), source);
    body["role"] = json!(role);
    body["description"] = json!(description);
    let (status, answer) = app.register(&body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["ok"], true, "{answer}");
}

async fn add(app: &TestApp, name: &str) -> Result<(), RouterError> {
    app.router
        .send(AddCharacter {
            name: name.into(),
            session: None,
            chat: None,
        })
        .await
        .expect("router answers")
}

async fn remove(app: &TestApp, name: &str) -> Result<(), RouterError> {
    app.router
        .send(RemoveCharacter { name: name.into() })
        .await
        .expect("router answers")
}

async fn rebuild(app: &TestApp, name: &str) -> Result<(), RouterError> {
    app.router
        .send(RebuildCharacter {
            name: name.into(),
            session: None,
        })
        .await
        .expect("router answers")
}

async fn characters(app: &TestApp) -> Vec<String> {
    app.router
        .send(ListCharacters)
        .await
        .expect("router answers")
}

/// `(name, description, source)` of each tool listed for `role`.
async fn tools_of(app: &TestApp, role: &str) -> Vec<(String, String, String)> {
    let listing = app.listing(Some(role)).await;
    listing["tools_by_role"][role]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let text = |k: &str| t[k].as_str().unwrap().to_owned();
            (text("name"), text("description"), text("source"))
        })
        .collect()
}

fn tools(expected: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    expected
        .iter()
        .map(|(n, d, s)| ((*n).to_owned(), (*d).to_owned(), (*s).to_owned()))
        .collect()
}

#[actix_web::test]
async fn a_rebuilt_manager_gets_back_every_tool_that_applied_to_it() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    register(&app, "g_kept", None, "global", "plugin:g").await;
    register(&app, "g_removed_for_lanlan", None, "global", "plugin:g").await;
    register(&app, "g_cleared", None, "global", "plugin:gone").await;
    register(&app, "own", Some("Lanlan"), "Lanlan's", "plugin:own").await;
    register(&app, "shared", None, "global first", "plugin:g").await;
    register(
        &app,
        "shared",
        Some("Lanlan"),
        "Lanlan's last",
        "plugin:own",
    )
    .await;
    register(&app, "mio_then_global", Some("Mio"), "Mio's", "plugin:own").await;
    register(&app, "mio_then_global", None, "global last", "plugin:g").await;
    let (status, _) = app
        .post(
            "/api/tools/unregister",
            &json!({"name": "g_removed_for_lanlan", "role": "Lanlan"}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = app
        .post(
            "/api/tools/clear",
            &json!({"source": "plugin:gone", "role": "Lanlan"}),
        )
        .await;
    assert_eq!(status, 200);

    let lanlan = tools(&[
        ("g_kept", "global", "plugin:g"),
        ("own", "Lanlan's", "plugin:own"),
        ("shared", "Lanlan's last", "plugin:own"),
        ("mio_then_global", "global last", "plugin:g"),
    ]);
    let mio = tools(&[
        ("g_kept", "global", "plugin:g"),
        ("g_removed_for_lanlan", "global", "plugin:g"),
        ("g_cleared", "global", "plugin:gone"),
        ("shared", "global first", "plugin:g"),
        ("mio_then_global", "global last", "plugin:g"),
    ]);
    assert_eq!(tools_of(&app, "Lanlan").await, lanlan);
    assert_eq!(tools_of(&app, "Mio").await, mio);
    let before = app.listing(None).await;

    assert_eq!(rebuild(&app, "Lanlan").await, Ok(()));
    assert_eq!(tools_of(&app, "Lanlan").await, lanlan);
    assert_eq!(app.listing(None).await, before);
    // Twice in a row, and the other character too.
    assert_eq!(rebuild(&app, "Lanlan").await, Ok(()));
    assert_eq!(rebuild(&app, "Mio").await, Ok(()));
    assert_eq!(app.listing(None).await, before);
    assert_eq!(characters(&app).await, ["Lanlan", "Mio"]);

    // The rebuilt manager takes further changes like any other.
    register(&app, "after", None, "after rebuild", "plugin:g").await;
    let (status, answer) = app
        .post(
            "/api/tools/clear",
            &json!({"source": "plugin:own", "role": "Lanlan"}),
        )
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "removed": 2, "source": "plugin:own", "affected_roles": ["Lanlan"], "failed_roles": []})
        )
    );
    assert_eq!(
        tools_of(&app, "Lanlan").await,
        tools(&[
            ("g_kept", "global", "plugin:g"),
            ("mio_then_global", "global last", "plugin:g"),
            ("after", "after rebuild", "plugin:g"),
        ])
    );
}

/// Rebuilds `name` with a live session on `fake` and returns the tool names of the first update
/// the new manager's session sends: exactly what that manager holds.
async fn rebuild_with_session(app: &TestApp, name: &str, fake: &FakeRealtime) -> Vec<String> {
    let before = fake.connections();
    app.router
        .send(RebuildCharacter {
            name: name.into(),
            session: Some(SessionSettings::new(&fake.url, Dialect::Openai)),
        })
        .await
        .expect("router answers")
        .expect("rebuilt");
    fake.wait_connections(before + 1).await;
    // The first update of the new connection: the session sends it right after connecting.
    let update = fake
        .wait_for("the rebuilt session's first update", |events| {
            events
                .iter()
                .filter(|e| e["type"] == "session.update")
                .nth(before)
                .cloned()
        })
        .await;
    update_tool_names(&update)
}

#[actix_web::test]
async fn a_rebuilt_manager_pushes_every_tool_that_applied_to_it_to_its_new_session() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    register(&app, "g_kept", None, "global", "plugin:g").await;
    register(&app, "g_removed_for_lanlan", None, "global", "plugin:g").await;
    register(&app, "g_cleared", None, "global", "plugin:gone").await;
    register(&app, "own", Some("Lanlan"), "Lanlan's", "plugin:own").await;
    register(&app, "mio_only", Some("Mio"), "Mio's", "plugin:own").await;
    register(&app, "shared", None, "global first", "plugin:g").await;
    let (status, _) = app
        .post(
            "/api/tools/unregister",
            &json!({"name": "g_removed_for_lanlan", "role": "Lanlan"}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = app
        .post("/api/tools/clear", &json!({"source": "plugin:gone"}))
        .await;
    assert_eq!(status, 200);

    // Lanlan had no session; rebuilt with one, its manager pushes what it really holds.
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    assert_eq!(
        rebuild_with_session(&app, "Lanlan", &fake).await,
        ["g_kept", "own", "shared"]
    );
    // Rebuilt again (its session closed and a new one opened), it still holds them.
    assert_eq!(
        rebuild_with_session(&app, "Lanlan", &fake).await,
        ["g_kept", "own", "shared"]
    );
    // A change after the rebuild reaches the new session.
    register(&app, "after", Some("Lanlan"), "after rebuild", "plugin:g").await;
    fake.update_with_tools(&["g_kept", "own", "shared", "after"])
        .await;
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["g_kept", "own", "shared", "after"],
               "Mio": ["g_kept", "g_removed_for_lanlan", "mio_only", "shared"]})
    );
}

#[actix_web::test]
async fn a_character_added_later_starts_without_earlier_global_registrations() {
    let app = spawn_app(&["Lanlan"]).await;
    register(&app, "early", None, "before Mio", "plugin:g").await;
    assert_eq!(add(&app, "Mio").await, Ok(()));
    assert_eq!(characters(&app).await, ["Lanlan", "Mio"]);
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["early"], "Mio": []})
    );
    // Later global registrations reach it, scoped ones too.
    let (status, answer) = app
        .register(&tool_body("late", "http://localhost/late", "plugin:g"))
        .await;
    assert_eq!(
        (status, answer["affected_roles"].clone()),
        (200, json!(["Lanlan", "Mio"]))
    );
    register(&app, "mine", Some("Mio"), "Mio's", "plugin:m").await;
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["early", "late"], "Mio": ["late", "mine"]})
    );
    // A rebuild of the new character does not bring back what never applied to it.
    assert_eq!(rebuild(&app, "Mio").await, Ok(()));
    assert_eq!(
        app.tool_names(Some("Mio")).await,
        json!({"Mio": ["late", "mine"]})
    );
    // Adding an existing name is refused.
    assert_eq!(
        add(&app, "Mio").await,
        Err(RouterError::DuplicateCharacter("Mio".into()))
    );
    assert_eq!(characters(&app).await, ["Lanlan", "Mio"]);
}

#[actix_web::test]
async fn a_removed_character_is_forgotten_and_a_new_one_of_that_name_starts_clean() {
    let app = spawn_app(&["Lanlan", "Mio", "Aoi"]).await;
    register(&app, "global", None, "for all", "plugin:g").await;
    register(&app, "mio_only", Some("Mio"), "Mio's", "plugin:m").await;
    assert_eq!(remove(&app, "Mio").await, Ok(()));
    assert_eq!(characters(&app).await, ["Lanlan", "Aoi"]);

    // Gone from every route.
    let gone = (404, json!({"ok": false, "detail": "unknown role: Mio"}));
    assert_eq!(app.get("/api/tools?role=Mio").await, gone);
    let mut body = tool_body("x", "http://localhost/x", "s");
    body["role"] = json!("Mio");
    assert_eq!(app.register(&body).await, gone);
    assert_eq!(
        app.post(
            "/api/tools/unregister",
            &json!({"name": "mio_only", "role": "Mio"})
        )
        .await,
        gone
    );
    assert_eq!(
        app.post(
            "/api/tools/clear",
            &json!({"source": "plugin:m", "role": "Mio"})
        )
        .await,
        gone
    );
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["global"], "Aoi": ["global"]})
    );
    // Global changes no longer count it.
    let (_, answer) = app
        .register(&tool_body("after", "http://localhost/after", "plugin:g"))
        .await;
    assert_eq!(answer["affected_roles"], json!(["Lanlan", "Aoi"]));

    // A new character of the same name starts clean, last in order.
    assert_eq!(add(&app, "Mio").await, Ok(()));
    assert_eq!(characters(&app).await, ["Lanlan", "Aoi", "Mio"]);
    let listing = app.listing(None).await;
    assert_eq!(
        crate::helpers::keys(&listing["tools_by_role"]),
        ["Lanlan", "Aoi", "Mio"]
    );
    assert_eq!(listing["tools_by_role"]["Mio"], json!([]));
    // Its rebuild does not resurrect the old character's tools.
    assert_eq!(rebuild(&app, "Mio").await, Ok(()));
    assert_eq!(app.tool_names(Some("Mio")).await, json!({"Mio": []}));
    // And clearing the old scoped source finds nothing of it.
    let (status, answer) = app
        .post("/api/tools/clear", &json!({"source": "plugin:m"}))
        .await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "removed": 0, "source": "plugin:m", "affected_roles": [], "failed_roles": []})
        )
    );
}

#[actix_web::test]
async fn lifecycle_messages_for_an_unknown_character_are_refused() {
    let app = spawn_app(&["Lanlan"]).await;
    assert_eq!(
        remove(&app, "Nobody").await,
        Err(RouterError::UnknownRole("Nobody".into()))
    );
    assert_eq!(
        rebuild(&app, "Nobody").await,
        Err(RouterError::UnknownRole("Nobody".into()))
    );
    assert_eq!(remove(&app, "Lanlan").await, Ok(()));
    assert_eq!(
        remove(&app, "Lanlan").await,
        Err(RouterError::UnknownRole("Lanlan".into()))
    );
    assert_eq!(characters(&app).await, Vec::<String>::new());
    assert_eq!(
        app.listing(None).await,
        json!({"ok": true, "tools_by_role": {}})
    );
}
