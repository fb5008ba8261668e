//! Shared test fixtures: a real server on port 0 and small HTTP helpers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use actix::Addr;
use runtime_tools::actors::router::Router;
use runtime_tools::config::{CharacterSettings, Settings};
use runtime_tools::startup::Application;
use serde_json::Value;

/// Generous upper bound for any single HTTP exchange in tests (a loaded 2-core machine).
pub const HTTP_DEADLINE: Duration = Duration::from_secs(30);

pub struct TestApp {
    pub addr: SocketAddr,
    pub base: String,
    pub router: Addr<Router>,
    pub client: awc::Client,
    pub handle: actix_web::dev::ServerHandle,
}

/// Settings for a test server on 127.0.0.1:0 with these characters.
pub fn settings(characters: &[&str]) -> Settings {
    Settings {
        bind: "127.0.0.1:0".parse().unwrap(),
        characters: characters
            .iter()
            .map(|c| CharacterSettings {
                name: (*c).to_owned(),
            })
            .collect(),
        workers: Some(2),
        ..Settings::default()
    }
}

/// Starts the real server (through the same seam `main` uses) with these characters.
pub async fn spawn_app(characters: &[&str]) -> TestApp {
    spawn_app_with(settings(characters)).await
}

pub async fn spawn_app_with(settings: Settings) -> TestApp {
    let app = Application::build(settings).await.expect("server builds");
    let addr = app.local_addr();
    let router = app.router();
    let handle = app.handle();
    actix_web::rt::spawn(app.run_until_stopped());
    TestApp {
        addr,
        base: format!("http://{addr}"),
        router,
        client: test_client(),
        handle,
    }
}

/// A plain HTTP client with a deadline well above anything a test waits for.
pub fn test_client() -> awc::Client {
    awc::Client::builder()
        .timeout(HTTP_DEADLINE)
        .disable_redirects()
        .finish()
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// POSTs a JSON body; returns the status and the JSON answer.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let mut response = self
            .client
            .post(self.url(path))
            .send_json(body)
            .await
            .expect("request sent");
        let status = response.status().as_u16();
        let bytes = response.body().limit(64 << 20).await.expect("body read");
        (status, parse_json(&bytes))
    }

    /// POSTs raw bytes with the given Content-Type (or none).
    pub async fn post_raw(
        &self,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> (u16, Value) {
        let mut request = self.client.post(self.url(path));
        if let Some(ct) = content_type {
            request = request.insert_header(("content-type", ct));
        }
        let mut response = request.send_body(body).await.expect("request sent");
        let status = response.status().as_u16();
        let bytes = response.body().limit(64 << 20).await.expect("body read");
        (status, parse_json(&bytes))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let mut response = self
            .client
            .get(self.url(path))
            .send()
            .await
            .expect("request sent");
        let status = response.status().as_u16();
        let bytes = response.body().limit(64 << 20).await.expect("body read");
        (status, parse_json(&bytes))
    }

    pub async fn register(&self, body: &Value) -> (u16, Value) {
        self.post("/api/tools/register", body).await
    }

    /// The listing of one role (or all when `None`), as `{role: [names]}`.
    pub async fn tool_names(&self, role: Option<&str>) -> Value {
        let path = match role {
            Some(r) => format!("/api/tools?role={r}"),
            None => "/api/tools".to_owned(),
        };
        let (status, body) = self.get(&path).await;
        assert_eq!(status, 200, "{body}");
        let mut out = serde_json::Map::new();
        for (role, tools) in body["tools_by_role"].as_object().expect("tools_by_role") {
            let names: Vec<Value> = tools
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].clone())
                .collect();
            out.insert(role.clone(), Value::Array(names));
        }
        Value::Object(out)
    }
}

pub fn parse_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// A register body for `name` with the given callback URL and source (role null).
pub fn tool_body(name: &str, callback_url: &str, source: &str) -> Value {
    serde_json::json!({
        "name": name,
        "description": format!("{name} tool"),
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "callback_url": callback_url,
        "role": null,
        "source": source,
        "timeout_seconds": 30
    })
}
