//! The Responses API's kept turns: a response the app got with only its own calls (the server
//! ran its calls of the same turn), or whose server calls were never run (the rounds ran out),
//! and the id a stream gave the app when the upstream's last response has another. The upstream
//! must see every call of a turn answered, however the app goes on:
//!
//! - by `previous_response_id` (the upstream keeps the turn): the server's
//!   `function_call_output` items are added to the input, in the model's order with the app's;
//!   an id a stream gave is replaced by the upstream's last one; a turn the store forgot gets an
//!   output saying the result was lost for each server call ([`LOST_RESULT_TEXT`]), so the
//!   conversation goes on;
//! - by sending the whole conversation again (`"store": false`, or an app that keeps its own
//!   history, like the Agents SDK): the server's items of the turn (its calls, and the reasoning
//!   that went with them) are put back in place, and its outputs after the turn's. A turn the
//!   store forgot leaves the app's items as they are: a valid conversation without the server's
//!   calls.
//!
//! Kept in the shared bounded store ([`crate::chat::kept`]) by the response's ids and the ids of
//! the app's calls; a replayed turn is put back only where the request sends back what the app
//! was handed of it (its calls' ids, names and argument text, after the same last message of the
//! person): several conversations' turns may have the same call ids. The app's input is read in
//! one pass ([`Replay::read`]) into the runs of model items it sends back (a run ends at the
//! person's, system's or developer's message and at an output), each looked up once by what it
//! hands back ([`Replay::look_up`], under the endpoint's lock), then put together again
//! ([`restore`]): linear in the input, whatever the store holds. No I/O.

use std::collections::HashSet;
use std::sync::Arc;

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::chat::kept::{
    AppCall, Found, HandBack, KeptTurn, KeptTurns, LOST_RESULT_TEXT, Lost, Restored, prompt_text,
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
    /// The canonical text of the person's last message before the turn, as the app sent it.
    pub prompt: Option<String>,
    /// The conversation the request that made it went on (`None`: a new one).
    pub conversation: Option<u64>,
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
            + self.prompt.as_ref().map_or(0, String::len)
    }

    /// A continuation by id must go on from the last response and answer the server's calls:
    /// which they were is remembered.
    fn lost(&self) -> Option<Lost> {
        (self.alias.is_some() || self.answers_anything()).then(|| Lost {
            response: Some(self.response.clone()),
            calls: self
                .calls
                .iter()
                .map(|(id, answer)| (id.clone(), answer.is_some()))
                .collect(),
        })
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
    role: Option<String>,
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

    /// Whether the item is one the model made (a message of the assistant, reasoning, a call
    /// of any tool): a run of them is what the app sends back of a response. A message of the
    /// person, the system or the developer ends a run, and so does an output.
    fn of_the_model(&self) -> bool {
        let output = self.kind.as_deref().is_some_and(|k| k.ends_with("_output"));
        let someone_else = self.role.as_deref().is_some_and(|r| r != "assistant");
        !output && !someone_else
    }
}

/// A run of model items the app sent back that holds calls: where it is, and what it hands
/// back.
#[derive(Debug)]
struct Run {
    start: usize,
    end: usize,
    back: HandBack,
    /// Its first call's id (how a forgotten turn is recognised).
    first_call: String,
}

/// A request's input as the restore reads it: read once, outside the endpoint's lock.
#[derive(Debug)]
pub(crate) struct Replay {
    heads: Vec<Head>,
    runs: Vec<Run>,
}

/// What the store holds for a request: looked up under the endpoint's lock, one lookup per id
/// or run.
#[derive(Debug)]
pub(crate) struct Looked {
    previous: Previous,
    /// For each run, the kept turn it sends back.
    runs: Vec<Option<Found<KeptResponse>>>,
    /// Runs whose calls named a forgotten turn.
    missed: usize,
}

/// What the store holds of the response the request continues from.
#[derive(Debug)]
enum Previous {
    /// No `previous_response_id`, or one the store never kept.
    None,
    Kept(Found<KeptResponse>),
    /// Forgotten: with the calls it left unanswered, when it had server calls.
    Forgotten(Option<Arc<Lost>>),
}

impl Replay {
    /// Reads the app's input in one pass: each item's head, and its runs of model items with
    /// calls, each with what it hands back (after the person's last message before it).
    pub(crate) fn read(input: &[Raw]) -> Self {
        let heads: Vec<Head> = input.iter().map(|item| Head::of(item)).collect();
        let mut runs = Vec::new();
        let mut person: Option<usize> = None;
        let mut prompt: Option<Option<String>> = None;
        let mut start = 0;
        for i in 0..=heads.len() {
            if i < heads.len() && heads[i].of_the_model() {
                continue;
            }
            let calls: Vec<AppCall> = heads[start..i].iter().filter_map(Head::app_call).collect();
            if let Some(first) = calls.first() {
                let first_call = first.id.clone();
                // The person's message before the run, read once for all the runs after it.
                let said = prompt
                    .get_or_insert_with(|| person.and_then(|p| prompt_text(&input[p])))
                    .clone();
                runs.push(Run {
                    start,
                    end: i,
                    back: HandBack::new(calls, said),
                    first_call,
                });
            }
            if i < heads.len() && heads[i].role.as_deref() == Some("user") {
                person = Some(i);
                prompt = None;
            }
            start = i + 1;
        }
        Self { heads, runs }
    }

    /// Looks up, in the store, the response `previous` names and the turn each run sends back.
    pub(crate) fn look_up(&self, kept: &KeptResponses, previous: Option<&str>) -> Looked {
        let previous = match previous {
            None => Previous::None,
            Some(id) => match kept.find(id) {
                Some(found) => Previous::Kept(found),
                None => kept
                    .forgotten(id)
                    .map_or(Previous::None, Previous::Forgotten),
            },
        };
        let mut missed = 0;
        let runs = self
            .runs
            .iter()
            .map(|run| {
                let found = kept.find_handed(&run.back);
                if found.is_none() && kept.forgotten(&run.first_call).is_some() {
                    missed += 1;
                }
                found
            })
            .collect();
        Looked {
            previous,
            runs,
            missed,
        }
    }
}

/// The app's input put together again with the kept turns it continues, as `looked` found them;
/// `previous` is the app's `previous_response_id`, which it returns as the upstream must see
/// it. Linear in the input: each item is copied or placed once.
pub(crate) fn restore(
    input: Vec<Raw>,
    replay: Replay,
    looked: Looked,
    previous: Option<String>,
) -> (Vec<Raw>, Option<String>, Restored) {
    let Replay { heads, runs } = replay;
    let mut restored = Restored {
        missed: looked.missed,
        ..Restored::default()
    };
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    let mut previous = previous;
    match looked.previous {
        Previous::None => {}
        Previous::Kept(found) => {
            let turn = &found.turn;
            previous = Some(turn.response.clone());
            if turn.answers_anything() {
                // The upstream holds the turn: its answers lead the input.
                i = answers(turn, &input, &heads, 0, &mut out);
                restored.completed += 1;
            }
            restored.conversation = Some(found.conversation);
            restored.take(found.slot);
        }
        Previous::Forgotten(Some(lost)) => {
            // The upstream holds the turn, the server no longer its results: each is answered
            // as lost, so the conversation goes on.
            previous = lost.response.clone().or(previous);
            i = lost_answers(&lost, &input, &heads, &mut out);
            restored.lost += lost.servers();
            restored.previous_forgotten = true;
        }
        Previous::Forgotten(None) => restored.previous_forgotten = true,
    }
    for (run, found) in runs.iter().zip(looked.runs) {
        let Some(found) = found else { continue };
        if run.start < i || !restored.take(found.slot) {
            continue;
        }
        out.extend(input[i..run.start].iter().cloned());
        place(
            &found.turn,
            &input[run.start..run.end],
            &heads[run.start..run.end],
            &mut out,
        );
        i = answers(&found.turn, &input, &heads, run.end, &mut out);
        restored.completed += 1;
        restored.conversation = Some(found.conversation);
    }
    out.extend(input[i..].iter().cloned());
    (out, previous, restored)
}

/// Writes a run the app sent back with its turn's items in the model's order: the app's items
/// before the turn's first as they are, then the turn's items (the server's as kept, the app's
/// as it sent them), then any other item of the run.
fn place(turn: &KeptResponse, run: &[Raw], heads: &[Head], out: &mut Vec<Raw>) {
    let theirs: HashSet<String> = turn.app_identities().collect();
    let in_turn = |head: &Head| head.identity().is_some_and(|id| theirs.contains(&id));
    let first = heads.iter().position(in_turn).unwrap_or(run.len());
    out.extend(run[..first].iter().cloned());
    let mut apps: IndexMap<String, &Raw> = IndexMap::new();
    let mut others = Vec::new();
    for (item, head) in run[first..].iter().zip(&heads[first..]) {
        match head.identity().filter(|id| theirs.contains(id)) {
            Some(id) if !apps.contains_key(&id) => {
                apps.insert(id, item);
            }
            _ => others.push(item),
        }
    }
    for (item, app) in &turn.items {
        if !app {
            out.push(item.clone());
        } else if let Some(theirs) = Head::of(item)
            .identity()
            .and_then(|id| apps.shift_remove(&id))
        {
            out.push(theirs.clone());
        }
    }
    out.extend(apps.into_values().cloned());
    out.extend(others.into_iter().cloned());
}

/// The `function_call_output` items the app sent at `from`, by call id, and where they end.
fn outputs_at<'a>(
    input: &'a [Raw],
    heads: &'a [Head],
    from: usize,
) -> (IndexMap<&'a str, &'a Raw>, usize) {
    let mut end = from;
    let mut theirs: IndexMap<&str, &Raw> = IndexMap::new();
    while end < input.len() && heads[end].is("function_call_output") {
        theirs.insert(
            heads[end].call_id.as_deref().unwrap_or_default(),
            &input[end],
        );
        end += 1;
    }
    (theirs, end)
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
    let (mut theirs, end) = outputs_at(input, heads, from);
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

/// Writes the answers of a forgotten turn's calls in the model's order: for each server call an
/// output saying its result was lost (unless the app answered it itself), the app's own from
/// the start of the input; returns where the app's outputs ended.
fn lost_answers(lost: &Lost, input: &[Raw], heads: &[Head], out: &mut Vec<Raw>) -> usize {
    let (mut theirs, end) = outputs_at(input, heads, 0);
    for (call, server) in &lost.calls {
        match theirs.shift_remove(call.as_str()) {
            Some(answer) => out.push(answer.clone()),
            None if *server => out.push(raw(&json!({"type": "function_call_output",
                "call_id": call, "output": LOST_RESULT_TEXT}))),
            None => {}
        }
    }
    out.extend(theirs.into_values().cloned());
    end
}

/// One item as kept JSON text.
pub(crate) fn raw(value: &Value) -> Raw {
    serde_json::value::to_raw_value(value).expect("a JSON value serialises")
}

#[cfg(test)]
mod tests;
