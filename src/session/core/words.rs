//! The core's words: the [`Protocol`] an adapter implements, what the model says
//! ([`ModelEvent`]) and what a new user turn abandons ([`Interruption`]), what the core makes of
//! it for the actor ([`Seen`]), the session's own tools ([`ForeignTool`]) and why an update fails
//! ([`SyncError`]).

use std::time::Duration;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::domain::call::ToolResult;
use crate::domain::connection::ConnectionKind;
use crate::domain::tool::SharedTool;
use crate::events::SearchKind;

/// A wire protocol, as the core uses it: what the model's frames mean, and the frames that
/// carry what the core decides. One implementation per protocol (today the OpenAI-Realtime
/// family, [`super::realtime::Realtime`]); the core names no wire field.
pub(crate) trait Protocol: std::fmt::Debug {
    /// Reads one text frame of the model's.
    fn read(&self, text: &str) -> Result<ModelEvent, ReadError>;

    /// The update that gives the session its own tools (`keep.tools`, first, as written) and
    /// the registered `tools`.
    fn tool_update(&self, tools: &[SharedTool], keep: Keep<'_>, event_id: &str) -> String;

    /// How the answers of a turn's calls travel: each in a frame of its own as soon as it is
    /// ready ([`call_output`](Self::call_output)), or the server's all in one frame once the
    /// last of them is ready ([`call_outputs`](Self::call_outputs)).
    fn answers(&self) -> Answers {
        Answers::EachAtOnce
    }

    /// The frame that answers one call with its result (the model reads
    /// [`ToolResult::model_text`] or the protocol's own shape of it).
    fn call_output(&self, result: &ToolResult, event_id: &str) -> String;

    /// The one frame that answers every call of a turn the server ran (for
    /// [`Answers::TogetherPerTurn`]).
    fn call_outputs(&self, results: &[ToolResult], event_id: &str) -> String {
        results
            .iter()
            .map(|result| self.call_output(result, event_id))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Whether the model takes images in the conversation.
    fn takes_images(&self) -> bool;

    /// The frame that shows the model a result's images (called only when it takes images and
    /// the result has some).
    fn images(&self, result: &ToolResult, event_id: &str) -> String;

    /// What the model is told instead of `dropped` images it cannot take.
    fn images_not_taken(&self, dropped: usize) -> String;

    /// The frame that asks the model to go on once every call of a turn is answered; `None`
    /// for a protocol whose model goes on by itself once it has the answers.
    fn continue_turn(&self, event_id: &str) -> Option<String>;

    /// Whether a new tool list needs a new connection (the protocol takes tools only in the
    /// setup that opens one): the first update of a connection goes on it, every later one is
    /// handed to the actor as [`super::Effect::Reconnect`].
    fn tools_need_new_connection(&self) -> bool {
        false
    }

    /// Whether the tools `find_tools` finds join the session's set, to be called by name; `false`
    /// for a protocol whose tools need a new connection, which a call in progress (the search
    /// itself) forbids: its model calls them through `call_tool`, and `find_tools` tells it their
    /// parameters.
    fn calls_found_tools_by_name(&self) -> bool {
        !self.tools_need_new_connection()
    }

    /// How a search of this protocol's model is announced and counted, for a session of `kind`.
    fn search_kind(&self, kind: ConnectionKind) -> SearchKind {
        SearchKind::Session(kind)
    }

    /// Whether a call of a non-blocking tool is answered at once as running, its result
    /// following as a message ([`late_result`](Self::late_result)); `false` for a protocol that
    /// carries non-blocking calls itself (Gemini Live's `NON_BLOCKING` functions), whose answer
    /// is the result, sent when it comes.
    fn answers_running_calls(&self) -> bool {
        true
    }

    /// Whether the provider decides when the model speaks of a late result or a note (Gemini
    /// Live's `scheduling`): then the core asks for no response and cancels none for them.
    fn schedules_itself(&self) -> bool {
        false
    }

    /// The frame that gives the model a non-blocking call's result when it comes.
    fn late_result(&self, result: &ToolResult, event_id: &str) -> String;

    /// The frame that tells the model `text` (a call's progress, a plugin's context) without
    /// asking for an answer; `respond`: a protocol that [schedules itself](Self::schedules_itself)
    /// is asked to answer it.
    fn note(&self, text: &str, respond: bool, event_id: &str) -> String;

    /// The frame that cancels the response in progress, for a protocol that has one.
    fn cancel_response(&self, event_id: &str) -> Option<String> {
        let _ = event_id;
        None
    }
}

/// How a protocol's call answers travel (see [`Protocol::answers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answers {
    /// Each answer in a frame of its own, as soon as it is ready.
    EachAtOnce,
    /// The answers of the calls the server ran in one turn, in one frame, once the last is
    /// ready (a call the provider cancelled is left out).
    TogetherPerTurn,
}

/// What the model said, as far as the session acts on it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ModelEvent {
    /// The session describes itself as it starts; `tools` are its tools, when it lists them.
    Started { tools: Option<Vec<ForeignTool>> },
    /// An update was applied; `tools` are the tools it echoed, when it echoed a list: they tell
    /// whose update this acknowledges, and a late duplicate from the awaited one.
    Updated { tools: Option<Vec<ForeignTool>> },
    /// The model refused something; `event_id` names the event when it says.
    Refused {
        message: String,
        event_id: Option<String>,
    },
    /// The model finished the arguments of a call.
    Call(Call),
    /// A turn (a response) finished; `calls` are the calls it made. `cancelled`: the provider
    /// cancelled it before it was complete (the person spoke over it, or the app cancelled it).
    TurnDone {
        turn: Option<String>,
        calls: Vec<Call>,
        cancelled: bool,
    },
    /// The person interrupted, or the provider cancelled calls: see [`Interruption`].
    Interrupted(Interruption),
    /// A response (a turn of the model's) began.
    TurnStarted,
    /// The person began speaking: a new user turn ([`Interruption::NewTurn`]), and no moment to
    /// speak until they stop.
    SpeechStarted,
    /// The person stopped speaking: the reply to their turn is expected next.
    SpeechStopped,
    /// Audio, transcripts, everything else: not the session's to act on.
    Other,
}

/// What a new user turn, or the provider's cancellation, abandons: the calls of those turns
/// that still run are cancelled, each answered as cancelled, and none of those turns is asked
/// to go on. Each protocol's adapter says which of its events (the provider's and, behind a
/// relay, the app's) mean which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Interruption {
    /// The person began a new turn (they started speaking, a message of theirs was added, or
    /// the app cancelled the response): every turn before it.
    NewTurn,
    /// This turn (response) was cancelled.
    Turn(String),
    /// The provider cancelled these calls, by id (Gemini Live's `toolCallCancellation`): they
    /// are cancelled whatever `cancel_on_interruption` says (the provider no longer takes their
    /// answers), and nothing is sent for them.
    Calls(Vec<String>),
}

/// One call of a tool, as the model made it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Call {
    /// The turn (response) it belongs to, when the model says.
    pub turn: Option<String>,
    pub call_id: String,
    pub name: String,
    /// The exact argument text the model produced.
    pub arguments: String,
}

/// Why a frame could not be read as an event of the model's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("server event is not a JSON object with a \"type\": {0}")]
    Malformed(String),
    #[error("server message is not a JSON object: {0}")]
    NotJsonObject(String),
    #[error("{kind} event lacks {field}")]
    MissingField {
        kind: &'static str,
        field: &'static str,
    },
}

/// A tool the session has that the server did not register: the app's own, kept byte for byte
/// as the app (or the session's own events) wrote it.
#[derive(Debug, Clone)]
pub(crate) struct ForeignTool {
    pub name: String,
    pub json: Box<RawValue>,
}

impl PartialEq for ForeignTool {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.json.get() == other.json.get()
    }
}

/// What a server-built update carries besides the registered tools: the tools the session
/// already has of its own, and the app's last session settings, whose values win over the
/// protocol's defaults for the keys a tool update touches.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Keep<'a> {
    pub tools: &'a [ForeignTool],
    pub settings: Option<&'a Map<String, Value>>,
}

/// The registered tools whose names none of `own` has, and the names of those left out: the
/// session's (the app's) own tool wins a clash.
pub(crate) fn without_clashes(
    tools: &[SharedTool],
    own: &[ForeignTool],
) -> (Vec<SharedTool>, Vec<String>) {
    let mut clashes = Vec::new();
    let kept = tools
        .iter()
        .filter(|t| {
            let clash = own.iter().any(|o| o.name == t.name);
            if clash {
                clashes.push(t.name.clone());
            }
            !clash
        })
        .cloned()
        .collect();
    (kept, clashes)
}

/// What became of a frame of the model's, for the actor to act on: what a kind of connection
/// does with it is the actor's (a relay passes it to its app, an attachment learns from it).
#[derive(Debug, PartialEq)]
pub(crate) enum Seen {
    /// Anything an app may see.
    Pass,
    /// The answer to one of the server's own updates (or a late or repeated one): the app never
    /// sees it.
    Ours,
    /// The session described its tools in an event nobody here awaited — as it started
    /// (`started`), or after an update someone else made — with these tools when it listed
    /// them. An app sees it.
    Described {
        started: bool,
        tools: Option<Vec<ForeignTool>>,
    },
    /// A refusal that names nothing of the server's: the app's, or nobody's.
    Error {
        message: String,
        event_id: Option<String>,
    },
    /// A frame that could not be read: an app gets it as it came.
    Unreadable(ReadError),
}

/// Why a session did not take a tool list: typed until the edge, where it becomes the text of
/// `failed_roles`, of the sessions listing and of the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyncError {
    /// The session answered the update with an error.
    #[error("model session refused the tool update: {0}")]
    Refused(String),
    /// No acknowledgement within the sync timeout.
    #[error(
        "model session did not acknowledge the tool update (no session.updated within {} s)",
        .0.as_secs_f64()
    )]
    NotAcknowledged(Duration),
    /// A Gemini Live session's new connection did not take the setup within the sync timeout.
    #[error(
        "gemini session did not take the new tools (no setupComplete within {} s)",
        .0.as_secs_f64()
    )]
    NoSetupComplete(Duration),
    /// The connection ended first.
    #[error("model session closed before acknowledging the tool update")]
    Closed,
    /// An attached call's session never said which tools it has, so nothing was sent.
    #[error(
        "the call's session did not say which tools it has (no session.created or \
         session.updated within {} s); the tools were not sent, so the app's are kept",
        .0.as_secs_f64()
    )]
    NotDescribed(Duration),
    /// A session whose tools need a new connection (Gemini Live) had no moment to open one
    /// within the sync timeout; the new tools go at the next such moment.
    #[error("gemini session not resumable: {0}")]
    NotResumable(String),
    /// An app behind the Gemini relay has not sent its setup, which the tools go in.
    #[error(
        "the app has not sent its setup within {} s; the tools go with it when it comes",
        .0.as_secs_f64()
    )]
    NoSetup(Duration),
    /// The session's actor is gone.
    #[error("model session actor is not running")]
    Gone,
    /// An attachment's handshake and first update took longer than the join may wait.
    #[error("the call did not take the tools within {} s", .0.as_secs_f64())]
    NotJoined(Duration),
    /// An in-process session's own reason.
    #[error("{0}")]
    Other(String),
}
