//! `Conversation`: one chat-completions request's tool loop, as plain state — the
//! [`WireConversation`] of `POST /v1/chat/completions`. The driver (`run.rs`) asks it for each
//! round's upstream body, feeds it each answer (a completion, or stream chunks whose text it
//! forwards), runs the calls it names, and hands it the results; it decides what the upstream
//! sees next and writes the app's answer. No I/O.
//!
//! The rules are the [`ToolLoop`]'s; in chat's terms: a round whose answer calls only registered
//! tools (or tools nobody has, which the server answers with an error) has them run, and the
//! model is asked again with the assistant turn and one tool message per call appended (and the
//! result images, for a model that takes them); a round that calls any of the app's own tools
//! ends the loop, handing the app a turn with only its calls; after `max_tool_rounds` rounds
//! that ran tools, one last round goes without tools, so the model answers in words.

use std::time::Instant;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::ChatEndpoint;
use super::answer::{self, ModelCall, RoundAnswer, StreamRound, add_usage};
use super::kept::{self, TooLarge};
use super::plain::PlainChunk;
use super::round::{Answer, Round, Step, Streamed, ToolLoop, Unreadable, WireConversation};
use super::settings::ChatSettings;
use super::stream::{AppStream, round_separator};
use super::turns::{self, HandedTurn};
use super::wire::{self, ChatRequest, Raw, assistant_turn, call_value, error_text, tool_message};
use crate::domain::call::ToolResult;
use crate::domain::connection::ConnectionKind;
use crate::domain::tool::SharedTool;

#[derive(Debug)]
pub(crate) struct Conversation {
    request: ChatRequest,
    /// The conversation the upstream sees next: the app's (with handed-back turns put together
    /// again), then every server round of this request.
    messages: Vec<Raw>,
    default_model: Option<String>,
    tools: ToolLoop,
    /// Every round's text so far, as the app sees it.
    text: String,
    usage: Option<Map<String, Value>>,
    /// The round being read: streamed, or a whole completion's answer.
    streamed: StreamRound,
    whole: Option<RoundAnswer>,
    /// The last round's text and calls (every call, in the model's order).
    round_text: String,
    round_calls: Vec<ModelCall>,
    /// The app's own calls of the turn handed to it, and the finish reason it gets.
    app_calls: Vec<ModelCall>,
    finish_reason: String,
    /// A whole answer's first and last completions (the first's `id` and `created` are the
    /// answer's).
    first: Option<Map<String, Value>>,
    last: Option<Map<String, Value>>,
    /// The app's stream.
    encoder: AppStream,
    /// The turn the app gets with only its own calls, kept for its next request.
    handed: Option<HandedTurn>,
    /// The canonical text of the person's last message of the app's request: a turn handed
    /// back follows it.
    prompt: Option<String>,
    /// The conversation the request goes on (of the handed-back turn it carried), for the
    /// turn it keeps.
    conversation: Option<u64>,
}

impl Conversation {
    /// A request begins: its messages put together again with the turns the character handed
    /// back (and the plugins' context), on `endpoint`.
    pub(crate) fn start(endpoint: &ChatEndpoint, role: &str, mut request: ChatRequest) -> Self {
        let prompt = turns::last_prompt(&request.messages);
        let (messages, restored) =
            endpoint.begin_chat(std::mem::take(&mut request.messages), Instant::now());
        if restored.missed > 0 {
            tracing::warn!(character = %role, turns = restored.missed, "a request carried turns whose server calls were forgotten ({}): the model sees only the app's calls of them", kept::bounds_text());
        }
        let mut conversation = Self::new(request, messages, endpoint.settings());
        conversation.prompt = prompt;
        conversation.conversation = restored.conversation;
        conversation
    }

    /// `messages` is the app's conversation, handed-back turns already completed.
    pub(crate) fn new(request: ChatRequest, messages: Vec<Raw>, settings: &ChatSettings) -> Self {
        let encoder = AppStream::new(request.include_usage);
        Self {
            request,
            messages,
            default_model: settings.model.clone(),
            tools: ToolLoop::new(settings.max_tool_rounds, settings.vision),
            text: String::new(),
            usage: None,
            streamed: StreamRound::default(),
            whole: None,
            round_text: String::new(),
            round_calls: Vec::new(),
            app_calls: Vec::new(),
            finish_reason: "stop".into(),
            first: None,
            last: None,
            encoder,
            handed: None,
            prompt: None,
            conversation: None,
        }
    }

    /// The tool messages of a round's results, in order, and the user message with the images
    /// the model takes (each result's output names those it does not get).
    fn answers(&self, mut results: Vec<ToolResult>) -> (Vec<Raw>, Option<Raw>) {
        let images = if self.tools.fit_images(&mut results) {
            wire::images_message(&results)
        } else {
            None
        };
        (results.iter().map(tool_message).collect(), images)
    }

    /// Every round's text so far, as the app sees it.
    #[cfg(test)]
    fn text(&self) -> &str {
        &self.text
    }
}

impl WireConversation for Conversation {
    const PATH: &'static str = "chat/completions";
    const KIND: ConnectionKind = ConnectionKind::Chat;
    type Kept = HandedTurn;

    /// The model the upstream is asked for: the app's, or the configured default.
    fn model(&self) -> &str {
        self.request
            .model
            .as_deref()
            .or(self.default_model.as_deref())
            .unwrap_or_default()
    }

    fn streaming(&self) -> bool {
        self.request.stream
    }

    fn tool_loop(&self) -> &ToolLoop {
        &self.tools
    }

    fn tool_loop_mut(&mut self) -> &mut ToolLoop {
        &mut self.tools
    }

    fn next_round(&mut self, registered: &[SharedTool]) -> Round {
        let offer = self.tools.offer(registered, &self.request.app_tools);
        let body = self.request.upstream_body(
            &self.messages,
            &offer.tools,
            offer.with_tools,
            self.default_model.as_deref(),
        );
        offer.round(body)
    }

    fn stream_begins(&mut self) {
        self.streamed = StreamRound::default();
        self.whole = None;
        self.encoder.new_round();
    }

    fn stream_event(&mut self, data: &str) -> Result<Streamed, Unreadable> {
        if data.trim() == "[DONE]" {
            return Ok(Streamed::End);
        }
        // Most chunks carry only text: passed as written when nothing in them changes.
        if let Some(chunk) = PlainChunk::read(data)
            && let Some(delta) = chunk.delta(data)
        {
            if delta.text.is_empty() {
                // The role, or nothing: nothing for the app yet (it gets the role with the
                // first text).
                self.encoder.adopt_plain_header(&chunk);
                return Ok(Streamed::Frames(Vec::new()));
            }
            if let Some(frame) = self.encoder.pass_text(&chunk, &delta, data) {
                self.streamed.take_text(&delta.text);
                return Ok(Streamed::Frames(vec![frame]));
            }
        }
        let Ok(mut chunk) = serde_json::from_str::<Map<String, Value>>(data) else {
            return Err(Unreadable::Invalid(format!(
                "the upstream's stream sent data that is not a JSON object: {}",
                error_text(data.as_bytes())
            )));
        };
        if let Some(error) = chunk.remove("error").filter(|e| !e.is_null()) {
            return Err(Unreadable::Error(error));
        }
        self.encoder.adopt_header(&chunk);
        if !self.streamed.take(&mut chunk) {
            return Ok(Streamed::Frames(Vec::new()));
        }
        let opening = says_nothing(&chunk);
        let frames = vec![self.encoder.forward(chunk)];
        Ok(if opening {
            Streamed::Held(frames)
        } else {
            Streamed::Frames(frames)
        })
    }

    /// Takes a whole completion (a stream whose upstream answered without streaming gets its
    /// text as one part).
    fn whole_answer(&mut self, body: &[u8]) -> Result<Vec<Bytes>, Unreadable> {
        let Some(completion) = answer::read_completion(body) else {
            return Err(Unreadable::Invalid(format!(
                "the upstream answered with success, but not with a chat completion: {}",
                error_text(body)
            )));
        };
        let mut frames = Vec::new();
        if self.request.stream {
            self.encoder.adopt_header(&completion.object);
            self.encoder.new_round();
            if !completion.answer.text.is_empty() {
                let chunk = json!({"choices": [{"index": 0,
                    "delta": {"content": completion.answer.text}, "finish_reason": null}]});
                frames.push(
                    self.encoder
                        .forward(chunk.as_object().cloned().unwrap_or_default()),
                );
            }
        } else {
            if self.first.is_none() {
                // All the first completion gives the app's answer is its id and creation.
                let mut first = Map::new();
                for key in ["id", "created"] {
                    if let Some(value) = completion.object.get(key) {
                        first.insert(key.into(), value.clone());
                    }
                }
                self.first = Some(first);
            }
            self.last = Some(completion.object);
        }
        self.whole = Some(completion.answer);
        Ok(frames)
    }

    fn answered(&mut self) -> Step {
        let mut answer = match self.whole.take() {
            Some(answer) => answer,
            None => std::mem::take(&mut self.streamed).finish(),
        };
        if let Some(usage) = answer.usage.take() {
            match &mut self.usage {
                Some(total) => add_usage(total, &usage),
                None => self.usage = Some(usage),
            }
        }
        let separator = round_separator(self.text.chars().next_back(), answer.text.chars().next());
        self.text.push_str(separator);
        self.text.push_str(&answer.text);
        self.round_text = answer.text;
        self.round_calls = answer.calls;
        let said = answer.finish_reason;
        let calls = self.round_calls.clone();
        let no_calls = calls.is_empty();
        let split = self
            .tools
            .split(calls, |name| self.request.is_app_tool(name));
        self.finish_reason = match (&split.step, said.as_deref()) {
            (Step::HandOff(_), _) => "tool_calls".to_owned(),
            (_, Some(said)) if no_calls => said.to_owned(),
            (_, None | Some("tool_calls") | Some("function_call")) => "stop".to_owned(),
            (_, Some(other)) => other.to_owned(),
        };
        self.app_calls = split.app;
        split.step
    }

    /// The server's calls of a round ran: the assistant turn (with the round's text), one tool
    /// message per call in the model's order, and the images the model takes go into the
    /// conversation for the next round.
    fn ran(&mut self, calls: &[ModelCall], results: Vec<ToolResult>) {
        self.tools.ran();
        self.messages.push(assistant_turn(&self.round_text, calls));
        let (answers, images) = self.answers(results);
        self.messages.extend(answers);
        self.messages.extend(images);
    }

    /// The round ends the request with the app's own calls: what the server ran of it is kept
    /// for the app's next request.
    fn hand_off(&mut self, server: &[ModelCall], results: Vec<ToolResult>) {
        let (answers, images) = self.answers(results);
        let mut answers: std::collections::HashMap<String, Raw> =
            server.iter().map(|c| c.id.clone()).zip(answers).collect();
        self.handed = Some(HandedTurn {
            calls: self
                .round_calls
                .iter()
                .map(|c| (call_value(c), answers.remove(&c.id)))
                .collect(),
            images,
            prompt: self.prompt.take(),
            conversation: self.conversation,
        });
    }

    /// The app's answer: the end of its stream, or its completion.
    fn finish(&mut self) -> (Answer, Option<HandedTurn>) {
        let usage = self.usage.take();
        let answer = if self.request.stream {
            let mut frames = self.encoder.app_calls(&self.app_calls);
            frames.push(self.encoder.finish(&self.finish_reason));
            frames.extend(self.encoder.usage(usage));
            frames.push(AppStream::done());
            Answer::Frames(frames)
        } else {
            let last = self.last.take().unwrap_or_default();
            Answer::Whole(Value::Object(wire::final_completion(
                last,
                self.first.as_ref(),
                &self.text,
                &self.app_calls,
                &self.finish_reason,
                usage,
            )))
        };
        (answer, self.handed.take())
    }

    fn failure_frames(&mut self, error: Value) -> Vec<Bytes> {
        vec![AppStream::error(&error)]
    }

    fn keep(
        endpoint: &ChatEndpoint,
        kept: HandedTurn,
        client: Option<std::net::SocketAddr>,
    ) -> Result<(), TooLarge> {
        endpoint.keep(kept, client)
    }
}

/// Whether a chunk says nothing yet: a role, or empty text, with no finish and no usage.
fn says_nothing(chunk: &Map<String, Value>) -> bool {
    let silent = |delta: &Map<String, Value>| {
        delta.iter().all(|(key, value)| match key.as_str() {
            "role" => true,
            "content" => value.as_str().is_some_and(str::is_empty) || value.is_null(),
            _ => false,
        })
    };
    chunk.get("usage").is_none_or(Value::is_null)
        && chunk
            .get("choices")
            .and_then(Value::as_array)
            .is_some_and(|choices| {
                choices.iter().all(|choice| {
                    choice.get("finish_reason").is_none_or(Value::is_null)
                        && choice
                            .get("delta")
                            .and_then(Value::as_object)
                            .is_some_and(silent)
                })
            })
}

#[cfg(test)]
mod tests {

    use serde_json::json;

    use super::*;
    use crate::domain::call::{ToolAnswer, ToolCall};
    use crate::domain::images::ToolImage;

    fn tool(name: &str) -> SharedTool {
        crate::domain::tool::test_tool(name, "")
    }

    fn conversation(app_tools: &str, rounds: usize, vision: bool) -> Conversation {
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"tools":{app_tools}}}"#
        );
        let request = ChatRequest::parse(body.as_bytes()).unwrap();
        let messages = request.messages.clone();
        let mut settings = ChatSettings::new("http://127.0.0.1:1/v1");
        settings.max_tool_rounds = rounds;
        settings.vision = vision;
        Conversation::new(request, messages, &settings)
    }

    fn call(id: &str, name: &str) -> ModelCall {
        ModelCall {
            id: id.into(),
            name: name.into(),
            arguments: "{}".into(),
        }
    }

    /// Feeds a whole completion with this text and these calls; what it leads to.
    fn answer(c: &mut Conversation, text: &str, calls: &[ModelCall]) -> Step {
        let calls: Vec<Value> = calls.iter().map(call_value).collect();
        let finish = if calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        let content = if text.is_empty() {
            Value::Null
        } else {
            json!(text)
        };
        let mut message = json!({"role": "assistant", "content": content});
        if !calls.is_empty() {
            message["tool_calls"] = json!(calls);
        }
        let completion = json!({"id": "c", "choices": [{"index": 0, "message": message,
            "finish_reason": finish}], "usage": {"total_tokens": 2}});
        c.whole_answer(completion.to_string().as_bytes()).unwrap();
        c.answered()
    }

    fn result(call: &ModelCall, output: &str, images: Vec<ToolImage>) -> ToolResult {
        let tool_call = ToolCall::from_raw(call.id.clone(), call.name.clone(), "{}".into());
        let mut answer = ToolAnswer::error(String::new());
        answer.error = None;
        answer.output = serde_json::value::RawValue::from_string(output.into()).unwrap();
        tool_call.result(answer, images)
    }

    fn sent(round: &Round) -> Value {
        serde_json::from_slice(&round.body).unwrap()
    }

    const APP_CLOCK: &str = r#"[{"type":"function","function":{"name":"app_clock"}}]"#;

    #[test]
    fn server_rounds_append_the_turn_and_results_then_the_cap_forces_words() {
        let mut c = conversation("null", 2, false);
        let registered = [tool("get_weather")];
        let first = c.next_round(&registered);
        assert_eq!(sent(&first)["tools"][0]["function"]["name"], "get_weather");
        let calls = vec![call("c1", "get_weather")];
        let Step::Run(run) = answer(&mut c, "Let me check.", &calls) else {
            panic!("a server round")
        };
        assert_eq!(run, calls);
        c.ran(&calls, vec![result(&calls[0], "\"sunny\"", vec![])]);
        let second = sent(&c.next_round(&registered));
        let messages = second["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["tool_calls"][0]["id"], "c1");
        assert_eq!(messages[1]["content"], "Let me check.");
        assert_eq!(
            messages[2],
            json!({"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "\"sunny\""})
        );
        let Step::Run(_) = answer(&mut c, "", &calls) else {
            panic!("a second server round")
        };
        c.ran(&calls, vec![result(&calls[0], "1", vec![])]);
        let last = c.next_round(&registered);
        assert_eq!(sent(&last).get("tools"), None);
        assert_eq!(answer(&mut c, "It is sunny.", &[]), Step::Deliver);
        assert_eq!(c.text(), "Let me check.\n\nIt is sunny.");
        assert_eq!(c.tools.rounds(), 3);
        let (Answer::Whole(done), None) = c.finish() else {
            panic!("a whole answer, nothing kept")
        };
        assert_eq!(done["choices"][0]["finish_reason"], "stop");
        assert_eq!(done["usage"]["total_tokens"], 6);
    }

    #[test]
    fn a_whole_answer_has_the_first_completions_id_and_creation_and_the_last_ones_rest() {
        let mut c = conversation("null", 2, false);
        let registered = [tool("get_weather")];
        c.next_round(&registered);
        let calls = [call_value(&call("c1", "get_weather"))];
        let first = json!({"id": "chatcmpl-1", "created": 100, "model": "m-1",
            "system_fingerprint": "fp-1", "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "tool_calls": calls}}]});
        c.whole_answer(first.to_string().as_bytes()).unwrap();
        let Step::Run(run) = c.answered() else {
            panic!("a server round")
        };
        c.ran(&run, vec![result(&run[0], "1", vec![])]);
        c.next_round(&registered);
        let last = json!({"id": "chatcmpl-2", "created": 200, "model": "m-2",
            "system_fingerprint": "fp-2", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "Sunny."}}]});
        c.whole_answer(last.to_string().as_bytes()).unwrap();
        assert_eq!(c.answered(), Step::Deliver);
        let (Answer::Whole(done), None) = c.finish() else {
            panic!("a whole answer, nothing kept")
        };
        assert_eq!(
            [
                &done["id"],
                &done["created"],
                &done["model"],
                &done["system_fingerprint"]
            ],
            [
                &json!("chatcmpl-1"),
                &json!(100),
                &json!("m-2"),
                &json!("fp-2")
            ]
        );
        assert_eq!(done["choices"][0]["message"]["content"], "Sunny.");
    }

    #[test]
    fn a_turn_with_the_apps_calls_is_handed_off_with_the_servers_kept() {
        let mut c = conversation(APP_CLOCK, 3, false);
        let round = c.next_round(&[tool("get_weather"), tool("app_clock")]);
        assert_eq!(round.clashes, ["app_clock"]);
        let sent_tools = sent(&round)["tools"].as_array().unwrap().clone();
        let names: Vec<&Value> = sent_tools.iter().map(|t| &t["function"]["name"]).collect();
        assert_eq!(
            names,
            ["app_clock", "get_weather"],
            "the app's, then the registered"
        );
        let calls = vec![call("s1", "get_weather"), call("a1", "app_clock")];
        let Step::HandOff(server) = answer(&mut c, "", &calls) else {
            panic!("a mixed turn is handed off")
        };
        assert_eq!(server, calls[..1]);
        c.hand_off(&server, vec![result(&server[0], "\"sunny\"", vec![])]);
        let (Answer::Whole(done), Some(turn)) = c.finish() else {
            panic!("the turn is kept")
        };
        assert!(turn.calls[0].1.is_some() && turn.calls[1].1.is_none());
        let message = &done["choices"][0]["message"];
        assert_eq!(message["tool_calls"].as_array().unwrap().len(), 1);
        assert_eq!(message["tool_calls"][0]["id"], "a1");
        assert_eq!(done["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn refused_tools_are_withheld_and_the_round_asked_again() {
        let mut c = conversation("null", 3, false);
        c.next_round(&[tool("w")]);
        assert!(c.tools.refuse_tools());
        let again = c.next_round(&[tool("w")]);
        assert_eq!(sent(&again).get("tools"), None);
        assert_eq!(c.tools.rounds(), 1);
        assert!(!c.tools.refuse_tools(), "only once");
        let mut none = conversation("null", 3, false);
        none.next_round(&[]);
        assert!(!none.tools.refuse_tools(), "nothing of ours to withhold");
    }

    #[test]
    fn images_go_to_a_vision_model_and_are_named_for_another() {
        let image = ToolImage {
            mime: "image/png",
            width: 1,
            height: 1,
            data_b64: "AAAA".into(),
            vision_prompt: "the sky".into(),
        };
        let calls = vec![call("c1", "get_map")];
        for vision in [true, false] {
            let mut c = conversation("null", 3, vision);
            c.next_round(&[tool("get_map")]);
            answer(&mut c, "", &calls);
            c.ran(&calls, vec![result(&calls[0], "{}", vec![image.clone()])]);
            let body = sent(&c.next_round(&[tool("get_map")]));
            let messages = body["messages"].as_array().unwrap();
            if vision {
                assert_eq!(messages.len(), 4);
                assert_eq!(messages[3]["role"], "user");
                assert_eq!(
                    messages[3]["content"][0]["text"],
                    "Image from tool get_map (call_id c1): the sky"
                );
                assert_eq!(
                    messages[3]["content"][1]["image_url"]["url"],
                    "data:image/png;base64,AAAA"
                );
            } else {
                assert_eq!(messages.len(), 3);
                let output: Value =
                    serde_json::from_str(messages[2]["content"].as_str().unwrap()).unwrap();
                assert_eq!(
                    output["_image_warnings"][0],
                    "1 image(s) not shown: this chat model takes no images ([character.chat] \
                     vision = false)"
                );
            }
        }
    }

    fn frames(streamed: Streamed) -> Vec<String> {
        let (Streamed::Frames(frames) | Streamed::Held(frames)) = streamed else {
            return vec!["(end)".into()];
        };
        frames
            .iter()
            .map(|f| String::from_utf8(f.to_vec()).unwrap())
            .collect()
    }

    /// What a frame says, as JSON.
    fn said(frame: &str) -> Value {
        let data = frame
            .strip_prefix("data: ")
            .unwrap()
            .strip_suffix("\n\n")
            .unwrap();
        serde_json::from_str(data).unwrap()
    }

    #[test]
    fn a_chunk_passed_as_written_says_usage_null_when_the_app_asked_for_usage() {
        let body = r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;
        let request = ChatRequest::parse(body.as_bytes()).unwrap();
        let messages = request.messages.clone();
        let mut c = Conversation::new(request, messages, &ChatSettings::new("http://x/v1"));
        c.next_round(&[]);
        c.stream_begins();
        let role = r#"{"id":"c1","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}"#;
        assert!(frames(c.stream_event(role).unwrap()).is_empty());
        let with = r#"{"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}],"usage":null}"#;
        assert_eq!(
            frames(c.stream_event(with).unwrap()),
            [format!("data: {with}\n\n")]
        );
        let without = r#"{"id":"c1","choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null}]} "#;
        assert_eq!(
            frames(c.stream_event(without).unwrap()),
            [format!(
                "data: {}\n\n",
                without.replace("]} ", r#"],"usage":null} "#)
            )]
        );
    }

    #[test]
    fn chunks_of_text_alone_pass_as_written_and_the_others_are_written_again() {
        let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let request = ChatRequest::parse(body.as_bytes()).unwrap();
        let messages = request.messages.clone();
        let mut c = Conversation::new(request, messages, &ChatSettings::new("http://x/v1"));
        let header = r#""id":"c1","object":"chat.completion.chunk","created":7,"model":"m""#;
        let text = |id: &str, text: &str| {
            format!(
                r#"{{"id":"{id}","object":"chat.completion.chunk","created":7,"model":"m","choices":[{{"index":0,"delta":{{"content":"{text}"}},"logprobs":null,"finish_reason":null}}],"usage":null}}"#
            )
        };
        c.next_round(&[]);
        c.stream_begins();
        let role = format!(
            r#"{{{header},"choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},"finish_reason":null}}]}}"#
        );
        assert!(frames(c.stream_event(&role).unwrap()).is_empty());
        // The first text gets the role, put in its delta; the next passes as it came.
        let first = text("c1", "Let me");
        // The app did not ask for usage: the upstream's `"usage": null` is left out.
        assert_eq!(
            frames(c.stream_event(&first).unwrap()),
            [format!(
                "data: {}\n\n",
                first
                    .replace(r#""delta":{"#, r#""delta":{"role":"assistant","#)
                    .replace(r#","usage":null"#, "")
            )]
        );
        let second = text("c1", " check.");
        assert_eq!(
            frames(c.stream_event(&second).unwrap()),
            [format!(
                "data: {}\n\n",
                second.replace(r#","usage":null"#, "")
            )]
        );
        assert_eq!(frames(c.stream_event("[DONE]").unwrap()), ["(end)"]);
        assert_eq!(c.answered(), Step::Deliver);
        // A later round's chunks have their own id: written again with the stream's, and its
        // first text set apart from the last round's.
        let mut c2 = c;
        c2.stream_begins();
        let later = frames(c2.stream_event(&text("c2", "Sunny.")).unwrap());
        let later = said(&later[0]);
        assert_eq!(later["id"], "c1");
        assert_eq!(
            later["choices"][0]["delta"],
            json!({"content": "\n\nSunny."})
        );
        let next = frames(c2.stream_event(&text("c2", " Hot.")).unwrap());
        assert_eq!(said(&next[0])["id"], "c1");
        c2.stream_event("[DONE]").unwrap();
        assert_eq!(c2.answered(), Step::Deliver);
        assert_eq!(c2.text(), "Let me check.\n\nSunny. Hot.");
    }
}
