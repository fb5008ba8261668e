//! Images in a tool result: checked, re-encoded when too large, returned by the invoke route,
//! and shown to a realtime model as a user message after the call's output (validated against
//! the official client-event schema), on the server's own session and on an attached call alike;
//! a dialect without images gets a warning instead.

use std::io::Cursor;

use actix::prelude::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use image::{DynamicImage, ImageBuffer, ImageFormat, Rgb};
use runtime_tools::{
    CallLocalTool, Dialect, RegisterTool, SessionSettings, ToolOutcome, ToolSpec, empty_parameters,
    local_handler,
};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply, invoke_ok, register};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::helpers::{TestApp, settings, spawn_app, spawn_app_with, tool_body};
use crate::schema::validate_client_events;

/// A `width`x`height` picture; `noisy` pictures compress badly.
fn picture(width: u32, height: u32, format: ImageFormat, noisy: bool) -> Vec<u8> {
    let mut seed = 0x9e37_79b9_u32;
    let image = ImageBuffer::from_fn(width, height, |x, y| {
        if noisy {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let [r, g, b, _] = seed.to_le_bytes();
            Rgb([r, g, b])
        } else {
            Rgb([(x % 256) as u8, (y % 256) as u8, 90])
        }
    });
    let mut bytes = Vec::new();
    DynamicImage::ImageRgb8(image)
        .write_to(&mut Cursor::new(&mut bytes), format)
        .unwrap();
    bytes
}

pub fn small_png() -> String {
    STANDARD.encode(picture(64, 48, ImageFormat::Png, false))
}

async fn app_with_tool(answer: Value) -> (TestApp, CallbackServer) {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with("/cb", Reply::json(answer));
    register(
        &app,
        tool_body("camera", &server.url("/cb"), "plugin:camera"),
    )
    .await;
    (app, server)
}

#[actix_web::test]
async fn invoke_returns_the_delivered_images() {
    let png = small_png();
    let app = app_with_tool(json!({"output": {"seen": 1}, "is_error": false,
        "images": [{"data_b64": png, "mime": "image/png", "vision_prompt": "read the gauge"}]}))
    .await;
    let result = invoke_ok(&app.0, "camera", json!({})).await;
    assert_eq!(result["output"], json!({"seen": 1}));
    assert_eq!(
        result["images"],
        json!([{"mime": "image/png", "width": 64, "height": 48, "data_b64": png,
                "vision_prompt": "read the gauge"}])
    );
    assert!(result.get("image_warnings").is_none(), "{result}");
}

#[actix_web::test]
async fn every_image_dropped_is_named_in_the_output() {
    let jpeg = STANDARD.encode(picture(20, 10, ImageFormat::Jpeg, false));
    let app = app_with_tool(json!({"output": "two cats", "images": [
        {"data_b64": "@@@@"},
        {"data_b64": jpeg, "mime": "image/png"},
        {"data_b64": jpeg},
    ]}))
    .await;
    let result = invoke_ok(&app.0, "camera", json!({})).await;
    let warnings = json!([
        "a tool may return at most 2 images; 1 dropped",
        "image #0 has invalid base64 (Invalid symbol 64, offset 0.); dropped",
        "image #1 is declared \"image/png\" but its bytes are image/jpeg; dropped",
    ]);
    // A non-object output is wrapped, so the warnings have somewhere to go.
    assert_eq!(
        result["output"],
        json!({"result": "two cats", "_image_warnings": warnings})
    );
    assert_eq!(result["image_warnings"], warnings);
    assert!(result.get("images").is_none(), "{result}");
}

#[actix_web::test]
async fn a_large_image_is_reencoded_to_jpeg_and_said_so() {
    let big = STANDARD.encode(picture(600, 400, ImageFormat::Png, true));
    assert!(big.len() > 512_000, "{}", big.len());
    let app = app_with_tool(json!({"output": {"shot": true},
        "images": [{"data_b64": big, "mime": "image/png"}]}))
    .await;
    let result = invoke_ok(&app.0, "camera", json!({})).await;
    let warning =
        "image #0 was re-encoded to JPEG 600x400 to fit the 512000-character delivery limit";
    assert_eq!(
        result["output"],
        json!({"shot": true, "_image_warnings": [warning]})
    );
    let image = &result["images"][0];
    assert_eq!(
        (&image["mime"], &image["width"], &image["height"]),
        (&json!("image/jpeg"), &json!(600), &json!(400))
    );
    let bytes = STANDARD
        .decode(image["data_b64"].as_str().unwrap())
        .unwrap();
    assert!(bytes.len() * 4 / 3 <= 512_000);
    let decoded = image::load_from_memory_with_format(&bytes, ImageFormat::Jpeg).unwrap();
    assert_eq!((decoded.width(), decoded.height()), (600, 400));
}

/// An in-process camera that answers with an image envelope.
struct Camera(String);

impl Actor for Camera {
    type Context = Context<Self>;
}

impl Handler<CallLocalTool> for Camera {
    type Result = ToolOutcome;

    fn handle(&mut self, _: CallLocalTool, _: &mut Self::Context) -> ToolOutcome {
        Ok(json!({"output": "snap", "images": [{"data_b64": self.0, "vision_prompt": "p"}]}))
    }
}

#[actix_web::test]
async fn an_in_process_tool_returns_images_the_same_way() {
    let app = spawn_app(&["Lanlan"]).await;
    let png = small_png();
    let tool = ToolSpec::local(
        "snap",
        "Take a picture.",
        empty_parameters(),
        "inproc:camera",
        local_handler(Camera(png.clone()).start().recipient()),
    );
    app.router
        .send(RegisterTool { tool, role: None })
        .await
        .unwrap()
        .unwrap();
    let result = invoke_ok(&app, "snap", json!({})).await;
    assert_eq!(result["output"], json!("snap"));
    assert_eq!(
        result["images"],
        json!([{"mime": "image/png", "width": 64, "height": 48, "data_b64": png, "vision_prompt": "p"}])
    );
}

async fn app_with_session(
    fake: &FakeRealtime,
    dialect: Dialect,
    callback: &CallbackServer,
) -> TestApp {
    let mut settings = settings(&["Mio"]);
    settings.characters[0].session = Some(SessionSettings::new(&fake.url, dialect));
    let app = spawn_app_with(settings).await;
    fake.nth_update(1).await;
    for tool in ["camera", "camera2"] {
        register(
            &app,
            tool_body(tool, &callback.url(&format!("/{tool}")), "plugin:cam"),
        )
        .await;
    }
    app
}

fn call(response_id: &str, call_id: &str, name: &str) -> Value {
    json!({"type": "response.function_call_arguments.done", "response_id": response_id,
           "item_id": format!("item_{call_id}"), "output_index": 0, "call_id": call_id,
           "name": name, "arguments": "{}"})
}

fn done(response_id: &str, calls: &[(&str, &str)]) -> Value {
    let output: Vec<Value> = calls
        .iter()
        .map(|(id, name)| json!({"type": "function_call", "call_id": id, "name": name, "arguments": "{}"}))
        .collect();
    json!({"type": "response.done", "response": {"id": response_id, "output": output}})
}

/// Waits for the `response.create` that closes a turn; returns every event sent until then.
async fn events_until_response_create(fake: &FakeRealtime) -> Vec<Value> {
    fake.wait_for("response.create", |events| {
        events
            .iter()
            .position(|e| e["type"] == "response.create")
            .map(|i| events[..=i].to_vec())
    })
    .await
}

/// A camera whose answer carries one image of `png` with a prompt.
fn gauge_camera(png: &str) -> CallbackServer {
    let callback = CallbackServer::start();
    callback.route(
        "/camera",
        Reply::json(json!({"output": {"gauge": "visible"}, "images": [
            {"data_b64": png, "mime": "image/png", "vision_prompt": "read the gauge"}]})),
    );
    callback
}

#[actix_web::test]
async fn a_realtime_model_sees_the_image_after_the_output_and_before_the_next_response() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let png = small_png();
    let callback = gauge_camera(&png);
    let _app = app_with_session(&fake, Dialect::Openai, &callback).await;
    sees_the_gauge(&fake, &png).await;
}

#[actix_web::test]
async fn an_attached_calls_model_sees_the_image_the_same_way() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let png = small_png();
    let callback = gauge_camera(&png);
    let app = spawn_app(&["Mio"]).await;
    register(
        &app,
        tool_body("camera", &callback.url("/camera"), "plugin:cam"),
    )
    .await;
    let url = format!("{}&call_id=rtc_cam", fake.url);
    let (status, body) = app
        .post("/api/sessions/attach", &json!({"role": "Mio", "url": url}))
        .await;
    assert_eq!(status, 200, "{body}");
    sees_the_gauge(&fake, &png).await;
}

/// The model calls the camera once: its exact output, then the image with its caption, then
/// the next response.
async fn sees_the_gauge(fake: &FakeRealtime, png: &str) {
    fake.push(call("r1", "c1", "camera")).await;
    fake.push(done("r1", &[("c1", "camera")])).await;
    let events = events_until_response_create(fake).await;
    let turn: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] != "session.update")
        .collect();
    assert_eq!(turn.len(), 3, "{turn:?}");
    assert_eq!(
        turn[0]["item"],
        json!({"type": "function_call_output", "call_id": "c1", "output": "{\"gauge\":\"visible\"}"})
    );
    assert_eq!(
        turn[1]["item"],
        json!({"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Image from tool camera (call_id c1): read the gauge"},
            {"type": "input_image", "image_url": format!("data:image/png;base64,{png}")},
        ]})
    );
    assert_eq!(turn[1]["type"], "conversation.item.create");
    assert_eq!(turn[2]["type"], "response.create");
    let report = validate_client_events(fake.events()).await;
    assert!(report.is_ok(), "{report:?}");
}

#[actix_web::test]
async fn a_model_turn_takes_at_most_two_images_over_all_its_calls() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let png = small_png();
    let two = json!({"output": {"n": 2}, "images": [{"data_b64": png}, {"data_b64": png}]});
    let callback = CallbackServer::start();
    callback.route("/camera", Reply::json(two.clone()));
    callback.route("/camera2", Reply::json(two));
    let _app = app_with_session(&fake, Dialect::Openai, &callback).await;
    fake.push(call("r1", "c1", "camera")).await;
    fake.push(call("r1", "c2", "camera2")).await;
    fake.push(done("r1", &[("c1", "camera"), ("c2", "camera2")]))
        .await;
    let events = events_until_response_create(&fake).await;
    let messages: Vec<&Value> = events
        .iter()
        .filter(|e| e["item"]["type"] == "message")
        .collect();
    assert_eq!(messages.len(), 1, "{events:?}");
    let images = messages[0]["item"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "input_image")
        .count();
    assert_eq!(images, 2);
    let outputs: Vec<Value> = events
        .iter()
        .filter(|e| e["item"]["type"] == "function_call_output")
        .map(|e| serde_json::from_str(e["item"]["output"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(outputs.len(), 2);
    let warned: Vec<&Value> = outputs
        .iter()
        .filter(|o| o.get("_image_warnings").is_some())
        .collect();
    assert_eq!(
        warned,
        [&json!({"n": 2, "_image_warnings": [
            "2 image(s) omitted: a model turn takes at most 2 images and 4194304 base64 characters"]})]
    );
    let report = validate_client_events(fake.events()).await;
    assert!(report.is_ok(), "{report:?}");
}

#[actix_web::test]
async fn a_dialect_without_images_gets_a_warning_instead() {
    for (dialect, name) in [(Dialect::Qwen, "qwen"), (Dialect::Glm, "glm")] {
        let fake = FakeRealtime::start(AckMode::Immediate).await;
        let callback = CallbackServer::start();
        callback.route(
            "/camera",
            Reply::json(json!({"output": "a photo", "images": [{"data_b64": small_png()}]})),
        );
        let _app = app_with_session(&fake, dialect, &callback).await;
        fake.push(call("r1", "c1", "camera")).await;
        fake.push(done("r1", &[("c1", "camera")])).await;
        let events = events_until_response_create(&fake).await;
        assert!(
            !events.iter().any(|e| e["item"]["type"] == "message"),
            "{name}: {events:?}"
        );
        let output = events
            .iter()
            .find(|e| e["item"]["type"] == "function_call_output")
            .map(|e| serde_json::from_str::<Value>(e["item"]["output"].as_str().unwrap()).unwrap())
            .unwrap();
        assert_eq!(
            output,
            json!({"result": "a photo", "_image_warnings": [format!(
                "1 image(s) not shown: this model session ({name} dialect) takes no images")]}),
            "{name}"
        );
    }
}
