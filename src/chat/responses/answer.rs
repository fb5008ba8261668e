//! The app's one response, built round after round from the upstream's: each round read from
//! its events (a stream) or from its whole response (for a stream, turned into the same events;
//! without one, its items placed as those events would place them), the items
//! the app gets kept in order, and — for a stream — the events the app gets, as they come. No
//! I/O.
//!
//! What the app gets of a round's items: every item but the server's calls (`function_call`
//! items whose name is not one of the app's tools); a `reasoning` item goes with the item after
//! it (it is held until that item begins: given with a message or an app's call, left out with
//! a server's call), so an app that replays its output never sends a reasoning item without the
//! item it belongs to. The app's stream reads as one response: the first round's
//! `response.created` and `response.in_progress` (later rounds' are not forwarded), each item's
//! events as they arrive with `output_index` counted over the app's items of every round,
//! `sequence_number` counted afresh, and one terminal event, written at the end, with the whole
//! response. One id throughout: the official SDKs' stream helpers refuse a stream whose
//! lifecycle events change it, so a stream carries its first round's id.

use std::collections::HashMap;
use std::fmt::Write as _;

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::chat::answer::{ModelCall, add_usage};
use crate::chat::round::{Streamed, Unreadable};
use crate::chat::wire::error_text;

mod passed;

/// What the app's response takes of the first round's: its id (a stream's) and its creation.
#[derive(serde::Deserialize)]
struct Opening {
    id: Option<Value>,
    created_at: Option<Value>,
}

impl Opening {
    fn into_first(self) -> Map<String, Value> {
        let fields = [("id", self.id), ("created_at", self.created_at)];
        fields
            .into_iter()
            .filter_map(|(key, value)| Some((key.to_owned(), value?)))
            .collect()
    }
}

/// The first round's response as far as the app's response takes it ([`Opening`]).
fn first_of(response: &Map<String, Value>) -> Map<String, Value> {
    let field = |key| response.get(key).cloned();
    Opening {
        id: field("id"),
        created_at: field("created_at"),
    }
    .into_first()
}

/// Where one upstream item's events go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The app's item at this index of its output.
    App(usize),
    /// A server's call: the app never sees it.
    Server,
    /// A reasoning item, waiting for the item after it.
    Held,
}

/// The round being read.
#[derive(Debug, Default)]
struct RoundRead {
    places: HashMap<u64, Place>,
    /// Held reasoning items, in order: their upstream index and events so far.
    held: Vec<(u64, Vec<Map<String, Value>>)>,
    /// Every finished item of the round, by upstream index (when the terminal event has none).
    done: std::collections::BTreeMap<u64, Value>,
    /// The round's response, from its terminal event (or its creation, until then).
    response: Option<Map<String, Value>>,
    /// The round's response as an opening event passed as written gave it: read only when no
    /// terminal event came after it.
    opening: Option<Box<RawValue>>,
    ended: bool,
}

/// What a round's answer holds for the loop.
#[derive(Debug, Default)]
pub(crate) struct RoundOutput {
    /// The upstream's id of the round's response.
    pub id: Option<String>,
    /// `completed`, `incomplete`, `failed`, ...; `None` when the stream ended before saying.
    pub status: Option<String>,
    /// Every output item, in the model's order.
    pub items: Vec<Value>,
    /// Its calls (`function_call` items), in the model's order.
    pub calls: Vec<ModelCall>,
}

/// The app's response over every round.
#[derive(Debug)]
pub(crate) struct AppResponse {
    streaming: bool,
    /// The next event's `sequence_number`.
    sequence: u64,
    /// The first round's id (a stream's id) and creation: all the app's response takes of it.
    first: Option<Map<String, Value>>,
    /// The last round's response.
    last: Option<Map<String, Value>>,
    /// The app's items, by index: as added, then as finished.
    items: Vec<Value>,
    usage: Option<Map<String, Value>>,
    rounds: usize,
    round: RoundRead,
    /// The app's stream has begun (its `response.created` went out).
    began: bool,
}

impl AppResponse {
    pub(crate) fn new(streaming: bool) -> Self {
        Self {
            streaming,
            sequence: 0,
            first: None,
            last: None,
            items: Vec::new(),
            usage: None,
            rounds: 0,
            round: RoundRead::default(),
            began: false,
        }
    }

    /// A round's events begin.
    pub(crate) fn round_begins(&mut self) {
        self.rounds += 1;
        self.round = RoundRead::default();
    }

    /// The id the app gets: a stream's first round's (one id throughout a stream), else the
    /// last round's.
    pub(crate) fn app_id(&self) -> Option<&str> {
        let response = if self.streaming {
            self.first.as_ref()
        } else {
            self.last.as_ref()
        };
        response.and_then(|r| r.get("id")).and_then(Value::as_str)
    }

    /// One event of the round's stream (its data); `is_app` says whether a call's name is one
    /// of the app's tools.
    pub(crate) fn event(
        &mut self,
        data: &str,
        is_app: &dyn Fn(&str) -> bool,
    ) -> Result<Streamed, Unreadable> {
        if let Some(streamed) = self.pass_event(data, is_app) {
            return Ok(streamed);
        }
        let Ok(event) = serde_json::from_str::<Map<String, Value>>(data) else {
            return Err(Unreadable::Invalid(format!(
                "the upstream's stream sent data that is not a JSON object: {}",
                error_text(data.as_bytes())
            )));
        };
        self.take(event, is_app)
    }

    /// A round's whole response: for an app's stream, read as the events a stream of it would
    /// have sent (their frames); without a stream, its items placed directly (no frames).
    pub(crate) fn whole(
        &mut self,
        body: &[u8],
        is_app: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<Bytes>, Unreadable> {
        let response = serde_json::from_slice::<Map<String, Value>>(body)
            .ok()
            .filter(|r| r.get("output").is_some_and(Value::is_array));
        let Some(mut response) = response else {
            return Err(Unreadable::Invalid(format!(
                "the upstream answered with success, but not with a response: {}",
                error_text(body)
            )));
        };
        self.round_begins();
        if !self.streaming {
            self.whole_unstreamed(response, is_app);
            return Ok(Vec::new());
        }
        // The items, out of the response while its opening is written (with no output yet);
        // put back for the terminal event.
        let items = match response.get_mut("output") {
            Some(Value::Array(items)) => std::mem::take(items),
            _ => Vec::new(),
        };
        let mut opening = response.clone();
        opening.insert("status".into(), json!("in_progress"));
        let mut frames = Vec::new();
        if self.streaming {
            for kind in ["response.created", "response.in_progress"] {
                let event = event_of(kind, [("response", Value::Object(opening.clone()))]);
                frames.extend(self.take_frames(event, is_app)?);
            }
        }
        for (index, item) in items.iter().enumerate() {
            for kind in ["response.output_item.added", "response.output_item.done"] {
                let event = event_of(
                    kind,
                    [("output_index", json!(index)), ("item", item.clone())],
                );
                frames.extend(self.take_frames(event, is_app)?);
            }
        }
        let terminal = match response.get("status").and_then(Value::as_str) {
            Some("incomplete") => "response.incomplete",
            Some("failed") => "response.failed",
            _ => "response.completed",
        };
        response.insert("output".into(), Value::Array(items));
        let event = event_of(terminal, [("response", Value::Object(response))]);
        frames.extend(self.take_frames(event, is_app)?);
        Ok(frames)
    }

    /// A round's whole response for an app that asked for no stream: its items placed as its
    /// events would place them, with no event written.
    fn whole_unstreamed(&mut self, response: Map<String, Value>, is_app: &dyn Fn(&str) -> bool) {
        if self.first.is_none() {
            self.first = Some(first_of(&response));
        }
        let items = match response.get("output") {
            Some(Value::Array(items)) => items.as_slice(),
            _ => &[],
        };
        let mut held = Vec::new();
        for item in items {
            match item_type(item) {
                "function_call" if !is_app(call_name(item)) => held.clear(),
                "reasoning" => held.push(item),
                _ => {
                    self.items.extend(held.drain(..).cloned());
                    self.items.push(item.clone());
                }
            }
        }
        self.items.extend(held.into_iter().cloned());
        self.round.response = Some(response);
        self.round.ended = true;
    }

    /// [`Self::take`], for the frames it gives.
    fn take_frames(
        &mut self,
        event: Map<String, Value>,
        is_app: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<Bytes>, Unreadable> {
        Ok(match self.take(event, is_app)? {
            Streamed::Frames(frames) | Streamed::Held(frames) => frames,
            Streamed::End => Vec::new(),
        })
    }

    fn take(
        &mut self,
        mut event: Map<String, Value>,
        is_app: &dyn Fn(&str) -> bool,
    ) -> Result<Streamed, Unreadable> {
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut frames = Vec::new();
        match kind.as_str() {
            "error" => {
                event.remove("type");
                event.remove("sequence_number");
                return Err(Unreadable::Error(Value::Object(event)));
            }
            "response.created" | "response.in_progress" | "response.queued" => {
                // Later rounds are the same response to the app: not announced again. The
                // frame is written before the response is moved out of the event.
                if self.rounds <= 1 {
                    self.began |= kind == "response.created";
                    frames.extend(self.frame_of(&mut event));
                }
                if let Some(Value::Object(response)) = event.remove("response") {
                    if self.first.is_none() {
                        self.first = Some(first_of(&response));
                    }
                    self.round.opening = None;
                    self.round.response = Some(response);
                }
                return Ok(Streamed::Held(frames));
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                if let Some(Value::Object(response)) = event.remove("response") {
                    self.round.response = Some(response);
                }
                // Reasoning last in its round has no item after it to wait for.
                frames.extend(self.release_held());
                self.round.ended = true;
                return Ok(Streamed::Frames(frames));
            }
            _ => match event.get("output_index").and_then(Value::as_u64) {
                None => frames.extend(self.frame(event)),
                Some(index) => {
                    frames.extend(self.item_event(&kind, index, event, is_app));
                    if opens(&kind) {
                        return Ok(Streamed::Held(frames));
                    }
                }
            },
        }
        Ok(Streamed::Frames(frames))
    }

    /// An event of one output item.
    fn item_event(
        &mut self,
        kind: &str,
        index: u64,
        mut event: Map<String, Value>,
        is_app: &dyn Fn(&str) -> bool,
    ) -> Vec<Bytes> {
        let mut frames = Vec::new();
        let item = event.get("item").cloned();
        if kind == "response.output_item.added" {
            frames = self.place(index, item.as_ref(), is_app).1;
        }
        if kind == "response.output_item.done"
            && let Some(item) = &item
        {
            self.round.done.insert(index, item.clone());
        }
        let place = match self.round.places.get(&index) {
            Some(place) => *place,
            // An item's event before the item: the app's, as far as anyone can tell.
            None => {
                self.items.push(item.clone().unwrap_or(Value::Null));
                let place = Place::App(self.items.len() - 1);
                self.round.places.insert(index, place);
                place
            }
        };
        match place {
            Place::Server => {}
            Place::Held => {
                if let Some((_, events)) = self.round.held.iter_mut().find(|(i, _)| *i == index) {
                    events.push(event);
                } else {
                    self.round.held.push((index, vec![event]));
                }
            }
            Place::App(at) => {
                if kind == "response.output_item.done"
                    && let Some(item) = item
                {
                    self.items[at] = item;
                }
                event.insert("output_index".into(), json!(at));
                frames.extend(self.frame(event));
            }
        }
        frames
    }

    /// Where a new item's events go (the app's, a server's call, or held reasoning); the
    /// frames of the held reasoning it releases.
    fn place(
        &mut self,
        index: u64,
        item: Option<&Value>,
        is_app: &dyn Fn(&str) -> bool,
    ) -> (Place, Vec<Bytes>) {
        let mut frames = Vec::new();
        let place = match item {
            Some(item) if item_type(item) == "function_call" && !is_app(call_name(item)) => {
                // Reasoning before a server's call is the server's too.
                self.round.held.clear();
                Place::Server
            }
            Some(item) if item_type(item) == "reasoning" => Place::Held,
            _ => {
                frames.extend(self.release_held());
                self.items.push(item.cloned().unwrap_or(Value::Null));
                Place::App(self.items.len() - 1)
            }
        };
        self.round.places.insert(index, place);
        (place, frames)
    }

    /// The held reasoning items become the app's, with the events they had so far.
    fn release_held(&mut self) -> Vec<Bytes> {
        let mut frames = Vec::new();
        for (index, events) in std::mem::take(&mut self.round.held) {
            let added = events
                .first()
                .and_then(|e| e.get("item"))
                .cloned()
                .unwrap_or(Value::Null);
            self.items.push(added);
            let at = self.items.len() - 1;
            self.round.places.insert(index, Place::App(at));
            for mut event in events {
                if event.get("type").and_then(Value::as_str) == Some("response.output_item.done")
                    && let Some(item) = event.get("item")
                {
                    self.items[at] = item.clone();
                }
                event.insert("output_index".into(), json!(at));
                frames.extend(self.frame(event));
            }
        }
        frames
    }

    /// An event as the app gets it, numbered in the app's sequence (nothing without a stream).
    fn frame(&mut self, mut event: Map<String, Value>) -> Option<Bytes> {
        self.frame_of(&mut event)
    }

    /// [`Self::frame`] of an event still needed after (its `sequence_number` set in it).
    fn frame_of(&mut self, event: &mut Map<String, Value>) -> Option<Bytes> {
        if !self.streaming {
            return None;
        }
        event.insert("sequence_number".into(), json!(self.sequence));
        self.sequence += 1;
        Some(sse_event(event))
    }

    /// The round is read: its output for the loop.
    pub(crate) fn round_output(&mut self) -> RoundOutput {
        let opening = self.round.opening.take();
        let mut response = self.round.response.take().or_else(|| {
            opening.and_then(|raw| serde_json::from_str::<Map<String, Value>>(raw.get()).ok())
        });
        let status = response
            .as_ref()
            .filter(|_| self.round.ended)
            .and_then(|r| r.get("status"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        // The items are taken: the response kept as the last one gets the app's items when
        // the app's response is written.
        let mut items = match response.as_mut().and_then(|r| r.get_mut("output")) {
            Some(Value::Array(items)) => std::mem::take(items),
            _ => Vec::new(),
        };
        if items.is_empty() {
            items = std::mem::take(&mut self.round.done).into_values().collect();
        }
        if let Some(usage) = response
            .as_ref()
            .and_then(|r| r.get("usage"))
            .and_then(Value::as_object)
        {
            match &mut self.usage {
                Some(total) => add_usage(total, usage),
                None => self.usage = Some(usage.clone()),
            }
        }
        let calls = items
            .iter()
            .filter(|item| item_type(item) == "function_call")
            .map(|item| ModelCall {
                id: item["call_id"].as_str().unwrap_or_default().to_owned(),
                name: call_name(item).to_owned(),
                arguments: item["arguments"].as_str().unwrap_or_default().to_owned(),
            })
            .collect();
        let id = response
            .as_ref()
            .and_then(|r| r.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(response) = response {
            self.last = Some(response);
        }
        RoundOutput {
            id,
            status,
            items,
            calls,
        }
    }

    /// The whole response the app gets: the last round's, with the app's id, the first round's
    /// creation time, the app's items of every round, usage summed over rounds, the app's own
    /// `previous_response_id`, and `status` (with its details) as given.
    /// Written once, at the end: the last round's response and the app's items are moved
    /// into it.
    pub(crate) fn response(
        &mut self,
        previous: Option<&str>,
        status: &str,
        details: Option<Value>,
    ) -> Map<String, Value> {
        let id = self
            .app_id()
            .map(str::to_owned)
            .unwrap_or_else(new_response_id);
        // Before any round's end: the response as the round being read was created.
        let mut response = self
            .last
            .take()
            .or_else(|| self.round.response.take())
            .or_else(|| {
                let raw = self.round.opening.take()?;
                serde_json::from_str(raw.get()).ok()
            })
            .or_else(|| self.first.clone())
            .unwrap_or_default();
        response.insert("id".into(), json!(id));
        response.insert("object".into(), json!("response"));
        if let Some(created) = self.first.as_ref().and_then(|f| f.get("created_at")) {
            response.insert("created_at".into(), created.clone());
        }
        response.insert("status".into(), json!(status));
        if let Some(details) = details {
            let key = if status == "failed" {
                "error"
            } else {
                "incomplete_details"
            };
            response.insert(key.into(), details);
        }
        response.insert(
            "output".into(),
            Value::Array(std::mem::take(&mut self.items)),
        );
        response.insert(
            "usage".into(),
            self.usage.take().map_or(Value::Null, Value::Object),
        );
        response.insert("previous_response_id".into(), json!(previous));
        response
    }

    /// The app's stream's last events: its terminal event with the whole response (after a
    /// `response.created` of its own when nothing was sent yet).
    pub(crate) fn terminal(&mut self, response: Map<String, Value>) -> Vec<Bytes> {
        let mut frames = Vec::new();
        if !self.began {
            self.began = true;
            let mut opening = response.clone();
            opening.insert("status".into(), json!("in_progress"));
            opening.insert("output".into(), json!([]));
            let event = event_of("response.created", [("response", Value::Object(opening))]);
            frames.extend(self.frame(event));
        }
        let kind = match response.get("status").and_then(Value::as_str) {
            Some("incomplete") => "response.incomplete",
            Some("failed") => "response.failed",
            _ => "response.completed",
        };
        let event = event_of(kind, [("response", Value::Object(response))]);
        frames.extend(self.frame(event));
        frames
    }
}

fn item_type(item: &Value) -> &str {
    item.get("type").and_then(Value::as_str).unwrap_or_default()
}

fn call_name(item: &Value) -> &str {
    item.get("name").and_then(Value::as_str).unwrap_or_default()
}

/// An event of this type with these fields (moved in, not serialised again).
fn event_of<const N: usize>(kind: &str, fields: [(&str, Value); N]) -> Map<String, Value> {
    let mut event = Map::new();
    event.insert("type".into(), json!(kind));
    for (key, value) in fields {
        event.insert(key.into(), value);
    }
    event
}

/// One SSE event as the Responses API sends it: its type as the event name, then the data.
fn sse_event(event: &Map<String, Value>) -> Bytes {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    let data = serde_json::to_string(event).unwrap_or_default();
    let mut frame = String::with_capacity(data.len() + kind.len() + 16);
    let _ = write!(frame, "event: {kind}\ndata: {data}\n\n");
    Bytes::from(frame)
}

/// A fresh response id in OpenAI's style, for an answer whose upstream sent none.
pub(crate) fn new_response_id() -> String {
    format!("resp_{}", uuid::Uuid::new_v4().simple())
}

/// Whether an item's event only opens it (the item or a part of it, with nothing said yet).
fn opens(kind: &str) -> bool {
    matches!(
        kind,
        "response.output_item.added" | "response.content_part.added"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(frame: &Bytes) -> Value {
        let text = std::str::from_utf8(frame).unwrap();
        let data = text.split("data: ").nth(1).unwrap().trim_end();
        serde_json::from_str(data).unwrap()
    }

    fn feed(answer: &mut AppResponse, events: &[Value]) -> Vec<Value> {
        let is_app = |name: &str| name == "app_clock";
        let mut frames = Vec::new();
        for event in events {
            match answer.event(&event.to_string(), &is_app).unwrap() {
                Streamed::Frames(more) | Streamed::Held(more) => {
                    frames.extend(more.iter().map(data))
                }
                Streamed::End => unreachable!("the terminal event gives its frames"),
            }
        }
        frames
    }

    fn item_events(index: u64, item: Value) -> Vec<Value> {
        vec![
            json!({"type": "response.output_item.added", "output_index": index, "item": item}),
            json!({"type": "response.output_text.delta", "output_index": index,
                   "item_id": item["id"], "content_index": 0, "delta": "x"}),
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        ]
    }

    fn round(id: &str, items: &[Value]) -> Vec<Value> {
        let mut events = vec![
            json!({"type": "response.created", "response": {"id": id, "output": [], "created_at": 7}}),
            json!({"type": "response.in_progress", "response": {"id": id, "output": []}}),
        ];
        for (index, item) in items.iter().enumerate() {
            events.extend(item_events(index as u64, item.clone()));
        }
        events.push(json!({"type": "response.completed", "response": {"id": id,
            "status": "completed", "output": items, "usage": {"total_tokens": 3}}}));
        events
    }

    #[test]
    fn rounds_read_as_one_stream_without_the_servers_calls() {
        let mut answer = AppResponse::new(true);
        let reasoning = json!({"type": "reasoning", "id": "rs_1", "summary": []});
        let server = json!({"type": "function_call", "id": "fc_1", "call_id": "s",
                            "name": "get_weather", "arguments": "{}"});
        let words = json!({"type": "message", "id": "msg_1", "content": []});
        answer.round_begins();
        let first = feed(&mut answer, &round("resp_1", &[reasoning.clone(), server]));
        let output = answer.round_output();
        assert_eq!(output.calls.len(), 1);
        assert_eq!(output.id.as_deref(), Some("resp_1"));
        let kinds: Vec<&str> = first.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["response.created", "response.in_progress"],
            "the reasoning went with the server's call"
        );
        answer.round_begins();
        let app_call = json!({"type": "function_call", "id": "fc_2", "call_id": "a",
                              "name": "app_clock", "arguments": "{}"});
        let second = feed(&mut answer, &round("resp_2", &[reasoning, words, app_call]));
        answer.round_output();
        let indexes: Vec<(&str, u64)> = second
            .iter()
            .map(|e| {
                (
                    e["type"].as_str().unwrap(),
                    e["output_index"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            indexes.len(),
            9,
            "the second round's created and in progress are not sent"
        );
        assert_eq!(indexes[0], ("response.output_item.added", 0));
        assert_eq!(indexes[3], ("response.output_item.added", 1));
        assert_eq!(indexes[8], ("response.output_item.done", 2));
        let numbers: Vec<u64> = first
            .iter()
            .chain(&second)
            .map(|e| e["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(numbers, (0..11).collect::<Vec<_>>());
        assert_eq!(answer.app_id(), Some("resp_1"));
        let response = answer.response(Some("resp_0"), "completed", None);
        assert_eq!(response["id"], "resp_1");
        assert_eq!(response["previous_response_id"], "resp_0");
        assert_eq!(response["usage"]["total_tokens"], 6);
        let ids: Vec<&Value> = response["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| &i["id"])
            .collect();
        assert_eq!(ids, ["rs_1", "msg_1", "fc_2"]);
        let end = answer.terminal(response);
        assert_eq!(data(&end[0])["type"], "response.completed");
        assert_eq!(data(&end[0])["sequence_number"], 11);
    }

    #[test]
    fn an_items_events_pass_as_written_but_for_their_index_and_number() {
        let is_app = |name: &str| name == "app_clock";
        let mut answer = AppResponse::new(true);
        answer.round_begins();
        let words = json!({"type": "message", "id": "msg_1", "content": []});
        assert_eq!(feed(&mut answer, &round("resp_1", &[words])).len(), 5);
        answer.round_output();
        answer.round_begins();
        let call = |id: &str| {
            json!({"type": "response.output_item.added", "output_index": 0, "item": {
                "type": "function_call", "id": id, "call_id": id, "name": "get_weather",
                "arguments": ""}})
        };
        let mut second = call("fc_1");
        let mut third = call("fc_2");
        third["output_index"] = json!(1);
        second["sequence_number"] = json!(2);
        third["sequence_number"] = json!(3);
        let message = json!({"type": "response.output_item.added", "sequence_number": 4,
            "output_index": 2, "item": {"type": "message", "id": "msg_2", "content": []}});
        let added = feed(&mut answer, &[second, third, message]);
        assert_eq!(added.len(), 1, "the server's calls are not the app's");
        assert_eq!(
            (&added[0]["output_index"], &added[0]["sequence_number"]),
            (&json!(1), &json!(5))
        );
        // The server's call's arguments: dropped.
        let arguments = r#"{"type":"response.function_call_arguments.delta","sequence_number":5,"item_id":"fc_1","output_index":0,"delta":"{}"}"#;
        let Streamed::Frames(none) = answer.event(arguments, &is_app).unwrap() else {
            panic!("not an opening")
        };
        assert!(none.is_empty());
        // The app's text: as written, but for its place in the app's output and its number.
        let delta = r#"{"type":"response.output_text.delta","sequence_number":9,"item_id":"msg_2","output_index":2,"content_index":0,"delta":"Hi \"you\"\u00e9","logprobs":[]}"#;
        let Streamed::Frames(frames) = answer.event(delta, &is_app).unwrap() else {
            panic!("a delta is not an opening")
        };
        let written = delta
            .replace(r#""sequence_number":9"#, r#""sequence_number":6"#)
            .replace(r#""output_index":2"#, r#""output_index":1"#);
        assert_eq!(
            std::str::from_utf8(&frames[0]).unwrap(),
            format!("event: response.output_text.delta\ndata: {written}\n\n")
        );
        // Numbered in the app's sequence, whatever the upstream's.
        let later = r#"{"type":"response.output_text.delta","sequence_number":40,"item_id":"msg_2","output_index":2,"content_index":0,"delta":"!"}"#;
        let Streamed::Frames(frames) = answer.event(later, &is_app).unwrap() else {
            panic!("a delta is not an opening")
        };
        assert_eq!(
            (
                &data(&frames[0])["sequence_number"],
                &data(&frames[0])["output_index"]
            ),
            (&json!(7), &json!(1))
        );
    }

    /// The frames of these rounds (each a list of events, the last its terminal one), the
    /// rounds' outputs and the app's response.
    fn rounds_as_read(rounds: &[Vec<Value>]) -> (Vec<Value>, Vec<Vec<Value>>, Map<String, Value>) {
        let mut answer = AppResponse::new(true);
        let mut frames = Vec::new();
        let mut outputs = Vec::new();
        for events in rounds {
            answer.round_begins();
            frames.extend(feed(&mut answer, events));
            outputs.push(answer.round_output().items);
        }
        let response = answer.response(None, "completed", None);
        frames.extend(answer.terminal(response.clone()).iter().map(data));
        (frames, outputs, response)
    }

    #[test]
    fn events_passed_as_written_read_as_events_read_in_full() {
        let reasoning = json!({"type": "reasoning", "id": "rs_1", "summary": []});
        let server = json!({"type": "function_call", "id": "fc_1", "call_id": "s",
                            "name": "get_weather", "arguments": "{}"});
        let words = json!({"type": "message", "id": "msg_1", "content": []});
        let app_call = json!({"type": "function_call", "id": "fc_2", "call_id": "a",
                              "name": "app_clock", "arguments": "{}"});
        let mut rounds = [
            round("resp_1", &[reasoning.clone(), server]),
            round("resp_2", &[reasoning, words, app_call]),
        ];
        // An item as it begins is not as it ends.
        for event in rounds.iter_mut().flatten() {
            if event["type"] == "response.output_item.added" {
                event["item"]["status"] = json!("in_progress");
            }
        }
        // The upstream's numbers (from 100): the events are passed as written, but for them.
        let numbered: Vec<Vec<Value>> = rounds
            .iter()
            .map(|events| {
                let mut events = events.clone();
                for (n, event) in events.iter_mut().enumerate() {
                    event["sequence_number"] = json!(100 + n);
                }
                events
            })
            .collect();
        let read = rounds_as_read(&rounds);
        assert_eq!(rounds_as_read(&numbered), read);
        let numbers: Vec<&Value> = read.0.iter().map(|f| &f["sequence_number"]).collect();
        assert_eq!(numbers, (0..numbers.len()).collect::<Vec<_>>());
    }

    /// Whole responses read by an app's response with or without a stream: each round's
    /// output and the app's response (its id apart: a stream's is its first round's).
    fn wholes_as_read(streaming: bool, rounds: &[Value]) -> (Vec<RoundOutput>, Map<String, Value>) {
        let mut answer = AppResponse::new(streaming);
        let outputs = rounds
            .iter()
            .map(|round| {
                let is_app = |name: &str| name == "app_clock";
                answer.whole(round.to_string().as_bytes(), &is_app).unwrap();
                answer.round_output()
            })
            .collect();
        let mut response = answer.response(Some("resp_0"), "completed", None);
        response.remove("id");
        (outputs, response)
    }

    #[test]
    fn a_whole_response_without_a_stream_places_its_items_as_its_events_would() {
        let reasoning = |id: &str| json!({"type": "reasoning", "id": id, "summary": []});
        let server = json!({"type": "function_call", "id": "fc_1", "call_id": "s",
                            "name": "get_weather", "arguments": "{}"});
        let words = json!({"type": "message", "id": "msg_1", "content": []});
        let app_call = json!({"type": "function_call", "id": "fc_2", "call_id": "a",
                              "name": "app_clock", "arguments": "{}"});
        let round = |id: &str, created: u64, output: Vec<Value>| {
            json!({"id": id, "object": "response", "created_at": created, "status": "completed",
                   "model": "m", "output": output, "usage": {"total_tokens": 3}})
        };
        let rounds = [
            round(
                "resp_1",
                7,
                vec![reasoning("rs_1"), server, reasoning("rs_2")],
            ),
            round(
                "resp_2",
                8,
                vec![reasoning("rs_3"), words, app_call, reasoning("rs_4")],
            ),
        ];
        let (outputs, response) = wholes_as_read(false, &rounds);
        let (streamed_outputs, streamed) = wholes_as_read(true, &rounds);
        assert_eq!(response, streamed);
        let ids = |items: &[Value]| items.iter().map(|i| i["id"].clone()).collect::<Vec<_>>();
        assert_eq!(
            ids(response["output"].as_array().unwrap()),
            ["rs_2", "rs_3", "msg_1", "fc_2", "rs_4"]
        );
        assert_eq!(response["created_at"], 7);
        assert_eq!(response["usage"]["total_tokens"], 6);
        for (output, streamed) in outputs.iter().zip(&streamed_outputs) {
            assert_eq!(
                (&output.id, &output.status, &output.items, &output.calls),
                (
                    &streamed.id,
                    &streamed.status,
                    &streamed.items,
                    &streamed.calls
                )
            );
        }
        assert_eq!(outputs[1].calls.len(), 1);
    }

    #[test]
    fn a_round_cut_short_keeps_the_response_it_was_created_with() {
        let created = json!({"type": "response.created", "sequence_number": 0, "response": {
            "id": "resp_1", "created_at": 7, "model": "m", "status": "in_progress",
            "output": []}});
        let cut_short = || {
            let mut answer = AppResponse::new(true);
            answer.round_begins();
            assert_eq!(feed(&mut answer, std::slice::from_ref(&created)).len(), 1);
            answer
        };
        let output = cut_short().round_output();
        assert_eq!(
            (output.id.as_deref(), output.status),
            (Some("resp_1"), None)
        );
        let response = cut_short().response(None, "failed", Some(json!({"code": "x"})));
        assert_eq!(
            [&response["id"], &response["model"], &response["created_at"]],
            [&json!("resp_1"), &json!("m"), &json!(7)]
        );
        assert_eq!(response["status"], "failed");
    }

    #[test]
    fn a_whole_response_is_read_the_same_way() {
        let mut answer = AppResponse::new(false);
        let body = json!({"id": "resp_5", "status": "completed", "output": [
            {"type": "message", "id": "msg_1", "content": []}]});
        let frames = answer
            .whole(body.to_string().as_bytes(), &|_| false)
            .unwrap();
        assert!(frames.is_empty(), "no stream, no frames");
        let output = answer.round_output();
        assert_eq!(output.status.as_deref(), Some("completed"));
        assert_eq!(answer.app_id(), Some("resp_5"));
        assert!(answer.whole(b"<html>", &|_| false).is_err());
    }
}
