//! The Responses API's kept turns: a response the app got with only its own calls (the server
//! ran its calls of the same turn), or whose server calls were never run (the rounds ran out),
//! and the id a stream gave the app when the upstream's last response has another. The upstream
//! must see every call of a turn answered, however the app goes on:
//!
//! - by `previous_response_id` (the upstream keeps the turn): the server's
//!   `function_call_output` items are added to the input, in the model's order with the app's;
//!   an id a stream gave is replaced by the upstream's last one;
//! - by sending the whole conversation again (`"store": false`, or an app that keeps its own
//!   history, like the Agents SDK): the server's items of the turn (its calls, and the reasoning
//!   that went with them) are put back in place, and its outputs after the turn's.
//!
//! Kept in the shared bounded store ([`crate::chat::kept`]) by the response's ids and the ids of
//! the app's calls; a replayed turn is put back only where the request sends back what the app
//! was handed of it (its calls' ids, names and argument text, after the same last message of the
//! person): several conversations' turns may have the same call ids. No I/O.

use std::collections::HashSet;
use std::time::Instant;

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::chat::kept::{
    AppCall, HandBack, KeptTurn, KeptTurns, Restored, json_len, prompt_before,
};
use crate::chat::wire::Raw;

/// One kept turn.
#[derive(Debug, Default)]
pub struct KeptResponse {
    /// The upstream's response that holds the turn (the request's last round).
    pub response: String,
    /// The id the app got for it, when another (a stream's first round's).
    pub alias: Option<String>,
    /// Every item of the turn in the model's order, and whether the app got it.
    pub items: Vec<(Raw, bool)>,
    /// The call ids of the turn in the model's order, with the server's output for its own.
    pub calls: Vec<(String, Option<Raw>)>,
    /// The user message showing the model the images of the server's results, if any.
    pub images: Option<Raw>,
    /// The person's last message before the turn, as the app sent it.
    pub prompt: Option<Value>,
}

impl KeptResponse {
    /// How the app's items are known again: a call by its `call_id`, anything else by its id.
    fn app_identities(&self) -> impl Iterator<Item = String> + '_ {
        self.items
            .iter()
            .filter(|(_, app)| *app)
            .filter_map(|(item, _)| Head::of(item).identity())
    }

    /// The ids of the app's calls.
    fn app_calls(&self) -> impl Iterator<Item = &str> {
        self.calls
            .iter()
            .filter(|(_, answer)| answer.is_none())
            .map(|(id, _)| id.as_str())
    }

    fn answers_anything(&self) -> bool {
        self.calls.iter().any(|(_, answer)| answer.is_some())
    }
}

impl KeptTurn for KeptResponse {
    fn keys(&self) -> Vec<&str> {
        let mut keys = vec![self.response.as_str()];
        keys.extend(self.alias.as_deref());
        keys.extend(self.app_calls());
        keys
    }

    fn hand_back(&self) -> HandBack {
        let calls = self
            .items
            .iter()
            .filter(|(_, app)| *app)
            .filter_map(|(item, _)| Head::of(item).app_call());
        HandBack::new(calls.collect(), self.prompt.clone())
    }

    fn bytes(&self) -> usize {
        let items: usize = self.items.iter().map(|(item, _)| item.get().len()).sum();
        let calls: usize = self
            .calls
            .iter()
            .map(|(id, answer)| id.len() + answer.as_ref().map_or(0, |a| a.get().len()))
            .sum();
        self.response.len()
            + self.alias.as_ref().map_or(0, String::len)
            + items
            + calls
            + self.images.as_ref().map_or(0, |i| i.get().len())
            + self.prompt.as_ref().map_or(0, json_len)
    }
}

/// A character's kept responses.
pub(crate) type KeptResponses = KeptTurns<KeptResponse>;

/// The parts of an input item the restore reads.
#[derive(Debug, Default, Deserialize)]
struct Head {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

impl Head {
    fn of(item: &RawValue) -> Self {
        serde_json::from_str(item.get()).unwrap_or_default()
    }

    fn is(&self, kind: &str) -> bool {
        self.kind.as_deref() == Some(kind)
    }

    /// A `function_call` item as one of the app's calls of a turn.
    fn app_call(&self) -> Option<AppCall> {
        self.is("function_call").then(|| AppCall {
            id: self.call_id.clone().unwrap_or_default(),
            name: self.name.clone().unwrap_or_default(),
            arguments: self.arguments.clone().unwrap_or_default(),
        })
    }

    fn identity(&self) -> Option<String> {
        if self.is("function_call") {
            self.call_id.clone()
        } else {
            self.id.clone()
        }
    }
}

/// The app's input put together again with the kept turns it continues; `previous` is the
/// app's `previous_response_id`, which it returns as the upstream must see it.
pub(crate) fn restore(
    kept: &mut KeptResponses,
    input: Vec<Raw>,
    previous: Option<String>,
    now: Instant,
) -> (Vec<Raw>, Option<String>, Restored) {
    kept.expire(now);
    let mut restored = Restored::default();
    if kept.is_idle() {
        return (input, previous, restored);
    }
    let heads: Vec<Head> = input.iter().map(|item| Head::of(item)).collect();
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    let mut previous = previous;
    if let Some(id) = previous.clone() {
        match kept.find(&id) {
            Some((slot, turn)) => {
                previous = Some(turn.response.clone());
                if turn.answers_anything() {
                    // The upstream holds the turn: its answers lead the input.
                    i = answers(turn, &input, &heads, 0, &mut out);
                    restored.completed += 1;
                }
                kept.used(slot, now);
            }
            None if kept.was_forgotten(&id) => restored.missed += 1,
            None => {}
        }
    }
    // From here on, `out` ends with copies of `input[copied..i]`.
    let mut copied = i;
    while i < input.len() {
        let call = heads[i]
            .is("function_call")
            .then_some(())
            .and(heads[i].call_id.as_deref());
        // A turn whose app calls the run around this call sends back exactly.
        let found = call.and_then(|id| {
            kept.find_handed(id, |turn| {
                let (start, end) = run_of(turn, &heads, copied, i);
                let calls = heads[start..end].iter().filter_map(Head::app_call);
                Some(HandBack::new(calls.collect(), prompt_before(&input, start)))
            })
        });
        let Some((slot, turn)) = found else {
            if call.is_some_and(|id| kept.was_forgotten(id)) {
                restored.missed += 1;
            }
            out.push(input[i].clone());
            i += 1;
            continue;
        };
        let (start, end) = run_of(turn, &heads, copied, i);
        out.truncate(out.len() - (i - start));
        let mut apps: IndexMap<String, Raw> = (start..end)
            .filter_map(|k| heads[k].identity().map(|id| (id, input[k].clone())))
            .collect();
        for (item, app) in &turn.items {
            if !app {
                out.push(item.clone());
            } else if let Some(theirs) = Head::of(item)
                .identity()
                .and_then(|id| apps.shift_remove(&id))
            {
                out.push(theirs);
            }
        }
        out.extend(apps.into_values());
        i = answers(turn, &input, &heads, end, &mut out);
        copied = i;
        restored.completed += 1;
        kept.used(slot, now);
    }
    (out, previous, restored)
}

/// The run of `turn`'s items the app sent back around the call at `i` (not before `copied`).
fn run_of(turn: &KeptResponse, heads: &[Head], copied: usize, i: usize) -> (usize, usize) {
    let theirs: HashSet<String> = turn.app_identities().collect();
    let in_turn = |head: &Head| head.identity().is_some_and(|id| theirs.contains(&id));
    let mut start = i;
    while start > copied && in_turn(&heads[start - 1]) {
        start -= 1;
    }
    let mut end = i;
    while end < heads.len() && in_turn(&heads[end]) {
        end += 1;
    }
    (start, end)
}

/// Writes the answers of a turn's calls in the model's order — the server's outputs, and the
/// app's own from the `function_call_output` items at `from` — then any other of those app
/// outputs and the images; returns where the app's outputs ended.
fn answers(
    turn: &KeptResponse,
    input: &[Raw],
    heads: &[Head],
    from: usize,
    out: &mut Vec<Raw>,
) -> usize {
    let mut end = from;
    let mut theirs: IndexMap<&str, &Raw> = IndexMap::new();
    while end < input.len() && heads[end].is("function_call_output") {
        theirs.insert(
            heads[end].call_id.as_deref().unwrap_or_default(),
            &input[end],
        );
        end += 1;
    }
    for (call, answer) in &turn.calls {
        match answer {
            Some(answer) => out.push(answer.clone()),
            None => out.extend(theirs.shift_remove(call.as_str()).cloned()),
        }
    }
    out.extend(theirs.into_values().cloned());
    out.extend(turn.images.clone());
    end
}

/// One item as kept JSON text.
pub(crate) fn raw(value: &Value) -> Raw {
    serde_json::value::to_raw_value(value).expect("a JSON value serialises")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::chat::kept::KEPT_TURN_TTL;

    fn item(value: Value) -> Raw {
        raw(&value)
    }

    fn output(call: &str, text: &str) -> Value {
        json!({"type": "function_call_output", "call_id": call, "output": text})
    }

    fn call(id: &str, call: &str) -> Value {
        json!({"type": "function_call", "id": id, "call_id": call, "name": "f", "arguments": "{}"})
    }

    /// A turn of the reasoning that went with the server's call `s`, that call, and the app's
    /// call `a`, in the response `resp_1`.
    fn mixed() -> KeptResponse {
        KeptResponse {
            response: "resp_1".into(),
            alias: None,
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
            images: None,
            prompt: Some(json!({"role": "user", "content": "hi"})),
        }
    }

    fn values(items: Vec<Raw>) -> Vec<Value> {
        items
            .iter()
            .map(|i| serde_json::from_str(i.get()).unwrap())
            .collect()
    }

    #[test]
    fn a_continuation_by_id_gets_the_servers_outputs_in_the_models_order() {
        let mut kept = KeptResponses::default();
        let now = Instant::now();
        kept.keep(mixed(), now).unwrap();
        let user = json!({"role": "user", "content": "and?"});
        let input = vec![item(output("a", "10:00")), item(user.clone())];
        let (out, previous, restored) = restore(&mut kept, input, Some("resp_1".into()), now);
        assert_eq!(previous.as_deref(), Some("resp_1"));
        assert_eq!(restored.completed, 1);
        assert_eq!(
            values(out),
            [output("s", "sunny"), output("a", "10:00"), user]
        );
    }

    #[test]
    fn a_replayed_turn_gets_the_servers_items_back_in_place() {
        let mut kept = KeptResponses::default();
        let now = Instant::now();
        kept.keep(mixed(), now).unwrap();
        let user = json!({"role": "user", "content": "hi"});
        let later = json!({"role": "user", "content": "thanks"});
        let input = vec![
            item(user.clone()),
            item(call("fc_a", "a")),
            item(output("a", "10:00")),
            item(later.clone()),
        ];
        let (out, previous, restored) = restore(&mut kept, input, None, now);
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
    }

    #[test]
    fn a_streams_id_goes_on_from_the_last_and_forgotten_turns_are_counted() {
        let mut kept = KeptResponses::default();
        let now = Instant::now();
        kept.keep(
            KeptResponse {
                response: "resp_9".into(),
                alias: Some("resp_7".into()),
                ..KeptResponse::default()
            },
            now,
        )
        .unwrap();
        let (_, previous, restored) = restore(&mut kept, Vec::new(), Some("resp_7".into()), now);
        assert_eq!(previous.as_deref(), Some("resp_9"));
        assert_eq!(restored, Restored::default(), "nothing to answer");
        kept.keep(mixed(), now).unwrap();
        let later = now + KEPT_TURN_TTL;
        let input = vec![item(call("fc_a", "a")), item(output("a", "1"))];
        let (out, _, restored) = restore(&mut kept, input, Some("resp_1".into()), later);
        assert_eq!(restored.missed, 2, "by its id and by its call");
        assert_eq!(out.len(), 2, "left as the app sent it");
    }
}
