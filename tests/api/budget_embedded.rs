//! A character's tool budget in an application's in-process session (`SessionHandle::embedded`):
//! it is handed the pinned tools and `find_tools` within the budget; its model's `find_tools`,
//! run with the dispatcher like any tool of the character, is answered by the server — searched,
//! announced (`tool.search`, kind `embedded`), the tools found appended to the session's set by a
//! `SyncTools` the session acknowledges before the answer comes back — and a call of a found
//! tool reaches its plugin. `search = "off"` says `over_budget` for it in `GET /api/sessions`.

use std::sync::{Arc, Mutex};

use actix::Actor;
use futures_util::FutureExt;
use runtime_tools::embedding::ToolResult;
use runtime_tools::embedding::{
    CloseSession, ConnectionKind, ConnectionReport, ConnectionState, Conversation, SessionHandle,
    SessionStatus, SyncError, SyncTools, rfc3339_now,
};
use runtime_tools::{Budget, JoinSession, SearchMode, SharedTool, ToolCall};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::budget_sessions::{budget, companion_tools, counter, mio_connection, register_all};
use crate::callback_server::{CallbackServer, Reply};
use crate::event_stream::open;
use crate::fake_realtime::EVENT_DEADLINE;
use crate::helpers::{TestApp, settings, spawn_app_with};

/// What the application's session saw and did, in order.
type Log = Arc<Mutex<Vec<String>>>;

/// An application's in-process session: it keeps each list it is handed, tells the test its
/// names, and acknowledges it — a list that holds the tool named in `gate` only once the test
/// opens the gate.
struct AppSession {
    tools: Arc<Mutex<Arc<[SharedTool]>>>,
    lists: mpsc::UnboundedSender<Vec<String>>,
    gate: Option<(String, oneshot::Receiver<()>)>,
    /// Lists that hold this tool are refused.
    refuse: Option<String>,
    log: Log,
}

impl actix::Actor for AppSession {
    type Context = actix::Context<Self>;
}

impl actix::Handler<SyncTools> for AppSession {
    type Result = actix::ResponseFuture<Result<(), SyncError>>;

    fn handle(&mut self, SyncTools(tools): SyncTools, _: &mut Self::Context) -> Self::Result {
        let names: Vec<String> = tools.iter().map(|t| t.name.clone()).collect();
        *self.tools.lock().unwrap() = tools;
        let _ = self.lists.send(names.clone());
        let gate = match &self.gate {
            Some((name, _)) if names.contains(name) => self.gate.take().map(|(_, gate)| gate),
            _ => None,
        };
        let log = self.log.clone();
        let refused = self
            .refuse
            .as_ref()
            .is_some_and(|name| names.contains(name));
        async move {
            if refused {
                return Err(SyncError::Other("the model takes no more tools".into()));
            }
            if let Some(gate) = gate {
                let _ = gate.await;
            }
            log.lock()
                .unwrap()
                .push(format!("acknowledged {}", names.join(",")));
            Ok(())
        }
        .boxed_local()
    }
}

impl actix::Handler<SessionStatus> for AppSession {
    type Result = actix::MessageResult<SessionStatus>;

    fn handle(&mut self, _: SessionStatus, _: &mut Self::Context) -> Self::Result {
        let offered = self.tools.lock().unwrap().len();
        actix::MessageResult(ConnectionReport {
            kind: ConnectionKind::Embedded,
            since: rfc3339_now(),
            upstream: None,
            state: ConnectionState::Connected,
            last_sync: None,
            acknowledged_tools: offered,
            calls_answered: 0,
            clashes: Vec::new(),
            offered_tools: offered,
            // The application does not know; the server says it.
            over_budget: false,
            gemini: None,
            running_calls: Vec::new(),
            conversation: Conversation::Idle,
        })
    }
}

impl actix::Handler<CloseSession> for AppSession {
    type Result = ();

    fn handle(&mut self, _: CloseSession, ctx: &mut Self::Context) {
        actix::ActorContext::stop(ctx);
    }
}

/// The application's side of the session, as the test drives it.
struct App {
    tools: Arc<Mutex<Arc<[SharedTool]>>>,
    lists: mpsc::UnboundedReceiver<Vec<String>>,
    log: Log,
}

impl App {
    /// Joins Mio with a session whose acknowledgement of a list holding `gate`'s tool waits for
    /// the gate.
    async fn join(app: &TestApp, gate: Option<(&str, oneshot::Receiver<()>)>) -> Self {
        Self::join_refusing(app, gate, None).await
    }

    /// The same, with a session that refuses lists holding the tool `refuse`.
    async fn join_refusing(
        app: &TestApp,
        gate: Option<(&str, oneshot::Receiver<()>)>,
        refuse: Option<&str>,
    ) -> Self {
        let tools = Arc::new(Mutex::new(Arc::from([])));
        let (sender, lists) = mpsc::unbounded_channel();
        let log = Log::default();
        let session = AppSession {
            tools: tools.clone(),
            lists: sender,
            gate: gate.map(|(name, gate)| (name.to_owned(), gate)),
            refuse: refuse.map(str::to_owned),
            log: log.clone(),
        }
        .start();
        app.router
            .send(JoinSession {
                role: "Mio".into(),
                session: SessionHandle::embedded(&session),
            })
            .await
            .unwrap()
            .unwrap();
        Self { tools, lists, log }
    }

    /// The names of the next list the session is handed.
    async fn next_list(&mut self) -> Vec<String> {
        tokio::time::timeout(EVENT_DEADLINE, self.lists.recv())
            .await
            .expect("a list within the deadline")
            .expect("the session runs")
    }

    /// The tool `name` of the latest list the session holds.
    fn tool(&self, name: &str) -> SharedTool {
        let tools = self.tools.lock().unwrap();
        tools
            .iter()
            .find(|t| t.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} is not in the session's list"))
    }

    /// Runs the model's call of `name`, as an application runs any call of the character's
    /// tools: found in the latest list, run with the dispatcher.
    fn call(
        &self,
        app: &TestApp,
        name: &str,
        arguments: &str,
    ) -> impl Future<Output = ToolResult> + use<> {
        let tool = self.tool(name);
        let call = ToolCall::from_raw(format!("call_{name}"), name.into(), arguments.into());
        let dispatcher = app.dispatcher.clone();
        async move { dispatcher.dispatch(&tool, call).await }
    }
}

/// A server whose Mio (no session of its own) has `tools` as its budget.
async fn app_with(tools: Budget) -> TestApp {
    let mut settings = settings(&["Mio"]);
    settings.characters[0].tools = tools;
    spawn_app_with(settings).await
}

#[actix_web::test]
async fn an_in_process_session_gets_the_tools_its_model_found_before_the_answer_comes_back() {
    let callback = CallbackServer::with("/cb", Reply::output(json!({"temp_c": 21})));
    let app = app_with(budget(8, &["clock", "lights_on"], SearchMode::Auto)).await;
    register_all(&app, &companion_tools(&callback, 40)).await;
    let (release, gate) = oneshot::channel();
    let mut session = App::join(&app, Some(("get_weather", gate))).await;

    // Over budget: the pinned tools (in registration order) and find_tools, nothing else.
    assert_eq!(
        session.next_list().await,
        ["lights_on", "clock", "find_tools"]
    );
    let find_tools = session.tool("find_tools");
    assert_eq!(
        find_tools.parameters.schema()["required"],
        json!(["query"]),
        "{}",
        Value::Object(find_tools.parameters.schema().clone())
    );
    let connection = mio_connection(&app).await;
    assert_eq!(
        (
            &connection["kind"],
            &connection["offered_tools"],
            &connection["over_budget"]
        ),
        (&json!("embedded"), &json!(3), &json!(false)),
        "{connection}"
    );
    let revealed_before = counter(&app, "runtime_tools_tools_revealed_total", "embedded").await;

    // The model searches. The list with what it found is handed to the session; the answer
    // waits for the session's acknowledgement of it.
    let mut events = open(&app, "?role=Mio", None).await.expect("stream opens");
    let search = session.call(
        &app,
        "find_tools",
        r#"{"query": "weather forecast for a city", "limit": 1}"#,
    );
    let (answered, answer) = oneshot::channel();
    let log = session.log.clone();
    log.lock().unwrap().clear();
    actix_web::rt::spawn(async move {
        let result = search.await;
        log.lock().unwrap().push("answered".into());
        let _ = answered.send(result);
    });
    let mut answer = answer;
    let grown = ["lights_on", "clock", "find_tools", "get_weather"];
    assert_eq!(session.next_list().await, grown);
    // Everything ready to run runs before the gate opens: the answer is not among it.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(
        answer.try_recv().is_err(),
        "find_tools was answered before the session acknowledged the tools it found"
    );
    release.send(()).unwrap();
    let result = tokio::time::timeout(EVENT_DEADLINE, answer)
        .await
        .expect("the answer within the deadline")
        .expect("the search ran");
    assert_eq!(
        *session.log.lock().unwrap(),
        [
            format!("acknowledged {}", grown.join(",")),
            "answered".into()
        ]
    );
    assert!(!result.is_error, "{}", result.model_text());
    let output: Value = serde_json::from_str(&result.model_text()).unwrap();
    assert_eq!(
        output,
        json!({"tools": [{"name": "get_weather",
                          "description": "Current weather and forecast for a city"}],
               "note": "these tools can be called now"})
    );

    // Seen: announced with the session's kind, and counted.
    let searched = events.wait_for("tool.search", |_| true).await.data;
    assert_eq!(
        searched,
        json!({"role": "Mio", "query_length": 27, "found": ["get_weather"], "kind": "embedded"})
    );
    assert_eq!(
        counter(&app, "runtime_tools_tools_revealed_total", "embedded").await,
        revealed_before + 1.0
    );

    // The model calls the tool it found: it reaches the plugin.
    let weather = session
        .call(&app, "get_weather", r#"{"city": "Kyoto"}"#)
        .await;
    assert_eq!(weather.model_text(), r#"{"temp_c":21}"#);
    let received = callback.wait_for_requests(1).await;
    assert_eq!(
        (
            &received[0].json()["name"],
            &received[0].json()["arguments"]
        ),
        (&json!("get_weather"), &json!({"city": "Kyoto"}))
    );
    let connection = mio_connection(&app).await;
    assert_eq!(connection["offered_tools"], json!(4), "{connection}");

    // A bad search is a tool error the model reads; nothing is searched or handed.
    let bad = session.call(&app, "find_tools", r#"{"limit": 3}"#).await;
    assert!(bad.is_error);
    let bad: Value = serde_json::from_str(&bad.model_text()).unwrap();
    assert!(
        bad["error"].as_str().unwrap().contains("query"),
        "the error names the missing field: {bad}"
    );
    // A search that finds what the session has answers at once, with no new list.
    let again = session
        .call(
            &app,
            "find_tools",
            r#"{"query": "weather forecast for a city", "limit": 1}"#,
        )
        .await;
    assert!(!again.is_error, "{}", again.model_text());
    assert!(session.lists.try_recv().is_err(), "a list was handed again");
}

#[actix_web::test]
async fn with_search_off_an_in_process_session_keeps_within_the_budget_and_is_over_it() {
    let callback = CallbackServer::with("/cb", Reply::output(json!("ok")));
    let app = app_with(budget(4, &["clock"], SearchMode::Off)).await;
    register_all(&app, &companion_tools(&callback, 12)).await;
    let mut session = App::join(&app, None).await;
    // The pinned, then the most recently registered, in registration order.
    assert_eq!(
        session.next_list().await,
        ["clock", "chore_09", "chore_10", "chore_11"]
    );
    let connection = mio_connection(&app).await;
    assert_eq!(
        (&connection["offered_tools"], &connection["over_budget"]),
        (&json!(4), &json!(true)),
        "{connection}"
    );
}

#[actix_web::test]
async fn a_list_the_in_process_session_refuses_makes_the_search_a_tool_error() {
    let callback = CallbackServer::with("/cb", Reply::output(json!("ok")));
    let app = app_with(budget(8, &[], SearchMode::Auto)).await;
    register_all(&app, &companion_tools(&callback, 40)).await;
    let mut session = App::join_refusing(&app, None, Some("get_weather")).await;
    assert_eq!(session.next_list().await, ["find_tools"]);
    let search = session
        .call(
            &app,
            "find_tools",
            r#"{"query": "weather forecast for a city"}"#,
        )
        .await;
    assert_eq!(session.next_list().await[1], "get_weather");
    assert!(search.is_error);
    let output: Value = serde_json::from_str(&search.model_text()).unwrap();
    assert_eq!(
        output,
        json!({"error": "the tools found could not be added to the session: the model takes no \
                         more tools", "is_error": true})
    );
}
