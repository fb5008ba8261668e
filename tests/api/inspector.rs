//! The inspector page at `GET /`: how it is served (plain HTTP), and what it shows and does in a
//! real headless Chromium (WebDriver): characters and tools, live updates from the event stream,
//! the "try it" forms against real callbacks and a real plugin process, auto-removal in the feed,
//! an app's relay coming and going in its character's session, a restarted server, layout,
//! colours and the keyboard. Every step waits on the page's DOM with
//! a deadline.

use awc::ws;
use fantoccini::key::Key;
use futures_util::SinkExt;
use indexmap::IndexMap;
use runtime_tools::{
    Dialect, McpServerSettings, McpTransport, SessionMode, SessionSettings, Settings,
};
use serde_json::{Value, json};

use crate::browser::Browser;
use crate::callback_server::{CallbackServer, ClosedPort, Reply, register, tool_with_timeout};
use crate::chat::{chat_server, register_weather};
use crate::examples::WeatherPlugin;
use crate::fake_chat::{Answer, FakeChat, calls_completion, completion};
use crate::fake_gemini::{FakeGemini, SetupMode};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::helpers::{TestApp, raw_head, settings, spawn_app, spawn_app_with, tool_body};
use crate::local_tools::register_dice;
use crate::mcp_plugins::start_plugin;

/// The page's files and their content types.
const ASSETS: [(&str, &str); 4] = [
    ("/", "text/html; charset=utf-8"),
    ("/inspector.css", "text/css; charset=utf-8"),
    ("/inspector.js", "text/javascript; charset=utf-8"),
    ("/schema-form.js", "text/javascript; charset=utf-8"),
];

const POLICY: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; \
                      base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

#[actix_web::test]
async fn the_page_and_its_assets_are_served_with_their_types_and_a_strict_policy() {
    let app = spawn_app(&["Lanlan"]).await;
    let host = app.host();
    let mut bodies = Vec::new();
    for (path, content_type) in ASSETS {
        let response = app.raw(raw_head("GET", path, &[("Host", &host)])).await;
        assert_eq!(response.status, 200, "{path}");
        assert_eq!(
            response.header("content-type"),
            Some(content_type),
            "{path}"
        );
        assert_eq!(response.header("cache-control"), Some("no-cache"), "{path}");
        assert_eq!(
            response.header("content-security-policy"),
            Some(POLICY),
            "{path}"
        );
        assert_eq!(
            response.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(
            response.header("referrer-policy"),
            Some("no-referrer"),
            "{path}"
        );
        bodies.push(String::from_utf8(response.body).expect("UTF-8"));
    }
    let html = &bodies[0];
    // Everything the page loads is one of the files above; nothing inline, nothing elsewhere.
    assert!(html.contains(r#"<link rel="stylesheet" href="/inspector.css">"#));
    assert!(html.contains(r#"<script type="module" src="/inspector.js"></script>"#));
    assert_eq!(html.matches("<script").count(), 1, "{html}");
    assert!(
        !html.contains("<style") && !html.contains(" style="),
        "{html}"
    );
    assert!(bodies[2].contains(r#"from "./schema-form.js";"#));
    for (body, (path, _)) in bodies.iter().zip(ASSETS) {
        assert!(
            !body.contains("http:") && !body.contains("https:") && !body.contains("innerHTML"),
            "{path} names another origin or writes HTML"
        );
    }
}

#[actix_web::test]
async fn the_page_is_behind_the_same_guard_as_the_api() {
    let app = spawn_app(&["Lanlan"]).await;
    let (status, body) = app.get_with_host("/", "evil.example").await;
    assert_eq!(status, 403);
    assert_eq!(
        body,
        json!({"ok": false, "detail": "Host header \"evil.example\" is not a loopback name or address"})
    );
    let request = app
        .client
        .get(app.url("/inspector.js"))
        .insert_header(("origin", "https://evil.example"));
    let (status, body) = app.send(request, None).await;
    assert_eq!(status, 403);
    assert_eq!(
        body,
        json!({"ok": false, "detail": "Origin \"https://evil.example\" is not a loopback page: browsers may call this API only from http://localhost or http://127.0.0.1 pages"})
    );
    let (status, body) = app.post("/", &json!({})).await;
    assert_eq!(status, 405);
    assert_eq!(body, json!({"ok": false, "detail": "Method Not Allowed"}));
    let (status, body) = app.get("/index.html").await;
    assert_eq!(status, 404);
    assert_eq!(body, json!({"ok": false, "detail": "Not Found"}));
}

// ---- In the browser ---------------------------------------------------------------------------

/// The CSS selector of a tool's card in a character's section.
fn card(role: &str, tool: &str) -> String {
    format!("section.character[data-role=\"{role}\"] li.tool[data-tool=\"{tool}\"]")
}

/// The XPath of a feed line of this kind that contains `text`.
fn feed_line(kind: &str, text: &str) -> String {
    format!("//ol[@id='feed']/li[@data-kind='{kind}'][contains(., '{text}')]")
}

/// A tool with one field of each kind the form generator knows.
fn trip_tool(callback_url: &str) -> Value {
    json!({
        "name": "plan_trip",
        "description": "Plan a trip.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "where to"},
            "days": {"type": "integer", "minimum": 1},
            "budget": {"type": "number"},
            "units": {"enum": ["metric", "imperial"]},
            "detailed": {"type": "boolean"},
            "stops": {"type": "array", "items": {"type": "string"}},
            "options": {"type": "object"}
        }, "required": ["city", "days"]},
        "callback_url": callback_url,
        "role": "Lanlan",
        "source": "manual",
        "timeout_seconds": 12
    })
}

/// Opens a tool's "try it" form.
async fn open_try_it(browser: &Browser, card: &str) {
    browser
        .wait_css(&format!("{card} details.try > summary"))
        .await
        .click()
        .await
        .expect("summary clicked");
}

/// Types into a field of a tool's form.
async fn fill(browser: &Browser, card: &str, field: &str, text: &str) {
    let input = browser
        .wait_css(&format!("{card} [name=\"{field}\"]"))
        .await;
    input.send_keys(text).await.expect("typed");
}

/// Clicks a tool's call button and waits for a result with a call id other than `previous`;
/// returns the result's text and its call id.
async fn call(browser: &Browser, card: &str, previous: Option<&str>) -> (String, String) {
    browser
        .wait_css(&format!("{card} button[type=submit]"))
        .await
        .click()
        .await
        .expect("call clicked");
    let selector = match previous {
        Some(id) => format!("{card} .result[data-call-id]:not([data-call-id=\"{id}\"])"),
        None => format!("{card} .result[data-call-id]"),
    };
    let result = browser.wait_css(&selector).await;
    let id = result
        .attr("data-call-id")
        .await
        .expect("attribute read")
        .expect("a call id");
    (result.text().await.expect("result text"), id)
}

/// The text of a tool's output, as shown.
async fn shown_output(browser: &Browser, card: &str) -> String {
    browser
        .wait_css(&format!("{card} .result pre.output"))
        .await
        .text()
        .await
        .expect("output text")
}

#[actix_web::test]
async fn the_page_shows_characters_tools_calls_and_removals_as_they_happen() {
    let test = "the_page_shows_characters_tools_calls_and_removals_as_they_happen";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut settings = settings(&["Lanlan", "Mio"]);
    settings.characters[1].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    let app = spawn_app_with(settings).await;
    // A real plugin process: the example weather plugin, registering for every character.
    let mut plugin = WeatherPlugin::start(&app.base);
    let weather_url = plugin
        .expect_line("callback listening on ")
        .await
        .trim_start_matches("callback listening on ")
        .to_owned();
    plugin.expect_line("registered ").await;

    browser.open(&app.url("/")).await;
    let weather = card("Lanlan", "get_weather");
    let text = browser.wait_css(&weather).await.text().await.unwrap();
    for shown in [
        "get_weather",
        "Get the current weather for a city.",
        "plugin:weather",
        weather_url.as_str(),
        "10 s",
        "Parameters schema",
        "Try it",
    ] {
        assert!(text.contains(shown), "{shown:?} not in {text:?}");
    }
    // The parameters schema, on demand.
    browser
        .wait_css(&format!("{weather} details.schema > summary"))
        .await
        .click()
        .await
        .expect("summary clicked");
    let schema = browser
        .wait_css(&format!("{weather} details.schema[open] pre"))
        .await;
    assert_eq!(
        schema.text().await.unwrap(),
        serde_json::to_string_pretty(&json!({"type": "object",
            "properties": {"location": {"type": "string", "description": "a city name"}},
            "required": ["location"]}))
        .unwrap()
    );
    browser.wait_css(&card("Mio", "get_weather")).await;
    // Lanlan has no session; Mio's is connected and acknowledged the plugin's tool.
    browser
        .wait_css("section[data-role='Lanlan'] .state[data-state='none']")
        .await;
    browser
        .wait_css("section[data-role='Mio'] .state[data-state='connected']")
        .await;
    browser
        .wait_xpath(
            "//section[@data-role='Mio']//dt[.='acknowledged tools']/following-sibling::dd[1][.='1']",
        )
        .await;

    // A tool registered through the API appears without a reload.
    browser
        .eval("window.notReloaded = true; return null;", vec![])
        .await;
    let trip = CallbackServer::with(
        "/plan",
        Reply::output(json!({"itinerary": ["Paris", "Lyon"], "nights": 3, "note": null})),
    );
    register(&app, trip_tool(&trip.url("/plan"))).await;
    let plan = card("Lanlan", "plan_trip");
    browser.wait_css(&plan).await;
    browser
        .wait_xpath(&feed_line(
            "tools.changed",
            "registered plan_trip (manual) for Lanlan",
        ))
        .await;
    assert_eq!(
        browser
            .eval("return window.notReloaded === true;", vec![])
            .await,
        json!(true)
    );
    assert!(
        browser
            .client
            .find_all(fantoccini::Locator::Css(&card("Mio", "plan_trip")))
            .await
            .unwrap()
            .is_empty()
    );

    // Its form: one control per property, of the property's kind.
    open_try_it(&browser, &plan).await;
    for control in [
        "input[name='city'][type='text'][required]",
        "input[name='days'][type='number'][step='1'][min='1'][required]",
        "input[name='budget'][type='number'][step='any']:not([required])",
        "select[name='units']",
        "select[name='detailed']",
        "textarea[name='stops']",
        "textarea[name='options']",
    ] {
        browser.wait_css(&format!("{plan} {control}")).await;
    }
    fill(&browser, &plan, "city", "Paris").await;
    fill(&browser, &plan, "days", "3").await;
    fill(&browser, &plan, "budget", "1234.5").await;
    let units = browser
        .wait_css(&format!("{plan} select[name='units']"))
        .await;
    units.select_by_label("imperial").await.unwrap();
    let detailed = browser
        .wait_css(&format!("{plan} select[name='detailed']"))
        .await;
    detailed.select_by_label("true").await.unwrap();
    fill(&browser, &plan, "stops", r#"["Lyon", "Nice"]"#).await;
    let (result, _) = call(&browser, &plan, None).await;
    assert!(result.starts_with("ok call_"), "{result}");
    assert_eq!(
        shown_output(&browser, &plan).await,
        serde_json::to_string_pretty(
            &json!({"itinerary": ["Paris", "Lyon"], "nights": 3, "note": null})
        )
        .unwrap()
    );
    // The callback got exactly what was typed, each value of its schema's type; the optional
    // field left empty was left out.
    assert_eq!(
        trip.received()[0].json()["arguments"],
        json!({"city": "Paris", "days": 3, "budget": 1234.5, "units": "imperial",
               "detailed": true, "stops": ["Lyon", "Nice"]})
    );
    browser
        .wait_xpath(&feed_line(
            "tool.call",
            "Lanlan · plan_trip · called by invoke",
        ))
        .await;

    // The real plugin answers through its form.
    open_try_it(&browser, &weather).await;
    fill(&browser, &weather, "location", "Shanghai").await;
    let (result, mut last_call) = call(&browser, &weather, None).await;
    assert!(result.starts_with("ok call_"), "{result}");
    assert_eq!(
        shown_output(&browser, &weather).await,
        serde_json::to_string_pretty(
            &json!({"location": "Shanghai", "temperature_c": 28, "conditions": "sunny"})
        )
        .unwrap()
    );

    // The plugin dies: each call now fails to connect, and the third removes its tools, which
    // the feed shows as an automatic removal and the lists drop.
    plugin.signal("KILL");
    plugin.wait_exit().await;
    for _ in 0..2 {
        let (result, id) = call(&browser, &weather, Some(&last_call)).await;
        assert!(
            result.starts_with("error call_")
                && result.contains("could not connect to remote tool callback"),
            "{result}"
        );
        last_call = id;
    }
    // The third call's answer comes after the removal it caused, which takes the card (and
    // the form) off the page.
    browser
        .wait_css(&format!("{weather} button[type=submit]"))
        .await
        .click()
        .await
        .expect("call clicked");
    let removal = browser
        .wait_xpath(&feed_line("tools.changed", "plugin:weather"))
        .await;
    assert_eq!(
        removal.attr("data-flag").await.unwrap().as_deref(),
        Some("auto-removed")
    );
    let removal_text = removal.text().await.unwrap();
    assert!(
        removal_text.ends_with(
            "AUTO-REMOVED tools of plugin:weather from Lanlan, Mio: its callback stopped \
             accepting connections"
        ),
        "{removal_text}"
    );
    browser
        .wait_xpath("//section[@data-role='Lanlan'][not(.//li[@data-tool='get_weather'])]")
        .await;
    browser
        .wait_xpath("//section[@data-role='Mio'][not(.//li[@data-tool='get_weather'])]")
        .await;
    browser.wait_css(&plan).await;
    browser
        .wait_xpath(&feed_line(
            "tool.call",
            "Lanlan · get_weather · called by invoke",
        ))
        .await;
    let failed_call = browser
        .wait_xpath("//ol[@id='feed']/li[@data-kind='tool.call'][@data-flag='error']")
        .await;
    assert!(failed_call.text().await.unwrap().ends_with(" · error"));

    // The removal stands out from every other line of the feed.
    let registered = browser
        .wait_xpath(&feed_line("tools.changed", "registered plan_trip"))
        .await;
    for property in ["border-left-width", "background-color", "font-weight"] {
        assert_ne!(
            removal.css_value(property).await.unwrap(),
            registered.css_value(property).await.unwrap(),
            "{property}"
        );
    }

    // Mio's model calls a slow tool and the person speaks over it: the call is cancelled, and
    // the feed says so, with how long it ran.
    let held = CallbackServer::with("/held", Reply::HoldOpen);
    register(
        &app,
        tool_with_timeout("find_flight", &held.url("/held"), "plugin:travel", 300.0),
    )
    .await;
    fake.update_with_tools(&["find_flight"]).await;
    fake.push_call("r1", "c1", "find_flight").await;
    held.wait_for_requests(1).await;
    fake.push(json!({"type": "input_audio_buffer.speech_started", "audio_start_ms": 900}))
        .await;
    let cancelled = browser
        .wait_xpath(&feed_line(
            "tool.call",
            "Mio · find_flight · called by own connection · cancelled after ",
        ))
        .await;
    assert_eq!(
        cancelled.attr("data-flag").await.unwrap().as_deref(),
        Some("cancelled")
    );
    let text = cancelled.text().await.unwrap();
    assert!(text.ends_with(" ms"), "{text}");
    browser.close().await;
}

#[actix_web::test]
async fn plugin_text_is_shown_as_text_and_odd_schemas_get_the_raw_json_editor() {
    let test = "plugin_text_is_shown_as_text_and_odd_schemas_get_the_raw_json_editor";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let app = spawn_app(&["Lanlan"]).await;
    let callback = CallbackServer::start();
    callback.route("/odd", Reply::output(json!("fine")));
    callback.route("/trip", Reply::output(json!("planned")));
    // Markup in a name, a description and a schema is shown, never run.
    register(
        &app,
        json!({
            "name": "<b>odd</b>",
            "description": "<img src=x onerror=\"window.injected = true\">",
            "parameters": {"oneOf": [
                {"type": "object", "properties": {"mode": {"type": "string"}}},
                {"type": "object", "properties": {"n": {"type": "integer"}}}
            ], "description": "<script>window.injected = true</script>"},
            "callback_url": callback.url("/odd"),
            "source": "external"
        }),
    )
    .await;
    register(&app, trip_tool(&callback.url("/trip"))).await;
    browser.open(&app.url("/")).await;

    let odd = card("Lanlan", "<b>odd</b>");
    let heading = browser.wait_css(&format!("{odd} h4")).await;
    assert_eq!(heading.text().await.unwrap(), "<b>odd</b>");
    let description = browser.wait_css(&format!("{odd} .description")).await;
    assert_eq!(
        description.text().await.unwrap(),
        "<img src=x onerror=\"window.injected = true\">"
    );
    for markup in ["b", "img", "script"] {
        let found = browser
            .client
            .find_all(fantoccini::Locator::Css(&format!("{odd} {markup}")))
            .await
            .unwrap();
        assert!(
            found.is_empty(),
            "a <{markup}> element was made from plugin text"
        );
    }

    // oneOf cannot be laid out as fields: the form is the raw JSON editor, and says why.
    open_try_it(&browser, &odd).await;
    let hint = browser.wait_css(&format!("{odd} .raw .hint")).await;
    assert_eq!(
        hint.text().await.unwrap(),
        "Raw JSON only: the parameters schema uses oneOf."
    );
    assert!(
        browser
            .client
            .find_all(fantoccini::Locator::Css(&format!(
                "{odd} button[aria-pressed]"
            )))
            .await
            .unwrap()
            .is_empty()
    );
    let raw = browser.wait_css(&format!("{odd} .raw textarea")).await;
    raw.clear().await.unwrap();
    raw.send_keys(r#"{"mode": "fast", "n": [1, 2.5]}"#)
        .await
        .unwrap();
    let (result, _) = call(&browser, &odd, None).await;
    assert!(result.starts_with("ok call_"), "{result}");
    assert_eq!(shown_output(&browser, &odd).await, "\"fine\"");
    assert_eq!(
        callback.received()[0].json()["arguments"],
        json!({"mode": "fast", "n": [1, 2.5]})
    );
    assert_eq!(
        browser
            .eval("return window.injected === undefined;", vec![])
            .await,
        json!(true)
    );

    // A JSON field that does not parse is named, focused, and nothing is sent.
    let plan = card("Lanlan", "plan_trip");
    open_try_it(&browser, &plan).await;
    fill(&browser, &plan, "city", "Paris").await;
    fill(&browser, &plan, "days", "2").await;
    fill(&browser, &plan, "stops", "[Lyon").await;
    browser
        .wait_css(&format!("{plan} button[type=submit]"))
        .await
        .click()
        .await
        .unwrap();
    let problem = browser
        .wait_css(&format!(
            "{plan} .result[data-outcome='problem'] .error-text"
        ))
        .await;
    assert!(
        problem
            .text()
            .await
            .unwrap()
            .starts_with("stops is not valid JSON: "),
        "{}",
        problem.text().await.unwrap()
    );
    assert_eq!(
        browser
            .eval("return document.activeElement.name;", vec![])
            .await,
        json!("stops")
    );
    assert_eq!(callback.received().len(), 1);

    // "Edit as JSON" carries the fields over; the JSON is what is sent, even with a required
    // field of the (hidden) form left empty.
    let stops = browser
        .wait_css(&format!("{plan} textarea[name='stops']"))
        .await;
    stops.clear().await.unwrap();
    stops.send_keys(r#"["Lyon"]"#).await.unwrap();
    let city = browser
        .wait_css(&format!("{plan} input[name='city']"))
        .await;
    city.clear().await.unwrap();
    let toggle = browser
        .wait_css(&format!("{plan} button[aria-pressed='false']"))
        .await;
    toggle.click().await.unwrap();
    let raw = browser
        .wait_css(&format!("{plan} .raw:not([hidden]) textarea"))
        .await;
    assert_eq!(
        raw.prop("value").await.unwrap().unwrap(),
        serde_json::to_string_pretty(&json!({"city": "", "days": 2, "stops": ["Lyon"]})).unwrap()
    );
    raw.clear().await.unwrap();
    raw.send_keys(r#"{"city": "Nice", "days": 4}"#)
        .await
        .unwrap();
    let (result, _) = call(&browser, &plan, None).await;
    assert!(result.starts_with("ok call_"), "{result}");
    assert_eq!(
        callback.received()[1].json()["arguments"],
        json!({"city": "Nice", "days": 4})
    );
    // And back: the form shows what the JSON said.
    toggle.click().await.unwrap();
    let days = browser
        .wait_css(&format!(
            "{plan} fieldset:not([disabled]) input[name='days']"
        ))
        .await;
    assert_eq!(days.prop("value").await.unwrap().as_deref(), Some("4"));
    assert_eq!(city.prop("value").await.unwrap().as_deref(), Some("Nice"));
    browser.close().await;
}

#[actix_web::test]
async fn an_apps_relay_shows_in_its_characters_session_while_it_is_connected() {
    let test = "an_apps_relay_shows_in_its_characters_session_while_it_is_connected";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut settings = settings(&["Lanlan", "Mio"]);
    let mut session = SessionSettings::new(&fake.url, Dialect::Openai);
    session.mode = SessionMode::Relay;
    settings.characters[1].session = Some(session);
    let app = spawn_app_with(settings).await;
    browser.open(&app.url("/")).await;
    let mio = "section[data-role='Mio']";
    browser
        .wait_css(&format!("{mio} .session-facts .state[data-state='none']"))
        .await;

    // An app connects through the relay: its connection appears, headed by its kind and state.
    let (_, mut app_socket) = awc::Client::new()
        .ws(format!("ws://{}/v1/realtime?character=Mio", app.addr))
        .connect()
        .await
        .expect("the relay opens");
    let relay = format!("{mio} li.connection[data-kind='relay']");
    browser
        .wait_css(&format!(
            "{relay} .connection-head .state[data-state='connected']"
        ))
        .await;
    browser
        .wait_css(&format!(
            "{mio} .session-facts .state[data-state='connected']"
        ))
        .await;
    let text = browser.wait_css(&relay).await.text().await.unwrap();
    for shown in [
        "relay",
        "connected",
        "upstream",
        fake.url.as_str(),
        "clashes",
    ] {
        assert!(text.contains(shown), "{shown:?} not in {text:?}");
    }
    browser
        .wait_xpath(&feed_line("session.state", "Mio: relay connected"))
        .await;

    // The app hangs up: the feed says the relay closed, and the connection is gone.
    app_socket
        .send(ws::Message::Close(Some(ws::CloseCode::Normal.into())))
        .await
        .expect("close sent");
    browser
        .wait_xpath(&feed_line("session.state", "Mio: relay closed"))
        .await;
    browser
        .wait_css(&format!("{mio} .session-facts .state[data-state='none']"))
        .await;
    assert!(
        browser
            .client
            .find_all(fantoccini::Locator::Css(&relay))
            .await
            .unwrap()
            .is_empty()
    );
    browser.close().await;
}

#[actix_web::test]
async fn a_gemini_live_session_shows_its_handle_and_its_moves() {
    let test = "a_gemini_live_session_shows_its_handle_and_its_moves";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let mut settings = settings(&["Mio"]);
    settings.characters[0].session = Some(SessionSettings::gemini(Some(&fake.url), Some("m")));
    let app = spawn_app_with(settings).await;
    fake.nth_setup(1).await;
    let callback = CallbackServer::with("/cb", Reply::output(json!({})));
    app.register(&tool_body("get_weather", &callback.url("/cb"), "plugin:w"))
        .await;
    fake.nth_setup(2).await;
    browser.open(&app.url("/")).await;
    let facts = browser
        .wait_xpath(
            "//section[@data-role='Mio']//li[@data-kind='client']\
             [contains(., '1 moves to a new connection')]",
        )
        .await;
    let text = facts.text().await.unwrap();
    for shown in ["Gemini Live", "handle", "old", "0 refused"] {
        assert!(text.contains(shown), "{shown:?} not in {text:?}");
    }
    browser.close().await;
}

#[actix_web::test]
async fn a_characters_text_chat_shows_in_its_session_and_its_calls_in_the_feed() {
    let test = "a_characters_text_chat_shows_in_its_session_and_its_calls_in_the_feed";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register_weather(&app, &callback).await;
    browser.open(&app.url("/")).await;
    let chat = "section[data-role='Mio'] .chat";
    browser
        .wait_css(&format!(
            "{chat} .connection-head .state[data-state='ready']"
        ))
        .await;
    let text = browser.wait_css(chat).await.text().await.unwrap();
    for shown in [
        "text chat",
        "upstream",
        upstream.base().as_str(),
        "requests",
    ] {
        assert!(text.contains(shown), "{shown:?} not in {text:?}");
    }

    // A chat request runs a tool: the feed shows the call, and the counters follow.
    upstream.script([
        Answer::Json(
            200,
            calls_completion(
                "c1",
                None,
                &[("call_1", "get_weather", json!({"location": "x"}))],
            ),
        ),
        Answer::Json(200, completion("c2", "Sunny.", (1, 1))),
        Answer::Json(500, json!({"error": {"message": "the model fell over"}})),
    ]);
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "weather?"}]});
    let (status, _) = app.post("/v1/chat/completions", &body).await;
    assert_eq!(status, 200);
    browser
        .wait_xpath(&feed_line(
            "tool.call",
            "Mio · get_weather · called by text chat",
        ))
        .await;
    browser
        .wait_xpath(
            "//section[@data-role='Mio']//div[contains(@class, 'chat')]\
             //dd[preceding-sibling::dt[1][normalize-space()='calls'] and normalize-space()='1']",
        )
        .await;

    // A failed request stands out.
    let (status, _) = app.post("/v1/chat/completions", &body).await;
    assert_eq!(status, 500);
    browser
        .wait_xpath(&feed_line(
            "chat.state",
            "last error: the upstream answered HTTP 500",
        ))
        .await;
    browser
        .wait_css(&format!(
            "{chat} .connection-head .state[data-state='failed']"
        ))
        .await;
    browser.close().await;
}

#[actix_web::test]
async fn a_restarted_server_is_noticed_and_its_state_read_again() {
    let test = "a_restarted_server_is_noticed_and_its_state_read_again";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let first = spawn_app(&["Lanlan"]).await;
    register(
        &first,
        tool_body("before", "http://127.0.0.1:9/cb", "external"),
    )
    .await;
    browser.open(&first.url("/")).await;
    browser.wait_css(&card("Lanlan", "before")).await;
    browser
        .wait_xpath(&feed_line("hello", "connected to the server"))
        .await;

    // The server stops; the page says it lost the stream, and follows the new server on the
    // same address when it comes: registrations were runtime state, so "before" is gone.
    first.handle.stop(false).await;
    browser
        .wait_css("#stream-status[data-state='reconnecting']")
        .await;
    let second = spawn_app_with(Settings {
        bind: first.addr,
        ..settings(&["Lanlan", "Mio"])
    })
    .await;
    register(
        &second,
        tool_body("after", "http://127.0.0.1:9/cb", "external"),
    )
    .await;
    browser
        .wait_xpath(&feed_line("hello", "the server restarted"))
        .await;
    browser.wait_css(&card("Mio", "after")).await;
    browser
        .wait_xpath("//section[@data-role='Lanlan'][.//li[@data-tool='after']][not(.//li[@data-tool='before'])]")
        .await;
    browser.wait_css("#stream-status[data-state='live']").await;
    browser.close().await;
}

/// WCAG relative luminance of a CSS `rgb(...)` / `rgba(...)` colour.
fn luminance(css: &str) -> f64 {
    let inner = css
        .trim_start_matches("rgba(")
        .trim_start_matches("rgb(")
        .trim_end_matches(')');
    let channels: Vec<f64> = inner
        .split(',')
        .take(3)
        .map(|c| {
            c.trim()
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("colour {css}"))
                / 255.0
        })
        .map(|c| {
            if c <= 0.03928 {
                c / 12.92
            } else {
                ((c + 0.055) / 1.055).powf(2.4)
            }
        })
        .collect();
    0.2126 * channels[0] + 0.7152 * channels[1] + 0.0722 * channels[2]
}

fn contrast(a: &str, b: &str) -> f64 {
    let (la, lb) = (luminance(a), luminance(b));
    (la.max(lb) + 0.05) / (la.min(lb) + 0.05)
}

/// Text whose contrast against its background is checked: body text, muted text, links and
/// summaries, badges, error text, the feed's kinds, a flagged line, a primary button.
const TEXTS: [&str; 10] = [
    "h1",
    "dt",
    "li.tool summary",
    "li.tool code",
    ".badge.bad",
    ".error-text",
    ".event .kind",
    ".event[data-flag='error'] .kind",
    "button.primary",
    ".stream-status",
];

/// Each of [`TEXTS`] as `[selector, colour, background]` (the background of the nearest
/// ancestor that has one).
const COLOURS: &str = r#"
const background = (el) => {
  for (; el; el = el.parentElement) {
    const c = getComputedStyle(el).backgroundColor;
    if (c !== "rgba(0, 0, 0, 0)" && c !== "transparent") return c;
  }
  return "rgb(255, 255, 255)";
};
return arguments[0].map((s) => {
  const el = document.querySelector(s);
  return el ? [s, getComputedStyle(el).color, background(el)] : [s, null, null];
});
"#;

/// Asserts every text of [`TEXTS`] is on the page with a contrast of at least 4.5:1 (WCAG AA);
/// returns the page's background colour.
async fn assert_readable(browser: &Browser) -> String {
    let colours = browser.eval(COLOURS, vec![json!(TEXTS)]).await;
    for entry in colours.as_array().unwrap() {
        let [selector, colour, background] = [&entry[0], &entry[1], &entry[2]];
        let (Some(colour), Some(background)) = (colour.as_str(), background.as_str()) else {
            panic!("{selector} is not on the page");
        };
        let ratio = contrast(colour, background);
        assert!(
            ratio >= 4.5,
            "{selector}: {colour} on {background} has a contrast of {ratio:.2}"
        );
    }
    browser
        .eval(
            "return getComputedStyle(document.body).backgroundColor;",
            vec![],
        )
        .await
        .as_str()
        .unwrap()
        .to_owned()
}

/// A page with a tool whose call failed, so every kind of text is on it.
async fn page_with_a_failed_call(browser: &Browser, app: &TestApp, dead: &ClosedPort) {
    register(app, tool_body("lookup", &dead.url("/cb"), "external")).await;
    browser.open(&app.url("/")).await;
    let lookup = card("Lanlan", "lookup");
    open_try_it(browser, &lookup).await;
    let (result, _) = call(browser, &lookup, None).await;
    assert!(result.starts_with("error call_"), "{result}");
    browser
        .wait_css("#feed li[data-kind='tool.call'][data-flag='error']")
        .await;
}

/// The left edges and widths of the two columns, and whether the page scrolls sideways.
const LAYOUT: &str = r#"
const a = document.querySelector(".characters").getBoundingClientRect();
const b = document.querySelector(".feed").getBoundingClientRect();
return {characters: [a.left, a.right, a.top, a.bottom], feed: [b.left, b.right, b.top],
        overflow: document.documentElement.scrollWidth > document.documentElement.clientWidth,
        width: window.innerWidth};
"#;

#[actix_web::test]
async fn two_columns_when_wide_one_when_narrow_and_readable_in_light_and_dark() {
    let test = "two_columns_when_wide_one_when_narrow_and_readable_in_light_and_dark";
    let Some(light) = Browser::start(test, &[]).await else {
        return;
    };
    let app = spawn_app(&["Lanlan"]).await;
    let dead = ClosedPort::new();
    page_with_a_failed_call(&light, &app, &dead).await;
    assert_eq!(
        light
            .eval(
                "return matchMedia('(prefers-color-scheme: dark)').matches;",
                vec![]
            )
            .await,
        json!(false)
    );
    assert_eq!(assert_readable(&light).await, "rgb(255, 255, 255)");

    // 1280x800: the feed is a column beside the characters.
    let wide = light.eval(LAYOUT, vec![]).await;
    assert_eq!(wide["width"], json!(1280), "{wide}");
    assert!(
        wide["feed"][0].as_f64() > wide["characters"][1].as_f64(),
        "{wide}"
    );
    assert_eq!(wide["overflow"], json!(false), "{wide}");
    // A narrow window: one column, the feed below the characters, nothing wider than the window.
    light.set_viewport(400, 800).await;
    let narrow = light.eval(LAYOUT, vec![]).await;
    // (A browser window has a minimum width, 500 for headless Chromium.)
    assert!(narrow["width"].as_f64() <= Some(500.0), "{narrow}");
    assert_eq!(narrow["characters"][0], narrow["feed"][0], "{narrow}");
    assert!(
        narrow["feed"][2].as_f64() >= narrow["characters"][3].as_f64(),
        "{narrow}"
    );
    assert_eq!(narrow["overflow"], json!(false), "{narrow}");
    light.close().await;

    // The same page with the system set to dark.
    let Some(dark) = Browser::start(test, &["--force-dark-mode"]).await else {
        return;
    };
    page_with_a_failed_call(&dark, &app, &dead).await;
    assert_eq!(
        dark.eval(
            "return matchMedia('(prefers-color-scheme: dark)').matches;",
            vec![]
        )
        .await,
        json!(true)
    );
    assert_eq!(assert_readable(&dark).await, "rgb(13, 17, 23)");
    dark.close().await;
}

#[actix_web::test]
async fn a_tool_can_be_tried_from_the_keyboard_alone_with_the_focus_in_view() {
    let test = "a_tool_can_be_tried_from_the_keyboard_alone_with_the_focus_in_view";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let app = spawn_app(&["Lanlan"]).await;
    let callback = CallbackServer::with("/cb", Reply::output(json!({"temperature_c": 21})));
    register(
        &app,
        tool_body("get_weather", &callback.url("/cb"), "external"),
    )
    .await;
    browser.open(&app.url("/")).await;
    let weather = card("Lanlan", "get_weather");
    browser.wait_css(&weather).await;

    // Tab from the top of the page to the tool's "Try it", counting the stops on the way.
    let focused = "const a = document.activeElement; \
                   return [a.tagName, \
                           (a.getAttribute('aria-label') || a.textContent).trim().slice(0, 40), \
                           getComputedStyle(a).outlineStyle];";
    let mut path = Vec::new();
    loop {
        press(&browser, &Key::Tab.to_string()).await;
        let now = browser.eval(focused, vec![]).await;
        path.push(now[1].as_str().unwrap_or_default().to_owned());
        // Every stop is a real control, and shows where the focus is.
        assert!(
            ["A", "BUTTON", "SUMMARY", "INPUT", "SELECT", "TEXTAREA"]
                .contains(&now[0].as_str().unwrap()),
            "{now}"
        );
        assert_eq!(now[2], json!("solid"), "no focus ring on {now}");
        if now[0] == json!("SUMMARY") && now[1] == json!("Try it") {
            break;
        }
        assert!(path.len() < 10, "never reached \"Try it\": {path:?}");
    }
    assert_eq!(
        path,
        [
            "Skip to the live events",
            "Search Lanlan's tools",
            "Search",
            "Parameters schema",
            "Try it"
        ]
    );
    // Enter opens it; Tab passes "Edit as JSON" and reaches the field; Enter there sends it.
    press(&browser, &Key::Enter.to_string()).await;
    press(&browser, &Key::Tab.to_string()).await;
    assert_eq!(
        browser
            .eval("return document.activeElement.textContent;", vec![])
            .await,
        json!("Edit as JSON")
    );
    press(&browser, &Key::Tab.to_string()).await;
    assert_eq!(
        browser
            .eval("return document.activeElement.name;", vec![])
            .await,
        json!("city")
    );
    press(&browser, &format!("Oslo{}", Key::Enter)).await;
    let (result, _) = call_result(&browser, &weather).await;
    assert!(result.starts_with("ok call_"), "{result}");
    assert_eq!(
        callback.received()[0].json()["arguments"],
        json!({"city": "Oslo"})
    );
    browser.close().await;
}

/// Types `keys` into whatever has the focus.
async fn press(browser: &Browser, keys: &str) {
    let focused = browser
        .client
        .active_element()
        .await
        .expect("a focused element");
    focused.send_keys(keys).await.expect("keys sent");
}

/// Waits for the first result of a tool's form (sent some other way than its button).
async fn call_result(browser: &Browser, card: &str) -> (String, String) {
    let result = browser
        .wait_css(&format!("{card} .result[data-call-id]"))
        .await;
    let id = result.attr("data-call-id").await.unwrap().unwrap();
    (result.text().await.unwrap(), id)
}

/// Writes `docs/inspector.png`: the page at 1280x800 in light mode with a few tools, a call's
/// result, a call waiting for the person's approval and the feed. Run on purpose:
/// `cargo test --release --test api inspector::screenshot -- --ignored`.
#[actix_web::test]
#[ignore = "writes docs/inspector.png; run it to refresh the README's screenshot"]
async fn screenshot() {
    let Some(browser) = Browser::start("screenshot", &[]).await else {
        return;
    };
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut settings = settings(&["Lanlan", "Mio"]);
    settings.characters[1].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    let app = spawn_app_with(settings).await;
    // The address the server prints: the page decides with the operator token.
    browser
        .open(&format!("{}#token={}", app.url("/"), app.operator_token))
        .await;
    let mut plugin = WeatherPlugin::start(&app.base);
    plugin.expect_line("registered ").await;
    let trip = CallbackServer::with("/plan", Reply::output(json!({"nights": 3})));
    register(&app, trip_tool(&trip.url("/plan"))).await;
    let weather = card("Lanlan", "get_weather");
    open_try_it(&browser, &weather).await;
    fill(&browser, &weather, "location", "Shanghai").await;
    call(&browser, &weather, None).await;
    browser
        .wait_css("section[data-role='Mio'] .state[data-state='connected']")
        .await;
    browser.wait_css(&card("Lanlan", "plan_trip")).await;
    // A few calls, so the tool shows its latency and error rate.
    for days in 1..=5 {
        crate::callback_server::invoke_ok(
            &app,
            "plan_trip",
            json!({"city": "Kyoto", "days": days}),
        )
        .await;
    }
    browser
        .wait_css(&format!(
            "{} .latency[data-calls=\"5\"]",
            card("Lanlan", "plan_trip")
        ))
        .await;
    // Mio's model calls a tool that needs the person's approval: it waits on the page.
    let messages = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    let mut send = tool_body("send_message", &messages.url("/send"), "plugin:messages");
    send["approval"] = json!("always");
    send["approval_timeout_seconds"] = json!(600);
    send["description"] = json!("Send a message to one of the person's contacts.");
    send["role"] = json!("Mio");
    send["parameters"] = json!({"type": "object", "properties": {
        "to": {"type": "string"}, "text": {"type": "string"}}, "required": ["to", "text"]});
    register(&app, send).await;
    browser.wait_css(&card("Mio", "send_message")).await;
    fake.push(crate::sessions::call_event(
        "r1",
        "c1",
        "send_message",
        r#"{"to": "Ann", "text": "Running ten minutes late"}"#,
    ))
    .await;
    browser.wait_css("#approvals li.approval").await;
    // The focus ring is not part of the picture.
    browser
        .eval(
            "document.activeElement.blur(); window.scrollTo(0, 0); return null;",
            vec![],
        )
        .await;
    let png = browser.client.screenshot().await.expect("screenshot");
    let path = crate::python::repo_file("docs/inspector.png");
    std::fs::write(&path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    browser.close().await;
}

#[actix_web::test]
async fn each_tool_says_where_it_runs_and_each_kind_of_field_reads_its_type() {
    let test = "each_tool_says_where_it_runs_and_each_kind_of_field_reads_its_type";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let time = crate::python::venv_python().await;
    let time = time.with_file_name("mcp-server-time");
    let app = spawn_app_with(Settings {
        mcp_servers: vec![McpServerSettings {
            behavior: Default::default(),
            approval: Default::default(),
            limits: Default::default(),
            name: "time".to_owned(),
            transport: McpTransport::Stdio {
                command: time.to_string_lossy().into_owned(),
                args: vec!["--local-timezone".to_owned(), "UTC".to_owned()],
                env: IndexMap::new(),
            },
            roles: None,
            timeout: std::time::Duration::from_secs(30),
        }],
        ..settings(&["Lanlan"])
    })
    .await;
    register_dice(&app, "roll", None).await;
    let callback = CallbackServer::with("/flags", Reply::output(json!("set")));
    register(
        &app,
        json!({
            "name": "flags",
            "parameters": {"type": "object", "properties": {
                "verbose": {"type": "boolean"},
                "level": {"type": "integer", "default": 2, "maximum": 9},
                "kind": {"const": "x"},
                "note": {"type": ["string", "null"]}
            }, "required": ["verbose", "kind"]},
            "callback_url": callback.url("/flags"),
            "source": "plugin:flags",
            "timeout_seconds": 0.5
        }),
    )
    .await;
    register(
        &app,
        json!({"name": "listy", "parameters": {"type": "object", "allOf": [{"required": ["a"]}]},
               "callback_url": callback.url("/listy"), "source": "external"}),
    )
    .await;
    browser.open(&app.url("/")).await;

    let runs = |tool: &str| {
        format!(
            "{}//dl[contains(@class,'meta')]/div[2]",
            xpath_card("Lanlan", tool)
        )
    };
    let mcp = browser.wait_xpath(&runs("get_current_time")).await;
    assert_eq!(
        mcp.text().await.unwrap().replace('\n', " "),
        "runs on MCP server time"
    );
    let local = browser.wait_xpath(&runs("roll")).await;
    assert_eq!(
        local.text().await.unwrap().replace('\n', " "),
        "runs in-process"
    );
    let remote = browser.wait_xpath(&runs("flags")).await;
    assert_eq!(
        remote.text().await.unwrap().replace('\n', " "),
        format!("callback {}", callback.url("/flags"))
    );
    let timeout = browser
        .wait_xpath(&format!(
            "{}//dl[contains(@class,'meta')]/div[3]",
            xpath_card("Lanlan", "flags")
        ))
        .await;
    assert_eq!(
        timeout.text().await.unwrap().replace('\n', " "),
        "timeout 0.5 s"
    );

    // A required boolean is a checkbox; a default fills its field; a const is a choice of one;
    // a nullable string is a text field.
    let flags = card("Lanlan", "flags");
    open_try_it(&browser, &flags).await;
    let verbose = browser
        .wait_css(&format!("{flags} input[name='verbose'][type='checkbox']"))
        .await;
    let level = browser
        .wait_css(&format!("{flags} input[name='level'][max='9']"))
        .await;
    assert_eq!(level.prop("value").await.unwrap().as_deref(), Some("2"));
    browser
        .wait_css(&format!("{flags} select[name='kind'][required]"))
        .await;
    browser
        .wait_css(&format!("{flags} input[name='note'][type='text']"))
        .await;
    verbose.click().await.unwrap();
    let (result, _) = call(&browser, &flags, None).await;
    assert!(result.starts_with("ok call_"), "{result}");
    assert_eq!(
        callback.received()[0].json()["arguments"],
        json!({"verbose": true, "level": 2, "kind": "x"})
    );

    // The in-process tool runs from its form too.
    let roll = card("Lanlan", "roll");
    open_try_it(&browser, &roll).await;
    fill(&browser, &roll, "sides", "20").await;
    call(&browser, &roll, None).await;
    assert!(
        shown_output(&browser, &roll)
            .await
            .starts_with("{\n  \"rolled\": 20,"),
    );

    // A schema that is more than a list of fields gets the raw JSON editor, saying why.
    let listy = card("Lanlan", "listy");
    open_try_it(&browser, &listy).await;
    let hint = browser.wait_css(&format!("{listy} .raw .hint")).await;
    assert_eq!(
        hint.text().await.unwrap(),
        "Raw JSON only: the parameters schema uses allOf."
    );
    browser.close().await;
}

#[actix_web::test]
async fn mcp_servers_show_with_their_state_and_a_dead_plugins_removal_is_flagged() {
    let test = "mcp_servers_show_with_their_state_and_a_dead_plugins_removal_is_flagged";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let app = spawn_app(&["Lanlan"]).await;
    browser.open(&app.url("/")).await;
    browser.wait_css("#mcp-empty:not([hidden])").await;

    // A plugin registers its MCP server: the server shows, with its state and tools, and its
    // tools say where they run.
    let plugin = start_plugin(&app, "weather", &["--source", "plugin:weather"]).await;
    let server = "li.mcp-server[data-name='weather'][data-kind='runtime']";
    browser
        .wait_css(&format!(
            "{server} .connection-head .state[data-state='connected']"
        ))
        .await;
    let text = browser.wait_css(server).await.text().await.unwrap();
    for shown in [
        "weather",
        "registered by a plugin",
        plugin.url().as_str(),
        "plugin:weather",
        "get_weather, add_tool",
        "registered at",
    ] {
        assert!(text.contains(shown), "{shown:?} not in {text:?}");
    }
    assert!(
        browser
            .wait_css("#mcp-empty")
            .await
            .attr("hidden")
            .await
            .unwrap()
            .is_some()
    );
    let runs = format!(
        "{}//dl[contains(@class,'meta')]/div[2]",
        xpath_card("Lanlan", "get_weather")
    );
    browser
        .wait_xpath(&format!("{runs}[contains(., 'MCP server weather')]"))
        .await;
    browser
        .wait_xpath(&feed_line(
            "mcp.state",
            "MCP server weather (registered by a plugin): connected",
        ))
        .await;

    // Killed: a failed call marks it unreachable; the third removes it, flagged in the feed.
    // Its exit is waited for: a call that still found its socket accepting would count as
    // reaching it.
    plugin.child.signal("KILL");
    plugin.child.wait_exit().await;
    for _ in 0..3 {
        let (status, _) = app
            .post(
                "/api/tools/invoke",
                &json!({"name": "get_weather", "arguments": {"city": "Kyoto"}}),
            )
            .await;
        assert_eq!(status, 200);
    }
    browser
        .wait_xpath(
            "//ol[@id='feed']/li[@data-kind='mcp.state'][@data-flag='auto-removed']\
             [contains(., 'MCP server weather (registered by a plugin) removed: auto_removed')]",
        )
        .await;
    browser
        .wait_xpath(&feed_line(
            "mcp.state",
            "MCP server weather (registered by a plugin): unreachable",
        ))
        .await;
    browser.wait_css("#mcp-empty:not([hidden])").await;
    browser
        .wait_css("section[data-role='Lanlan'] ul.tools:empty")
        .await;
    browser.close().await;
}

/// The XPath of a tool's card in a character's section.
fn xpath_card(role: &str, tool: &str) -> String {
    format!("//section[@data-role='{role}']//li[@data-tool='{tool}']")
}

#[actix_web::test]
async fn a_non_blocking_tool_its_running_call_its_progress_and_its_result_show() {
    let test = "a_non_blocking_tool_its_running_call_its_progress_and_its_result_show";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app =
        crate::helpers::app_with_session(&fake.url, &[], runtime_tools::Dialect::Openai, |_| {})
            .await;
    let slow = CallbackServer::with(
        "/search",
        Reply::after_gate(Reply::output(json!({"flights": 3}))),
    );
    let mut search = tool_with_timeout("search", &slow.url("/search"), "plugin:travel", 300.0);
    search["behavior"] = json!("non_blocking");
    register(&app, search).await;
    fake.push(crate::sessions::call_event("r1", "c1", "search", "{}"))
        .await;
    slow.wait_for_requests(1).await;

    browser.open(&app.url("/")).await;
    let card = browser.wait_css(&card("Mio", "search")).await;
    let text = card.text().await.unwrap();
    assert!(text.contains("non-blocking"), "{text:?}");
    browser
        .wait_xpath(
            "//section[@data-role='Mio']//li[@data-kind='client']\
             [contains(., 'search (c1) · non-blocking')]",
        )
        .await;

    let (status, _) = app
        .post(
            "/api/tools/calls/c1/progress",
            &json!({"message": "Checking prices"}),
        )
        .await;
    assert_eq!(status, 200);
    browser
        .wait_xpath(&feed_line("tool.progress", "Checking prices"))
        .await;
    slow.open_gate();
    browser
        .wait_xpath(&feed_line(
            "tool.result",
            "result delivered (spoken of when idle)",
        ))
        .await;
    browser.close().await;
}

/// A tool's latency box (its p50, p95, error rate and histogram), once it counts `calls` calls.
async fn latency(browser: &Browser, card: &str, calls: usize) -> (String, Vec<(String, u64)>) {
    let box_ = browser
        .wait_css(&format!("{card} .latency[data-calls=\"{calls}\"]"))
        .await;
    let text = box_.text().await.expect("latency text");
    let bars = browser
        .eval(
            "return [...arguments[0].querySelectorAll('.histogram .bar')]
                 .map((r) => [r.dataset.bin, Number(r.dataset.count)]);",
            vec![serde_json::to_value(&box_).expect("element as argument")],
        )
        .await;
    let bars = serde_json::from_value(bars).expect("bins and counts");
    (text, bars)
}

/// The number of milliseconds after `label` ("p50 123 ms", "p95 12.5 ms").
fn millis_after(text: &str, label: &str) -> f64 {
    let rest = &text[text
        .find(label)
        .unwrap_or_else(|| panic!("{label} in {text:?}"))
        + label.len()..];
    rest.trim_start()
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a number after {label} in {text:?}"))
}

#[actix_web::test]
async fn each_tool_shows_its_latency_and_error_rate_updated_as_calls_happen() {
    let test = "each_tool_shows_its_latency_and_error_rate_updated_as_calls_happen";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let app = spawn_app(&["Lanlan"]).await;
    let callback = CallbackServer::start();
    callback.route("/fast", Reply::output(json!(1)));
    callback.route(
        "/flaky",
        Reply::json(json!({"error": "flaked", "is_error": true})),
    );
    callback.route(
        "/slow",
        Reply::after(
            std::time::Duration::from_millis(150),
            Reply::output(json!(2)),
        ),
    );
    for (name, path) in [
        ("fast_tool", "/fast"),
        ("flaky_tool", "/flaky"),
        ("slow_tool", "/slow"),
    ] {
        register(
            &app,
            tool_with_timeout(name, &callback.url(path), "manual", 30.0),
        )
        .await;
    }
    // Calls made before the page opens: it reads them from the recent calls.
    for _ in 0..3 {
        crate::callback_server::invoke_ok(&app, "fast_tool", json!({})).await;
    }
    browser.open(&app.url("/")).await;
    let fast = card("Lanlan", "fast_tool");
    let (text, bars) = latency(&browser, &fast, 3).await;
    assert!(text.contains("p50 ") && text.contains("p95 "), "{text}");
    assert!(text.contains("errors 0/3 (0%)"), "{text}");
    let labels: Vec<&str> = bars.iter().map(|(bin, _)| bin.as_str()).collect();
    assert_eq!(
        labels,
        ["< 1 ms", "< 10 ms", "< 100 ms", "< 1 s", "< 10 s", "≥ 10 s"]
    );
    assert_eq!(bars.iter().map(|(_, n)| n).sum::<u64>(), 3);
    let no_calls = browser
        .wait_css(&format!(
            "{} .latency[data-calls=\"0\"]",
            card("Lanlan", "slow_tool")
        ))
        .await;
    assert_eq!(no_calls.text().await.unwrap(), "No calls yet.");

    // Calls made while the page is open update it live (the tool.call events).
    let slow = card("Lanlan", "slow_tool");
    for _ in 0..2 {
        crate::callback_server::invoke_ok(&app, "slow_tool", json!({})).await;
    }
    let (text, bars) = latency(&browser, &slow, 2).await;
    // The callback answers after 150 ms: no call of it can take less.
    assert!(millis_after(&text, "p50") >= 150.0, "{text}");
    assert!(
        millis_after(&text, "p95") >= millis_after(&text, "p50"),
        "{text}"
    );
    let under_100ms: u64 = bars[..3].iter().map(|(_, n)| n).sum();
    assert_eq!(under_100ms, 0, "{bars:?}");
    assert_eq!(bars.iter().map(|(_, n)| n).sum::<u64>(), 2);

    let flaky = card("Lanlan", "flaky_tool");
    crate::callback_server::invoke_ok(&app, "flaky_tool", json!({})).await;
    let (text, _) = latency(&browser, &flaky, 1).await;
    assert!(text.contains("errors 1/1 (100%)"), "{text}");
    browser
        .wait_css(&format!("{flaky} .latency .error-rate.bad"))
        .await;
    crate::callback_server::invoke_ok(&app, "fast_tool", json!({})).await;
    let (text, _) = latency(&browser, &fast, 4).await;
    assert!(text.contains("errors 0/4 (0%)"), "{text}");
    browser.close().await;
}

#[actix_web::test]
async fn a_call_waiting_for_approval_shows_and_is_approved_or_denied_from_the_page() {
    let test = "a_call_waiting_for_approval_shows_and_is_approved_or_denied_from_the_page";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut settings = settings(&["Mio"]);
    settings.characters[0].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    // Any local caller decides here: this test is of the page's approvals, not of the token.
    settings.decisions = runtime_tools::Decisions::Loopback;
    let app = spawn_app_with(settings).await;
    let plugin = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    let mut send = tool_body("send_message", &plugin.url("/send"), "plugin:messages");
    send["approval"] = json!("always");
    send["approval_timeout_seconds"] = json!(600);
    register(&app, send).await;
    browser.open(&app.url("/")).await;
    browser.wait_css(&card("Mio", "send_message")).await;

    // Denied, with a reason.
    fake.push(crate::sessions::call_event(
        "r1",
        "c1",
        "send_message",
        r#"{"city": "Ann"}"#,
    ))
    .await;
    let pending = browser.wait_css("#approvals li.approval").await;
    let text = pending.text().await.unwrap();
    assert!(
        text.contains("Mio · send_message")
            && text.contains("\"city\": \"Ann\"")
            && text.contains("s left to decide"),
        "{text:?}"
    );
    let reason = browser
        .wait_css("#approvals li.approval input.approval-reason")
        .await;
    reason.send_keys("not now").await.expect("typed");
    browser
        .wait_css("#approvals li.approval button.deny")
        .await
        .click()
        .await
        .expect("clicked");
    browser
        .wait_xpath(&feed_line(
            "approval.resolved",
            "send_message · denied (not now)",
        ))
        .await;
    browser
        .wait_xpath("//p[@id='approvals-empty'][not(@hidden)]")
        .await;

    // Approved: the plugin is called once.
    fake.push(crate::sessions::call_event(
        "r2",
        "c2",
        "send_message",
        r#"{"city": "Bo"}"#,
    ))
    .await;
    browser
        .wait_xpath("//ul[@id='approvals']/li[contains(., 'Bo')]//button[@class='approve']")
        .await
        .click()
        .await
        .expect("clicked");
    browser
        .wait_xpath(&feed_line("approval.resolved", "send_message · approved"))
        .await;
    let received = plugin.wait_for_requests(1).await;
    assert_eq!(received[0].json()["arguments"], json!({"city": "Bo"}));
    browser.close().await;
}

/// Mio, whose model (a realtime session on `fake`) may call `send_message`, which needs the
/// person's approval and is answered by `plugin`; deciding needs the operator token (the
/// default).
async fn app_with_a_tool_that_needs_approval(
    fake: &FakeRealtime,
    plugin: &CallbackServer,
) -> TestApp {
    let mut settings = settings(&["Mio"]);
    settings.characters[0].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    let app = spawn_app_with(settings).await;
    let mut send = tool_body("send_message", &plugin.url("/send"), "plugin:messages");
    send["approval"] = json!("always");
    send["approval_timeout_seconds"] = json!(600);
    register(&app, send).await;
    app
}

/// Where the page keeps the operator token for its tab.
const TOKEN_KEY: &str = "runtime-tools.operator-token";

/// The page's address, the token it keeps, every address it fetched and the text it shows.
async fn what_the_page_holds(browser: &Browser) -> Value {
    browser
        .eval(
            "return {href: location.href, kept: sessionStorage.getItem(arguments[0]),
                     fetched: performance.getEntriesByType('resource').map((e) => e.name),
                     text: document.body.innerText};",
            vec![json!(TOKEN_KEY)],
        )
        .await
}

/// Mio's model calls `send_message` to `to` as call `call_id`; the page shows it waiting.
async fn model_asks(browser: &Browser, fake: &FakeRealtime, call_id: &str, to: &str) {
    fake.push(crate::sessions::call_event(
        &format!("r_{call_id}"),
        call_id,
        "send_message",
        &json!({"to": to}).to_string(),
    ))
    .await;
    browser
        .wait_xpath(&format!(
            "//ul[@id='approvals']/li[contains(., '\"to\": \"{to}\"')]"
        ))
        .await;
}

/// Clicks Approve on the approval of the call to `to`.
async fn approve_on_the_page(browser: &Browser, to: &str) {
    browser
        .wait_xpath(&format!(
            "//ul[@id='approvals']/li[contains(., '\"to\": \"{to}\"')]//button[@class='approve']"
        ))
        .await
        .click()
        .await
        .expect("clicked");
}

#[actix_web::test]
async fn opened_with_the_operator_token_the_page_decides_and_the_token_leaves_the_address() {
    let test = "opened_with_the_operator_token_the_page_decides_and_the_token_leaves_the_address";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let plugin = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    let app = app_with_a_tool_that_needs_approval(&fake, &plugin).await;
    let token = app.operator_token.clone();
    // The address the server prints on its `inspector:` line.
    browser
        .open(&format!("{}#token={token}", app.url("/")))
        .await;
    browser.wait_css(&card("Mio", "send_message")).await;

    // The token left the address bar at once, for the tab's own storage.
    let held = what_the_page_holds(&browser).await;
    assert_eq!(held["href"], json!(app.url("/")), "{held}");
    assert_eq!(held["kept"], json!(token));
    browser
        .wait_xpath("//p[@id='approvals-read-only'][@hidden]")
        .await;

    // A decision carries it: the operator's decision is taken, and the call runs.
    model_asks(&browser, &fake, "c1", "Ann").await;
    approve_on_the_page(&browser, "Ann").await;
    browser
        .wait_xpath(&feed_line("approval.resolved", "send_message · approved"))
        .await;
    let received = plugin.wait_for_requests(1).await;
    assert_eq!(received[0].json()["arguments"], json!({"to": "Ann"}));

    // A reload keeps it for the tab; no address the page fetched or shows ever held it.
    let before = what_the_page_holds(&browser).await;
    browser.client.refresh().await.expect("reloaded");
    browser.wait_css("#stream-status[data-state='live']").await;
    model_asks(&browser, &fake, "c2", "Bo").await;
    approve_on_the_page(&browser, "Bo").await;
    let received = plugin.wait_for_requests(2).await;
    assert_eq!(received[1].json()["arguments"], json!({"to": "Bo"}));
    let after = what_the_page_holds(&browser).await;
    assert_eq!(after["href"], json!(app.url("/")), "{after}");
    for held in [&before, &after] {
        let fetched = held["fetched"].as_array().unwrap();
        assert!(
            fetched
                .iter()
                .any(|url| url.as_str().unwrap().contains("/api/approvals")),
            "{held}"
        );
        assert!(
            !fetched
                .iter()
                .any(|url| url.as_str().unwrap().contains(&token)),
            "{held}"
        );
        assert!(!held["text"].as_str().unwrap().contains(&token), "{held}");
    }
    browser.close().await;
}

#[actix_web::test]
async fn opened_without_the_token_the_page_cannot_decide_and_says_how_to_open_it() {
    let test = "opened_without_the_token_the_page_cannot_decide_and_says_how_to_open_it";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let plugin = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    let app = app_with_a_tool_that_needs_approval(&fake, &plugin).await;
    browser.open(&app.url("/")).await;
    browser.wait_css(&card("Mio", "send_message")).await;

    // The call shows, with its arguments and time left, and nothing to decide it with.
    let note = browser
        .wait_xpath("//p[@id='approvals-read-only'][not(@hidden)]")
        .await;
    model_asks(&browser, &fake, "c1", "Ann").await;
    let item = browser.wait_css("#approvals li.approval").await;
    assert!(
        item.text().await.unwrap().contains("s left to decide"),
        "{:?}",
        item.text().await
    );
    let controls = "return document.querySelectorAll(
        '#approvals li.approval button, #approvals li.approval input').length;";
    assert_eq!(browser.eval(controls, vec![]).await, json!(0));
    let said = note.text().await.unwrap();
    assert!(
        said.starts_with(
            "Read-only: this page was opened without the operator token, which deciding an approval needs."
        ) && said.contains(
            "open the inspector at the address the server printed when it started, on its \
             line that begins with \"inspector:\" and ends in \"/#token=…\""
        ),
        "{said:?}"
    );

    // Given a token that is not the operator's, the page offers to decide; the server refuses,
    // and the page says so and goes back to showing only.
    browser
        .eval(
            "location.hash = '#token=a-plugins-token-not-the-operators'; return null;",
            vec![],
        )
        .await;
    approve_on_the_page(&browser, "Ann").await;
    let refused = browser
        .wait_xpath("//ul[@id='approvals']/li//p[@class='approval-problem'][not(@hidden)]")
        .await;
    let refused = refused.text().await.unwrap();
    assert!(
        refused.starts_with("Not decided: the server refused it (deciding an approval needs the operator token, and the bearer token sent is not it"),
        "{refused:?}"
    );
    let said = browser
        .wait_xpath(
            "//p[@id='approvals-read-only'][not(@hidden)][contains(., 'refused this page')]",
        )
        .await
        .text()
        .await
        .unwrap();
    assert!(
        said.starts_with(
            "Read-only: the server refused this page's token: it is not the operator token"
        ),
        "{said:?}"
    );
    assert_eq!(browser.eval(controls, vec![]).await, json!(0));
    let held = what_the_page_holds(&browser).await;
    assert_eq!(
        (&held["href"], &held["kept"]),
        (&json!(app.url("/")), &Value::Null),
        "{held}"
    );
    let (_, waiting) = app.get("/api/approvals").await;
    assert_eq!(
        waiting["approvals"].as_array().unwrap().len(),
        1,
        "{waiting}"
    );
    assert!(plugin.received().is_empty());

    // The operator's token, given the same way, lets it decide.
    browser
        .eval(
            "location.hash = '#token=' + arguments[0]; return null;",
            vec![json!(app.operator_token)],
        )
        .await;
    approve_on_the_page(&browser, "Ann").await;
    browser
        .wait_xpath(&feed_line("approval.resolved", "send_message · approved"))
        .await;
    plugin.wait_for_requests(1).await;
    browser
        .wait_xpath("//p[@id='approvals-read-only'][@hidden]")
        .await;
    browser.close().await;
}

/// The terms and values of a tool card's meta list, in order.
async fn meta_of(browser: &Browser, card: &str) -> Vec<(String, String)> {
    let meta = browser.wait_css(&format!("{card} dl.meta")).await;
    let pairs = browser
        .eval(
            "return [...arguments[0].querySelectorAll(':scope > div')]
                 .map((d) => [d.querySelector('dt').textContent, d.querySelector('dd').textContent]);",
            vec![serde_json::to_value(&meta).expect("element as argument")],
        )
        .await;
    serde_json::from_value(pairs).expect("terms and values")
}

#[actix_web::test]
async fn each_tool_shows_its_limits_and_the_feed_what_held_a_call_back() {
    let test = "each_tool_shows_its_limits_and_the_feed_what_held_a_call_back";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app =
        crate::helpers::app_with_session(&fake.url, &[], runtime_tools::Dialect::Openai, |_| {})
            .await;
    let callback = CallbackServer::start();
    callback.route("/arm", Reply::output(json!({"moved": true})));
    callback.route("/quota", Reply::output(json!({"left": 1})));
    callback.route(
        "/lights",
        Reply::after(
            std::time::Duration::from_millis(300),
            Reply::output(json!({"on": true})),
        ),
    );
    callback.route("/plain", Reply::output(json!(1)));
    let with = |name: &str, limits: Value| {
        let mut body = tool_with_timeout(name, &callback.url(&format!("/{name}")), "manual", 30.0);
        for (field, value) in limits.as_object().unwrap() {
            body[field] = value.clone();
        }
        body
    };
    register(&app, with("arm", json!({"max_concurrent": 1}))).await;
    register(
        &app,
        with(
            "quota",
            json!({"max_concurrent": 3, "rate": {"calls": 1, "per_seconds": 60}}),
        ),
    )
    .await;
    register(&app, with("lights", json!({"dedupe_seconds": 5}))).await;
    register(&app, with("plain", json!({}))).await;

    browser.open(&app.url("/")).await;
    let limits_of = |meta: Vec<(String, String)>| -> Vec<(String, String)> {
        meta.into_iter()
            .filter(|(term, _)| ["at once", "rate", "repeats"].contains(&term.as_str()))
            .collect()
    };
    let pair = |term: &str, value: &str| (term.to_owned(), value.to_owned());
    assert_eq!(
        limits_of(meta_of(&browser, &card("Mio", "arm")).await),
        [pair(
            "at once",
            "one call at a time; others wait their turn"
        )]
    );
    assert_eq!(
        limits_of(meta_of(&browser, &card("Mio", "quota")).await),
        [
            pair("at once", "at most 3 calls; others wait their turn"),
            pair("rate", "at most 1 call per 60 s"),
        ]
    );
    assert_eq!(
        limits_of(meta_of(&browser, &card("Mio", "lights")).await),
        [pair(
            "repeats",
            "a model's repeat within 5 s gets the first call's result"
        )]
    );
    assert_eq!(
        limits_of(meta_of(&browser, &card("Mio", "plain")).await),
        []
    );

    // A call beyond the rate says so in the feed, as does a model's repeat, naming its first.
    crate::callback_server::invoke_ok(&app, "quota", json!({})).await;
    let (status, refused) =
        crate::callback_server::invoke(&app, json!({"name": "quota", "arguments": {}})).await;
    assert_eq!(
        (status, &refused["is_error"]),
        (200, &json!(true)),
        "{refused}"
    );
    let held = browser
        .wait_xpath(&feed_line("tool.call", " · rate limited"))
        .await;
    let line = |text: String| text.split_once("tool.call ").map(|(_, l)| l.to_owned());
    let text = line(held.text().await.unwrap()).unwrap();
    assert!(
        text.starts_with("Mio · quota · called by invoke · ")
            && text.ends_with(" ms · rate limited"),
        "{text:?}"
    );
    crate::limits::model_calls(&fake, "c1", "lights", r#"{"on": true}"#).await;
    crate::limits::model_calls(&fake, "c2", "lights", r#"{"on":true}"#).await;
    let repeat = browser
        .wait_xpath(&feed_line("tool.call", " · repeat of c1 · ok"))
        .await;
    let text = line(repeat.text().await.unwrap()).unwrap();
    assert!(
        text.starts_with("Mio · lights · called by own connection · ")
            && text.ends_with(" ms · repeat of c1 · ok"),
        "{text:?}"
    );
    // The repeat reached no plugin: the tool's two calls count no error.
    let (text, _) = latency(&browser, &card("Mio", "lights"), 2).await;
    assert!(text.contains("errors 0/2 (0%)"), "{text}");
    browser.close().await;
}

/// Holds back the page's reads of the approvals list: each is sent at once, its answer handed
/// to the page only when the test says, so a list read before an event can arrive after it.
/// `<html data-held-approvals>` says how many wait; `window.releaseApprovals()` hands them over
/// and resolves once the page has had a task to act on them.
const HOLD_APPROVALS: &str = r#"
(() => {
  const fetch = window.fetch.bind(window);
  const held = [];
  const count = () => { document.documentElement.dataset.heldApprovals = String(held.length); };
  window.fetch = (input, init) => {
    const read = !init?.method || init.method === "GET";
    if (!read || !String(input).includes("/api/approvals")) return fetch(input, init);
    const answer = fetch(input, init).then(async (response) => {
      const text = await response.text();
      return { status: response.status, text: async () => text };
    });
    return new Promise((resolve) => {
      held.push({ answer, resolve });
      count();
    });
  };
  window.releaseApprovals = async () => {
    const released = held.splice(0);
    count();
    for (const { answer, resolve } of released) resolve(answer);
    await Promise.all(released.map(({ answer }) => answer));
    await new Promise((resolve) => setTimeout(resolve, 0));
  };
})();
"#;

#[actix_web::test]
async fn a_list_of_approvals_read_before_an_approval_event_does_not_undo_it() {
    let test = "a_list_of_approvals_read_before_an_approval_event_does_not_undo_it";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let plugin = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    let app = app_with_a_tool_that_needs_approval(&fake, &plugin).await;
    browser.before_each_page(HOLD_APPROVALS).await;
    browser
        .open(&format!("{}#token={}", app.url("/"), app.operator_token))
        .await;
    // The page read the list on `hello`, before any call: its answer is held.
    browser.wait_css("#stream-status[data-state='live']").await;
    browser.wait_css("html[data-held-approvals='1']").await;
    // The call's event shows it; then the list read before it (empty) comes in.
    model_asks(&browser, &fake, "c1", "Ann").await;
    browser
        .eval("return window.releaseApprovals();", vec![])
        .await;
    let shown = browser
        .eval(
            "return [...document.querySelectorAll('#approvals li')].map((li) => li.innerText);",
            vec![],
        )
        .await;
    let shown: Vec<&str> = shown
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        shown.iter().any(|text| text.contains("\"to\": \"Ann\"")),
        "{shown:?}"
    );
    // And it can be decided.
    approve_on_the_page(&browser, "Ann").await;
    let received = plugin.wait_for_requests(1).await;
    assert_eq!(received[0].json()["arguments"], json!({"to": "Ann"}));
    browser.close().await;
}
