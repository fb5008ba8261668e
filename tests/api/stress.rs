//! Bounded stress: 1 000 concurrent invokes on slow callbacks while eight clients churn
//! register / unregister / clear on the same names. Every request must be answered, nothing may
//! deadlock, and the final registry must equal the last write per name and character.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{Value, json};

use runtime_tools::{Dialect, SessionSettings};

use crate::callback_server::{CallbackServer, Reply};
use crate::fake_realtime::{AckMode, FakeRealtime, update_tool_names};
use crate::helpers::{TestApp, settings, spawn_app_with, tool_body};

const CHARACTERS: [&str; 2] = ["Lanlan", "Mio"];
const INVOKES: usize = 1_000;
const CHURN_CLIENTS: u64 = 8;
const OPS_PER_CLIENT: u64 = 40;
const NAMES: [&str; 4] = ["t0", "t1", "t2", "t3"];
/// Bound on the whole run: far above what it needs, far below a hang.
const RUN_DEADLINE: Duration = Duration::from_secs(120);

/// One churn request: what it did to whom, and when it was in flight.
#[derive(Debug, Clone)]
struct Op {
    name: &'static str,
    /// Characters it applies to.
    targets: Vec<&'static str>,
    /// `Some(description)` for a register, `None` for a removal.
    writes: Option<String>,
    sent: Instant,
    answered: Instant,
}

/// A small deterministic generator, so a failure can be replayed.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

async fn churn(app: Rc<TestApp>, client: u64, callback: String) -> Vec<Op> {
    let mut rng = Lcg(client + 1);
    let mut ops = Vec::new();
    for seq in 0..OPS_PER_CLIENT {
        let name = NAMES[rng.next(NAMES.len() as u64) as usize];
        let (role, targets) = match rng.next(3) {
            0 => (Value::Null, CHARACTERS.to_vec()),
            1 => (json!("Lanlan"), vec!["Lanlan"]),
            _ => (json!("Mio"), vec!["Mio"]),
        };
        // Each name has its own source, so a clear touches exactly one name.
        let source = format!("plugin:churn-{name}");
        let sent = Instant::now();
        let (path, body, writes) = match rng.next(3) {
            0 => {
                let description = format!("client {client} op {seq}");
                let mut body = tool_body(name, &callback, &source);
                body["description"] = json!(description);
                body["role"] = role;
                ("/api/tools/register", body, Some(description))
            }
            1 => (
                "/api/tools/unregister",
                json!({"name": name, "role": role}),
                None,
            ),
            _ => (
                "/api/tools/clear",
                json!({"source": source, "role": role}),
                None,
            ),
        };
        let (status, answer) = app.post(path, &body).await;
        assert_eq!(status, 200, "{path} {body} -> {answer}");
        assert_eq!(answer["ok"], json!(true), "{path} {body} -> {answer}");
        ops.push(Op {
            name,
            targets,
            writes,
            sent,
            answered: Instant::now(),
        });
    }
    ops
}

/// Whether `state` can be the outcome of `ops` (all touching one name and character): some op
/// with that effect must be one that no other op started after.
fn consistent(state: &Option<String>, ops: &[&Op]) -> bool {
    if ops.is_empty() {
        return state.is_none();
    }
    ops.iter().any(|candidate| {
        candidate.writes == *state
            && ops
                .iter()
                .all(|o| o.writes == candidate.writes || o.sent <= candidate.answered)
    })
}

#[actix_web::test]
async fn invokes_and_churn_under_load_lose_nothing() {
    // Mio has a live session: its manager's final list must reach the model, not only the
    // listing.
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut settings = settings(&CHARACTERS);
    settings.characters[1].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    let app = Rc::new(spawn_app_with(settings).await);
    fake.nth_update(1).await;
    let slow = CallbackServer::with(
        "/slow",
        Reply::after(Duration::from_millis(500), Reply::output(json!("done"))),
    );
    let churn_callback = CallbackServer::with("/churn", Reply::output(json!("ok")));
    let (status, _) = app
        .register(&tool_body("slow", &slow.url("/slow"), "plugin:slow"))
        .await;
    assert_eq!(status, 200);

    // Enough connections that the 1 000 calls are all in flight at once.
    let client = awc::Client::builder()
        .connector(awc::Connector::new().limit(0))
        .timeout(RUN_DEADLINE)
        .finish();
    let invokes = (0..INVOKES).map(|i| {
        let request = client
            .post(app.url("/api/tools/invoke"))
            .send_json(&json!({"name": "slow", "arguments": {"i": i}, "role": "Mio", "call_id": format!("c{i}")}));
        async move {
            let mut response = request.await.expect("invoke answered");
            let body: Value = response.json().await.expect("invoke body");
            (response.status().as_u16(), body)
        }
    });
    let churners = (0..CHURN_CLIENTS).map(|c| churn(app.clone(), c, churn_callback.url("/churn")));

    let run = async { tokio::join!(join_all(invokes), join_all(churners)) };
    let (invoked, churned) = tokio::time::timeout(RUN_DEADLINE, run)
        .await
        .expect("every request was answered (no deadlock)");

    for (i, (status, body)) in invoked.iter().enumerate() {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(
            (&body["call_id"], &body["output"], &body["is_error"]),
            (&json!(format!("c{i}")), &json!("done"), &json!(false)),
            "{body}"
        );
    }
    assert_eq!(slow.received().len(), INVOKES);

    let ops: Vec<Op> = churned.into_iter().flatten().collect();
    let (status, listing) = app.get("/api/tools").await;
    assert_eq!(status, 200);
    for character in CHARACTERS {
        let tools: HashMap<&str, &Value> = listing["tools_by_role"][character]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap(), t))
            .collect();
        for name in NAMES {
            let state = tools
                .get(name)
                .map(|t| t["description"].as_str().unwrap().to_owned());
            let touching: Vec<&Op> = ops
                .iter()
                .filter(|o| o.name == name && o.targets.contains(&character))
                .collect();
            assert!(
                consistent(&state, &touching),
                "{character}/{name} ended as {state:?}, which is not the last write of {touching:#?}"
            );
        }
    }
    // The last update Mio's session received is the listed list, names and descriptions.
    let listed: Vec<(Value, Value)> = listing["tools_by_role"]["Mio"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].clone(), t["description"].clone()))
        .collect();
    let last = fake
        .wait_for("Mio's session to hold the final list", |events| {
            events
                .iter()
                .rev()
                .find(|e| e["type"] == "session.update")
                .filter(|e| update_tool_names(e).len() == listed.len())
                .cloned()
        })
        .await;
    let pushed: Vec<(Value, Value)> = last["session"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].clone(), t["description"].clone()))
        .collect();
    assert_eq!(pushed, listed);
}
