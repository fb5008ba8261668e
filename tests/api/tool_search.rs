//! `GET /api/tools/search`: a character's tools ranked for a text over the real server — the
//! answer's shape and order (ties by name), the index following every register, replacement
//! and removal, each refusal with its exact body, the `tool.search` event (never the query's
//! text) and its metric; what a query is about deciding where its words rank tools alike; and
//! the inspector's search box, in headless Chromium, using the route.

use serde_json::{Value, json};

use crate::browser::Browser;
use crate::helpers::{TestApp, spawn_app};

/// A callback URL nothing needs to answer: searching never calls a tool.
const CALLBACK: &str = "http://127.0.0.1:9/cb";

fn tool(name: &str, description: &str, parameters: Value, source: &str) -> Value {
    json!({
        "name": name,
        "description": description,
        "parameters": parameters,
        "callback_url": CALLBACK,
        "source": source,
    })
}

async fn register(app: &TestApp, mut body: Value, role: Option<&str>) {
    body["role"] = json!(role);
    let (status, answer) = app.register(&body).await;
    assert_eq!(status, 200, "{answer}");
}

/// The search path with its query string encoded.
fn path(pairs: &[(&str, &str)]) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for (key, value) in pairs {
        query.append_pair(key, value);
    }
    format!("/api/tools/search?{}", query.finish())
}

async fn search(app: &TestApp, pairs: &[(&str, &str)]) -> (u16, Value) {
    app.get(&path(pairs)).await
}

/// The names found, in order.
fn names(answer: &Value) -> Vec<&str> {
    answer["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("a name"))
        .collect()
}

/// The scores found, in order.
fn scores(answer: &Value) -> Vec<f64> {
    answer["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["score"].as_f64().expect("a number"))
        .collect()
}

/// A character with a few tools of different kinds.
async fn weather_and_friends(app: &TestApp) {
    let city = json!({"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. Kyoto"}}});
    register(
        app,
        tool(
            "getWeatherForecast",
            "Tomorrow's weather forecast for a city.",
            city.clone(),
            "plugin:weather",
        ),
        None,
    )
    .await;
    register(
        app,
        tool(
            "get_current_time",
            "The current time in a time zone.",
            json!({}),
            "plugin:clock",
        ),
        None,
    )
    .await;
    register(
        app,
        tool(
            "lights.turn_off",
            "Turn off the lights in a room.",
            json!({}),
            "plugin:home",
        ),
        None,
    )
    .await;
    register(
        app,
        tool(
            "send_email",
            "Send an email message to someone.",
            json!({}),
            "plugin:mail",
        ),
        None,
    )
    .await;
}

#[actix_web::test]
async fn a_search_answers_the_characters_best_tools_first_with_their_source_and_score() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    weather_and_friends(&app).await;
    register(
        &app,
        tool(
            "umbrella_advice",
            "Whether to take an umbrella, from the weather.",
            json!({}),
            "plugin:weather",
        ),
        Some("Mio"),
    )
    .await;

    let (status, answer) = search(
        &app,
        &[
            ("role", "Lanlan"),
            (
                "q",
                "Will it rain in Kyoto tomorrow? Check the weather forecast",
            ),
        ],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["role"], "Lanlan");
    assert_eq!(
        answer["query"],
        "Will it rain in Kyoto tomorrow? Check the weather forecast"
    );
    // Only Lanlan's tools, and only those sharing a word with the query.
    assert_eq!(names(&answer), ["getWeatherForecast"]);
    let found = &answer["tools"][0];
    assert_eq!(found["source"], "plugin:weather");
    assert_eq!(
        found["description"],
        "Tomorrow's weather forecast for a city."
    );
    assert!(found["score"].as_f64().expect("a number") > 0.0, "{found}");
    assert_eq!(found.as_object().unwrap().len(), 4, "{found}");

    // The name, split at its case changes and separators, is found by its words.
    let (_, answer) = search(&app, &[("role", "Lanlan"), ("q", "turn the lights off")]).await;
    assert_eq!(names(&answer)[0], "lights.turn_off");
    let (_, answer) = search(&app, &[("role", "Lanlan"), ("q", "what time is it now")]).await;
    assert_eq!(names(&answer), ["get_current_time"]);
    // Best first: every score at most the one before.
    let (_, answer) = search(
        &app,
        &[
            ("role", "Lanlan"),
            ("q", "get the current weather forecast, send it by email"),
        ],
    )
    .await;
    let scores = scores(&answer);
    assert_eq!(scores.len(), 3, "{answer}");
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    // Nothing shares a word: an empty list, not an error; a query of only function words too.
    for q in ["zebra crossing", "what is the"] {
        let (status, answer) = search(&app, &[("role", "Lanlan"), ("q", q)]).await;
        assert_eq!(status, 200);
        assert_eq!(answer, json!({"role": "Lanlan", "query": q, "tools": []}));
    }
    let (_, answer) = search(&app, &[("role", "Mio"), ("q", "umbrella")]).await;
    assert_eq!(names(&answer), ["umbrella_advice"]);
}

#[actix_web::test]
async fn where_the_words_rank_tools_alike_what_the_query_is_about_decides() {
    let app = spawn_app(&["Lanlan"]).await;
    for (name, description) in [
        (
            "convert_units",
            "Convert a quantity from one unit to another.",
        ),
        (
            "convert_money",
            "Convert an amount from one currency to another.",
        ),
        ("convert_image", "Convert an image file to another format."),
        ("convert_case", "Convert text to upper or lower case."),
        (
            "convert_time",
            "Convert a time from one time zone to another.",
        ),
    ] {
        register(
            &app,
            tool(name, description, json!({}), "plugin:convert"),
            None,
        )
        .await;
    }
    // "convert" is the only word of the query any tool says (the words alone rank four alike,
    // by name: `convert_case` first); "sterling" and "yen" are money.
    let (status, answer) = search(
        &app,
        &[
            ("role", "Lanlan"),
            ("q", "convert 30 pounds sterling into Japanese yen"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(names(&answer)[0], "convert_money", "{answer}");
    let scores = scores(&answer);
    assert!(scores.iter().all(|&s| s > 0.0), "{scores:?}");
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
}

#[actix_web::test]
async fn the_tool_with_words_like_more_of_the_query_comes_first() {
    let app = spawn_app(&["Lanlan"]).await;
    // Five tools from BFCL: the one its request needs and four whose words the place's name says.
    let tools = [
        (
            "locate_tallest_mountains",
            "Find the tallest mountains within a specified radius of a location.",
            json!({
                "location": "The city from which to calculate distance.",
                "radius": "The radius within which to find mountains, measured in kilometers.",
                "amount": "The number of mountains to find, listed from tallest to smallest.",
            }),
        ),
        (
            "Services_4_FindProvider",
            "Discover a therapist based on the user's specific needs and location.",
            json!({
                "city": "The city where the user is looking for a therapist, in the format of \
                         'City, State', such as 'Berkeley, CA' or 'New York, NY'. State has to be \
                         abbrieviated.",
                "type": "The specialization of the therapist the user is seeking.",
                "insurance_accepted": "Indicates whether the therapist should accept insurance, \
                                       true for yes and false for no.",
            }),
        ),
        (
            "views_open",
            "This function opens a new view in the application using a trigger ID and returns \
             the server's response.",
            json!({
                "token": "Authentication token used to validate the request.",
                "trigger_id": "An identifier that triggers the view to be opened.",
                "view": "The encoded view data to be displayed.",
            }),
        ),
        (
            "views_publish",
            "Publish a view for a specific user using their user ID and a unique hash.",
            json!({
                "token": "Authentication token required to authorize the publishing action.",
                "user_id": "The unique identifier of the user for whom the view is being published.",
                "view": "The name of the view to be published.",
                "hash": "A unique hash to ensure the request is not processed multiple times.",
            }),
        ),
        (
            "views_update",
            "Update an existing view in the system with new information based on a unique \
             identifier.",
            json!({
                "token": "Authentication token to verify the user.",
                "view_id": "Unique identifier of the view to be updated.",
                "external_id": "An optional external identifier for third-party integrations.",
                "view": "Serialized string representation of the view data.",
                "hash": "An optional hash for verifying the integrity of the view data.",
            }),
        ),
    ];
    for (name, description, parameters) in tools {
        let properties: serde_json::Map<String, Value> = parameters
            .as_object()
            .expect("an object")
            .iter()
            .map(|(p, d)| (p.clone(), json!({"type": "string", "description": d})))
            .collect();
        let parameters = json!({"type": "object", "properties": properties});
        register(
            &app,
            tool(name, description, parameters, "plugin:bfcl"),
            None,
        )
        .await;
    }
    // Without comparing the query's words with each tool's, `mountain` puts the mountains
    // first; its other words (family, therapist, looking) are like the therapists' tool's.
    let query = "I need help looking for a Family Therapist in Mountain View.";
    let (status, answer) = search(&app, &[("role", "Lanlan"), ("q", query)]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(names(&answer)[0], "Services_4_FindProvider", "{answer}");
}

#[actix_web::test]
async fn equal_scores_are_ordered_by_name_and_limit_cuts_the_list() {
    let app = spawn_app(&["Lanlan"]).await;
    // Twelve tools alike but for their names' numbers, registered in an order that is not theirs.
    for n in [7, 3, 11, 1, 9, 5, 12, 2, 10, 4, 8, 6] {
        let name = format!("note_{n:02}");
        register(
            &app,
            tool(&name, "Write a note.", json!({}), "plugin:notes"),
            None,
        )
        .await;
    }
    let (status, answer) = search(&app, &[("role", "Lanlan"), ("q", "note")]).await;
    assert_eq!(status, 200);
    let expected: Vec<String> = (1..=10).map(|n| format!("note_{n:02}")).collect();
    assert_eq!(
        names(&answer),
        expected,
        "the default limit is 10, ties by name ascending"
    );
    let first = answer["tools"][0]["score"].clone();
    assert!(
        answer["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["score"] == first)
    );
    let (_, answer) = search(&app, &[("role", "Lanlan"), ("q", "note"), ("limit", "50")]).await;
    assert_eq!(names(&answer).len(), 12);
    let (_, answer) = search(&app, &[("role", "Lanlan"), ("q", "note"), ("limit", "1")]).await;
    assert_eq!(names(&answer), ["note_01"]);
}

#[actix_web::test]
async fn the_index_follows_every_registration_replacement_and_removal() {
    let app = spawn_app(&["Lanlan"]).await;
    weather_and_friends(&app).await;
    let find = async |q: &str| {
        let (status, answer) = search(&app, &[("role", "Lanlan"), ("q", q)]).await;
        assert_eq!(status, 200, "{answer}");
        names(&answer)
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(find("email").await, ["send_email"]);
    // Replaced with another description: found by its new words, no longer by the old.
    register(
        &app,
        tool("send_email", "Post a letter.", json!({}), "plugin:mail"),
        None,
    )
    .await;
    assert_eq!(find("letter").await, ["send_email"]);
    assert_eq!(find("message someone").await, Vec::<String>::new());
    // Unregistered: gone.
    let (status, _) = app
        .post("/api/tools/unregister", &json!({"name": "send_email"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(find("letter").await, Vec::<String>::new());
    // A clear of its source: gone too; the others stay.
    let (status, _) = app
        .post("/api/tools/clear", &json!({"source": "plugin:home"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(find("turn off the lights").await, Vec::<String>::new());
    assert_eq!(find("weather").await, ["getWeatherForecast"]);
    // Registered again with the same definition: found as before.
    register(
        &app,
        tool(
            "lights.turn_off",
            "Turn off the lights in a room.",
            json!({}),
            "plugin:home",
        ),
        None,
    )
    .await;
    assert_eq!(find("turn off the lights").await, ["lights.turn_off"]);
}

#[actix_web::test]
async fn bad_queries_are_refused_with_the_field_and_the_reason() {
    let app = spawn_app(&["Lanlan"]).await;
    let (status, answer) = search(&app, &[("role", "Nobody"), ("q", "weather")]).await;
    assert_eq!(status, 404);
    assert_eq!(
        answer,
        json!({"ok": false, "detail": "unknown role: Nobody"})
    );
    let refused = |loc: &str, msg: &str, kind: &str| json!({"ok": false, "detail": [{"loc": ["query", loc], "msg": msg, "type": kind}]});
    let (status, answer) = search(&app, &[("role", "Lanlan")]).await;
    assert_eq!(status, 422);
    assert_eq!(
        answer,
        refused("q", "Field required: what to search for", "missing")
    );
    let (status, answer) = search(&app, &[("role", "Lanlan"), ("q", "")]).await;
    assert_eq!(status, 422);
    assert_eq!(
        answer,
        refused(
            "q",
            "must be 1 to 512 characters, got none",
            "string_too_short"
        )
    );
    // 512 characters (of two bytes each) are fine; 513 are not.
    let (status, _) = search(&app, &[("role", "Lanlan"), ("q", &"é".repeat(512))]).await;
    assert_eq!(status, 200);
    let (status, answer) = search(&app, &[("role", "Lanlan"), ("q", &"é".repeat(513))]).await;
    assert_eq!(status, 422);
    assert_eq!(
        answer,
        refused(
            "q",
            "must be 1 to 512 characters, got 513",
            "string_too_long"
        )
    );
    for limit in ["0", "51", "ten", "-1", "2.5"] {
        let (status, answer) = search(
            &app,
            &[("role", "Lanlan"), ("q", "weather"), ("limit", limit)],
        )
        .await;
        assert_eq!(status, 422, "{limit}");
        let msg = format!("must be a whole number from 1 to 50, got {limit:?}");
        assert_eq!(answer, refused("limit", &msg, "value_error"));
    }
    let (status, answer) = search(&app, &[("q", "weather")]).await;
    assert_eq!(status, 422);
    assert_eq!(
        answer,
        refused("role", "Field required: the character to search", "missing")
    );
    // Every failing field at once.
    let (status, answer) = search(&app, &[("limit", "0")]).await;
    assert_eq!(status, 422);
    let locs: Vec<&Value> = answer["detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["loc"])
        .collect();
    assert_eq!(
        locs,
        [
            &json!(["query", "role"]),
            &json!(["query", "q"]),
            &json!(["query", "limit"])
        ]
    );
    // A parameter given twice cannot be read: the same 422 as every route's query string.
    let (status, answer) = app.get("/api/tools/search?role=Lanlan&q=a&q=b").await;
    assert_eq!(status, 422);
    assert_eq!(answer["detail"][0]["loc"], json!(["query"]));
    assert_eq!(answer["detail"][0]["type"], "query_invalid");
    // Reads only.
    let (status, answer) = app.post("/api/tools/search", &json!({})).await;
    assert_eq!(status, 405);
    assert_eq!(answer, json!({"ok": false, "detail": "Method Not Allowed"}));
}

#[actix_web::test]
async fn each_search_is_announced_without_its_text_and_counted() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    weather_and_friends(&app).await;
    let mut stream = crate::event_stream::open(&app, "?role=Lanlan", None)
        .await
        .expect("stream opens");
    let secret = "my PIN is 4321: what's the weather forecast";
    let (status, _) = search(&app, &[("role", "Lanlan"), ("q", secret), ("limit", "5")]).await;
    assert_eq!(status, 200);
    let event = stream.wait_for("tool.search", |_| true).await;
    assert_eq!(
        event.data,
        json!({"role": "Lanlan", "query_length": secret.chars().count(),
               "found": ["getWeatherForecast"], "kind": "api"})
    );
    // A refused search is neither announced nor counted; another one that finds nothing is.
    let (status, _) = search(&app, &[("role", "Lanlan"), ("q", "")]).await;
    assert_eq!(status, 422);
    let (status, _) = search(&app, &[("role", "Lanlan"), ("q", "zebra")]).await;
    assert_eq!(status, 200);
    let event = stream.wait_for("tool.search", |_| true).await;
    assert_eq!(
        event.data,
        json!({"role": "Lanlan", "query_length": 5, "found": [], "kind": "api"})
    );
    let (status, text) = app.get("/metrics").await;
    assert_eq!(status, 200);
    let text = text.as_str().expect("the exposition");
    assert!(
        text.contains("runtime_tools_tool_searches_total{kind=\"api\"} 2\n"),
        "{text}"
    );
}

#[actix_web::test]
async fn the_inspectors_search_box_finds_a_characters_tools_through_the_route() {
    let test = "the_inspectors_search_box_finds_a_characters_tools_through_the_route";
    let Some(browser) = Browser::start(test, &[]).await else {
        return;
    };
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    weather_and_friends(&app).await;
    let mut stream = crate::event_stream::open(&app, "?role=Lanlan", None)
        .await
        .expect("stream opens");
    browser.open(&app.url("/")).await;
    let section = "section.character[data-role=\"Lanlan\"]";
    let input = browser
        .wait_css(&format!(
            "{section} form.tool-search input[type=\"search\"]"
        ))
        .await;
    input
        .send_keys("Will it rain tomorrow? weather forecast, and the time")
        .await
        .expect("typed");
    browser
        .wait_css(&format!(
            "{section} form.tool-search button[type=\"submit\"]"
        ))
        .await
        .click()
        .await
        .expect("clicked");
    // The page asked the route: the server announced it.
    let event = stream.wait_for("tool.search", |_| true).await;
    assert_eq!(event.data["kind"], "api");
    assert_eq!(
        event.data["found"],
        json!(["getWeatherForecast", "get_current_time"])
    );
    let results = browser
        .wait_css(&format!("{section} ol.search-results[data-count=\"2\"]"))
        .await;
    let found = browser
        .eval(
            "return [...arguments[0].querySelectorAll('li')].map(li => [li.dataset.tool, li.querySelector('.score').textContent]);",
            vec![serde_json::to_value(&results).expect("an element")],
        )
        .await;
    let found = found.as_array().expect("a list");
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0][0], "getWeatherForecast");
    assert_eq!(found[1][0], "get_current_time");
    assert!(
        found[0][1].as_str().unwrap().starts_with("score "),
        "{found:?}"
    );
    // A query nothing matches says so; a bad one shows the server's reason.
    input.clear().await.expect("cleared");
    input.send_keys("zebra").await.expect("typed");
    browser
        .wait_css(&format!(
            "{section} form.tool-search button[type=\"submit\"]"
        ))
        .await
        .click()
        .await
        .expect("clicked");
    let none = browser
        .wait_css(&format!("{section} .search-results[data-count=\"0\"]"))
        .await;
    assert_eq!(none.text().await.unwrap(), "No tool matches.");
    browser.close().await;
}
