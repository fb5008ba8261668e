//! `runtime-tools mcp`: a stdio MCP server exposing one character's tools.
//!
//! It is a client of a running runtime-tools server: `tools/list` reads
//! `GET /api/tools?detail=full`, `tools/call` goes through `POST /api/tools/invoke` (the model's
//! own path: same dispatcher, same result mapping), and `notifications/tools/list_changed` follows
//! `GET /api/events`. Errors are `isError` results carrying the text the model would see. Stdout
//! is the protocol: everything else goes to the log on stderr.
//!
//! A call's arguments reach the server exactly as the client wrote them, as the model's do:
//! stdin passes through a tap that keeps the text of each `tools/call`'s `arguments` by request
//! id ([`ExactArguments`]) before the SDK parses it (parsing rounds numbers beyond an `f64`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, ErrorData, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerInfo, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use sse_stream::SseStream;

use super::exact;
use crate::domain::call::{JsonText, Outcome, ToolResult};

/// The server `runtime-tools mcp` talks to unless told otherwise: the default bind address.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:48911";

/// Longest wait for a listing: the server answers it from memory, so this only catches a server
/// that stopped answering.
pub(crate) const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest wait for an invoke: the longest tool timeout (300 s) and a margin for the server.
pub(crate) const INVOKE_TIMEOUT: Duration = Duration::from_secs(330);

/// First wait before reconnecting to the event stream; doubled per failure up to
/// [`MAX_EVENTS_BACKOFF`].
pub(crate) const EVENTS_BACKOFF: Duration = Duration::from_millis(250);

/// Longest wait between reconnections to the event stream: a restarted server is noticed within
/// this time.
pub(crate) const MAX_EVENTS_BACKOFF: Duration = Duration::from_secs(5);

/// What to serve: the server's address and the character whose tools to expose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeSettings {
    /// The runtime-tools server's base URL, e.g. `http://127.0.0.1:48911`.
    pub server: String,
    /// The character; `None`: every character's tools, each name resolved as invoke resolves it
    /// (the first character, in configuration order, that has it).
    pub role: Option<String>,
}

/// Calls whose argument text is kept while the SDK has not asked for it yet. Each is taken when
/// its call runs, at once; only messages the SDK refuses (malformed ones) leave theirs behind, so
/// this bounds what a misbehaving client can make the tap hold.
pub(crate) const MAX_KEPT_ARGUMENTS: usize = 1024;

/// Bytes of stdin the tap reads ahead of the SDK: one pipe's worth.
const TAP_BUFFER: usize = 64 * 1024;

/// Serves MCP on stdin / stdout until the client closes it.
pub async fn run(settings: ServeSettings) -> anyhow::Result<()> {
    let exact = ExactArguments::default();
    let (sdk_side, tap_side) = tokio::io::duplex(TAP_BUFFER);
    tokio::spawn(tap(tokio::io::stdin(), tap_side, exact.clone()));
    serve_with(settings, (sdk_side, tokio::io::stdout()), exact).await
}

async fn serve_with<T, E, A>(
    settings: ServeSettings,
    transport: T,
    exact: ExactArguments,
) -> anyhow::Result<()>
where
    T: rmcp::transport::IntoTransport<RoleServer, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let api = Api::new(&settings)?;
    let handler = CharacterTools {
        api: api.clone(),
        exact,
    };
    let running = handler
        .serve(transport)
        .await
        .context("the MCP client did not complete the initialize handshake")?;
    tracing::info!(server = %api.base, role = ?api.role, "serving MCP on stdio");
    let watcher = tokio::spawn(watch_events(api, running.peer().clone()));
    let reason = running.waiting().await;
    watcher.abort();
    tracing::info!(reason = ?reason, "MCP client went away");
    Ok(())
}

/// The runtime-tools HTTP API, as this command uses it.
#[derive(Clone)]
struct Api {
    http: reqwest::Client,
    base: Arc<str>,
    role: Option<String>,
}

impl Api {
    fn new(settings: &ServeSettings) -> anyhow::Result<Self> {
        let base = settings.server.trim_end_matches('/');
        let url = url::Url::parse(base).with_context(|| format!("--server {base:?}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            anyhow::bail!("--server {base:?}: must be an http:// URL");
        }
        let http = reqwest::Client::builder()
            // The server is local: an HTTP proxy of the environment must not see the calls.
            .no_proxy()
            .build()
            .context("HTTP client")?;
        Ok(Self {
            http,
            base: base.into(),
            role: settings.role.clone().filter(|r| !r.is_empty()),
        })
    }

    fn url(&self, path: &str) -> String {
        let mut url = format!("{}{path}", self.base);
        if let Some(role) = &self.role {
            let role: String = url::form_urlencoded::byte_serialize(role.as_bytes()).collect();
            url.push_str(if path.contains('?') { "&" } else { "?" });
            url.push_str("role=");
            url.push_str(&role);
        }
        url
    }

    fn unreachable(&self, e: impl std::fmt::Display) -> String {
        format!("runtime-tools server {} is not reachable: {e}", self.base)
    }

    async fn tools(&self) -> Result<Vec<Tool>, String> {
        let response = self
            .http
            .get(self.url("/api/tools?detail=full"))
            .timeout(LIST_TIMEOUT)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        let body: Value = response.json().await.map_err(|e| self.unreachable(e))?;
        if status != 200 {
            return Err(format!(
                "runtime-tools server answered the listing with HTTP {status}: {}",
                error_detail(&body)
            ));
        }
        Ok(listed_tools(&body))
    }

    /// Runs the call through the server's invoke route; `arguments` is the exact JSON text of
    /// the arguments object.
    async fn invoke(&self, name: &str, arguments: &RawValue) -> CallToolResult {
        let request = InvokeBody {
            name,
            arguments,
            role: self.role.as_deref(),
        };
        // Strings and exact JSON text: serialising cannot fail.
        let request = serde_json::to_vec(&request).unwrap_or_default();
        let answer = async {
            let response = self
                .http
                .post(format!("{}/api/tools/invoke", self.base))
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(request)
                .timeout(INVOKE_TIMEOUT)
                .send()
                .await?;
            let status = response.status().as_u16();
            Ok::<_, reqwest::Error>((status, response.text().await?))
        };
        match answer.await {
            Ok((200, body)) => call_result(&body),
            Ok((status, body)) => {
                tracing::debug!(status, tool = name, "invoke refused");
                let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
                error_result(name, error_detail(&body))
            }
            Err(e) => error_result(name, self.unreachable(e)),
        }
    }
}

/// The `detail` text of an error answer (or the whole body when it has none).
fn error_detail(body: &Value) -> String {
    match &body["detail"] {
        Value::String(text) => text.clone(),
        Value::Null => body.to_string(),
        other => other.to_string(),
    }
}

/// The tools of a `GET /api/tools?detail=full` answer as MCP tools: one role's (the only one a
/// `?role=` listing holds), or every role's with the first character's definition of each name.
fn listed_tools(listing: &Value) -> Vec<Tool> {
    let mut tools: Vec<Tool> = Vec::new();
    let roles = listing["tools_by_role"].as_object();
    for listed in roles
        .into_iter()
        .flat_map(|r| r.values())
        .flat_map(|t| t.as_array().into_iter().flatten())
    {
        let Some(name) = listed["name"].as_str() else {
            continue;
        };
        if tools.iter().any(|t| t.name == name) {
            continue;
        }
        let schema = match &listed["parameters"] {
            Value::Object(schema) => schema.clone(),
            _ => Map::from_iter([("type".to_owned(), json!("object"))]),
        };
        let description = listed["description"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        tools.push(Tool::new(name.to_owned(), description, Arc::new(schema)));
    }
    tools
}

/// The invoke answer (its exact text) as an MCP result: the text the model would get, the
/// output as `structuredContent` when it is a JSON object, and each delivered image as image
/// content.
fn call_result(body: &str) -> CallToolResult {
    #[derive(Deserialize)]
    struct Invoked {
        name: String,
        call_id: String,
        output: Option<JsonText>,
        #[serde(default)]
        is_error: bool,
        error: Option<String>,
        #[serde(default)]
        images: Vec<InvokedImage>,
    }
    #[derive(Deserialize)]
    struct InvokedImage {
        mime: String,
        data_b64: String,
    }
    let invoked: Invoked = match serde_json::from_str(body) {
        Ok(invoked) => invoked,
        Err(e) => {
            return CallToolResult::error(vec![ContentBlock::text(format!(
                "runtime-tools server answered invoke with an unexpected body ({e}): {body}"
            ))]);
        }
    };
    let result = ToolResult {
        call_id: invoked.call_id,
        model_call_id: None,
        name: invoked.name,
        output: invoked.output.unwrap_or_else(|| RawValue::NULL.to_owned()),
        is_error: invoked.is_error,
        error: invoked.error,
        images: Vec::new(),
        image_warnings: Vec::new(),
        scheduling: Default::default(),
        outcome: if invoked.is_error {
            Outcome::ToolError
        } else {
            Outcome::Ok
        },
        first_call_id: None,
    };
    let mut content = vec![ContentBlock::text(result.model_text())];
    content.extend(
        invoked
            .images
            .into_iter()
            .map(|image| ContentBlock::image(image.data_b64, image.mime)),
    );
    if result.is_error {
        return CallToolResult::error(content);
    }
    let mut success = CallToolResult::success(content);
    if let Ok(Value::Object(structured)) = serde_json::from_str::<Value>(result.output.get()) {
        success.structured_content = Some(Value::Object(structured));
    }
    success
}

/// An error result for a call that did not run, in the form the model sees errors.
fn error_result(name: &str, error: String) -> CallToolResult {
    let result = ToolResult {
        call_id: String::new(),
        model_call_id: None,
        name: name.to_owned(),
        output: RawValue::NULL.to_owned(),
        is_error: true,
        error: Some(error),
        images: Vec::new(),
        image_warnings: Vec::new(),
        scheduling: Default::default(),
        outcome: Outcome::ToolError,
        first_call_id: None,
    };
    CallToolResult::error(vec![ContentBlock::text(result.model_text())])
}

/// The body of an invoke, the arguments as exact text.
#[derive(serde::Serialize)]
struct InvokeBody<'a> {
    name: &'a str,
    arguments: &'a RawValue,
    role: Option<&'a str>,
}

/// The exact text of each `tools/call`'s arguments, by request id, from the tap until the call
/// takes it.
#[derive(Clone, Default)]
struct ExactArguments(Arc<Mutex<KeptArguments>>);

#[derive(Default)]
struct KeptArguments {
    by_id: HashMap<String, JsonText>,
    /// Ids in arrival order, to forget the oldest past [`MAX_KEPT_ARGUMENTS`].
    order: VecDeque<String>,
}

impl ExactArguments {
    fn keep(&self, id: String, arguments: JsonText) {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.by_id.insert(id.clone(), arguments).is_none() {
            kept.order.push_back(id);
        }
        while kept.order.len() > MAX_KEPT_ARGUMENTS {
            if let Some(oldest) = kept.order.pop_front() {
                kept.by_id.remove(&oldest);
            }
        }
    }

    /// The text kept for call `id`, if it is the text of `parsed` (what the SDK made of the same
    /// message): a message the tap read differently is never used.
    fn take(&self, id: &str, parsed: &Map<String, Value>) -> Option<JsonText> {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let text = kept.by_id.remove(id)?;
        kept.order.retain(|k| k != id);
        drop(kept);
        exact::if_parsed_as(text, parsed)
    }
}

/// Copies the client's messages (one per line) from `input` to the SDK, keeping the exact
/// argument text of every `tools/call` in `exact` first.
async fn tap<R, W>(input: R, mut sdk: W, exact: ExactArguments)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut input = tokio::io::BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        keep_arguments(&line, &exact);
        if sdk.write_all(&line).await.is_err() {
            break;
        }
    }
    // The client closed stdin: so does the SDK's side.
    let _ = sdk.shutdown().await;
}

/// Keeps the argument text of each `tools/call` request in `line` (a message or a batch).
fn keep_arguments(line: &[u8], exact: &ExactArguments) {
    let one = |message: &RawValue| {
        if let Some((id, arguments)) = exact::tools_call_arguments(message) {
            exact.keep(id.to_string(), arguments);
        }
    };
    let Ok(message) = serde_json::from_slice::<&RawValue>(line) else {
        return;
    };
    if message.get().starts_with('[') {
        if let Ok(batch) = serde_json::from_str::<Vec<&RawValue>>(message.get()) {
            batch.into_iter().for_each(one);
        }
    } else {
        one(message);
    }
}

/// The MCP server: one character's tools.
struct CharacterTools {
    api: Api,
    exact: ExactArguments,
}

impl ServerHandler for CharacterTools {
    fn get_info(&self) -> ServerInfo {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        let name = match &self.api.role {
            Some(role) => format!("the tools of {role} on runtime-tools"),
            None => "the tools of every character on runtime-tools".to_owned(),
        };
        ServerInfo::new(capabilities)
            .with_server_info(
                Implementation::new("runtime-tools", env!("CARGO_PKG_VERSION")).with_title(name),
            )
            .with_instructions(
                "Tools that local plugins registered with a runtime-tools server. Each call runs \
                 as the model's call would; errors come back as isError results.",
            )
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .api
            .tools()
            .await
            .map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let parsed = request.arguments.unwrap_or_default();
        let id = serde_json::to_string(&context.id).unwrap_or_default();
        // The client's own text when the tap kept it (it always does under `run`); otherwise
        // the SDK's parse, written out again.
        let arguments = self.exact.take(&id, &parsed).unwrap_or_else(|| {
            let text = serde_json::to_string(&parsed).unwrap_or_else(|_| "{}".to_owned());
            RawValue::from_string(text).unwrap_or_else(|_| RawValue::NULL.to_owned())
        });
        Ok(self.api.invoke(&request.name, &arguments).await)
    }
}

/// Follows `GET /api/events` and tells the client to list again when the tools may have
/// changed: on every `tools.changed` that affected a role, and on reconnecting (what happened
/// while the stream was down is unknown). Reconnects with a capped backoff.
async fn watch_events(api: Api, peer: Peer<RoleServer>) {
    let mut backoff = EVENTS_BACKOFF;
    let mut connected_before = false;
    loop {
        match follow(&api, &peer, &mut connected_before).await {
            Ok(()) => backoff = EVENTS_BACKOFF,
            Err(e) => tracing::debug!(error = %e, "event stream unavailable"),
        }
        if peer.is_transport_closed() {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_EVENTS_BACKOFF);
    }
}

/// One connection to the event stream, until it ends.
async fn follow(
    api: &Api,
    peer: &Peer<RoleServer>,
    connected_before: &mut bool,
) -> Result<(), String> {
    let response = api
        .http
        .get(api.url("/api/events"))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let mut events = SseStream::from_bytes_stream(response.bytes_stream());
    while let Some(event) = events.next().await {
        let event = event.map_err(|e| e.to_string())?;
        let changed = match event.event.as_deref() {
            Some("hello") => std::mem::replace(connected_before, true),
            Some("reset") => true,
            Some("tools.changed") => event
                .data
                .as_deref()
                .and_then(|d| serde_json::from_str::<Value>(d).ok())
                .is_some_and(|d| {
                    d["affected_roles"]
                        .as_array()
                        .is_some_and(|r| !r.is_empty())
                }),
            _ => false,
        };
        if changed && peer.notify_tool_list_changed().await.is_err() {
            return Ok(());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tap_keeps_each_calls_argument_text_until_its_call_takes_it() {
        let exact = ExactArguments::default();
        let big = r#"{"n": 123456789012345678901234567890, "s": "\u00e9"}"#;
        keep_arguments(
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"t","arguments":{big}}}}}"#
            )
            .as_bytes(),
            &exact,
        );
        // A batch, a string id, and messages that are not calls.
        keep_arguments(
            br#"[{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"t","arguments":{"x":1}}},{"jsonrpc":"2.0","method":"notifications/initialized"}]"#,
            &exact,
        );
        keep_arguments(br#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#, &exact);
        keep_arguments(b"not json", &exact);
        let parsed: Map<String, Value> = serde_json::from_str(big).unwrap();
        assert_eq!(exact.take("7", &parsed).unwrap().get(), big);
        assert!(exact.take("7", &parsed).is_none(), "taken once");
        let x: Map<String, Value> = serde_json::from_str(r#"{"x": 1}"#).unwrap();
        assert_eq!(exact.take("\"a\"", &x).unwrap().get(), r#"{"x":1}"#);
        assert!(exact.take("8", &Map::new()).is_none());
        // Text that is not what the SDK parsed is never used.
        keep_arguments(
            br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"t","arguments":{"x":2}}}"#,
            &exact,
        );
        assert!(exact.take("9", &x).is_none());
    }

    #[test]
    fn the_tap_forgets_the_oldest_past_its_bound() {
        let exact = ExactArguments::default();
        for id in 0..MAX_KEPT_ARGUMENTS + 10 {
            exact.keep(id.to_string(), RawValue::from_string("{}".into()).unwrap());
        }
        let kept = exact.0.lock().unwrap();
        assert_eq!(kept.by_id.len(), MAX_KEPT_ARGUMENTS);
        assert!(!kept.by_id.contains_key("9") && kept.by_id.contains_key("10"));
    }

    #[test]
    fn listing_becomes_mcp_tools_first_definition_wins() {
        let listing = json!({"ok": true, "tools_by_role": {
            "A": [{"name": "t", "description": "from A", "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}],
            "B": [{"name": "t", "description": "from B", "parameters": {}},
                  {"name": "u", "description": "", "parameters": {"type": "object"}}]
        }});
        let tools = listed_tools(&listing);
        let seen: Vec<(String, String)> = tools
            .iter()
            .map(|t| {
                (
                    t.name.to_string(),
                    t.description.clone().unwrap_or_default().to_string(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [("t".into(), "from A".into()), ("u".into(), "".into())]
        );
        assert_eq!(
            Value::Object((*tools[0].input_schema).clone()),
            json!({"type": "object", "properties": {"x": {"type": "string"}}})
        );
    }

    #[test]
    fn results_carry_the_models_text() {
        let ok = call_result(
            r#"{"ok": true, "name": "t", "call_id": "c", "output": {"a": 1, "big": 123456789012345678901234567890}, "is_error": false}"#,
        );
        assert_eq!(ok.is_error, Some(false));
        assert_eq!(
            ok.content[0].as_text().unwrap().text,
            r#"{"a": 1, "big": 123456789012345678901234567890}"#
        );
        assert!(ok.structured_content.is_some());

        let text = call_result(
            r#"{"ok": true, "name": "t", "call_id": "c", "output": "hi", "is_error": false}"#,
        );
        assert_eq!(text.content[0].as_text().unwrap().text, r#""hi""#);
        assert_eq!(text.structured_content, None);

        let failed = call_result(
            r#"{"ok": true, "name": "t", "call_id": "c", "output": null, "is_error": true, "error": "boom"}"#,
        );
        assert_eq!(failed.is_error, Some(true));
        assert_eq!(
            failed.content[0].as_text().unwrap().text,
            r#"{"error":"boom","is_error":true}"#
        );
    }
}
