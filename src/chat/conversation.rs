//! `Conversation`: one chat request's tool loop, as plain state. Its driver (`run.rs`) asks it
//! for each round's upstream body, feeds it each answer, runs the calls it names, and hands it
//! the results; it decides what the upstream sees next and when the app gets its answer. No
//! I/O here.
//!
//! The rules: a round whose answer calls only registered tools (or tools nobody has, which the
//! server answers with an error) has them run, and the model is asked again with the
//! assistant turn and one tool message per call appended (and the result images, for a model
//! that takes them); a round that calls any of the app's own tools ends the loop, handing the
//! app a turn with only its calls; after `max_tool_rounds` rounds that ran tools, one last
//! round goes without tools, so the model answers in words.

use serde_json::{Map, Value};

use super::answer::{ModelCall, RoundAnswer, add_usage};
use super::turns::HandedTurn;
use super::wire::{
    self, ChatRequest, Raw, assistant_turn, call_value, round_separator, tool_message,
};
use crate::domain::call::ToolResult;
use crate::domain::images::TurnBudget;
use crate::domain::tool::SharedTool;

/// Calls of one round the server runs; more are answered with an error. A model asking for
/// more parallel calls than this in one turn is looping, and each call may open a connection.
pub(crate) const MAX_CALLS_PER_ROUND: usize = 32;

/// What a round asks of the upstream.
#[derive(Debug)]
pub(crate) struct Round {
    pub body: Vec<u8>,
    /// Registered tools left out because the app has a tool of the same name.
    pub clashes: Vec<String>,
}

/// What the loop does after an answer.
#[derive(Debug)]
pub(crate) enum Step {
    /// The answer is the app's: no (runnable) call in it.
    Deliver { finish_reason: String },
    /// Run the server's calls, then ask again.
    Run(Vec<ModelCall>),
    /// Run the server's calls, then hand the app a turn with only its own calls (`all` is
    /// every call of the turn, in the model's order).
    HandOff {
        all: Vec<ModelCall>,
        server: Vec<ModelCall>,
        app: Vec<ModelCall>,
    },
}

#[derive(Debug)]
pub(crate) struct Conversation {
    request: ChatRequest,
    /// The conversation the upstream sees next: the app's (with handed-back turns put together
    /// again), then every server round of this request.
    messages: Vec<Raw>,
    default_model: Option<String>,
    max_tool_rounds: usize,
    vision: bool,
    /// Rounds so far that ran tools.
    tool_rounds: usize,
    /// Tools are withheld for the rest of the request (the model refused them).
    withhold_tools: bool,
    /// The tools the last round sent, by which its calls are resolved.
    sent: Vec<SharedTool>,
    /// The last round carried tools.
    sent_tools: bool,
    /// Every round's text so far, as the app sees it.
    text: String,
    usage: Option<Map<String, Value>>,
    /// Upstream calls made so far.
    rounds: usize,
}

impl Conversation {
    /// `messages` is the app's conversation, handed-back turns already completed.
    pub(crate) fn new(
        request: ChatRequest,
        messages: Vec<Raw>,
        default_model: Option<String>,
        max_tool_rounds: usize,
        vision: bool,
    ) -> Self {
        Self {
            request,
            messages,
            default_model,
            max_tool_rounds,
            vision,
            tool_rounds: 0,
            withhold_tools: false,
            sent: Vec::new(),
            sent_tools: false,
            text: String::new(),
            usage: None,
            rounds: 0,
        }
    }

    pub(crate) fn request(&self) -> &ChatRequest {
        &self.request
    }

    /// The model the upstream is asked for: the app's, or the configured default.
    pub(crate) fn model(&self) -> &str {
        self.request
            .model
            .as_deref()
            .or(self.default_model.as_deref())
            .unwrap_or_default()
    }

    /// The next round's request, offering `registered` (the character's tools now) unless
    /// tools are withheld or the rounds that may run tools are used up.
    pub(crate) fn next_round(&mut self, registered: &[SharedTool]) -> Round {
        let with_tools = !self.withhold_tools && self.tool_rounds < self.max_tool_rounds;
        let (tools, clashes) = if with_tools {
            crate::session::core::without_clashes(registered, &self.request.app_tools)
        } else {
            (Vec::new(), Vec::new())
        };
        let body = self.request.upstream_body(
            &self.messages,
            &tools,
            with_tools,
            self.default_model.as_deref(),
        );
        self.sent.clone_from(&tools);
        self.sent_tools = with_tools;
        self.rounds += 1;
        Round { body, clashes }
    }

    /// Tools are withheld from the start: the model is known to refuse them.
    pub(crate) fn withhold_tools(&mut self) {
        self.withhold_tools = true;
    }

    /// The upstream refused the last round's tools: they are withheld from now on, and the
    /// round is asked again (true) unless it carried none of ours to withhold (false).
    pub(crate) fn refuse_tools(&mut self) -> bool {
        if !self.sent_tools || self.sent.is_empty() || self.withhold_tools {
            return false;
        }
        self.withhold_tools = true;
        self.rounds -= 1;
        true
    }

    /// Takes the last round's answer and says what to do next.
    pub(crate) fn answered(&mut self, answer: &mut RoundAnswer) -> Step {
        if let Some(usage) = answer.usage.take() {
            match &mut self.usage {
                Some(total) => add_usage(total, &usage),
                None => self.usage = Some(usage),
            }
        }
        let separator = round_separator(self.text.chars().next_back(), answer.text.chars().next());
        self.text.push_str(separator);
        self.text.push_str(&answer.text);
        let calls = std::mem::take(&mut answer.calls);
        let said = answer.finish_reason.clone();
        let finish_reason = match said.as_deref() {
            None | Some("tool_calls") | Some("function_call") => "stop".to_owned(),
            Some(other) => other.to_owned(),
        };
        if calls.is_empty() {
            return Step::Deliver {
                finish_reason: said.unwrap_or(finish_reason),
            };
        }
        let (app, server): (Vec<ModelCall>, Vec<ModelCall>) = calls
            .iter()
            .cloned()
            .partition(|c| self.request.is_app_tool(&c.name));
        if !self.sent_tools {
            // The round went without tools: calls the model makes anyway cannot be run (the
            // server's) and are dropped; the app's still reach the app.
            if !server.is_empty() {
                tracing::warn!(
                    calls = server.len(),
                    "the model called tools in a round sent without them; those calls were dropped"
                );
            }
            if app.is_empty() {
                return Step::Deliver { finish_reason };
            }
            return Step::HandOff {
                all: app.clone(),
                server: Vec::new(),
                app,
            };
        }
        if app.is_empty() {
            Step::Run(server)
        } else {
            Step::HandOff {
                all: calls,
                server,
                app,
            }
        }
    }

    /// The registered tool a call of the last round names, if it was sent.
    pub(crate) fn tool_for(&self, name: &str) -> Option<&SharedTool> {
        self.sent.iter().find(|t| t.name == name)
    }

    /// The names of the tools the last round sent, for the error a call of another name gets.
    pub(crate) fn sent_names(&self) -> impl Iterator<Item = &str> {
        self.sent.iter().map(|t| t.name.as_str())
    }

    /// The server's calls of a round ran: the assistant turn (with the round's text), one tool
    /// message per call in the model's order, and the images the model takes go into the
    /// conversation for the next round.
    pub(crate) fn ran(&mut self, text: &str, calls: &[ModelCall], results: Vec<ToolResult>) {
        self.tool_rounds += 1;
        self.messages.push(assistant_turn(text, calls));
        let (answers, images) = self.answers(results);
        self.messages.extend(answers);
        self.messages.extend(images);
    }

    /// The round ends the request with the app's own calls: what the server ran of it is kept
    /// for the app's next request, which must follow `prompt` (the person's last message of
    /// this one) to get it back.
    pub(crate) fn hand_off(
        &mut self,
        calls: &[ModelCall],
        server: Vec<ModelCall>,
        results: Vec<ToolResult>,
        prompt: Option<Value>,
    ) -> HandedTurn {
        let (answers, images) = self.answers(results);
        let mut answers: std::collections::HashMap<String, Raw> =
            server.iter().map(|c| c.id.clone()).zip(answers).collect();
        HandedTurn {
            calls: calls
                .iter()
                .map(|c| (call_value(c), answers.remove(&c.id)))
                .collect(),
            images,
            prompt,
        }
    }

    /// The tool messages of a round's results, in order, and the user message with the images
    /// the model takes (each result's output names those it does not get).
    fn answers(&self, mut results: Vec<ToolResult>) -> (Vec<Raw>, Option<Raw>) {
        let mut budget = TurnBudget::default();
        for result in &mut results {
            let warning = if self.vision {
                budget.take(&mut result.images)
            } else {
                images_not_taken(&mut result.images)
            };
            result.add_image_warnings(warning.into_iter().collect());
        }
        let images = if self.vision {
            wire::images_message(&results)
        } else {
            None
        };
        (results.iter().map(tool_message).collect(), images)
    }

    /// Every round's text so far, as the app sees it.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Usage summed over every round so far.
    pub(crate) fn usage(&self) -> Option<&Map<String, Value>> {
        self.usage.as_ref()
    }

    /// Upstream calls made so far.
    #[cfg(test)]
    fn rounds(&self) -> usize {
        self.rounds
    }
}

/// Drops the images of a result for a model that takes none; returns what the model is told
/// instead, so it never answers as if it had seen them.
fn images_not_taken(images: &mut Vec<crate::domain::images::ToolImage>) -> Option<String> {
    let dropped = std::mem::take(images).len();
    (dropped > 0).then(|| {
        format!(
            "{dropped} image(s) not shown: this chat model takes no images ([character.chat] \
             vision = false)"
        )
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::domain::call::{ToolAnswer, ToolCall};
    use crate::domain::callback_url::CallbackUrl;
    use crate::domain::images::ToolImage;
    use crate::domain::tool::{ToolSpec, empty_parameters};

    fn tool(name: &str) -> SharedTool {
        Arc::new(ToolSpec::remote(
            name,
            "",
            empty_parameters(),
            "plugin:w",
            CallbackUrl::parse("http://127.0.0.1:9/cb").unwrap(),
            Duration::from_secs(5),
        ))
    }

    fn conversation(app_tools: &str, rounds: usize, vision: bool) -> Conversation {
        let body = format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"tools":{app_tools}}}"#
        );
        let request = ChatRequest::parse(body.as_bytes()).unwrap();
        let messages = request.messages.clone();
        Conversation::new(request, messages, None, rounds, vision)
    }

    fn call(id: &str, name: &str) -> ModelCall {
        ModelCall {
            id: id.into(),
            name: name.into(),
            arguments: "{}".into(),
        }
    }

    fn answer(text: &str, calls: Vec<ModelCall>) -> RoundAnswer {
        RoundAnswer {
            text: text.into(),
            finish_reason: Some(
                if calls.is_empty() {
                    "stop"
                } else {
                    "tool_calls"
                }
                .into(),
            ),
            calls,
            usage: Some(json!({"total_tokens": 2}).as_object().unwrap().clone()),
        }
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
        let Step::Run(run) = c.answered(&mut answer("Let me check.", calls.clone())) else {
            panic!("a server round")
        };
        assert_eq!(run, calls);
        c.ran(
            "Let me check.",
            &calls,
            vec![result(&calls[0], "\"sunny\"", vec![])],
        );
        let second = sent(&c.next_round(&registered));
        let messages = second["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["tool_calls"][0]["id"], "c1");
        assert_eq!(messages[1]["content"], "Let me check.");
        assert_eq!(
            messages[2],
            json!({"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "\"sunny\""})
        );
        let Step::Run(_) = c.answered(&mut answer("", calls.clone())) else {
            panic!("a second server round")
        };
        c.ran("", &calls, vec![result(&calls[0], "1", vec![])]);
        let last = c.next_round(&registered);
        assert_eq!(sent(&last).get("tools"), None);
        let Step::Deliver { finish_reason } = c.answered(&mut answer("It is sunny.", vec![]))
        else {
            panic!("words at last")
        };
        assert_eq!(finish_reason, "stop");
        assert_eq!(c.text(), "Let me check.\n\nIt is sunny.");
        assert_eq!(c.rounds(), 3);
        assert_eq!(c.usage().unwrap()["total_tokens"], 6);
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
        let Step::HandOff { all, server, app } = c.answered(&mut answer("", calls.clone())) else {
            panic!("a mixed turn is handed off")
        };
        assert_eq!((server.len(), app.len()), (1, 1));
        assert_eq!(all, calls);
        let turn = c.hand_off(
            &calls,
            server.clone(),
            vec![result(&server[0], "\"sunny\"", vec![])],
            None,
        );
        assert!(turn.calls[0].1.is_some() && turn.calls[1].1.is_none());
    }

    #[test]
    fn refused_tools_are_withheld_and_the_round_asked_again() {
        let mut c = conversation("null", 3, false);
        c.next_round(&[tool("w")]);
        assert!(c.refuse_tools());
        let again = c.next_round(&[tool("w")]);
        assert_eq!(sent(&again).get("tools"), None);
        assert_eq!(c.rounds(), 1);
        assert!(!c.refuse_tools(), "only once");
        let mut none = conversation("null", 3, false);
        none.next_round(&[]);
        assert!(!none.refuse_tools(), "nothing of ours to withhold");
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
            c.answered(&mut answer("", calls.clone()));
            c.ran(
                "",
                &calls,
                vec![result(&calls[0], "{}", vec![image.clone()])],
            );
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
}
