//! Churn: every kind of connection the server opens or accepts, and everything a call or a
//! subscriber leaves behind, driven in cycles against the real server binary running as a
//! child process (so its `/proc` is its own: the test binary runs many tests at once). Its
//! descriptors, TCP sockets by state, threads and RSS ([`Holdings`]) are read after a warm-up
//! and after the cycles, and must come back within the bounds below once the peers have gone:
//! the kinds' bounds, and the test that holds each, are in docs/reliability.md ("Churn").
//!
//! `CHURN_CYCLES` sets the cycles of every kind (the default keeps `cargo test` fast);
//! `benches/churn/run.sh` runs these tests with thousands, and each test prints its readings.

mod requests;
mod sessions;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cli::{Child, TempDir};
use crate::helpers::HTTP_DEADLINE;
use crate::procfs::Holdings;

/// Descriptors a kind may leave open beyond its warm reading: a thread's pooled connection or
/// an allocator's file may come late, a leak grows with the cycles.
pub const FD_SLACK: usize = 4;

/// RSS a kind may add beyond its warm reading, in KiB: the allocator's pages are not all
/// emptied again, and bounded stores fill; a leak grows with the cycles.
pub const RSS_SLACK_KIB: u64 = 8 * 1024;

/// Longest wait for the server to let go of what the cycles left once their peers are gone:
/// the close grace (2 s) and the HTTP keep-alive (5 s), on a loaded machine.
const SETTLE_DEADLINE: Duration = Duration::from_secs(40);

/// How often the server's holdings are read while waiting for them to settle.
const READ_EVERY: Duration = Duration::from_millis(100);

/// The cycles before the warm reading: `CHURN_WARM_UP`, or `default` (a few, so `cargo test`
/// stays fast). The server's memory climbs to a plateau before it stays flat: what a few
/// thousand connections leave in the allocator's pages and in the bounded stores (the event
/// ring) is not a leak, and a soak that reads RSS against it warms up past it
/// (docs/reliability.md, "Churn").
pub fn warm_up(default: usize) -> usize {
    std::env::var("CHURN_WARM_UP")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// The cycles a kind runs: `CHURN_CYCLES`, or `default`.
pub fn cycles(default: usize) -> usize {
    std::env::var("CHURN_CYCLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// The server binary, running as a child process with a configuration file.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    client: awc::Client,
    _dir: TempDir,
}

impl Server {
    /// Starts `runtime-tools serve` with `config` (TOML; the bind address is added) and waits
    /// for it to listen.
    pub fn start(test: &str, config: &str) -> Server {
        let dir = TempDir::new(&format!("churn-{test}"));
        let path = dir.file("runtime-tools.toml", config);
        let path = path.to_str().expect("a UTF-8 path");
        // mimalloc returns the pages it frees at once rather than 10 ms later on the thread's
        // next allocation, which an idle server never makes: RSS at rest is then what the
        // server holds, not pages freed and kept for reuse (up to +17 MiB after a few thousand
        // attachments, whatever their number).
        let mut child = Child::start_logging_with_env(
            &["serve", "--config", path, "--bind", "127.0.0.1:0"],
            "warn",
            &[("MIMALLOC_PURGE_DELAY", "0")],
        );
        let addr = child.listening("127.0.0.1");
        Server {
            child,
            addr,
            client: awc::Client::builder().timeout(HTTP_DEADLINE).finish(),
            _dir: dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The server's holdings now.
    pub fn holdings(&self) -> Holdings {
        Holdings::of(self.child.pid())
    }

    /// POSTs `body` as JSON on a connection that closes after the answer (so no idle
    /// connection of the test's is left in the server's count); returns the status and JSON.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let mut response = self
            .client
            .post(self.url(path))
            .force_close()
            .send_json(body)
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = response.status().as_u16();
        let body = response.json::<Value>().limit(1 << 24).await;
        (status, body.unwrap_or(Value::Null))
    }

    /// GETs `path` as [`Server::post`] does.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let mut response = self
            .client
            .get(self.url(path))
            .force_close()
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let status = response.status().as_u16();
        let body = response.json::<Value>().limit(1 << 24).await;
        (status, body.unwrap_or(Value::Null))
    }

    /// Sends `body` with `method` and `headers` to `path` on a connection that closes after
    /// the answer; returns the status, the headers and the body as text.
    pub async fn exchange(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, Vec<(String, String)>, String) {
        let method = actix_web::http::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = self.client.request(method, self.url(path)).force_close();
        for (name, value) in headers {
            request = request.insert_header((*name, *value));
        }
        let mut response = request
            .send_body(body.to_owned())
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let names = response
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let bytes = response.body().limit(1 << 24).await.expect("body read");
        let text = String::from_utf8_lossy(&bytes).into_owned();
        (response.status().as_u16(), names, text)
    }

    /// Registers `tool` (a register body); its answer must be a 200.
    pub async fn register(&self, tool: &Value) -> Value {
        let (status, answer) = self.post("/api/tools/register", tool).await;
        assert_eq!(status, 200, "{answer}");
        answer
    }

    /// The server's holdings once it is at rest: its TCP sockets only listening or among the
    /// `rest` connections the test keeps open on purpose (the sessions in use, an idle pooled
    /// connection), none closing. The reading the bounds are held against.
    pub async fn at_rest(&self, rest: usize) -> Holdings {
        self.wait_for("at rest", |now| at_rest(now, rest)).await
    }

    /// Waits until the server is back within the bounds of `warm` (its reading at rest after
    /// the warm-up) for `kinds`: no more than `rest` connections open and none closing (so
    /// none in `CLOSE_WAIT`), descriptors within [`FD_SLACK`], no more threads, RSS within
    /// [`RSS_SLACK_KIB`]. Prints the readings (the soak script's output).
    pub async fn holds_bounds(&self, kinds: &str, cycles: usize, warm: &Holdings, rest: usize) {
        self.settles(kinds, cycles, warm, rest, RSS_SLACK_KIB).await;
    }

    /// [`Server::holds_bounds`] for a kind whose state is kept, by design, for a while after
    /// its client has gone, up to a bound of its own: RSS within [`RSS_SLACK_KIB`] and
    /// `kept_kib` more.
    pub async fn holds_bounds_keeping(
        &self,
        kinds: &str,
        cycles: usize,
        warm: &Holdings,
        rest: usize,
        kept_kib: u64,
    ) {
        self.settles(kinds, cycles, warm, rest, RSS_SLACK_KIB + kept_kib)
            .await;
    }

    async fn settles(
        &self,
        kinds: &str,
        cycles: usize,
        warm: &Holdings,
        rest: usize,
        rss_slack_kib: u64,
    ) {
        let start = Instant::now();
        let now = self
            .wait_for(
                &format!("{kinds}: after {cycles} cycles (warm: {warm}; rss +{rss_slack_kib} KiB)"),
                |now| {
                    at_rest(now, rest)
                        && now.fds <= warm.fds + FD_SLACK
                        && now.threads <= warm.threads
                        && now.rss_kib <= warm.rss_kib + rss_slack_kib
                },
            )
            .await;
        println!(
            "churn {kinds}: {cycles} cycles; warm: {warm}; after: {now} (settled in {} ms)",
            start.elapsed().as_millis()
        );
    }

    /// Reads the server's holdings until `done` holds of them; panics with the last reading
    /// past [`SETTLE_DEADLINE`].
    async fn wait_for(&self, what: &str, done: impl Fn(&Holdings) -> bool) -> Holdings {
        let start = Instant::now();
        let mut ticks = tokio::time::interval(READ_EVERY);
        loop {
            ticks.tick().await;
            let now = self.holdings();
            if done(&now) {
                return now;
            }
            assert!(
                start.elapsed() < SETTLE_DEADLINE,
                "{what}: the server still holds {now} after {SETTLE_DEADLINE:?} (bounds: at \
                 rest, fds +{FD_SLACK}, threads no more, rss as stated)"
            );
        }
    }
}

/// Whether the server's TCP sockets are only listening or among `rest` established ones.
fn at_rest(now: &Holdings, rest: usize) -> bool {
    now.tcp.iter().all(|(state, n)| match *state {
        "LISTEN" => true,
        "ESTABLISHED" => *n <= rest,
        _ => false,
    })
}
