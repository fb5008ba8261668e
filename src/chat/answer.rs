//! A round's answer from the upstream, read from a whole completion or from stream chunks: its
//! text, its tool calls (put together from their fragments whatever the upstream's quirks), its
//! finish reason and its usage, summed over rounds. No I/O.

use serde_json::{Map, Value};

/// One tool call the model made, put together from its fragments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModelCall {
    pub id: String,
    pub name: String,
    /// The argument text exactly as the model wrote it.
    pub arguments: String,
}

/// What one round's answer holds for the loop.
#[derive(Debug, Default)]
pub(crate) struct RoundAnswer {
    /// The text of the first choice (what a stream sent as `content` deltas).
    pub text: String,
    pub calls: Vec<ModelCall>,
    pub finish_reason: Option<String>,
    pub usage: Option<Map<String, Value>>,
}

/// A whole (non-streamed) completion and what it holds for the loop.
#[derive(Debug)]
pub(crate) struct Completion {
    pub object: Map<String, Value>,
    pub answer: RoundAnswer,
}

/// Reads a completion. `None` when the body is not one (not a JSON object with `choices`).
pub(crate) fn read_completion(body: &[u8]) -> Option<Completion> {
    let object: Map<String, Value> = serde_json::from_slice(body).ok()?;
    let choice = object.get("choices")?.as_array()?.first();
    let message = choice.and_then(|c| c.get("message"));
    let mut answer = RoundAnswer {
        text: message
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        finish_reason: choice
            .and_then(|c| c.get("finish_reason"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        usage: object.get("usage").and_then(Value::as_object).cloned(),
        calls: Vec::new(),
    };
    let mut fragments = CallFragments::default();
    for call in message
        .and_then(|m| m.get("tool_calls"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        fragments.whole(call);
    }
    answer.calls = fragments.finish();
    Some(Completion { object, answer })
}

/// The tool calls of a streamed answer, put together from their fragments. The usual form
/// is a first fragment with `index`, `id`, `type` and `function.name`, then argument fragments
/// with the same `index`. Upstream quirks are taken too: every parallel call with index 0, each
/// whole in one fragment (Ollama); fragments without `id`; a name repeated in every fragment;
/// arguments sent as a JSON object instead of its text.
#[derive(Debug, Default)]
pub(crate) struct CallFragments {
    calls: Vec<PartialCall>,
}

#[derive(Debug, Default)]
struct PartialCall {
    index: Option<u64>,
    id: Option<String>,
    name: String,
    arguments: String,
}

impl PartialCall {
    /// Whether its argument text is a whole JSON value already (a further named fragment is
    /// then a new call, not more of this one).
    fn is_complete(&self) -> bool {
        !self.arguments.is_empty() && serde_json::from_str::<Value>(&self.arguments).is_ok()
    }
}

impl CallFragments {
    /// Takes one fragment of a `delta.tool_calls` array.
    pub(crate) fn fragment(&mut self, fragment: &Value) {
        let index = fragment.get("index").and_then(Value::as_u64);
        let id = fragment
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty());
        let function = fragment.get("function");
        let name = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        let arguments = function.and_then(|f| f.get("arguments"));
        let target = self
            .calls
            .iter()
            .rposition(|c| index.is_none() || c.index == index);
        let continues = target.is_some_and(|i| {
            let call = &self.calls[i];
            match (id, &call.id) {
                (Some(id), Some(known)) => id == known,
                // A new id for a call that had none: its first fragment came without one.
                (Some(_), None) => call.name.is_empty() || !call.is_complete(),
                (None, _) => match name {
                    Some(name) => {
                        call.name.is_empty() || (call.name == name && !call.is_complete())
                    }
                    None => true,
                },
            }
        });
        let call = if let (true, Some(i)) = (continues, target) {
            &mut self.calls[i]
        } else {
            self.calls.push(PartialCall {
                index,
                ..PartialCall::default()
            });
            self.calls.last_mut().expect("just pushed")
        };
        if let (Some(id), None) = (id, &call.id) {
            call.id = Some(id.to_owned());
        }
        if let Some(name) = name
            && call.name.is_empty()
        {
            call.name = name.to_owned();
        }
        match arguments {
            Some(Value::String(text)) => call.arguments.push_str(text),
            Some(Value::Null) | None => {}
            // Some servers send the arguments object itself.
            Some(other) => call.arguments.push_str(&other.to_string()),
        }
    }

    /// Takes one whole call of a completion's `message.tool_calls`.
    fn whole(&mut self, call: &Value) {
        let function = call.get("function");
        self.calls.push(PartialCall {
            index: None,
            id: call
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .map(str::to_owned),
            name: function
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            arguments: match function.and_then(|f| f.get("arguments")) {
                Some(Value::String(text)) => text.clone(),
                None | Some(Value::Null) => String::new(),
                Some(other) => other.to_string(),
            },
        });
    }

    /// The calls in the order the model made them; a call without an id gets a fresh one.
    pub(crate) fn finish(self) -> Vec<ModelCall> {
        self.calls
            .into_iter()
            .map(|c| ModelCall {
                id: c
                    .id
                    .unwrap_or_else(|| format!("call_{}", uuid::Uuid::new_v4().simple())),
                name: c.name,
                arguments: c.arguments,
            })
            .collect()
    }
}

/// One streamed round as it arrives: the text, the calls, the finish reason and the usage of
/// its first choice.
#[derive(Debug, Default)]
pub(crate) struct StreamRound {
    text: String,
    calls: CallFragments,
    finish_reason: Option<String>,
    usage: Option<Map<String, Value>>,
}

impl StreamRound {
    /// Takes one chunk, and strips from it what the app must not see as it is (the tool-call
    /// fragments, the round's finish reason and usage, the role); returns whether something is
    /// left to forward (text, a refusal, reasoning, log probabilities).
    pub(crate) fn take(&mut self, chunk: &mut Map<String, Value>) -> bool {
        if let Some(usage) = chunk.remove("usage").and_then(|u| match u {
            Value::Object(u) => Some(u),
            _ => None,
        }) {
            self.usage = Some(usage);
        }
        let Some(choices) = chunk.get_mut("choices").and_then(Value::as_array_mut) else {
            return false;
        };
        let mut forward = false;
        choices.retain_mut(|choice| {
            let Some(choice) = choice.as_object_mut() else {
                return false;
            };
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                // Only the first choice runs tools; others pass as they are.
                forward = true;
                return true;
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_owned());
            }
            choice.insert("finish_reason".into(), Value::Null);
            let mut keep = choice.get("logprobs").is_some_and(|l| !l.is_null());
            if let Some(delta) = choice.get_mut("delta").and_then(Value::as_object_mut) {
                delta.remove("role");
                if let Some(Value::Array(fragments)) = delta.remove("tool_calls") {
                    for fragment in &fragments {
                        self.calls.fragment(fragment);
                    }
                }
                match delta.get("content") {
                    Some(Value::String(text)) if !text.is_empty() => {
                        self.text.push_str(text);
                        keep = true;
                    }
                    Some(Value::String(_)) | Some(Value::Null) => {
                        delta.remove("content");
                    }
                    _ => {}
                }
                delta.retain(|_, v| !v.is_null());
                keep |= !delta.is_empty();
            }
            forward |= keep;
            keep
        });
        forward
    }

    /// Takes the text of a chunk that carries nothing else (read as a [`super::wire::TextChunk`]).
    pub(crate) fn take_text(&mut self, text: &str) {
        self.text.push_str(text);
    }

    pub(crate) fn finish(self) -> RoundAnswer {
        RoundAnswer {
            text: self.text,
            calls: self.calls.finish(),
            finish_reason: self.finish_reason,
            usage: self.usage,
        }
    }
}

/// Adds one round's usage to the total: numbers summed wherever both have them (nested details
/// included), anything else kept from the first round that had it.
pub(crate) fn add_usage(total: &mut Map<String, Value>, round: &Map<String, Value>) {
    for (key, value) in round {
        match (total.get_mut(key), value) {
            (None, value) => {
                total.insert(key.clone(), value.clone());
            }
            (Some(Value::Object(sum)), Value::Object(more)) => add_usage(sum, more),
            (Some(Value::Number(sum)), Value::Number(more)) => {
                let added = match (sum.as_u64(), more.as_u64()) {
                    (Some(a), Some(b)) => Some(Value::from(a.saturating_add(b))),
                    _ => sum
                        .as_f64()
                        .zip(more.as_f64())
                        .and_then(|(a, b)| serde_json::Number::from_f64(a + b))
                        .map(Value::Number),
                };
                if let Some(added) = added {
                    total.insert(key.clone(), added);
                }
            }
            (Some(_), _) => {}
        }
    }
}
