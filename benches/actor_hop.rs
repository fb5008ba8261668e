//! What one actor round trip from an HTTP handler costs, with nothing else in the way: the
//! smallest server of this crate's shape, measured by `benches/http/run.sh hop`.
//!
//! An actix-web server (no guard, no CORS, no body checks) with two routes that read the body
//! and answer a two-field JSON object:
//!
//! - `POST /bare` answers at once;
//! - `POST /hop` first sends the body's length to an actor and answers with its reply, as a
//!   register sends its change to the router.
//!
//! With `--actor-on worker` the actor runs on the first HTTP worker's thread (a hop from a handler
//! on that worker stays on its thread); by default (`--actor-on system`) it runs on the actix
//! system's thread, where the server keeps its router and managers, so every hop crosses threads.
//! Figures and method: docs/benchmarks.md ("What a hop between threads costs"). Run:
//! `cargo bench --bench actor_hop -- --port P [--workers N] [--actor-on system|worker]` (port 0:
//! any free port); it prints `listening on http://ADDR` and serves until stopped. Without
//! `--port` it does nothing, so a plain `cargo bench` passes it by.

use std::sync::{Arc, Mutex};

use actix::prelude::*;
use actix_web::{App, HttpResponse, HttpServer, web};

/// Answers a number with the next one.
struct Counter;

impl Actor for Counter {
    type Context = Context<Self>;
}

#[derive(Message)]
#[rtype(result = "usize")]
struct Next(usize);

impl Handler<Next> for Counter {
    type Result = usize;

    fn handle(&mut self, msg: Next, _: &mut Self::Context) -> usize {
        msg.0 + 1
    }
}

async fn bare(body: web::Bytes) -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"ok": true, "n": body.len()}))
}

async fn hop(counter: web::Data<Addr<Counter>>, body: web::Bytes) -> HttpResponse {
    match counter.send(Next(body.len())).await {
        Ok(n) => HttpResponse::Ok().json(serde_json::json!({"ok": true, "n": n})),
        Err(e) => HttpResponse::ServiceUnavailable().body(e.to_string()),
    }
}

struct Options {
    /// `None`: not asked to serve (a plain `cargo bench` runs every bench target).
    port: Option<u16>,
    workers: usize,
    on_worker: bool,
}

fn options() -> Options {
    let args: Vec<String> = std::env::args().collect();
    let mut options = Options {
        port: None,
        workers: 2,
        on_worker: false,
    };
    let mut i = 1;
    while i < args.len() {
        let value = args.get(i + 1).map(String::as_str).unwrap_or_default();
        match args[i].as_str() {
            "--port" => options.port = Some(value.parse().expect("--port takes a number")),
            "--workers" => options.workers = value.parse().expect("--workers takes a number"),
            "--actor-on" => {
                options.on_worker = match value {
                    "worker" => true,
                    "system" => false,
                    _ => panic!("--actor-on takes system or worker"),
                }
            }
            // cargo bench passes --bench; anything else is a mistake.
            "--bench" => {
                i += 1;
                continue;
            }
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    options
}

fn main() -> std::io::Result<()> {
    let options = options();
    let Some(port) = options.port else {
        eprintln!("actor_hop serves only when given --port: run it with benches/http/run.sh hop");
        return Ok(());
    };
    actix_web::rt::System::new().block_on(async move {
        // On a worker: the mailbox exists now, the actor is started by the first worker's
        // factory (actix-server builds the workers one after the other, before accepting).
        let (counter, pending) = if options.on_worker {
            let (tx, rx) = actix::dev::channel::channel::<Counter>(16);
            (Addr::new(tx), Some(rx))
        } else {
            (Counter.start(), None)
        };
        let pending = Arc::new(Mutex::new(pending));
        let counter = web::Data::new(counter);
        let server = HttpServer::new(move || {
            if let Some(rx) = pending.lock().expect("not poisoned").take() {
                actix::spawn(Context::with_receiver(rx).into_future(Counter));
            }
            App::new()
                .app_data(counter.clone())
                .route("/bare", web::post().to(bare))
                .route("/hop", web::post().to(hop))
        })
        .workers(options.workers)
        .bind(("127.0.0.1", port))?;
        println!("listening on http://{}", server.addrs()[0]);
        server.run().await
    })
}
