//! The chat-completions turns the server handed back to an app with only the app's own calls in
//! them, and what they held besides: the server's calls and their results. When the app's next
//! request carries such a turn (and its own results), the turn is put together again, so the
//! upstream always sees a complete, valid sequence: every call of the turn, each answered once.
//!
//! Kept in the shared bounded store ([`super::kept`]), keyed by the ids of the calls the app got,
//! and put back only into a request that sends back what the app was handed of it (its calls'
//! ids, names and argument text, after the same last message of the person): several
//! conversations' turns may have the same call ids. A request is read once, outside the
//! endpoint's lock ([`Replay::read`]: each assistant message with calls and what it hands back),
//! its turns looked up under it, one lookup each ([`Replay::look_up`]), and put together again
//! outside it ([`restore`]). A turn that is forgotten still leaves a valid sequence (the app's own
//! calls and results, as it sent them); such a request is logged as a miss.

use indexmap::IndexMap;
use serde_json::{Map, Value};

use super::kept::{
    AppCall, Found, HandBack, KeptTurn, KeptTurns, Restored, json_len, prompt_before, prompt_text,
};
use super::wire::{MessageHead, Raw};

/// One turn handed back to the app.
#[derive(Debug)]
pub struct HandedTurn {
    /// Every call of the turn in the model's order: the call as the model made it, and for the
    /// server's calls the tool message that answered it.
    pub calls: Vec<(Value, Option<Raw>)>,
    /// The user message showing the model the images of the server's results, if any.
    pub images: Option<Raw>,
    /// The canonical text of the person's last message before the turn, as the app sent it.
    pub prompt: Option<String>,
    /// The conversation the request that made it went on (`None`: a new one).
    pub conversation: Option<u64>,
}

impl HandedTurn {
    fn call_id(call: &Value) -> &str {
        call.get("id").and_then(Value::as_str).unwrap_or_default()
    }

    /// The calls the app got.
    fn app_calls(&self) -> impl Iterator<Item = &Value> {
        self.calls
            .iter()
            .filter(|(_, answer)| answer.is_none())
            .map(|(call, _)| call)
    }
}

impl KeptTurn for HandedTurn {
    fn keys(&self) -> Vec<&str> {
        self.app_calls().map(Self::call_id).collect()
    }

    fn hand_back(&self) -> HandBack {
        HandBack::new(
            self.app_calls().map(app_call).collect(),
            self.prompt.clone(),
        )
    }

    fn bytes(&self) -> usize {
        let calls: usize = self
            .calls
            .iter()
            .map(|(call, answer)| json_len(call) + answer.as_ref().map_or(0, |a| a.get().len()))
            .sum();
        calls
            + self.images.as_ref().map_or(0, |i| i.get().len())
            + self.prompt.as_ref().map_or(0, String::len)
    }
}

/// A call in the chat shape (`{"id", "function": {"name", "arguments"}}`); what is missing reads
/// as empty.
fn app_call(call: &Value) -> AppCall {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    let function = call.get("function");
    AppCall {
        id: text(call.get("id")),
        name: text(function.and_then(|f| f.get("name"))),
        arguments: text(function.and_then(|f| f.get("arguments"))),
    }
}

/// The calls of the assistant turn `message`, as the app sends them back.
fn sent_calls(message: &Raw) -> Option<Vec<AppCall>> {
    let message: Value = serde_json::from_str(message.get()).ok()?;
    let calls = message.get("tool_calls")?.as_array()?;
    Some(calls.iter().map(app_call).collect())
}

/// The canonical text of the person's last message of a request, as the app sent it: what a
/// turn handed back in answer to it follows.
pub(crate) fn last_prompt(messages: &[Raw]) -> Option<String> {
    prompt_before(messages, messages.len())
}

/// A character's handed-back chat turns.
pub(crate) type HandedTurns = KeptTurns<HandedTurn>;

/// An assistant message of a request that carries calls: where it is, and what it hands back.
#[derive(Debug)]
struct Sent {
    index: usize,
    back: HandBack,
    /// Its first call's id (how a forgotten turn is recognised).
    first_call: String,
}

/// A request's messages as the restore reads them: read once, outside the endpoint's lock.
#[derive(Debug)]
pub(crate) struct Replay {
    heads: Vec<MessageHead>,
    sent: Vec<Sent>,
}

/// The turns the store holds for a request's assistant messages (looked up under the lock).
#[derive(Debug)]
pub(crate) struct Looked {
    found: Vec<Option<Found<HandedTurn>>>,
    missed: usize,
}

impl Replay {
    /// Reads the messages in one pass: each one's head, and what each assistant message with
    /// calls hands back (after the person's last message before it).
    pub(crate) fn read(messages: &[Raw]) -> Self {
        let heads: Vec<MessageHead> = messages.iter().map(|m| MessageHead::of(m)).collect();
        let mut sent = Vec::new();
        let mut person: Option<usize> = None;
        let mut prompt: Option<Option<String>> = None;
        for (index, head) in heads.iter().enumerate() {
            if head.role.as_deref() == Some("user") {
                person = Some(index);
                prompt = None;
                continue;
            }
            let Some(first_call) = head.call_ids().first().map(|id| (*id).to_owned()) else {
                continue;
            };
            let Some(calls) = sent_calls(&messages[index]) else {
                continue;
            };
            // The person's message before the turn, read once for all the turns after it.
            let said = prompt
                .get_or_insert_with(|| person.and_then(|p| prompt_text(&messages[p])))
                .clone();
            sent.push(Sent {
                index,
                back: HandBack::new(calls, said),
                first_call,
            });
        }
        Self { heads, sent }
    }

    /// Looks up, in the store, the turn each assistant message sends back.
    pub(crate) fn look_up(&self, turns: &HandedTurns) -> Looked {
        let mut missed = 0;
        let found = self
            .sent
            .iter()
            .map(|sent| {
                let found = turns.find_handed(&sent.back);
                if found.is_none() && turns.forgotten(&sent.first_call).is_some() {
                    missed += 1;
                }
                found
            })
            .collect();
        Looked { found, missed }
    }
}

/// Puts every handed-back turn of `messages` together again, as `looked` found them: the
/// assistant turn gets back the server's calls, in the model's order, and its tool results are
/// followed by the server's (the app's own results kept as the app wrote them). Linear in the
/// messages: each is moved once.
pub(crate) fn restore(messages: Vec<Raw>, replay: Replay, looked: Looked) -> (Vec<Raw>, Restored) {
    let Replay { heads, sent } = replay;
    let mut restored = Restored {
        missed: looked.missed,
        ..Restored::default()
    };
    let mut out = Vec::with_capacity(messages.len());
    let mut messages = messages.into_iter().map(Some).collect::<Vec<_>>();
    let mut i = 0;
    for (sent, found) in sent.iter().zip(looked.found) {
        let Some(found) = found else { continue };
        if sent.index < i || !restored.take(found.slot) {
            continue;
        }
        out.extend(messages[i..sent.index].iter_mut().filter_map(Option::take));
        let turn = &found.turn;
        let assistant = messages[sent.index]
            .take()
            .expect("each message is taken once");
        // The app's own results follow its turn.
        let mut j = sent.index + 1;
        let mut results: IndexMap<String, Raw> = IndexMap::new();
        while j < messages.len() && heads[j].role.as_deref() == Some("tool") {
            let id = heads[j].tool_call_id.clone().unwrap_or_default();
            let message = messages[j].take().expect("each message is taken once");
            results.insert(id, message);
            j += 1;
        }
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
        restored.conversation = Some(found.conversation);
        i = j;
    }
    out.extend(messages[i..].iter_mut().filter_map(Option::take));
    (out, restored)
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
    use std::time::{Duration, Instant};

    use serde_json::json;

    use super::*;
    use crate::chat::kept::back::canonical;
    use crate::chat::kept::{KEPT_TURN_TTL, MAX_KEPT_BYTES, MAX_KEPT_TURNS, Owner};

    /// The whole restore, as the endpoint runs it (its lock aside).
    fn restore(turns: &mut HandedTurns, messages: Vec<Raw>, now: Instant) -> (Vec<Raw>, Restored) {
        turns.expire(now);
        let replay = Replay::read(&messages);
        let looked = replay.look_up(turns);
        let (out, restored) = super::restore(messages, replay, looked);
        turns.used(&restored.used, now);
        (out, restored)
    }

    trait Keep {
        fn keep_turn(
            &mut self,
            turn: HandedTurn,
            now: Instant,
        ) -> Result<(), crate::chat::kept::TooLarge>;
    }

    impl Keep for HandedTurns {
        fn keep_turn(
            &mut self,
            turn: HandedTurn,
            now: Instant,
        ) -> Result<(), crate::chat::kept::TooLarge> {
            self.keep(turn, Owner::default(), now)
        }
    }

    fn counted(restored: &Restored) -> (usize, usize) {
        (restored.completed, restored.missed)
    }

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
            conversation: None,
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
        turn.prompt = Some(canonical(&json!({"role": "user", "content": "hi"})));
        turns.keep_turn(turn, now).unwrap();
        let app_turn = json!({"role": "assistant", "content": "Looking.", "tool_calls": [call("a1", "app_clock")]});
        let messages = vec![
            raw(json!({"role": "user", "content": "hi"})),
            raw(app_turn),
            raw(tool("a1", "10:00")),
            raw(json!({"role": "user", "content": "thanks"})),
        ];
        let (out, restored) = restore(&mut turns, messages, now);
        assert_eq!(counted(&restored), (1, 0));
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
        assert_eq!(restore(&mut turns, again, now).1.completed, 1);
    }

    #[test]
    fn an_unknown_turn_passes_as_it_is_and_a_forgotten_one_is_counted() {
        let mut turns = HandedTurns::default();
        let start = Instant::now();
        turns.keep_turn(mixed_turn(), start).unwrap();
        let messages = || {
            vec![
                raw(json!({"role": "assistant", "tool_calls": [call("a1", "app_clock")]})),
                raw(tool("a1", "10:00")),
            ]
        };
        let other = vec![raw(
            json!({"role": "assistant", "tool_calls": [call("zz", "app_clock")]}),
        )];
        let (out, restored) = restore(&mut turns, other, start);
        assert_eq!((out.len(), counted(&restored)), (1, (0, 0)));

        let later = start + KEPT_TURN_TTL + Duration::from_secs(1);
        let (out, restored) = restore(&mut turns, messages(), later);
        assert_eq!(values(out), values(messages()));
        assert_eq!(counted(&restored), (0, 1));
        assert_eq!(turns.len(), 0);
    }

    #[test]
    fn the_store_keeps_at_most_its_bound_forgetting_the_least_recently_used() {
        let mut turns = HandedTurns::default();
        let now = Instant::now();
        for n in 0..MAX_KEPT_TURNS + 10 {
            turns
                .keep_turn(
                    HandedTurn {
                        calls: vec![(call(&format!("a{n}"), "app"), None)],
                        images: None,
                        prompt: None,
                        conversation: None,
                    },
                    now,
                )
                .unwrap();
        }
        assert_eq!(turns.len(), MAX_KEPT_TURNS);
        let first = vec![raw(
            json!({"role": "assistant", "tool_calls": [call("a0", "app")]}),
        )];
        assert_eq!(restore(&mut turns, first, now).1.missed, 1);
        let last = format!("a{}", MAX_KEPT_TURNS + 9);
        let newest = vec![raw(
            json!({"role": "assistant", "tool_calls": [call(&last, "app")]}),
        )];
        assert_eq!(restore(&mut turns, newest, now).1.completed, 1);
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
            prompt: Some(canonical(&json!({"role": "user", "content": said}))),
            conversation: None,
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
        turns
            .keep_turn(turn_of(1, "{}", "time in Tokyo?"), now)
            .unwrap();
        turns
            .keep_turn(turn_of(3, "{}", "time in Paris?"), now)
            .unwrap();
        turns
            .keep_turn(turn_of(5, "{\"tz\":\"utc\"}", "time in Paris?"), now)
            .unwrap();

        let (out, restored) = restore(&mut turns, request_of("{}", "time in Tokyo?"), now);
        assert_eq!(
            (restored.completed, echoed(&out)),
            (1, vec!["{\"n\": 1}".to_owned()])
        );
        let (out, _) = restore(&mut turns, request_of("{}", "time in Paris?"), now);
        assert_eq!(echoed(&out), ["{\"n\": 3}"]);
        let (out, _) = restore(
            &mut turns,
            request_of("{\"tz\":\"utc\"}", "time in Paris?"),
            now,
        );
        assert_eq!(echoed(&out), ["{\"n\": 5}"]);
        // Arguments written otherwise, or another person's message: nothing is put in.
        for request in [
            request_of("{ }", "time in Tokyo?"),
            request_of("{}", "time in Rome?"),
        ] {
            let sent = values(request.clone());
            let (out, restored) = restore(&mut turns, request, now);
            assert_eq!((values(out), counted(&restored)), (sent, (0, 0)));
        }
        // The person's message may have its keys in another order.
        let mut reordered = request_of("{}", "time in Tokyo?");
        reordered[0] =
            raw(serde_json::from_str(r#"{"content": "time in Tokyo?", "role": "user"}"#).unwrap());
        assert_eq!(
            echoed(&restore(&mut turns, reordered, now).0),
            ["{\"n\": 1}"]
        );
    }

    #[test]
    fn the_store_is_bounded_in_bytes_forgetting_the_least_recently_used() {
        let mut turns = HandedTurns::default();
        let now = Instant::now();
        let big = |n: u32| {
            let output = "x".repeat(MAX_KEPT_BYTES / 4);
            HandedTurn {
                calls: vec![
                    (call("srv_0", "echo"), Some(raw(tool("srv_0", &output)))),
                    (call(&format!("a{n}"), "app"), None),
                ],
                images: None,
                prompt: None,
                conversation: None,
            }
        };
        for n in 0..6 {
            turns.keep_turn(big(n), now).unwrap();
        }
        assert_eq!(turns.len(), 3);
        assert!(turns.bytes() <= MAX_KEPT_BYTES);
        let asked = |n: u32| {
            vec![raw(
                json!({"role": "assistant", "tool_calls": [call(&format!("a{n}"), "app")]}),
            )]
        };
        assert_eq!(restore(&mut turns, asked(0), now).1.missed, 1);
        assert_eq!(restore(&mut turns, asked(5), now).1.completed, 1);

        let too_large = HandedTurn {
            calls: vec![
                (
                    call("srv_0", "echo"),
                    Some(raw(tool("srv_0", &"y".repeat(MAX_KEPT_BYTES)))),
                ),
                (call("a9", "app"), None),
            ],
            images: None,
            prompt: None,
            conversation: None,
        };
        assert!(turns.keep_turn(too_large, now).unwrap_err().bytes > MAX_KEPT_BYTES);
        assert_eq!(turns.len(), 3, "nothing kept was forgotten for it");
        assert_eq!(restore(&mut turns, asked(9), now).1.missed, 1);
    }
}
