//! The Responses API (`POST /v1/responses`): one request's tool loop as plain state, the
//! [`WireConversation`] the one driver (`run.rs`) runs — the same loop as chat completions
//! ([`ToolLoop`]), in the Responses API's terms.
//!
//! Each round is the app's request with the round's `input`: where the upstream keeps
//! responses (the app did not say `"store": false`), the first round sends the app's input and
//! later rounds chain on the round before (`previous_response_id`) with only the server's
//! `function_call_output` items (and `tools`, `instructions` and every other field again: they
//! do not carry over); without storing, every round sends the whole input again — the app's,
//! then each round's output items (reasoning included, as the upstream gave them), then the
//! outputs. The app gets one response ([`answer`]): the last round's id (a stream's first
//! round's, which the server maps to the last), the model's items of every round and the app's
//! own calls, never the server's. What the app's next request needs put back is kept
//! ([`kept`]).
//!
//! - [`request`]: the app's request and each round's body;
//! - [`answer`]: the rounds read, the app's response and its stream;
//! - [`kept`]: the kept turns, and the app's next request put together again with them.

pub(crate) mod answer;
pub(crate) mod issued;
pub(crate) mod kept;
pub(crate) mod request;

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use serde_json::{Value, json};

use self::answer::{AppResponse, RoundOutput};
use self::kept::{KeptResponse, raw};
use self::request::ResponsesRequest;
use super::ChatEndpoint;
use super::answer::ModelCall;
use super::kept::{TooLarge, prompt_before};
use super::round::{
    Answer, Round, Step, Streamed, ToolLoop, Unreadable, WireConversation, not_run_text,
};
use super::settings::ChatSettings;
use super::wire::Raw;
use crate::domain::call::ToolResult;
use crate::domain::connection::ConnectionKind;
use crate::domain::tool::SharedTool;

#[derive(Debug)]
pub(crate) struct ResponsesConversation {
    request: ResponsesRequest,
    /// The app's input, put together again with the kept turns, and the plugins' context.
    input: Vec<Raw>,
    /// The app's `previous_response_id` as the app wrote it, and as the first round sends it.
    apps_previous: Option<String>,
    previous: Option<String>,
    default_model: Option<String>,
    tools: ToolLoop,
    /// Without storing: every round's items and outputs so far. Storing: the last round's
    /// outputs, which the next round sends.
    history: Vec<Raw>,
    answer: AppResponse,
    round: RoundOutput,
    /// The server's calls of the last round that were never run (the rounds ran out, or the
    /// response ended otherwise), answered for the upstream with why.
    dropped: Vec<ModelCall>,
    /// The turn handed to the app, kept for its next request.
    kept: Option<KeptResponse>,
    /// The canonical text of the person's last message of the app's request: a turn handed
    /// back follows it.
    prompt: Option<String>,
    /// The conversation the request goes on (of the kept turn it continued), for the turn it
    /// keeps.
    conversation: Option<u64>,
    /// The id of the response the app got, once it has one.
    issued: Option<String>,
}

impl ResponsesConversation {
    /// A request begins: its input put together again with what the character kept for it
    /// (and the plugins' context), on `endpoint`.
    pub(crate) fn start(
        endpoint: &ChatEndpoint,
        role: &str,
        mut request: ResponsesRequest,
    ) -> Self {
        let apps_previous = request.previous_response_id.clone();
        let prompt = prompt_before(&request.input, request.input.len());
        let (input, previous, restored) = endpoint.begin_responses(
            std::mem::take(&mut request.input),
            apps_previous.clone(),
            Instant::now(),
        );
        if restored.previous_forgotten {
            tracing::warn!(character = %role, lost = restored.lost, "a request went on from a response whose kept turn was forgotten ({}): its server calls (lost) are answered as lost, and the model may call again", crate::chat::kept::bounds_text());
        }
        if restored.missed > 0 {
            tracing::warn!(character = %role, turns = restored.missed, "a request sent back turns whose server calls were forgotten ({}): the model sees only the app's calls of them", crate::chat::kept::bounds_text());
        }
        let mut conversation =
            Self::new(request, input, apps_previous, previous, endpoint.settings());
        conversation.prompt = prompt;
        conversation.conversation = restored.conversation;
        conversation
    }

    pub(crate) fn new(
        request: ResponsesRequest,
        input: Vec<Raw>,
        apps_previous: Option<String>,
        previous: Option<String>,
        settings: &ChatSettings,
    ) -> Self {
        let answer = AppResponse::new(request.stream());
        Self {
            request,
            input,
            apps_previous,
            previous,
            default_model: settings.model.clone(),
            tools: ToolLoop::new(settings.max_tool_rounds, settings.vision),
            history: Vec::new(),
            answer,
            round: RoundOutput::default(),
            dropped: Vec::new(),
            kept: None,
            prompt: None,
            conversation: None,
            issued: None,
        }
    }

    /// The `function_call_output` items of a round's results, in order, and the user message
    /// with the images the model takes.
    fn outputs(&self, mut results: Vec<ToolResult>) -> (Vec<Raw>, Option<Raw>) {
        let images = if self.tools.fit_images(&mut results) {
            images_message(&results)
        } else {
            None
        };
        let outputs = results
            .iter()
            .map(|r| output_item(r.model_call_id(), &r.model_text()));
        (outputs.collect(), images)
    }

    /// The round's answers go into the next round's input.
    fn answer_round(&mut self, outputs: Vec<Raw>, images: Option<Raw>) {
        if self.request.store {
            self.history = outputs;
            self.history.extend(images);
            self.previous.clone_from(&self.round.id);
        } else {
            self.history.extend(self.round.items.iter().map(raw));
            self.history.extend(outputs);
            self.history.extend(images);
        }
    }

    /// The turn the app's next request must find answered: the round's items (which the app
    /// got), and the server's answer to each of its own calls.
    fn keep_turn(&mut self, answers: Vec<(String, Raw)>, images: Option<Raw>) {
        let Some(response) = self.round.id.clone() else {
            return;
        };
        let mut answers: std::collections::HashMap<String, Raw> = answers.into_iter().collect();
        let app_calls: Vec<&str> = self
            .round
            .calls
            .iter()
            .filter(|c| self.request.is_app_tool(&c.name))
            .map(|c| c.id.as_str())
            .collect();
        let mut after_server = false;
        let mut items: Vec<(Raw, bool)> = Vec::with_capacity(self.round.items.len());
        // The app's items as it got them: a reasoning item goes with the item after it.
        for item in self.round.items.iter().rev() {
            let kind = item["type"].as_str().unwrap_or_default();
            let app = match kind {
                "function_call" => {
                    app_calls.contains(&item["call_id"].as_str().unwrap_or_default())
                }
                "reasoning" => !after_server,
                _ => true,
            };
            if kind != "reasoning" {
                after_server = !app;
            }
            items.push((raw(item), app));
        }
        items.reverse();
        let calls = self
            .round
            .calls
            .iter()
            .map(|c| (c.id.clone(), answers.remove(&c.id)))
            .collect();
        let alias = self
            .answer
            .app_id()
            .filter(|id| *id != response)
            .map(str::to_owned);
        self.kept = Some(KeptResponse {
            response,
            alias,
            items,
            calls,
            images,
            prompt: self.prompt.clone(),
            conversation: self.conversation,
        });
    }
}

impl WireConversation for ResponsesConversation {
    const PATH: &'static str = "responses";
    const KIND: ConnectionKind = ConnectionKind::Responses;
    type Kept = KeptResponse;

    /// The model the upstream is asked for: the app's, or the configured default.
    fn model(&self) -> &str {
        self.request
            .model()
            .or(self.default_model.as_deref())
            .unwrap_or_default()
    }

    fn streaming(&self) -> bool {
        self.request.stream()
    }

    fn tool_loop(&self) -> &ToolLoop {
        &self.tools
    }

    fn tool_loop_mut(&mut self) -> &mut ToolLoop {
        &mut self.tools
    }

    fn next_round(&mut self, registered: &[SharedTool]) -> Round {
        let offer = self.tools.offer(registered, self.request.app_tools());
        let chained = self.request.store && self.round.id.is_some();
        let input: [&[Raw]; 2] = if chained {
            [&self.history, &[]]
        } else {
            [&self.input, &self.history]
        };
        let body = self.request.upstream_body(
            &input,
            self.previous.as_deref(),
            &offer.tools,
            offer.with_tools,
            self.default_model.as_deref(),
        );
        offer.round(body)
    }

    fn stream_begins(&mut self) {
        self.answer.round_begins();
    }

    fn stream_event(&mut self, data: &str) -> Result<Streamed, Unreadable> {
        let request = &self.request;
        let streamed = self.answer.event(data, &|name| request.is_app_tool(name))?;
        Ok(streamed)
    }

    fn whole_answer(&mut self, body: &[u8]) -> Result<Vec<Bytes>, Unreadable> {
        let request = &self.request;
        self.answer.whole(body, &|name| request.is_app_tool(name))
    }

    fn answered(&mut self) -> Step {
        self.round = self.answer.round_output();
        if self.round.status.as_deref() != Some("completed") {
            // The response ended otherwise (incomplete, failed, or its stream broke off): it
            // is the app's as it is, and the server's calls in it are not run.
            self.dropped = self
                .round
                .calls
                .iter()
                .filter(|c| !self.request.is_app_tool(&c.name))
                .cloned()
                .collect();
            return Step::Deliver;
        }
        let split = self.tools.split(self.round.calls.clone(), |name| {
            self.request.is_app_tool(name)
        });
        self.dropped = split.dropped;
        split.step
    }

    fn ran(&mut self, _calls: &[ModelCall], results: Vec<ToolResult>) {
        self.tools.ran();
        let (outputs, images) = self.outputs(results);
        self.answer_round(outputs, images);
    }

    fn hand_off(&mut self, server: &[ModelCall], results: Vec<ToolResult>) {
        let (outputs, images) = self.outputs(results);
        let answers = server.iter().map(|c| c.id.clone()).zip(outputs).collect();
        self.keep_turn(answers, images);
    }

    fn finish(&mut self) -> (Answer, Option<KeptResponse>) {
        let ran_out = !self.dropped.is_empty() && self.round.status.as_deref() == Some("completed");
        let (status, details) = match self.round.status.as_deref() {
            _ if ran_out => (
                "incomplete".to_owned(),
                Some(json!({"reason": "max_tool_rounds"})),
            ),
            None => (
                "failed".to_owned(),
                Some(json!({"code": "upstream_invalid",
                    "message": "the upstream's stream ended before its response was complete"})),
            ),
            Some(status) => (status.to_owned(), None),
        };
        if !self.dropped.is_empty() {
            let why = not_run_text(self.tools.max_tool_rounds());
            let answers = self
                .dropped
                .iter()
                .map(|c| (c.id.clone(), output_item(&c.id, &why)))
                .collect();
            self.keep_turn(answers, None);
        }
        let stream_id = self.answer.app_id().map(str::to_owned);
        let response = self
            .answer
            .response(self.apps_previous.as_deref(), &status, details);
        self.issued = response_id(&response);
        let mut kept = self.kept.take();
        if kept.is_none()
            && self.request.store
            && let (Some(last), Some(app)) = (&self.round.id, stream_id)
            && *last != app
        {
            // A stream's id is its first round's: the app's next request that names it goes
            // on from the last.
            kept = Some(KeptResponse {
                response: last.clone(),
                alias: Some(app),
                conversation: self.conversation,
                ..KeptResponse::default()
            });
        }
        let answer = if self.request.stream() {
            Answer::Frames(self.answer.terminal(response))
        } else {
            Answer::Whole(Value::Object(response))
        };
        (answer, kept)
    }

    fn failure_frames(&mut self, error: Value) -> Vec<Bytes> {
        let code = error
            .get("code")
            .and_then(Value::as_str)
            .unwrap_or("server_error")
            .to_owned();
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| error.to_string(), str::to_owned);
        let details = json!({"code": code, "message": message});
        let response = self
            .answer
            .response(self.apps_previous.as_deref(), "failed", Some(details));
        self.issued = response_id(&response);
        self.answer.terminal(response)
    }

    fn explain_status(status: u16) -> Option<&'static str> {
        (status == 404).then_some("the upstream does not speak the Responses API")
    }

    fn keep(
        endpoint: &ChatEndpoint,
        kept: KeptResponse,
        client: Option<SocketAddr>,
    ) -> Result<(), TooLarge> {
        endpoint.keep_response(kept, client)
    }

    fn issued(&self) -> Option<&str> {
        self.issued.as_deref()
    }
}

/// The id of a response the app gets.
fn response_id(response: &serde_json::Map<String, Value>) -> Option<String> {
    response
        .get("id")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The `function_call_output` item that answers a call with the text the model reads.
fn output_item(call_id: &str, output: &str) -> Raw {
    raw(&json!({"type": "function_call_output", "call_id": call_id, "output": output}))
}

/// The user message that shows the model a round's result images: for each a line naming the
/// call and what to look for, then the image as an `input_image` with its `data:` URL. `None`
/// without images.
fn images_message(results: &[ToolResult]) -> Option<Raw> {
    let mut content = Vec::new();
    for result in results {
        for image in &result.images {
            content.push(json!({"type": "input_text", "text": result.image_caption(image)}));
            content.push(json!({"type": "input_image", "image_url": image.data_url(),
                                "detail": "auto"}));
        }
    }
    (!content.is_empty()).then(|| raw(&json!({"role": "user", "content": content})))
}
