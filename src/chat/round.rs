//! The tool loop's rules, whatever the wire format: which tools a round offers (the registered
//! ones after the app's, minus clashes, none once the rounds that may run tools are used up or
//! the model refused them), what a round's calls lead to (run the server's and ask again, or
//! hand the app its own), and which result images the model is shown. Each wire format's
//! conversation (`conversation.rs` for chat completions, `responses/` for the Responses API)
//! holds one [`ToolLoop`] and speaks its own wire around it. No I/O.

use super::answer::ModelCall;
use crate::domain::call::ToolResult;
use crate::domain::images::{ToolImage, TurnBudget};
use crate::domain::tool::SharedTool;
use crate::session::core::ForeignTool;

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
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The answer is the app's: nothing (more) to run.
    Deliver,
    /// Run the server's calls, then ask again.
    Run(Vec<ModelCall>),
    /// Run the server's calls of a turn that also holds the app's, then answer the app with a
    /// turn of only its own calls.
    HandOff(Vec<ModelCall>),
}

/// A round's calls, sorted by whose they are.
#[derive(Debug)]
pub(crate) struct Split {
    pub step: Step,
    /// The app's own calls, in the model's order: the app's to answer.
    pub app: Vec<ModelCall>,
    /// The server's calls of a round that went without tools: never run.
    pub dropped: Vec<ModelCall>,
}

/// The tools offered round by round, and how many rounds ran them.
#[derive(Debug)]
pub(crate) struct ToolLoop {
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
    /// Upstream calls made so far.
    rounds: usize,
}

/// The tools of one round.
#[derive(Debug)]
pub(crate) struct Offer {
    /// The registered tools to add after the app's.
    pub tools: Vec<SharedTool>,
    pub clashes: Vec<String>,
    /// Whether the round carries tools at all (the app's included).
    pub with_tools: bool,
}

impl Offer {
    /// The round of this offer, whose upstream request is `body`.
    pub(crate) fn round(self, body: Vec<u8>) -> Round {
        Round {
            body,
            clashes: self.clashes,
        }
    }
}

impl ToolLoop {
    pub(crate) fn new(max_tool_rounds: usize, vision: bool) -> Self {
        Self {
            max_tool_rounds,
            vision,
            tool_rounds: 0,
            withhold_tools: false,
            sent: Vec::new(),
            sent_tools: false,
            rounds: 0,
        }
    }

    /// The next round's tools: `registered` (the character's tools now) minus those the app
    /// has, unless tools are withheld or the rounds that may run tools are used up.
    pub(crate) fn offer(&mut self, registered: &[SharedTool], app: &[ForeignTool]) -> Offer {
        let with_tools = !self.withhold_tools && self.tool_rounds < self.max_tool_rounds;
        let (tools, clashes) = if with_tools {
            crate::session::core::without_clashes(registered, app)
        } else {
            (Vec::new(), Vec::new())
        };
        self.sent.clone_from(&tools);
        self.sent_tools = with_tools;
        self.rounds += 1;
        Offer {
            tools,
            clashes,
            with_tools,
        }
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

    /// What a round's calls lead to. `is_app` says whether a name is one of the app's tools.
    pub(crate) fn split(&self, calls: Vec<ModelCall>, is_app: impl Fn(&str) -> bool) -> Split {
        let (app, server): (Vec<ModelCall>, Vec<ModelCall>) =
            calls.into_iter().partition(|c| is_app(&c.name));
        if !self.sent_tools && !server.is_empty() {
            // The round went without tools: calls the model makes anyway cannot be run (the
            // server's) and are dropped; the app's still reach the app.
            tracing::warn!(
                calls = server.len(),
                "the model called tools in a round sent without them; those calls were dropped"
            );
            let step = if app.is_empty() {
                Step::Deliver
            } else {
                Step::HandOff(Vec::new())
            };
            return Split {
                step,
                app,
                dropped: server,
            };
        }
        let step = match (app.is_empty(), server.is_empty()) {
            (true, true) => Step::Deliver,
            (true, false) => Step::Run(server),
            (false, _) => Step::HandOff(server),
        };
        Split {
            step,
            app,
            dropped: Vec::new(),
        }
    }

    /// The server's calls of a round ran.
    pub(crate) fn ran(&mut self) {
        self.tool_rounds += 1;
    }

    /// The registered tool a call of the last round names, if it was sent.
    pub(crate) fn tool_for(&self, name: &str) -> Option<&SharedTool> {
        self.sent.iter().find(|t| t.name == name)
    }

    /// The names of the tools the last round sent, for the error a call of another name gets.
    pub(crate) fn sent_names(&self) -> impl Iterator<Item = &str> {
        self.sent.iter().map(|t| t.name.as_str())
    }

    /// Takes the images of a round's results the model is shown (a model with vision, within
    /// the turn's budget); each result's output names those it does not get. True when the
    /// model takes images at all.
    pub(crate) fn fit_images(&self, results: &mut [ToolResult]) -> bool {
        let mut budget = TurnBudget::default();
        for result in results.iter_mut() {
            let warning = if self.vision {
                budget.take(&mut result.images)
            } else {
                images_not_taken(&mut result.images)
            };
            result.add_image_warnings(warning.into_iter().collect());
        }
        self.vision
    }

    /// Upstream calls made so far.
    #[cfg(test)]
    pub(crate) fn rounds(&self) -> usize {
        self.rounds
    }

    /// Rounds that may still run tools after this one.
    pub(crate) fn max_tool_rounds(&self) -> usize {
        self.max_tool_rounds
    }
}

/// Drops the images of a result for a model that takes none; returns what the model is told
/// instead, so it never answers as if it had seen them.
fn images_not_taken(images: &mut Vec<ToolImage>) -> Option<String> {
    let dropped = std::mem::take(images).len();
    (dropped > 0).then(|| {
        format!(
            "{dropped} image(s) not shown: this chat model takes no images ([character.chat] \
             vision = false)"
        )
    })
}

/// The text that answers a call the server did not run because the request's rounds that may
/// run tools were used up (the upstream keeps the call, so it must be answered).
pub(crate) fn not_run_text(max_tool_rounds: usize) -> String {
    format!(
        "the call was not run: this request's rounds that may run tools (max_tool_rounds = \
         {max_tool_rounds}) were used up"
    )
}

/// An upstream answer the conversation cannot take.
#[derive(Debug)]
pub(crate) enum Unreadable {
    /// Not what the wire format answers with: what is wrong.
    Invalid(String),
    /// The upstream's stream reported an error: its error object.
    Error(serde_json::Value),
}

/// What one event of a streamed round gives.
#[derive(Debug)]
pub(crate) enum Streamed {
    /// Frames for the app, now (maybe none).
    Frames(Vec<bytes::Bytes>),
    /// Frames that say nothing yet (the stream's or an item's opening, a role with no text):
    /// the app gets them with the next frames that do, in one write.
    Held(Vec<bytes::Bytes>),
    /// The round's answer is complete.
    End,
}

/// The app's answer once the loop is done.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A whole answer (JSON).
    Whole(serde_json::Value),
    /// The last frames of the app's stream.
    Frames(Vec<bytes::Bytes>),
}

/// One wire format's conversation, as the one driver (`run.rs`) needs it: plain state that
/// says what each round sends, takes each round's answer (whole or event by event, with the
/// frames its app's stream gets), says what comes next, and writes the app's answer. A new wire
/// format is a new implementation; the driver has no branch on it.
pub(crate) trait WireConversation {
    /// The upstream's path (under its base URL) that rounds go to.
    const PATH: &'static str;
    /// The kind its calls are announced with (`tool.call`).
    const KIND: crate::domain::connection::ConnectionKind;
    /// What a request leaves for the app's next one: a turn answered partly by the server.
    type Kept;

    /// The model the upstream is asked for.
    fn model(&self) -> &str;
    /// Whether the app asked for a stream.
    fn streaming(&self) -> bool;
    fn tool_loop(&self) -> &ToolLoop;
    fn tool_loop_mut(&mut self) -> &mut ToolLoop;
    /// The next round's request, offering `registered` (the character's tools now).
    fn next_round(&mut self, registered: &[SharedTool]) -> Round;
    /// A streamed round's events begin.
    fn stream_begins(&mut self);
    /// One event of a streamed round (its data).
    fn stream_event(&mut self, data: &str) -> Result<Streamed, Unreadable>;
    /// A whole (non-streamed) answer of a round; the frames the app's stream gets for it.
    fn whole_answer(&mut self, body: &[u8]) -> Result<Vec<bytes::Bytes>, Unreadable>;
    /// The round's answer is in (whole, or its stream ended): what comes next.
    fn answered(&mut self) -> Step;
    /// The server's calls of the round ran (`Step::Run`): their results go into the next round.
    fn ran(&mut self, calls: &[ModelCall], results: Vec<ToolResult>);
    /// The server's calls of a turn handed to the app ran (`Step::HandOff`).
    fn hand_off(&mut self, server: &[ModelCall], results: Vec<ToolResult>);
    /// The app's answer, and what is kept for its next request.
    fn finish(&mut self) -> (Answer, Option<Self::Kept>);
    /// The frames that end a stream already under way with `error` (an error object in
    /// OpenAI's shape: `message`, `type`, `code`, ...).
    fn failure_frames(&mut self, error: serde_json::Value) -> Vec<bytes::Bytes>;
    /// What an error status of the upstream says besides its own message, if anything.
    fn explain_status(_status: u16) -> Option<&'static str> {
        None
    }
    /// Keeps what a request left on the character's endpoint, charged to the app's connection
    /// `client` (not what is larger than the whole store).
    fn keep(
        endpoint: &super::ChatEndpoint,
        kept: Self::Kept,
        client: Option<std::net::SocketAddr>,
    ) -> Result<(), super::kept::TooLarge>;
    /// The id of the response the app got, when the wire format gives one it can go on from
    /// (the Responses API's).
    fn issued(&self) -> Option<&str> {
        None
    }
}
