//! The turns the server handed back to an app with only the app's own calls in them, and what
//! they held besides: the server's calls and their results. When the app's next request
//! carries such a turn (and its own results), the turn is put together again, so the upstream
//! always sees a complete, valid sequence: every call of the turn, each answered once.
//!
//! A turn belongs to the conversation that made it. Call ids say little about that (many
//! OpenAI-compatible servers number their calls `call_0`, `call_1` in every answer), so a turn
//! is put back only into a request that sends back what the app was handed of it, exactly: the
//! ids, names and argument text of its calls, after the same last message of the person. Any
//! other request passes as the app wrote it.
//!
//! Plain and bounded: at most [`MAX_HANDED_TURNS`] turns and [`MAX_HANDED_TURN_BYTES`] per
//! character, each kept [`HANDED_TURN_TTL`] after it was last used (a conversation that goes on
//! sends the turn with every request, and keeps it); the least recently used go first. A turn
//! that is forgotten still leaves a valid sequence (the app's own calls and results, as it sent
//! them); forgotten turns are remembered a while longer by a fingerprint, so that case is
//! counted as a miss (logged, never an error to the app).

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::wire::{MessageHead, Raw};

/// Turns kept per character: far more than the conversations one person has going at once.
pub const MAX_HANDED_TURNS: usize = 256;

/// Bytes of kept turns per character (the server's calls, their results and images, the
/// person's message they follow): a result may be megabytes, and a turn is kept for an hour,
/// so the count alone would let one character hold gigabytes.
pub const MAX_HANDED_TURN_BYTES: usize = 32 * 1024 * 1024;

/// How long a turn is kept after it was last used: an app that answers its own tool a day
/// later has a different conversation.
pub(crate) const HANDED_TURN_TTL: Duration = Duration::from_secs(3600);

/// Fingerprints of forgotten turns remembered, so a request that carries one is counted as a
/// miss.
const MAX_FORGOTTEN: usize = 4 * MAX_HANDED_TURNS;

/// One turn handed back to the app.
#[derive(Debug)]
pub struct HandedTurn {
    /// Every call of the turn in the model's order: the call as the model made it, and for the
    /// server's calls the tool message that answered it.
    pub calls: Vec<(Value, Option<Raw>)>,
    /// The user message showing the model the images of the server's results, if any.
    pub images: Option<Raw>,
    /// The person's last message before the turn, as the app sent it.
    pub prompt: Option<Value>,
}

impl HandedTurn {
    fn call_id(call: &Value) -> &str {
        call.get("id").and_then(Value::as_str).unwrap_or_default()
    }

    /// What the app was handed of the turn, as it must send it back.
    fn hand_back(&self) -> HandBack {
        let mut calls: Vec<AppCall> = self
            .calls
            .iter()
            .filter(|(_, answer)| answer.is_none())
            .map(|(call, _)| AppCall::of(call))
            .collect();
        calls.sort_unstable();
        HandBack {
            calls,
            prompt: self.prompt.clone(),
        }
    }

    /// What the turn holds, in bytes of JSON text.
    fn bytes(&self) -> usize {
        let calls: usize = self
            .calls
            .iter()
            .map(|(call, answer)| json_len(call) + answer.as_ref().map_or(0, |a| a.get().len()))
            .sum();
        calls
            + self.images.as_ref().map_or(0, |i| i.get().len())
            + self.prompt.as_ref().map_or(0, json_len)
    }
}

fn json_len(value: &Value) -> usize {
    serde_json::to_string(value).map_or(0, |text| text.len())
}

/// One of the app's calls of a turn: its id, name and argument text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct AppCall {
    id: String,
    name: String,
    arguments: String,
}

impl AppCall {
    /// A call in the chat shape (`{"id", "function": {"name", "arguments"}}`); what is missing
    /// reads as empty, and never matches a call the model made.
    fn of(call: &Value) -> Self {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
        let function = call.get("function");
        Self {
            id: text(call.get("id")),
            name: text(function.and_then(|f| f.get("name"))),
            arguments: text(function.and_then(|f| f.get("arguments"))),
        }
    }
}

/// What a hand-back is matched on: the app's calls of the turn (in order of id) and the
/// person's last message before it.
#[derive(Debug, Clone, PartialEq)]
struct HandBack {
    calls: Vec<AppCall>,
    prompt: Option<Value>,
}

impl HandBack {
    /// The assistant turn at `index` of a request, as a hand-back (`None` when it calls
    /// nothing).
    fn at(messages: &[Raw], heads: &[MessageHead], index: usize) -> Option<Self> {
        if heads[index].call_ids().is_empty() {
            return None;
        }
        let message: Value = serde_json::from_str(messages[index].get()).ok()?;
        let mut calls: Vec<AppCall> = message
            .get("tool_calls")?
            .as_array()?
            .iter()
            .map(AppCall::of)
            .collect();
        calls.sort_unstable();
        Some(Self {
            calls,
            prompt: prompt_before(messages, heads, index),
        })
    }

    /// A hash of what is matched, objects' keys taken in order (two apps may write a message's
    /// keys in different orders): turns are found by it, then compared whole.
    fn fingerprint(&self) -> u64 {
        let mut hasher = std::hash::DefaultHasher::new();
        self.calls.hash(&mut hasher);
        match &self.prompt {
            Some(prompt) => hash_value(prompt, &mut hasher),
            None => 0u8.hash(&mut hasher),
        }
        hasher.finish()
    }
}

fn hash_value(value: &Value, hasher: &mut impl Hasher) {
    match value {
        Value::Null => 0u8.hash(hasher),
        Value::Bool(b) => (1u8, b).hash(hasher),
        Value::Number(n) => (2u8, n.to_string()).hash(hasher),
        Value::String(s) => (3u8, s).hash(hasher),
        Value::Array(items) => {
            (4u8, items.len()).hash(hasher);
            for item in items {
                hash_value(item, hasher);
            }
        }
        Value::Object(object) => {
            (5u8, object.len()).hash(hasher);
            let mut keys: Vec<&String> = object.keys().collect();
            keys.sort_unstable();
            for key in keys {
                key.hash(hasher);
                hash_value(&object[key.as_str()], hasher);
            }
        }
    }
}

/// The person's last message before `index` (`None` when there is none).
fn prompt_before(messages: &[Raw], heads: &[MessageHead], index: usize) -> Option<Value> {
    let user = heads[..index]
        .iter()
        .rposition(|head| head.role.as_deref() == Some("user"))?;
    serde_json::from_str(messages[user].get()).ok()
}

/// The person's last message of a request, as the app sent it: what a turn handed back in
/// answer to it follows.
pub(crate) fn last_prompt(messages: &[Raw]) -> Option<Value> {
    let heads: Vec<MessageHead> = messages.iter().map(|m| MessageHead::of(m)).collect();
    prompt_before(messages, &heads, messages.len())
}

/// What putting a request's conversation together again did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Turns completed with the server's calls and results.
    pub completed: usize,
    /// Turns that held server calls the store no longer has (forgotten by age, count or size).
    pub missed: usize,
}

/// A kept turn.
#[derive(Debug)]
struct Kept {
    turn: HandedTurn,
    back: HandBack,
    fingerprint: u64,
    bytes: usize,
    used: Instant,
}

/// Why a turn was not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    pub bytes: usize,
}

#[derive(Debug, Default)]
pub(crate) struct HandedTurns {
    /// By key, the least recently used first.
    turns: IndexMap<u64, Kept>,
    /// Keys by fingerprint (several conversations may hand back look-alike turns).
    by_fingerprint: HashMap<u64, Vec<u64>>,
    bytes: usize,
    forgotten: VecDeque<u64>,
    forgotten_set: HashSet<u64>,
    next: u64,
}

impl HandedTurns {
    /// Keeps a turn handed back to the app; a turn larger than the whole store is not kept
    /// (its next request is counted as a miss).
    pub(crate) fn keep(&mut self, turn: HandedTurn, now: Instant) -> Result<(), TooLarge> {
        self.expire(now);
        let back = turn.hand_back();
        let fingerprint = back.fingerprint();
        let bytes = turn.bytes();
        if bytes > MAX_HANDED_TURN_BYTES {
            self.remember_forgotten(fingerprint);
            return Err(TooLarge { bytes });
        }
        while self.turns.len() >= MAX_HANDED_TURNS || self.bytes + bytes > MAX_HANDED_TURN_BYTES {
            self.forget_oldest();
        }
        let key = self.next;
        self.next += 1;
        self.by_fingerprint
            .entry(fingerprint)
            .or_default()
            .push(key);
        self.bytes += bytes;
        self.turns.insert(
            key,
            Kept {
                turn,
                back,
                fingerprint,
                bytes,
                used: now,
            },
        );
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        self.turns.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }

    /// The kept turn `back` matches: the most recently used of those that match it whole.
    fn find(&self, back: &HandBack, fingerprint: u64) -> Option<u64> {
        self.by_fingerprint
            .get(&fingerprint)?
            .iter()
            .filter(|key| self.turns.get(*key).is_some_and(|kept| kept.back == *back))
            .max_by_key(|key| self.turns.get_index_of(*key))
            .copied()
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
        let backs: Vec<Option<HandBack>> = (0..messages.len())
            .map(|i| HandBack::at(&messages, &heads, i))
            .collect();
        let mut out = Vec::with_capacity(messages.len());
        let mut messages = messages.into_iter().map(Some).collect::<Vec<_>>();
        let mut i = 0;
        while i < messages.len() {
            let found = backs[i].as_ref().map(|back| {
                let fingerprint = back.fingerprint();
                (self.find(back, fingerprint), fingerprint)
            });
            let key = match found {
                Some((Some(key), _)) => key,
                Some((None, fingerprint)) => {
                    if self.forgotten_set.contains(&fingerprint) {
                        restored.missed += 1;
                    }
                    out.push(messages[i].take().expect("each message is taken once"));
                    i += 1;
                    continue;
                }
                None => {
                    out.push(messages[i].take().expect("each message is taken once"));
                    i += 1;
                    continue;
                }
            };
            // Used again: the conversation goes on, so it is kept longer.
            let mut kept = self.turns.shift_remove(&key).expect("the turn was found");
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
            let turn = &kept.turn;
            out.push(complete_turn(&assistant, turn));
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
            kept.used = now;
            self.turns.insert(key, kept);
            i = j;
        }
        (out, restored)
    }

    fn expire(&mut self, now: Instant) {
        while let Some((_, kept)) = self.turns.first() {
            if now.duration_since(kept.used) < HANDED_TURN_TTL {
                break;
            }
            self.forget_oldest();
        }
    }

    fn forget_oldest(&mut self) {
        let Some((key, kept)) = self.turns.shift_remove_index(0) else {
            return;
        };
        self.bytes -= kept.bytes;
        if let Some(keys) = self.by_fingerprint.get_mut(&kept.fingerprint) {
            keys.retain(|k| *k != key);
            if keys.is_empty() {
                self.by_fingerprint.remove(&kept.fingerprint);
            }
        }
        self.remember_forgotten(kept.fingerprint);
    }

    fn remember_forgotten(&mut self, fingerprint: u64) {
        if self.forgotten_set.insert(fingerprint) {
            self.forgotten.push_back(fingerprint);
        }
        while self.forgotten.len() > MAX_FORGOTTEN {
            if let Some(old) = self.forgotten.pop_front() {
                self.forgotten_set.remove(&old);
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
            prompt: None,
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
        let mut turn = mixed_turn();
        turn.prompt = Some(json!({"role": "user", "content": "hi"}));
        turns.keep(turn, now).unwrap();
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
            raw(json!({"role": "user", "content": "hi"})),
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
        turns.keep(mixed_turn(), start).unwrap();
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
            turns
                .keep(
                    HandedTurn {
                        calls: vec![(call(&format!("a{n}"), "app"), None)],
                        images: None,
                        prompt: None,
                    },
                    now,
                )
                .unwrap();
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

    /// A turn of conversation `who`: the server's `srv_0` echoing `n`, the app's `call_0`
    /// with `arguments`, after the person said `said`.
    fn turn_of(n: u32, arguments: &str, said: &str) -> HandedTurn {
        let app = json!({"id": "call_0", "type": "function",
                         "function": {"name": "app_clock", "arguments": arguments}});
        HandedTurn {
            calls: vec![
                (
                    call("srv_0", "echo"),
                    Some(raw(tool("srv_0", &format!("{{\"n\": {n}}}")))),
                ),
                (app, None),
            ],
            images: None,
            prompt: Some(json!({"role": "user", "content": said})),
        }
    }

    fn request_of(arguments: &str, said: &str) -> Vec<Raw> {
        vec![
            raw(json!({"role": "user", "content": said})),
            raw(json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_0", "type": "function",
                 "function": {"name": "app_clock", "arguments": arguments}}]})),
            raw(tool("call_0", "10:00")),
        ]
    }

    fn echoed(out: &[Raw]) -> Vec<String> {
        values(out.to_vec())
            .iter()
            .filter(|m| m["tool_call_id"] == "srv_0")
            .map(|m| m["content"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn turns_with_the_same_call_ids_stay_with_their_conversations() {
        let mut turns = HandedTurns::default();
        let now = Instant::now();
        turns.keep(turn_of(1, "{}", "time in Tokyo?"), now).unwrap();
        turns.keep(turn_of(3, "{}", "time in Paris?"), now).unwrap();
        turns
            .keep(turn_of(5, "{\"tz\":\"utc\"}", "time in Paris?"), now)
            .unwrap();

        let (out, restored) = turns.restore(request_of("{}", "time in Tokyo?"), now);
        assert_eq!(
            (restored.completed, echoed(&out)),
            (1, vec!["{\"n\": 1}".to_owned()])
        );
        let (out, _) = turns.restore(request_of("{}", "time in Paris?"), now);
        assert_eq!(echoed(&out), ["{\"n\": 3}"]);
        let (out, _) = turns.restore(request_of("{\"tz\":\"utc\"}", "time in Paris?"), now);
        assert_eq!(echoed(&out), ["{\"n\": 5}"]);
        // Arguments written otherwise, or another person's message: nothing is put in.
        for request in [
            request_of("{ }", "time in Tokyo?"),
            request_of("{}", "time in Rome?"),
        ] {
            let sent = values(request.clone());
            let (out, restored) = turns.restore(request, now);
            assert_eq!((values(out), restored), (sent, Restored::default()));
        }
        // The person's message may have its keys in another order.
        let mut reordered = request_of("{}", "time in Tokyo?");
        reordered[0] =
            raw(serde_json::from_str(r#"{"content": "time in Tokyo?", "role": "user"}"#).unwrap());
        assert_eq!(echoed(&turns.restore(reordered, now).0), ["{\"n\": 1}"]);
    }

    #[test]
    fn the_store_is_bounded_in_bytes_forgetting_the_least_recently_used() {
        let mut turns = HandedTurns::default();
        let now = Instant::now();
        let big = |n: u32| {
            let output = "x".repeat(MAX_HANDED_TURN_BYTES / 4);
            HandedTurn {
                calls: vec![
                    (call("srv_0", "echo"), Some(raw(tool("srv_0", &output)))),
                    (call(&format!("a{n}"), "app"), None),
                ],
                images: None,
                prompt: None,
            }
        };
        for n in 0..6 {
            turns.keep(big(n), now).unwrap();
        }
        assert_eq!(turns.len(), 3);
        assert!(turns.bytes <= MAX_HANDED_TURN_BYTES);
        let asked = |n: u32| {
            vec![raw(
                json!({"role": "assistant", "tool_calls": [call(&format!("a{n}"), "app")]}),
            )]
        };
        assert_eq!(turns.restore(asked(0), now).1.missed, 1);
        assert_eq!(turns.restore(asked(5), now).1.completed, 1);

        let too_large = HandedTurn {
            calls: vec![
                (
                    call("srv_0", "echo"),
                    Some(raw(tool("srv_0", &"y".repeat(MAX_HANDED_TURN_BYTES)))),
                ),
                (call("a9", "app"), None),
            ],
            images: None,
            prompt: None,
        };
        assert!(turns.keep(too_large, now).unwrap_err().bytes > MAX_HANDED_TURN_BYTES);
        assert_eq!(turns.len(), 3, "nothing kept was forgotten for it");
        assert_eq!(turns.restore(asked(9), now).1.missed, 1);
    }
}
