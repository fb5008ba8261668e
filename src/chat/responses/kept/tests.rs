use std::time::Instant;

use serde_json::json;

use super::*;
use crate::chat::kept::{KEPT_TURN_TTL, MAX_KEPT_TURNS, Owner};

fn item(value: Value) -> Raw {
    raw(&value)
}

fn output(call: &str, text: &str) -> Value {
    json!({"type": "function_call_output", "call_id": call, "output": text})
}

fn call(id: &str, call: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call, "name": "f", "arguments": "{}"})
}

fn said(text: &str) -> Option<String> {
    Some(crate::chat::kept::back::canonical(
        &json!({"role": "user", "content": text}),
    ))
}

/// A turn of the reasoning that went with the server's call `s`, that call, and the app's
/// call `a`, in the response `resp_1`.
fn mixed() -> KeptResponse {
    KeptResponse {
        response: "resp_1".into(),
        items: vec![
            (
                item(json!({"type": "reasoning", "id": "rs_1", "summary": []})),
                false,
            ),
            (item(call("fc_s", "s")), false),
            (item(call("fc_a", "a")), true),
        ],
        calls: vec![
            ("s".into(), Some(item(output("s", "sunny")))),
            ("a".into(), None),
        ],
        prompt: said("hi"),
        ..KeptResponse::default()
    }
}

fn values(items: Vec<Raw>) -> Vec<Value> {
    items
        .iter()
        .map(|i| serde_json::from_str(i.get()).unwrap())
        .collect()
}

/// The whole restore, as the endpoint runs it (its lock aside).
fn put_together(
    kept: &mut KeptResponses,
    input: Vec<Raw>,
    previous: Option<&str>,
    now: Instant,
) -> (Vec<Raw>, Option<String>, Restored) {
    kept.expire(now);
    let replay = Replay::read(&input);
    let looked = replay.look_up(kept, previous);
    let (out, previous, restored) = restore(input, replay, looked, previous.map(str::to_owned));
    kept.used(&restored.used, now);
    (out, previous, restored)
}

fn keep(kept: &mut KeptResponses, turn: KeptResponse, now: Instant) {
    kept.keep(turn, Owner::default(), now).unwrap();
}

#[test]
fn a_continuation_by_id_gets_the_servers_outputs_in_the_models_order() {
    let mut kept = KeptResponses::default();
    let now = Instant::now();
    keep(&mut kept, mixed(), now);
    let user = json!({"role": "user", "content": "and?"});
    let input = vec![item(output("a", "10:00")), item(user.clone())];
    let (out, previous, restored) = put_together(&mut kept, input, Some("resp_1"), now);
    assert_eq!(previous.as_deref(), Some("resp_1"));
    assert_eq!((restored.completed, restored.used.len()), (1, 1));
    assert_eq!(
        values(out),
        [output("s", "sunny"), output("a", "10:00"), user]
    );
}

#[test]
fn a_replayed_turn_gets_the_servers_items_back_in_place() {
    let mut kept = KeptResponses::default();
    let now = Instant::now();
    keep(&mut kept, mixed(), now);
    let user = json!({"role": "user", "content": "hi"});
    let later = json!({"role": "user", "content": "thanks"});
    let input = vec![
        item(user.clone()),
        item(call("fc_a", "a")),
        item(output("a", "10:00")),
        item(later.clone()),
    ];
    let (out, previous, restored) = put_together(&mut kept, input, None, now);
    assert_eq!((previous, restored.completed), (None, 1));
    let out = values(out);
    let kinds: Vec<&str> = out
        .iter()
        .map(|i| i["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        [
            "",
            "reasoning",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output",
            ""
        ]
    );
    assert_eq!(
        (&out[2]["call_id"], &out[3]["call_id"]),
        (&json!("s"), &json!("a"))
    );
    assert_eq!(
        (&out[4]["output"], &out[5]["output"]),
        (&json!("sunny"), &json!("10:00"))
    );
    assert_eq!(out[6], later);

    // Another person's message before the same call: not this conversation's turn.
    let other = vec![
        item(json!({"role": "user", "content": "hello"})),
        item(call("fc_a", "a")),
        item(output("a", "10:00")),
    ];
    let sent = values(other.clone());
    let (out, _, restored) = put_together(&mut kept, other, None, now);
    assert_eq!((values(out), restored.completed), (sent, 0));
}

#[test]
fn a_streams_id_goes_on_from_the_last_and_forgotten_turns_are_counted() {
    let mut kept = KeptResponses::default();
    let now = Instant::now();
    keep(
        &mut kept,
        KeptResponse {
            response: "resp_9".into(),
            alias: Some("resp_7".into()),
            ..KeptResponse::default()
        },
        now,
    );
    let (_, previous, restored) = put_together(&mut kept, Vec::new(), Some("resp_7"), now);
    assert_eq!(previous.as_deref(), Some("resp_9"));
    assert_eq!(restored.completed, 0, "nothing to answer");
    keep(&mut kept, mixed(), now);
    let later = now + KEPT_TURN_TTL;
    let input = vec![
        item(json!({"role": "user", "content": "hi"})),
        item(call("fc_a", "a")),
        item(output("a", "1")),
    ];
    let (out, _, restored) = put_together(&mut kept, input, None, later);
    assert_eq!(restored.missed, 1, "by its call");
    assert_eq!(
        out.len(),
        3,
        "left as the app sent it: a valid conversation"
    );
}

#[test]
fn a_continuation_of_a_forgotten_turn_answers_its_server_calls_as_lost() {
    let mut kept = KeptResponses::default();
    let now = Instant::now();
    keep(&mut kept, mixed(), now);
    // The store fills up with other turns.
    for n in 0..MAX_KEPT_TURNS {
        let id = format!("resp_other_{n}");
        keep(
            &mut kept,
            KeptResponse {
                response: id,
                ..KeptResponse::default()
            },
            now,
        );
    }
    let user = json!({"role": "user", "content": "and?"});
    let input = vec![item(output("a", "10:00")), item(user.clone())];
    let (out, previous, restored) = put_together(&mut kept, input, Some("resp_1"), now);
    assert_eq!(previous.as_deref(), Some("resp_1"));
    assert_eq!((restored.lost, restored.previous_forgotten), (1, true));
    assert_eq!(
        values(out),
        [output("s", LOST_RESULT_TEXT), output("a", "10:00"), user]
    );
}

#[test]
fn a_long_run_of_calls_is_read_once() {
    // Thousands of calls that all name the kept turn's app call: one run, one lookup, no match
    // (its calls are not what the app was handed).
    let mut kept = KeptResponses::default();
    let now = Instant::now();
    keep(&mut kept, mixed(), now);
    let mut input = vec![item(json!({"role": "user", "content": "hi"}))];
    input.extend((0..20_000).map(|n| item(call(&format!("fc_{n}"), "a"))));
    let sent = input.len();
    let replay = Replay::read(&input);
    assert_eq!(replay.runs.len(), 1);
    let (out, _, restored) = put_together(&mut kept, input, None, now);
    assert_eq!((out.len(), restored.completed), (sent, 0));
}

#[test]
fn a_turn_sent_back_twice_in_one_request_is_put_back_once() {
    let mut kept = KeptResponses::default();
    let now = Instant::now();
    keep(&mut kept, mixed(), now);
    let mut input = Vec::new();
    for _ in 0..3 {
        input.push(item(json!({"role": "user", "content": "hi"})));
        input.push(item(call("fc_a", "a")));
        input.push(item(output("a", "10:00")));
    }
    let (out, _, restored) = put_together(&mut kept, input, None, now);
    assert_eq!((restored.completed, restored.used.len()), (1, 1));
    let servers = values(out).iter().filter(|i| i["call_id"] == "s").count();
    assert_eq!(servers, 2, "the server's call and its output, once");
}
