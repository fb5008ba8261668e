//! Stream events passed to the app as the upstream wrote them, when nothing in them changes but
//! their numbers: read with borrowed fields only, then written with their `sequence_number` (and
//! `output_index`) replaced in place.

use std::fmt::Write as _;

use bytes::Bytes;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{AppResponse, Opening, Place, item_type, opens};
use crate::chat::round::Streamed;
use crate::domain::json_text::splice;

/// An event's fields that say what it is, where it goes and what it is numbered; the others
/// pass as written.
#[derive(serde::Deserialize)]
struct EventHead<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    output_index: Option<&'a RawValue>,
    #[serde(borrow)]
    sequence_number: Option<&'a RawValue>,
    #[serde(borrow)]
    response: Option<&'a RawValue>,
    #[serde(borrow)]
    item: Option<&'a RawValue>,
}

/// Where a number's text is in an event's data.
#[derive(Debug, Clone, Copy)]
struct Number {
    at: usize,
    len: usize,
}

impl Number {
    /// `raw`, read from `data`, when it lies within it.
    fn of(data: &str, raw: &RawValue) -> Option<Self> {
        let text = raw.get();
        let at = (text.as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
        let end = at.checked_add(text.len())?;
        (end <= data.len() && data.is_char_boundary(at) && data.is_char_boundary(end)).then_some(
            Self {
                at,
                len: text.len(),
            },
        )
    }
}

impl AppResponse {
    /// An event read without building it into a map, when that is enough: the first round's
    /// opening events (the response parsed alone, and only once), an item's beginning and end
    /// (the item parsed alone), and the events of an item already placed (a text delta, a
    /// call's arguments, ...). The app gets each as the upstream wrote it, but for its
    /// `output_index` and `sequence_number`, written in place of the upstream's; a server's
    /// call's events are dropped. `None`: the event is read in full ([`Self::take`]), as are
    /// reasoning items' (held) and any event without a `sequence_number`.
    pub(super) fn pass_event(
        &mut self,
        data: &str,
        is_app: &dyn Fn(&str) -> bool,
    ) -> Option<Streamed> {
        if !self.streaming || data.contains(['\n', '\r']) {
            return None;
        }
        let event = serde_json::from_str::<EventHead>(data).ok()?;
        let kind = event.kind;
        let sequence = Number::of(data, event.sequence_number?)?;
        if matches!(
            kind,
            "response.created" | "response.in_progress" | "response.queued"
        ) {
            // The response as created is the round's until its terminal event; it is read
            // then, and only if that event never comes.
            let raw = event.response?;
            if self.first.is_none() {
                let opening = serde_json::from_str::<Opening>(raw.get()).ok()?;
                self.first = Some(opening.into_first());
            }
            if kind == "response.created"
                || (self.round.response.is_none() && self.round.opening.is_none())
            {
                self.round.response = None;
                self.round.opening = Some(raw.to_owned());
            }
            let mut frames = Vec::new();
            if self.rounds <= 1 {
                self.began |= kind == "response.created";
                frames.push(self.renumbered(data, kind, sequence, None));
            }
            return Some(Streamed::Held(frames));
        }
        let index_raw = event.output_index?;
        let index: u64 = index_raw.get().parse().ok()?;
        let index_raw = Number::of(data, index_raw)?;
        let held = |frames| {
            if opens(kind) {
                Streamed::Held(frames)
            } else {
                Streamed::Frames(frames)
            }
        };
        let at = match kind {
            "response.output_item.added" => {
                let item: Value = serde_json::from_str(event.item?.get()).ok()?;
                if item_type(&item) == "reasoning" {
                    return None;
                }
                let (place, mut frames) = self.place(index, Some(&item), is_app);
                if let Place::App(at) = place {
                    frames.push(self.renumbered(data, kind, sequence, Some((index_raw, at))));
                }
                return Some(held(frames));
            }
            "response.output_item.done" => {
                let item: Value = serde_json::from_str(event.item?.get()).ok()?;
                let at = match self.round.places.get(&index)? {
                    Place::Held => return None,
                    Place::Server => None,
                    Place::App(at) => Some(*at),
                };
                if let Some(at) = at {
                    self.items[at] = item.clone();
                }
                self.round.done.insert(index, item);
                at
            }
            _ => match self.round.places.get(&index)? {
                Place::Held => return None,
                Place::Server => None,
                Place::App(at) => Some(*at),
            },
        };
        let frames = at
            .map(|at| self.renumbered(data, kind, sequence, Some((index_raw, at))))
            .into_iter()
            .collect();
        Some(held(frames))
    }

    /// The frame of an event (`data`, of type `kind`) as the upstream wrote it, but for its
    /// `sequence_number`, the app's next, and its `output_index`, when given, `at`.
    fn renumbered(
        &mut self,
        data: &str,
        kind: &str,
        sequence: Number,
        index: Option<(Number, usize)>,
    ) -> Bytes {
        let (sequence_text, index_text) = (
            self.sequence.to_string(),
            index.map(|(_, at)| at.to_string()),
        );
        self.sequence += 1;
        let mut edits = vec![(
            sequence.at..sequence.at + sequence.len,
            sequence_text.as_str(),
        )];
        if let (Some((number, _)), Some(text)) = (index, &index_text) {
            edits.push((number.at..number.at + number.len, text.as_str()));
        }
        let mut frame = String::with_capacity(data.len() + kind.len() + 32);
        let _ = write!(frame, "event: {kind}\ndata: ");
        splice(&mut frame, data, &mut edits);
        frame.push_str("\n\n");
        Bytes::from(frame)
    }
}
