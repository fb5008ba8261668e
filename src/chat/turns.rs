//! The turns the server handed back to an app with only the app's own calls in them, and what
//! they held besides: the server's calls and their results. When the app's next request
//! carries such a turn (and its own results), the turn is put together again, so the upstream
//! always sees a complete, valid sequence: every call of the turn, each answered once.
//!
//! Plain and bounded: at most [`MAX_HANDED_TURNS`] turns per character, each kept
//! [`HANDED_TURN_TTL`] after it was last used (a conversation that goes on sends the turn with
//! every request, and keeps it). A turn that is forgotten still leaves a valid sequence (the
//! app's own calls and results, as it sent them); the ids of forgotten turns are remembered a
//! while longer, so that case is logged.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::wire::{MessageHead, Raw};

/// Turns kept per character: far more than the conversations one person has going at once.
pub(crate) const MAX_HANDED_TURNS: usize = 256;

/// How long a turn is kept after it was last used: an app that answers its own tool a day
/// later has a different conversation.
pub(crate) const HANDED_TURN_TTL: Duration = Duration::from_secs(3600);

/// Call ids of forgotten turns remembered, so a request that carries one is logged as a miss.
const MAX_FORGOTTEN_IDS: usize = 4 * MAX_HANDED_TURNS;

/// One turn handed back to the app.
#[derive(Debug)]
pub struct HandedTurn {
    /// Every call of the turn in the model's order: the call as the model made it, and for the
    /// server's calls the tool message that answered it.
    pub calls: Vec<(Value, Option<Raw>)>,
    /// The user message showing the model the images of the server's results, if any.
    pub images: Option<Raw>,
}

impl HandedTurn {
    fn call_id(call: &Value) -> &str {
        call.get("id").and_then(Value::as_str).unwrap_or_default()
    }

    /// The ids of the calls the app got.
    fn app_ids(&self) -> impl Iterator<Item = &str> {
        self.calls
            .iter()
            .filter(|(_, answer)| answer.is_none())
            .map(|(call, _)| Self::call_id(call))
    }
}

/// What putting a request's conversation together again did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Turns completed with the server's calls and results.
    pub completed: usize,
    /// Turns that held server calls the store no longer has (forgotten by age or count).
    pub missed: usize,
}

#[derive(Debug, Default)]
pub(crate) struct HandedTurns {
    turns: IndexMap<u64, (HandedTurn, Instant)>,
    by_call: HashMap<String, u64>,
    forgotten: VecDeque<String>,
    forgotten_set: HashSet<String>,
    next: u64,
}

impl HandedTurns {
    /// Keeps a turn handed back to the app, keyed by the ids of the calls the app got.
    pub(crate) fn keep(&mut self, turn: HandedTurn, now: Instant) {
        self.expire(now);
        while self.turns.len() >= MAX_HANDED_TURNS {
            self.forget_oldest();
        }
        let key = self.next;
        self.next += 1;
        for id in turn.app_ids() {
            self.by_call.insert(id.to_owned(), key);
        }
        self.turns.insert(key, (turn, now));
    }

    pub(crate) fn len(&self) -> usize {
        self.turns.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }

    /// Puts every handed-back turn of `messages` together again: the assistant turn gets
    /// back the server's calls, in the model's order, and its tool results are followed by the
    /// server's (the app's own results kept as the app wrote them).
    pub(crate) fn restore(&mut self, messages: Vec<Raw>, now: Instant) -> (Vec<Raw>, Restored) {
        self.expire(now);
        let mut restored = Restored::default();
        if self.turns.is_empty() && self.forgotten.is_empty() {
            return (messages, restored);
        }
        let heads: Vec<MessageHead> = messages.iter().map(|m| MessageHead::of(m)).collect();
        let mut out = Vec::with_capacity(messages.len());
        let mut messages = messages.into_iter().map(Some).collect::<Vec<_>>();
        let mut i = 0;
        while i < messages.len() {
            let ids = heads[i].call_ids();
            let key = ids.first().and_then(|id| self.by_call.get(*id)).copied();
            let turn = key.and_then(|k| self.turns.get(&k)).map(|(t, _)| t);
            let matches = turn.is_some_and(|t| {
                let mut theirs: Vec<&str> = t.app_ids().collect();
                let mut ours = ids.clone();
                theirs.sort_unstable();
                ours.sort_unstable();
                theirs == ours
            });
            if !matches {
                if ids.iter().any(|id| self.forgotten_set.contains(*id)) {
                    restored.missed += 1;
                }
                out.push(messages[i].take().expect("each message is taken once"));
                i += 1;
                continue;
            }
            let key = key.expect("a matching turn has a key");
            // Used again: the conversation goes on, so it is kept longer.
            let (turn, _) = self.turns.shift_remove(&key).expect("the turn was found");
            let assistant = messages[i].take().expect("each message is taken once");
            // The app's own results follow its turn.
            let mut j = i + 1;
            let mut results: IndexMap<String, Raw> = IndexMap::new();
            while j < messages.len() && heads[j].role.as_deref() == Some("tool") {
                let id = heads[j].tool_call_id.clone().unwrap_or_default();
                let message = messages[j].take().expect("each message is taken once");
                results.insert(id, message);
                j += 1;
            }
            out.push(complete_turn(&assistant, &turn));
            for (call, answer) in &turn.calls {
                match answer {
                    Some(answer) => out.push(answer.clone()),
                    None => {
                        if let Some(result) = results.shift_remove(HandedTurn::call_id(call)) {
                            out.push(result);
                        }
                    }
                }
            }
            out.extend(results.into_values());
            if let Some(images) = &turn.images {
                out.push(images.clone());
            }
            restored.completed += 1;
            self.turns.insert(key, (turn, now));
            i = j;
        }
        (out, restored)
    }

    fn expire(&mut self, now: Instant) {
        while let Some((_, (_, used))) = self.turns.first() {
            if now.duration_since(*used) < HANDED_TURN_TTL {
                break;
            }
            self.forget_oldest();
        }
    }

    fn forget_oldest(&mut self) {
        let Some((_, (turn, _))) = self.turns.shift_remove_index(0) else {
            return;
        };
        for id in turn.app_ids() {
            self.by_call.remove(id);
            if self.forgotten_set.insert(id.to_owned()) {
                self.forgotten.push_back(id.to_owned());
            }
        }
        while self.forgotten.len() > MAX_FORGOTTEN_IDS {
            if let Some(id) = self.forgotten.pop_front() {
                self.forgotten_set.remove(&id);
            }
        }
    }
}

/// The app's assistant turn with every call of the model's turn in order: the server's as the
/// model made them, the app's as the app sent them back.
fn complete_turn(assistant: &Raw, turn: &HandedTurn) -> Raw {
    let mut message: Map<String, Value> = serde_json::from_str(assistant.get()).unwrap_or_default();
    let theirs: Vec<Value> = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let calls: Vec<Value> = turn
        .calls
        .iter()
        .map(|(call, answer)| match answer {
            Some(_) => call.clone(),
            None => theirs
                .iter()
                .find(|c| HandedTurn::call_id(c) == HandedTurn::call_id(call))
                .cloned()
                .unwrap_or_else(|| call.clone()),
        })
        .collect();
    message.insert("tool_calls".into(), Value::Array(calls));
    serde_json::value::to_raw_value(&message).expect("a JSON object serialises")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn raw(value: Value) -> Raw {
        serde_json::value::to_raw_value(&value).unwrap()
    }

    fn call(id: &str, name: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": name, "arguments": "{}"}})
    }

    fn tool(id: &str, content: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": content})
    }

    /// A turn of three calls: the server's `s1`, the app's `a1`, the server's `s2`.
    fn mixed_turn() -> HandedTurn {
        HandedTurn {
            calls: vec![
                (call("s1", "get_weather"), Some(raw(tool("s1", "sunny")))),
                (call("a1", "app_clock"), None),
                (call("s2", "get_time"), Some(raw(tool("s2", "noon")))),
            ],
            images: None,
        }
    }

    fn values(messages: Vec<Raw>) -> Vec<Value> {
        messages
            .iter()
            .map(|m| serde_json::from_str(m.get()).unwrap())
            .collect()
    }

    #[test]
    fn a_handed_back_turn_is_completed_in_the_models_order() {
        let mut turns = HandedTurns::default();
        let now = Instant::now();
        turns.keep(mixed_turn(), now);
        let app_turn = json!({"role": "assistant", "content": "Looking.", "tool_calls": [call("a1", "app_clock")]});
        let messages = vec![
            raw(json!({"role": "user", "content": "hi"})),
            raw(app_turn),
            raw(tool("a1", "10:00")),
            raw(json!({"role": "user", "content": "thanks"})),
        ];
        let (out, restored) = turns.restore(messages, now);
        assert_eq!(
            restored,
            Restored {
                completed: 1,
                missed: 0
            }
        );
        let out = values(out);
        assert_eq!(out.len(), 6);
        assert_eq!(out[1]["content"], "Looking.");
        let ids: Vec<&str> = out[1]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["s1", "a1", "s2"]);
        let answered: Vec<&str> = out[2..5]
            .iter()
            .map(|m| m["tool_call_id"].as_str().unwrap())
            .collect();
        assert_eq!(answered, ["s1", "a1", "s2"]);
        assert_eq!(out[3]["content"], "10:00");
        assert_eq!(out[5]["content"], "thanks");
        // The next request of the same conversation is completed the same way.
        let again = vec![
            raw(
                json!({"role": "assistant", "content": null, "tool_calls": [call("a1", "app_clock")]}),
            ),
            raw(tool("a1", "10:00")),
        ];
        assert_eq!(turns.restore(again, now).1.completed, 1);
    }

    #[test]
    fn an_unknown_turn_passes_as_it_is_and_a_forgotten_one_is_counted() {
        let mut turns = HandedTurns::default();
        let start = Instant::now();
        turns.keep(mixed_turn(), start);
        let messages = || {
            vec![
                raw(json!({"role": "assistant", "tool_calls": [call("a1", "app_clock")]})),
                raw(tool("a1", "10:00")),
            ]
        };
        let other = vec![raw(
            json!({"role": "assistant", "tool_calls": [call("zz", "app_clock")]}),
        )];
        let (out, restored) = turns.restore(other, start);
        assert_eq!((out.len(), restored), (1, Restored::default()));

        let later = start + HANDED_TURN_TTL + Duration::from_secs(1);
        let (out, restored) = turns.restore(messages(), later);
        assert_eq!(values(out), values(messages()));
        assert_eq!(
            restored,
            Restored {
                completed: 0,
                missed: 1
            }
        );
        assert!(turns.is_empty());
    }

    #[test]
    fn the_store_keeps_at_most_its_bound_forgetting_the_least_recently_used() {
        let mut turns = HandedTurns::default();
        let now = Instant::now();
        for n in 0..MAX_HANDED_TURNS + 10 {
            turns.keep(
                HandedTurn {
                    calls: vec![(call(&format!("a{n}"), "app"), None)],
                    images: None,
                },
                now,
            );
        }
        assert_eq!(turns.len(), MAX_HANDED_TURNS);
        let first = vec![raw(
            json!({"role": "assistant", "tool_calls": [call("a0", "app")]}),
        )];
        assert_eq!(turns.restore(first, now).1.missed, 1);
        let last = format!("a{}", MAX_HANDED_TURNS + 9);
        let newest = vec![raw(
            json!({"role": "assistant", "tool_calls": [call(&last, "app")]}),
        )];
        assert_eq!(turns.restore(newest, now).1.completed, 1);
    }
}
