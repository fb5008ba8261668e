//! In-process benchmarks: the router driven with actor messages, as an in-process plugin would.
//!
//! One long-lived actix `System` runs for the whole binary; every measurement is a batch of
//! iterations run inside one `block_on`, timed with `iter_custom`, so the figures include the
//! mailbox hops but no per-iteration runtime start-up. Groups:
//!
//! - `register` / `unregister` / `clear`: a role-null change fanned out to 1, 8, 64, 256
//!   characters;
//! - `list`: `ListTools` over 1 and 8 characters holding 10, 100, 1000 tools each;
//! - `dispatch`: a remote tool against a loopback callback server started here, next to a bare
//!   awc POST of the same body to the same server (the floor), and an in-process local tool;
//! - `arguments`: checking a call's argument text against the benchmark tool's schema and a large
//!   one (30 properties, nested objects), valid and not; compiling each schema, and taking one
//!   already in use (what a registration adds);
//! - `session`: register to one character with and without a live session whose (fake) model
//!   peer acknowledges every `session.update` at once;
//! - `limits`: a model's call of the remote tool through the call policy and the dispatcher, as a
//!   session core makes it, for the tool without limits (`no_limits`) and with limits that never
//!   hold a call back (`limits_unbound`: `max_concurrent` 1024, a rate it never reaches,
//!   `dedupe_seconds` 5 with distinct arguments), beside the dispatcher alone (`dispatch`: no
//!   policy in front); the three alternate, round after round, in one run;
//! - `register_1000`: register on one character that holds 1,000 tools, cycling over their
//!   names: `same_definition` (a plugin registering its tools again) and `new_definition` (each
//!   registration a new description, so the tool's search terms are worked out and indexed).
//!
//! Figures and method: docs/benchmarks.md. Run: `cargo bench --bench router [FILTER]`.

use std::time::{Duration, Instant};

use actix::prelude::*;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use futures_util::StreamExt;
use runtime_tools::bench::BenchPolicy;
use runtime_tools::embedding::ConnectionState;
use runtime_tools::{
    CallLimits, CallLocalTool, CallbackUrl, CharacterSettings, ClearSource, Dialect,
    DispatchSettings, EventHub, EventSettings, ListSessions, ListTools, Parameters, Rate,
    RegisterTool, ResolveTool, Router, SessionSettings, SharedTool, ToolCall, ToolOutcome,
    ToolSpec, UnregisterTool, local_handler,
};
use serde_json::{Map, Value, json};

/// Character counts of the fan-out grid (the issue's grid).
const FAN_OUT: [usize; 4] = [1, 8, 64, 256];
/// Tools per character of the list grid.
const TOOLS_PER_CHARACTER: [usize; 3] = [10, 100, 1000];
/// Distinct names the register benchmark cycles over, so most registrations replace a tool, as
/// in the HTTP harness.
const NAME_CYCLE: usize = 100;
/// What the callback server answers: the same body as the nginx callback of the HTTP harness.
const CALLBACK_REPLY: &str = r#"{"output": {"temperature_c": 28}, "is_error": false}"#;
/// Tools the character of the `register_1000` group holds.
const HELD_TOOLS: usize = 1000;
/// Tools per character of the session grid.
const SESSION_TOOLS: [usize; 3] = [1, 26, 100];
/// Longest wait for the fake model peer to be connected before the session group starts.
const SESSION_CONNECT_DEADLINE: Duration = Duration::from_secs(20);
/// Rounds of the limits group: its variants alternate, so a drift of the shared machine shows
/// as a difference between rounds rather than between variants.
const LIMITS_ROUNDS: u32 = 3;

/// The parameters of the HTTP harness's tool (`tool_body` of benches/http/run.sh).
fn schema() -> Map<String, Value> {
    let Value::Object(schema) = json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["c", "f"]}
        },
        "required": ["city"]
    }) else {
        unreachable!()
    };
    schema
}

fn parameters(schema: Map<String, Value>) -> Parameters {
    Parameters::new(schema).expect("a valid schema")
}

/// The register body of the HTTP harness, as a domain value.
fn remote_tool(name: &str, callback: &str) -> ToolSpec {
    ToolSpec::remote(
        name,
        "Benchmark tool: get the current weather for a city.",
        parameters(schema()),
        "plugin:bench",
        CallbackUrl::parse(&format!("{callback}/tools/{name}")).expect("a loopback callback URL"),
        Duration::from_secs(30),
    )
}

fn call(i: u64) -> ToolCall {
    let mut arguments = Map::new();
    arguments.insert("city".into(), json!("Tokyo"));
    arguments.insert("unit".into(), json!("c"));
    ToolCall::from_arguments(format!("call_{i}"), "tool_000".into(), arguments)
}

fn characters(n: usize) -> Vec<CharacterSettings> {
    (0..n)
        .map(|i| CharacterSettings::new(format!("role{i}")))
        .collect()
}

/// An event hub nobody subscribes to: publishing is part of every change, as in the server.
fn events() -> EventHub {
    EventHub::new(&EventSettings::default())
}

fn launch(sys: &SystemRunner, n: usize) -> Addr<Router> {
    sys.block_on(async { Router::launch(characters(n), &DispatchSettings::default(), events()).0 })
}

/// Times `iters` runs of `step` inside the long-lived system.
fn timed<F, Fut>(sys: &SystemRunner, iters: u64, mut step: F) -> Duration
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = ()>,
{
    sys.block_on(async {
        let start = Instant::now();
        for i in 0..iters {
            step(i).await;
        }
        start.elapsed()
    })
}

/// Like [`timed`], but `setup` runs untimed before each step.
fn timed_with_setup<S, SFut, F, Fut>(
    sys: &SystemRunner,
    iters: u64,
    mut setup: S,
    mut step: F,
) -> Duration
where
    S: FnMut(u64) -> SFut,
    SFut: Future<Output = ()>,
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = ()>,
{
    sys.block_on(async {
        let mut total = Duration::ZERO;
        for i in 0..iters {
            setup(i).await;
            let start = Instant::now();
            step(i).await;
            total += start.elapsed();
        }
        total
    })
}

async fn register(router: &Addr<Router>, tool: ToolSpec, role: Option<&str>) {
    let report = router
        .send(RegisterTool {
            tool,
            role: role.map(str::to_owned),
        })
        .await
        .expect("router answers")
        .expect("registered");
    assert!(report.failed_roles.is_empty(), "{report:?}");
}

fn fan_out(c: &mut Criterion, sys: &SystemRunner) {
    let callback = "http://127.0.0.1:9";
    let names: Vec<String> = (0..NAME_CYCLE).map(|k| format!("tool_{k:03}")).collect();
    for n in FAN_OUT {
        let router = launch(sys, n);
        let mut group = c.benchmark_group("register");
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter_custom(|iters| {
                timed(sys, iters, |i| {
                    let tool = remote_tool(&names[i as usize % NAME_CYCLE], callback);
                    let router = &router;
                    async move { register(router, tool, None).await }
                })
            })
        });
        group.finish();

        let mut group = c.benchmark_group("unregister");
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter_custom(|iters| {
                timed_with_setup(
                    sys,
                    iters,
                    |_| register(&router, remote_tool("doomed", callback), None),
                    |_| async {
                        let report = router
                            .send(UnregisterTool {
                                name: "doomed".into(),
                                role: None,
                            })
                            .await
                            .expect("router answers")
                            .expect("unregistered");
                        assert_eq!(report.removed, n);
                    },
                )
            })
        });
        group.finish();

        let mut group = c.benchmark_group("clear");
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter_custom(|iters| {
                timed_with_setup(
                    sys,
                    iters,
                    |_| {
                        let mut tool = remote_tool("doomed", callback);
                        tool.source = "plugin:doomed".into();
                        register(&router, tool, None)
                    },
                    |_| async {
                        let report = router
                            .send(ClearSource {
                                source: "plugin:doomed".into(),
                                role: None,
                            })
                            .await
                            .expect("router answers")
                            .expect("cleared");
                        assert_eq!(report.removed, n);
                    },
                )
            })
        });
        group.finish();
    }
}

fn list(c: &mut Criterion, sys: &SystemRunner) {
    let mut group = c.benchmark_group("list");
    for n in [1, 8] {
        for tools in TOOLS_PER_CHARACTER {
            let router = launch(sys, n);
            sys.block_on(async {
                for k in 0..tools {
                    register(
                        &router,
                        remote_tool(&format!("tool_{k:04}"), "http://127.0.0.1:9"),
                        None,
                    )
                    .await;
                }
            });
            let id = BenchmarkId::new(format!("{n}_characters"), tools);
            group.bench_with_input(id, &tools, |b, _| {
                b.iter_custom(|iters| {
                    timed(sys, iters, |_| async {
                        let roles = router
                            .send(ListTools { role: None })
                            .await
                            .expect("router answers")
                            .expect("listed");
                        assert_eq!(roles.len() * roles[0].tools.registry().len(), n * tools);
                    })
                })
            });
        }
    }
    group.finish();
}

/// A loopback callback server answering every POST like the nginx callback does.
fn start_callback_server(sys: &SystemRunner) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("bound").port();
    sys.block_on(async move {
        let server = HttpServer::new(|| {
            App::new().default_service(web::to(|| async {
                HttpResponse::Ok()
                    .content_type("application/json")
                    .body(CALLBACK_REPLY)
            }))
        })
        .workers(1)
        .listen(listener)
        .expect("listening")
        .run();
        actix_web::rt::spawn(server);
    });
    format!("http://127.0.0.1:{port}")
}

/// An in-process tool that answers at once.
struct Echo;

impl Actor for Echo {
    type Context = Context<Self>;
}

impl Handler<CallLocalTool> for Echo {
    type Result = ToolOutcome;

    fn handle(&mut self, CallLocalTool(call): CallLocalTool, _: &mut Self::Context) -> ToolOutcome {
        Ok(json!({"temperature_c": 28, "call_id": call.call_id}))
    }
}

fn dispatch(c: &mut Criterion, sys: &SystemRunner) {
    let callback = start_callback_server(sys);
    let (router, dispatcher) = sys
        .block_on(async { Router::launch(characters(1), &DispatchSettings::default(), events()) });
    let remote: SharedTool = std::sync::Arc::new(remote_tool("tool_000", &callback));
    sys.block_on(register(&router, remote_tool("tool_000", &callback), None));
    // The same dispatch with the arguments check switched off, to show what the check costs.
    let unchecked = sys.block_on(async {
        let settings = DispatchSettings {
            validate_arguments: false,
            ..DispatchSettings::default()
        };
        Router::launch(characters(1), &settings, events()).1
    });
    let local: SharedTool = sys.block_on(async {
        std::sync::Arc::new(ToolSpec::local(
            "tool_000",
            "Benchmark tool: answers at once.",
            parameters(schema()),
            "inproc:bench",
            local_handler(Echo.start().recipient()),
        ))
    });
    let client = sys.block_on(async { awc::Client::default() });
    let url = format!("{callback}/tools/tool_000");

    let mut group = c.benchmark_group("dispatch");
    group.bench_function("bare_awc_post", |b| {
        b.iter_custom(|iters| {
            timed(sys, iters, |i| {
                let request = client.post(&url).send_json(&call(i));
                async move {
                    let mut response = request.await.expect("callback answers");
                    let body = response.body().await.expect("body");
                    assert_eq!(body.len(), CALLBACK_REPLY.len());
                }
            })
        })
    });
    group.bench_function("remote", |b| {
        b.iter_custom(|iters| {
            timed(sys, iters, |i| {
                let (dispatcher, remote, call) = (&dispatcher, &remote, call(i));
                async move {
                    let result = dispatcher.dispatch(remote, call).await;
                    assert!(!result.is_error, "{result:?}");
                }
            })
        })
    });
    group.bench_function("remote_unchecked", |b| {
        b.iter_custom(|iters| {
            timed(sys, iters, |i| {
                let (dispatcher, remote, call) = (&unchecked, &remote, call(i));
                async move {
                    let result = dispatcher.dispatch(remote, call).await;
                    assert!(!result.is_error, "{result:?}");
                }
            })
        })
    });
    group.bench_function("resolve_and_remote", |b| {
        b.iter_custom(|iters| {
            timed(sys, iters, |i| {
                let (dispatcher, router, call) = (&dispatcher, &router, call(i));
                async move {
                    let resolved = router
                        .send(ResolveTool {
                            name: "tool_000".into(),
                            role: Some("role0".into()),
                        })
                        .await
                        .expect("router answers")
                        .expect("found");
                    let result = dispatcher.dispatch(&resolved.tool, call).await;
                    assert!(!result.is_error, "{result:?}");
                }
            })
        })
    });
    group.bench_function("local", |b| {
        b.iter_custom(|iters| {
            timed(sys, iters, |i| {
                let (dispatcher, local, call) = (&dispatcher, &local, call(i));
                async move {
                    let result = dispatcher.dispatch(local, call).await;
                    assert!(!result.is_error, "{result:?}");
                }
            })
        })
    });
    group.finish();
}

/// A model's call with arguments no other call of the run has (a distinct city), so a tool
/// that dedupes repeats runs every call (criterion restarts `i` at each batch).
fn distinct_call(i: u64) -> ToolCall {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut arguments = Map::new();
    arguments.insert("city".into(), json!(format!("city {n}")));
    arguments.insert("unit".into(), json!("c"));
    ToolCall::from_arguments(format!("call_{i}"), "tool_000".into(), arguments)
}

fn limits(c: &mut Criterion, sys: &SystemRunner) {
    let callback = start_callback_server(sys);
    let events = events();
    let dispatcher = sys.block_on(async {
        Router::launch(characters(1), &DispatchSettings::default(), events.clone()).1
    });
    let policy = BenchPolicy::new(events);
    let plain: SharedTool = std::sync::Arc::new(remote_tool("tool_000", &callback));
    // Every limit present, none ever reached: no run comes near 100,000 calls a second.
    let unbound: SharedTool =
        std::sync::Arc::new(remote_tool("tool_000", &callback).with_limits(CallLimits {
            max_concurrent: Some(1024),
            rate: Some(Rate {
                calls: 100_000,
                per_seconds: 1,
            }),
            dedupe_seconds: 5,
        }));
    let mut group = c.benchmark_group("limits");
    for round in 1..=LIMITS_ROUNDS {
        group.bench_function(BenchmarkId::new("dispatch", round), |b| {
            b.iter_custom(|iters| {
                timed(sys, iters, |i| {
                    let (dispatcher, tool, call) = (&dispatcher, &plain, distinct_call(i));
                    async move {
                        let result = dispatcher.dispatch(tool, call).await;
                        assert!(!result.is_error, "{result:?}");
                    }
                })
            })
        });
        for (name, tool) in [("no_limits", &plain), ("limits_unbound", &unbound)] {
            group.bench_function(BenchmarkId::new(name, round), |b| {
                b.iter_custom(|iters| {
                    timed(sys, iters, |i| {
                        let (policy, dispatcher, call) = (&policy, &dispatcher, distinct_call(i));
                        async move {
                            let result = policy.call(dispatcher, "role0", tool, call).await;
                            assert!(!result.is_error, "{result:?}");
                        }
                    })
                })
            });
        }
    }
    group.finish();
}

/// A large parameters schema: 30 properties — 10 constrained strings, 10 bounded numbers and 10
/// nested objects of three properties each — no unknown property allowed at either level.
fn large_schema() -> Map<String, Value> {
    let mut properties = Map::new();
    for k in 0..10 {
        properties.insert(
            format!("text_{k}"),
            json!({"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z ]+$"}),
        );
        properties.insert(
            format!("number_{k}"),
            json!({"type": "number", "minimum": 0, "maximum": 1000}),
        );
        properties.insert(
            format!("nested_{k}"),
            json!({"type": "object", "additionalProperties": false, "required": ["id", "kind"],
                   "properties": {"id": {"type": "integer", "minimum": 1},
                                  "kind": {"type": "string", "enum": ["a", "b", "c", "d"]},
                                  "tags": {"type": "array", "items": {"type": "string"},
                                           "maxItems": 8}}}),
        );
    }
    let required: Vec<String> = properties.keys().cloned().collect();
    let Value::Object(schema) = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    }) else {
        unreachable!()
    };
    schema
}

/// Arguments that fill every property of [`large_schema`] validly.
fn large_arguments() -> Value {
    let mut arguments = Map::new();
    for k in 0..10 {
        arguments.insert(format!("text_{k}"), json!("Tokyo Station"));
        arguments.insert(format!("number_{k}"), json!(k * 10));
        arguments.insert(
            format!("nested_{k}"),
            json!({"id": k + 1, "kind": "b", "tags": ["x", "y"]}),
        );
    }
    Value::Object(arguments)
}

fn arguments(c: &mut Criterion) {
    let bench_tool = parameters(schema());
    let large = parameters(large_schema());
    let mut wrong_large = large_arguments();
    wrong_large["number_3"] = json!(-1);
    wrong_large["nested_5"]["kind"] = json!("z");
    wrong_large["text_7"] = json!(7);
    let cases = [
        (
            "bench_tool_valid",
            &bench_tool,
            json!({"city": "Tokyo", "unit": "c"}),
        ),
        ("bench_tool_invalid", &bench_tool, json!({"unit": "kelvin"})),
        ("large_valid", &large, large_arguments()),
        ("large_invalid", &large, wrong_large),
    ];
    let mut group = c.benchmark_group("arguments");
    for (label, parameters, arguments) in cases {
        let raw = arguments.to_string();
        let valid = label.ends_with("_valid");
        group.bench_function(label, |b| {
            b.iter(|| {
                let checked = parameters.check(std::hint::black_box(&raw));
                assert_eq!(checked.is_ok(), valid);
                checked
            })
        });
    }
    // What parsing the large arguments alone costs: the check parses the argument text into a
    // JSON tree before validating it.
    let large_text = large_arguments().to_string();
    group.bench_function("parse_large", |b| {
        b.iter(|| serde_json::from_str::<Value>(std::hint::black_box(&large_text)).expect("JSON"))
    });
    // A schema no tool uses yet is compiled: each iteration's schema differs (its
    // `description`), so none is found among the schemas in use.
    for (label, schema) in [
        ("compile_bench_tool", schema()),
        ("compile_large", large_schema()),
    ] {
        let mut fresh = 0u64;
        group.bench_function(label, |b| {
            b.iter_batched(
                || {
                    fresh += 1;
                    let mut schema = schema.clone();
                    schema.insert("description".into(), json!(format!("schema {fresh}")));
                    schema
                },
                |schema| Parameters::new(schema).expect("a valid schema"),
                criterion::BatchSize::SmallInput,
            )
        });
    }
    // A schema some tool already uses (a plugin registering again) is shared, not compiled.
    let _in_use = parameters(schema());
    group.bench_function("in_use_bench_tool", |b| {
        b.iter_batched(
            schema,
            |schema| Parameters::new(schema).expect("a valid schema"),
            criterion::BatchSize::SmallInput,
        )
    });
    group.finish();
}

/// A fake model peer: greets with `session.created` and acknowledges every `session.update` at
/// once with `session.updated`.
fn start_fake_model(sys: &SystemRunner) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let port = listener.local_addr().expect("bound").port();
    sys.block_on(async move {
        let server =
            HttpServer::new(|| App::new().route("/v1/realtime", web::get().to(model_peer)))
                .workers(1)
                .listen(listener)
                .expect("listening")
                .run();
        actix_web::rt::spawn(server);
    });
    format!("ws://127.0.0.1:{port}/v1/realtime?model=fake")
}

/// The type of a client event.
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(borrow, rename = "type")]
    kind: std::borrow::Cow<'a, str>,
}

async fn model_peer(req: HttpRequest, body: web::Payload) -> actix_web::Result<HttpResponse> {
    let (response, mut session, stream) = actix_ws::handle(&req, body)?;
    let mut stream = stream.max_frame_size(64 << 20);
    actix_web::rt::spawn(async move {
        let created = json!({"type": "session.created", "event_id": "srv_0",
                             "session": {"type": "realtime", "id": "sess_fake"}});
        let _ = session.text(created.to_string()).await;
        while let Some(Ok(message)) = stream.next().await {
            let actix_ws::Message::Text(text) = message else {
                continue;
            };
            // Only the type is read, so the peer costs next to nothing; the acknowledgement
            // carries the whole update back, as real servers echo the session.
            let Ok(Head { kind }) = serde_json::from_str::<Head>(&text) else {
                continue;
            };
            if kind == "session.update" {
                let ack = format!(
                    r#"{{"type":"session.updated","event_id":"srv_ack","session":{text}}}"#
                );
                let _ = session.text(ack).await;
            }
        }
    });
    Ok(response)
}

/// A router with one character whose session is connected to the fake model peer at `url`.
fn session_router(sys: &SystemRunner, url: &str) -> Addr<Router> {
    sys.block_on(async {
        let mut character = CharacterSettings::new("role0");
        character.session = Some(SessionSettings::new(url, Dialect::Openai));
        let router = Router::launch(vec![character], &DispatchSettings::default(), events()).0;
        let deadline = Instant::now() + SESSION_CONNECT_DEADLINE;
        loop {
            let sessions = router.send(ListSessions).await.expect("router answers");
            if sessions[0].1.state == ConnectionState::Connected {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the fake model peer never connected"
            );
            actix_web::rt::time::sleep(Duration::from_millis(10)).await;
        }
        router
    })
}

fn session(c: &mut Criterion, sys: &SystemRunner) {
    let url = start_fake_model(sys);
    let mut group = c.benchmark_group("session_register");
    // Every sync carries the character's whole tool list, so the cost grows with it.
    for tools in SESSION_TOOLS {
        let names: Vec<String> = (0..tools).map(|k| format!("tool_{k:03}")).collect();
        for (label, router) in [
            ("without", launch(sys, 1)),
            ("with", session_router(sys, &url)),
        ] {
            let id = BenchmarkId::new(format!("{label}_session"), tools);
            group.bench_with_input(id, &tools, |b, _| {
                b.iter_custom(|iters| {
                    timed(sys, iters, |i| {
                        let tool = remote_tool(&names[i as usize % tools], "http://127.0.0.1:9");
                        let router = &router;
                        async move { register(router, tool, None).await }
                    })
                })
            });
        }
    }
    group.finish();
}

/// Register on a character that holds [`HELD_TOOLS`] tools, each registration replacing one.
fn register_at_1000(c: &mut Criterion, sys: &SystemRunner) {
    let router = launch(sys, 1);
    let names: Vec<String> = (0..HELD_TOOLS).map(|k| format!("tool_{k:04}")).collect();
    sys.block_on(async {
        for name in &names {
            register(&router, remote_tool(name, "http://127.0.0.1:9"), None).await;
        }
    });
    let mut group = c.benchmark_group("register_1000");
    group.bench_function("same_definition", |b| {
        b.iter_custom(|iters| {
            timed(sys, iters, |i| {
                let tool = remote_tool(&names[i as usize % HELD_TOOLS], "http://127.0.0.1:9");
                let router = &router;
                async move { register(router, tool, None).await }
            })
        })
    });
    let mut fresh = 0u64;
    group.bench_function("new_definition", |b| {
        b.iter_custom(|iters| {
            timed(sys, iters, |i| {
                fresh += 1;
                let mut tool = remote_tool(&names[i as usize % HELD_TOOLS], "http://127.0.0.1:9");
                tool.description =
                    format!("Benchmark tool {fresh}: get the current weather for a city.");
                let router = &router;
                async move { register(router, tool, None).await }
            })
        })
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let sys = System::new();
    register_at_1000(c, &sys);
    fan_out(c, &sys);
    list(c, &sys);
    dispatch(c, &sys);
    limits(c, &sys);
    arguments(c);
    session(c, &sys);
}

criterion_group! {
    name = router;
    // Short windows: the grid is large and the machine is shared; repeat runs instead.
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = benches
}
criterion_main!(router);
