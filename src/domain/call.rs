//! Tool calls and their results: the arguments rule, the callback-response mapping and the text
//! the model receives. Plain functions; the dispatcher and the sessions use them.
//!
//! Arguments and outputs travel as their exact JSON text ([`JsonText`]): a number the model or a
//! plugin wrote with more digits than an `f64` holds reaches the other side as written. Parsed
//! [`Value`]s exist only where logic needs them (an `is_error` flag, images, argument checks).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use indexmap::IndexMap;
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::arguments::{ArgumentError, ArgumentsRead, Parameters, read_arguments};
use super::images::ToolImage;
pub(crate) use super::json_text::JsonText;
use super::json_text::{null_text, text_of};
pub use super::outcome::Outcome;
use super::{peer_id, peer_text};

/// How many characters of an HTTP error body a tool error quotes.
pub(crate) const ERROR_BODY_QUOTE_CHARS: usize = 200;

/// When a non-blocking call's result, a progress note that asks to be spoken, or a plugin's
/// context that asks for a reply makes the model speak (`scheduling`, named as Gemini Live
/// names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheduling {
    /// The model answers once the session is idle: no response in progress, nobody speaking.
    #[default]
    WhenIdle,
    /// The model is told, and says nothing until its next answer.
    Silent,
    /// A response in progress is cancelled, and the model answers at once.
    Interrupt,
}

impl Scheduling {
    /// The name a plugin writes.
    pub fn name(self) -> &'static str {
        match self {
            Scheduling::WhenIdle => "when_idle",
            Scheduling::Silent => "silent",
            Scheduling::Interrupt => "interrupt",
        }
    }

    /// The scheduling a plugin names.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "when_idle" => Some(Scheduling::WhenIdle),
            "silent" => Some(Scheduling::Silent),
            "interrupt" => Some(Scheduling::Interrupt),
            _ => None,
        }
    }
}

/// One call of a tool, as the model (or the invoke route) made it. Serialised, it is the body
/// POSTed to a remote tool's callback: `{name, arguments, call_id, raw_arguments}`, where
/// `arguments` is the exact JSON text of the arguments object.
#[derive(Debug, Clone)]
pub struct ToolCall {
    pub name: String,
    /// The arguments as a parsed JSON object, for logic and the argument check (see
    /// `read_arguments`). Numbers beyond an `f64` are rounded here; the callback receives the
    /// exact text instead.
    pub arguments: Map<String, Value>,
    /// The call's id as the server keeps and shows it — and as the callback, the events, the
    /// recent calls and the logs name the call: the model's, cut to
    /// [`peer_id::MAX_CALL_ID_BYTES`] with a mark when it was longer.
    pub call_id: String,
    /// The model's own id when it was longer than the bound: what the model is answered with.
    model_call_id: Option<Arc<str>>,
    /// The exact argument text the model (or the invoke route's client) produced.
    pub raw_arguments: String,
    /// The arguments object as the callback receives it, numbers exactly as written.
    arguments_text: JsonText,
    /// How `raw_arguments` read, so the argument check need not parse it again.
    read: ArgumentsRead,
    /// The span the call runs in (its `execute_tool` span), whose trace the callback's
    /// `traceparent` names; `None` for a call nobody observes (the dispatcher then starts a
    /// trace of its own for the callback).
    pub trace: Option<opentelemetry::trace::SpanContext>,
}

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut body = serializer.serialize_struct("ToolCall", 4)?;
        body.serialize_field("name", &self.name)?;
        body.serialize_field("arguments", &self.arguments_text)?;
        body.serialize_field("call_id", &self.call_id)?;
        body.serialize_field("raw_arguments", &self.raw_arguments)?;
        body.end()
    }
}

/// What became of a call: always something the model can be shown.
#[derive(Debug, Clone)]
pub struct ToolResult {
    /// The call's id as the server keeps and shows it (see [`ToolCall::call_id`]).
    pub call_id: String,
    /// The model's own id when it was longer than the bound (see [`ToolResult::model_call_id`]).
    pub(crate) model_call_id: Option<Arc<str>>,
    pub name: String,
    /// The tool's output as exact JSON text (`null` when there is none). On a tool error it is
    /// the readable half the tool sent next to its error, if any.
    pub output: JsonText,
    pub is_error: bool,
    pub error: Option<String>,
    /// Images that passed every check, to show the model next to the output.
    pub images: Vec<ToolImage>,
    /// What happened to images that were dropped or changed (also in the output's
    /// `_image_warnings`, so the model reads them).
    pub image_warnings: Vec<String>,
    /// When the model speaks of the result of a non-blocking call (the answer's `scheduling`).
    pub scheduling: Scheduling,
    /// How the call ended; [`Outcome::Ok`] exactly when it is not `is_error`.
    pub outcome: Outcome,
    /// A call the model repeated (`dedupe_seconds`) got the result of an identical call instead
    /// of running: that call's id. Its result is that call's, outcome included; it is reported
    /// as [`Outcome::Deduplicated`] ([`ToolResult::reported_outcome`]).
    pub first_call_id: Option<String>,
}

/// What a tool answered, before it is tied to its call.
#[derive(Debug, Clone)]
pub struct ToolAnswer {
    /// Exact JSON text; `null` when the tool gave none.
    pub output: JsonText,
    /// The error text of a tool error.
    pub error: Option<String>,
    /// The `images` field of the answer, still to be checked.
    pub images: Option<Value>,
    /// The answer's `scheduling` (see [`Scheduling`]); the default when it names none, or one
    /// there is not.
    pub scheduling: Scheduling,
    /// How the call ended, when it is an error (a success is [`Outcome::Ok`] whatever this says).
    pub outcome: Outcome,
}

/// The outcome of an in-process tool: `Ok(output)` or `Err(error text for the model)`. An output
/// object that carries `is_error`, or both `output` and `images`, is read as an envelope, like a
/// callback's answer, so an in-process tool can send images and an error with its output.
pub type ToolOutcome = Result<Value, String>;

/// An in-process tool's handler. Implemented for actor recipients in `local_tool`, so in-process
/// plugins write an actor; kept as a trait here so the domain does not depend on the actor system.
pub trait LocalHandler: Send + Sync {
    fn call(&self, call: ToolCall) -> BoxFuture<'static, ToolOutcome>;

    /// The longest a call may take, when the handler bounds its calls itself (an MCP server's
    /// tool does); listings show it.
    fn timeout(&self) -> Option<std::time::Duration> {
        None
    }
}

/// A shared handle on an in-process tool's handler.
#[derive(Clone)]
pub struct LocalToolHandler(pub Arc<dyn LocalHandler>);

impl fmt::Debug for LocalToolHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LocalToolHandler")
    }
}

impl ToolCall {
    /// A call from the model's argument text, read as `read_arguments` says.
    pub fn from_raw(call_id: String, name: String, raw_arguments: String) -> Self {
        let (arguments, arguments_text, read) = read_arguments(&raw_arguments);
        let (call_id, model_call_id) = peer_id::split_call_id(call_id);
        Self {
            name,
            arguments,
            call_id,
            model_call_id,
            raw_arguments,
            arguments_text,
            read,
            trace: None,
        }
    }

    /// A call whose arguments object is `text`, exactly as a client wrote it; `arguments` is its
    /// parsed form (the argument check reads it, the callback gets `text`).
    pub fn from_text(
        call_id: String,
        name: String,
        text: JsonText,
        arguments: Map<String, Value>,
    ) -> Self {
        let (call_id, model_call_id) = peer_id::split_call_id(call_id);
        Self {
            name,
            arguments,
            call_id,
            model_call_id,
            raw_arguments: text.get().to_owned(),
            arguments_text: text,
            read: ArgumentsRead::Object,
            trace: None,
        }
    }

    /// A call from already-parsed arguments; `raw_arguments` is their JSON text.
    pub fn from_arguments(call_id: String, name: String, arguments: Map<String, Value>) -> Self {
        // Serialising a map of JSON values cannot fail.
        let raw_arguments = serde_json::to_string(&arguments).unwrap_or_default();
        let arguments_text = text_of(raw_arguments.clone());
        let (call_id, model_call_id) = peer_id::split_call_id(call_id);
        Self {
            name,
            arguments,
            call_id,
            model_call_id,
            raw_arguments,
            arguments_text,
            read: ArgumentsRead::Object,
            trace: None,
        }
    }

    /// Checks the call's arguments against `parameters`, from the parse the call already holds
    /// (the text is not read again): the verdict and the text for the model are those of
    /// [`Parameters::check`] of its argument text.
    pub fn check_arguments(&mut self, parameters: &Parameters) -> Result<(), ArgumentError> {
        self.read.as_object()?;
        parameters.check_object_map(&mut self.arguments)
    }

    /// The arguments object as the callback receives it.
    pub fn arguments_text(&self) -> &RawValue {
        &self.arguments_text
    }

    /// The id the model sent, exactly: what a protocol that matches an answer to its call by id
    /// answers with. The same as `call_id` unless the model's was longer than
    /// [`peer_id::MAX_CALL_ID_BYTES`].
    pub fn model_call_id(&self) -> &str {
        self.model_call_id.as_deref().unwrap_or(&self.call_id)
    }

    /// The model's own id, when it is not `call_id`: for whoever answers the call later.
    pub(crate) fn long_model_call_id(&self) -> Option<&Arc<str>> {
        self.model_call_id.as_ref()
    }

    /// Ties an answer (and the images that passed their checks) to this call.
    pub fn result(&self, answer: ToolAnswer, images: Vec<ToolImage>) -> ToolResult {
        let is_error = answer.error.is_some();
        ToolResult {
            call_id: self.call_id.clone(),
            model_call_id: self.model_call_id.clone(),
            name: self.name.clone(),
            is_error,
            output: answer.output,
            error: answer.error,
            images,
            image_warnings: Vec::new(),
            scheduling: answer.scheduling,
            outcome: if is_error {
                answer.outcome
            } else {
                Outcome::Ok
            },
            first_call_id: None,
        }
    }

    /// A tool error with no output.
    pub fn error(&self, error: String) -> ToolResult {
        self.result(ToolAnswer::error(error), Vec::new())
    }

    /// A call that ended as `outcome` (an error) with `error` for the model.
    pub fn failed(&self, outcome: Outcome, error: String) -> ToolResult {
        self.result(ToolAnswer::failed(outcome, error), Vec::new())
    }
}

impl ToolAnswer {
    /// What the model is answered at once when it calls a non-blocking tool:
    /// `{"status": "running", "tool": NAME, "call_id": ID}` (the result follows when it comes).
    pub fn running(call: &ToolCall) -> Self {
        let output = serde_json::json!({
            "status": "running",
            "tool": call.name,
            "call_id": call.call_id,
        });
        Self::output(text_of(output.to_string()))
    }

    /// What a live session's model is answered at once when its call waits for a person's
    /// approval.
    pub fn awaiting_approval(call: &ToolCall) -> Self {
        Self::output(text_of(super::approval::awaiting_output(&call.name)))
    }

    /// A tool error with no output.
    pub fn error(error: String) -> Self {
        Self::failed(Outcome::ToolError, error)
    }

    /// A call that ended as `outcome` (an error), with no output.
    pub fn failed(outcome: Outcome, error: String) -> Self {
        Self {
            output: null_text(),
            error: Some(error),
            images: None,
            scheduling: Scheduling::default(),
            outcome,
        }
    }

    /// A successful output of exact JSON text.
    pub(crate) fn output(output: JsonText) -> Self {
        Self {
            output,
            error: None,
            images: None,
            scheduling: Scheduling::default(),
            outcome: Outcome::Ok,
        }
    }

    /// An in-process tool's outcome.
    pub fn from_local(outcome: ToolOutcome) -> Self {
        match outcome {
            Err(error) => Self::error(error),
            Ok(Value::Object(object))
                if object.contains_key("is_error")
                    || (object.contains_key("output") && object.contains_key("images")) =>
            {
                let text = serde_json::to_string(&object).unwrap_or_default();
                read_json_body(&text).unwrap_or_else(|| Self::output(text_of(text)))
            }
            Ok(value) => Self::output(text_of(value.to_string())),
        }
    }
}

impl ToolResult {
    /// The id the model sent for the call, exactly: what a protocol that matches an answer to
    /// its call by id answers with (see [`ToolCall::model_call_id`]).
    pub fn model_call_id(&self) -> &str {
        self.model_call_id.as_deref().unwrap_or(&self.call_id)
    }

    /// The same result, answering the model's own id `model_call_id` (`None`: `call_id` is it):
    /// for a result made from what the server kept of a call rather than from the call.
    pub(crate) fn answering(mut self, model_call_id: Option<Arc<str>>) -> Self {
        self.model_call_id = model_call_id;
        self
    }

    /// The line that goes before one of its images in the conversation: which tool and call it
    /// came from, and what to look for.
    pub fn image_caption(&self, image: &crate::domain::images::ToolImage) -> String {
        let mut caption = format!("Image from tool {} (call_id {})", self.name, self.call_id);
        if !image.vision_prompt.is_empty() {
            caption.push_str(": ");
            caption.push_str(&image.vision_prompt);
        }
        caption
    }

    /// The result of a call cancelled because the person interrupted (a new user turn began)
    /// after it had run for `ran`: a tool error that says so, so the conversation has an answer
    /// for every call the model made. The same text on every kind of session.
    pub fn interrupted(call_id: String, name: String, ran: Duration) -> Self {
        let error = format!(
            "cancelled because the person interrupted: a new user turn began after the call had \
             run {} s, so its result was discarded",
            seconds(ran)
        );
        Self {
            call_id,
            model_call_id: None,
            name,
            output: null_text(),
            is_error: true,
            error: Some(error),
            images: Vec::new(),
            image_warnings: Vec::new(),
            scheduling: Scheduling::default(),
            outcome: Outcome::Cancelled,
            first_call_id: None,
        }
    }

    /// This result as the answer to `call`, a repeat of the call it came from: the same output,
    /// error and images, under the repeat's own id, naming the first call.
    pub fn repeated_for(&self, call: &ToolCall) -> Self {
        Self {
            call_id: call.call_id.clone(),
            first_call_id: Some(self.call_id.clone()),
            ..self.clone()
        }
    }

    /// How the call is reported (the `tool.call` event, metrics, the recent calls, its span):
    /// its outcome, or [`Outcome::Deduplicated`] for a repeat that got another call's result.
    pub fn reported_outcome(&self) -> Outcome {
        if self.first_call_id.is_some() {
            Outcome::Deduplicated
        } else {
            self.outcome
        }
    }

    /// The result of a non-blocking call whose tool was removed after it had run for `ran`: it
    /// was cancelled, and the model is told so.
    pub fn tool_removed(call_id: String, name: String, ran: Duration) -> Self {
        let error = format!(
            "cancelled because the tool '{name}' was removed while the call ran (after {} s)",
            seconds(ran)
        );
        Self {
            error: Some(error),
            ..Self::interrupted(call_id, name, ran)
        }
    }

    /// The text of a non-blocking call's result as the model reads it when it comes: which tool
    /// and call it is, then the output (or, for an error, that it is one, and the error).
    pub fn late_text(&self) -> String {
        let what = if self.is_error {
            "ended with an error"
        } else {
            "finished"
        };
        format!(
            "The non-blocking tool call {} (call_id {}) {what}. Result: {}",
            self.name,
            self.call_id,
            self.model_text()
        )
    }

    /// How a live session's model is told the outcome of a call it was answered as awaiting
    /// approval for: not run (denied, expired, cancelled: the error says which), or approved
    /// and run, with the result.
    pub fn approval_text(&self) -> String {
        match self.outcome {
            Outcome::Denied | Outcome::Expired | Outcome::Cancelled => format!(
                "The tool call {} (call_id {}) that waited for the person's approval was not                  run. Result: {}",
                self.name,
                self.call_id,
                self.model_text()
            ),
            _ => {
                let what = if self.is_error {
                    "ran and ended with an error"
                } else {
                    "ran and finished"
                };
                format!(
                    "The person approved the tool call {} (call_id {}); it {what}. Result: {}",
                    self.name,
                    self.call_id,
                    self.model_text()
                )
            }
        }
    }

    /// The text the model receives: the output's exact JSON text, or for an error a JSON object
    /// text carrying the error (and the output the tool sent with it), so the model always
    /// learns what went wrong and reads whatever the tool explained.
    pub fn model_text(&self) -> String {
        match &self.error {
            Some(error) => {
                let output = (self.output.get() != "null").then_some(&*self.output);
                serde_json::to_string(&ErrorText {
                    error,
                    output,
                    is_error: true,
                })
                .unwrap_or_default()
            }
            None => self.output.get().to_owned(),
        }
    }

    /// Adds `warnings` to the output's `_image_warnings` (a list, kept if the tool already sent
    /// one), turning an output that is not an object into `{"result": output}` first, so the
    /// model knows which images it did not get.
    pub fn add_image_warnings(&mut self, warnings: Vec<String>) {
        if warnings.is_empty() {
            return;
        }
        self.output = with_image_warnings(&self.output, &warnings);
        self.image_warnings.extend(warnings);
    }
}

#[derive(Serialize)]
struct ErrorText<'a> {
    error: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<&'a RawValue>,
    is_error: bool,
}

/// `output` with `warnings` appended to its `_image_warnings` list.
fn with_image_warnings(output: &RawValue, warnings: &[String]) -> JsonText {
    const KEY: &str = "_image_warnings";
    let mut object: IndexMap<String, JsonText> =
        match serde_json::from_str::<IndexMap<String, JsonText>>(output.get()) {
            Ok(object) if output.get().trim_start().starts_with('{') => object,
            _ => IndexMap::from([("result".to_owned(), output.to_owned())]),
        };
    let mut list: Vec<Value> = object
        .get(KEY)
        .and_then(|existing| serde_json::from_str::<Vec<Value>>(existing.get()).ok())
        .unwrap_or_default();
    list.extend(warnings.iter().cloned().map(Value::String));
    object.insert(KEY.to_owned(), text_of(Value::Array(list).to_string()));
    text_of(serde_json::to_string(&object).unwrap_or_default())
}

/// Maps a completed callback exchange to the tool's answer.
pub(crate) fn map_callback_response(status: u16, body: &[u8]) -> ToolAnswer {
    if (300..400).contains(&status) {
        return ToolAnswer::error(format!(
            "remote tool callback answered with a redirect (HTTP {status}); redirects are not followed"
        ));
    }
    if status >= 400 {
        let text = String::from_utf8_lossy(body);
        let quoted: String = text.chars().take(ERROR_BODY_QUOTE_CHARS).collect();
        return ToolAnswer::error(format!(
            "remote tool callback returned HTTP {status}: {quoted}"
        ));
    }
    match std::str::from_utf8(body) {
        Ok(text) => read_json_body(text).unwrap_or_else(|| {
            ToolAnswer::output(text_of(Value::String(text.to_owned()).to_string()))
        }),
        Err(_) => ToolAnswer::output(text_of(
            Value::String(String::from_utf8_lossy(body).into_owned()).to_string(),
        )),
    }
}

/// Reads a JSON body: an envelope (an object with `output` or `is_error`) gives its parts, any
/// other JSON value is the output whole.
/// `None` when the text is not JSON.
///
/// Only the envelope's top level is parsed into values; `output` (and a whole non-envelope
/// body) stays exact text, read by serde_json's skipping parser, which has no depth limit and
/// does not recurse: an answer nested deeper than serde_json's 128-level limit for values (which
/// keeps a hostile document from exhausting the stack) is read in full like any
/// other, its `is_error` honoured.
fn read_json_body(text: &str) -> Option<ToolAnswer> {
    let trimmed = text.trim();
    if !trimmed.starts_with('{') {
        let value = serde_json::from_str::<JsonText>(trimmed).ok()?;
        return Some(ToolAnswer::output(value));
    }
    let object =
        serde_json::from_str::<IndexMap<String, &RawValue, foldhash::fast::RandomState>>(trimmed)
            .ok()?;
    // A callback's envelope has `output` or `is_error`; any other object is the tool's data.
    if !object.contains_key("output") && !object.contains_key("is_error") {
        return Some(ToolAnswer::output(text_of(trimmed.to_owned())));
    }
    let is_error = object
        .get("is_error")
        .is_some_and(|raw| is_truthy_text(raw));
    // Images nested too deep to parse are no list of images: they are reported as such.
    let images = object
        .get("images")
        .map(|raw| serde_json::from_str::<Value>(raw.get()).unwrap_or(Value::Null));
    let output = match object.get("output") {
        Some(output) => (*output).to_owned(),
        // No `output`: the envelope's other fields are the readable part, e.g. a plugin's
        // `{"is_error": true, "error": "QUOTA", "reason": "..."}`.
        None => {
            let rest: IndexMap<&str, &RawValue> = object
                .iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "is_error" | "error" | "images" | "scheduling")
                })
                .map(|(k, v)| (k.as_str(), *v))
                .collect();
            if rest.is_empty() {
                null_text()
            } else {
                text_of(serde_json::to_string(&rest).unwrap_or_default())
            }
        }
    };
    let error = is_error.then(|| error_text(object.get("error").copied()));
    Some(ToolAnswer {
        output,
        error,
        images,
        scheduling: scheduling_of(object.get("scheduling").copied()),
        outcome: Outcome::ToolError,
    })
}

/// [`is_truthy`] of JSON text. Text too deep to parse into a value is a non-empty array or
/// object, which is true.
fn is_truthy_text(raw: &RawValue) -> bool {
    serde_json::from_str::<Value>(raw.get()).map_or(true, |v| is_truthy(&v))
}

/// Python truthiness, which plugins written for the reference server rely on.
fn is_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// The error text of an envelope: its `error` string, the exact JSON text of any other non-null
/// value, or a stock text when there is none; cut to the bound of peer text (the output, which
/// the tool may make as large as the response cap, carries what is long).
fn error_text(error: Option<&RawValue>) -> String {
    const NO_MESSAGE: &str = "remote tool reported an error without a message";
    let Some(raw) = error else {
        return NO_MESSAGE.to_owned();
    };
    match serde_json::from_str::<Option<String>>(raw.get()) {
        Ok(Some(text)) if !text.is_empty() => peer_text::bounded(text),
        Ok(_) => NO_MESSAGE.to_owned(),
        Err(_) => peer_text::bounded_str(raw.get()),
    }
}

/// An envelope's `scheduling`: one of [`Scheduling`]'s names, else the default (a name there is
/// not is logged, without the answer).
fn scheduling_of(raw: Option<&RawValue>) -> Scheduling {
    let Some(raw) = raw else {
        return Scheduling::default();
    };
    let name = serde_json::from_str::<String>(raw.get()).ok();
    match name.as_deref().and_then(Scheduling::from_name) {
        Some(scheduling) => scheduling,
        None => {
            tracing::warn!(
                scheduling = %peer_text::bounded_str(raw.get()),
                "a tool answered a scheduling that is not when_idle, silent or interrupt; using when_idle"
            );
            Scheduling::default()
        }
    }
}

/// `30`, `0.5`, `2.25`: seconds as a person would write them (to the millisecond).
pub(crate) fn seconds(d: Duration) -> String {
    let text = format!("{:.3}", d.as_secs_f64());
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn output_of(answer: &ToolAnswer) -> Value {
        serde_json::from_str(answer.output.get()).unwrap()
    }

    #[test]
    fn arguments_rule() {
        assert_eq!(read_arguments("").0, Map::new());
        assert_eq!(read_arguments("  ").0, Map::new());
        assert_eq!(
            Value::Object(read_arguments(r#"{"a":1}"#).0),
            json!({"a": 1})
        );
        assert_eq!(
            Value::Object(read_arguments("[1,2]").0),
            json!({"value": [1, 2]})
        );
        assert_eq!(Value::Object(read_arguments("7").0), json!({"value": 7}));
        assert_eq!(
            Value::Object(read_arguments("{oops").0),
            json!({"_raw": "{oops"})
        );
    }

    #[test]
    fn the_callback_gets_the_arguments_exactly_as_written() {
        let big = r#" {"big": 123456789012345678901234567890, "f": 0.10000000000000000001} "#;
        let call = ToolCall::from_raw("c".into(), "t".into(), big.into());
        assert_eq!(call.arguments_text().get(), big.trim());
        assert_eq!(call.raw_arguments, big);
        let body = serde_json::to_string(&call).unwrap();
        assert_eq!(
            body,
            format!(
                r#"{{"name":"t","arguments":{},"call_id":"c","raw_arguments":{}}}"#,
                big.trim(),
                serde_json::to_string(big).unwrap()
            )
        );
        let value = ToolCall::from_raw("c".into(), "t".into(), "12345678901234567890123".into());
        assert_eq!(
            value.arguments_text().get(),
            r#"{"value":12345678901234567890123}"#
        );
        let text = ToolCall::from_raw("c".into(), "t".into(), "{oops".into());
        assert_eq!(text.arguments_text().get(), r#"{"_raw":"{oops"}"#);
        let empty = ToolCall::from_raw("c".into(), "t".into(), "".into());
        assert_eq!(empty.arguments_text().get(), "{}");
    }

    #[test]
    fn success_output() {
        let body = br#"{"output": {"temperature_c": 28}, "is_error": false}"#;
        let answer = map_callback_response(200, body);
        assert_eq!(answer.error, None);
        assert_eq!(answer.output.get(), r#"{"temperature_c": 28}"#);
        assert_eq!(
            map_callback_response(200, br#"{"output": null}"#)
                .output
                .get(),
            "null"
        );
    }

    #[test]
    fn outputs_keep_their_numbers() {
        let body =
            br#"{"output": {"n": 123456789012345678901234567890, "x": 1.000000000000000000001}}"#;
        assert_eq!(
            map_callback_response(200, body).output.get(),
            r#"{"n": 123456789012345678901234567890, "x": 1.000000000000000000001}"#
        );
        assert_eq!(
            map_callback_response(200, b" 123456789012345678901234567890 ")
                .output
                .get(),
            "123456789012345678901234567890"
        );
    }

    #[test]
    fn tool_level_error() {
        let body = br#"{"error": "location not found", "is_error": true}"#;
        let answer = map_callback_response(200, body);
        assert_eq!(answer.error.as_deref(), Some("location not found"));
        assert_eq!(answer.output.get(), "null");
    }

    #[test]
    fn an_error_keeps_its_output() {
        let body = br#"{"output": {"error": "ValueError: boom"}, "is_error": true, "error": "ValueError"}"#;
        let answer = map_callback_response(200, body);
        assert_eq!(answer.error.as_deref(), Some("ValueError"));
        assert_eq!(output_of(&answer), json!({"error": "ValueError: boom"}));
        let call = ToolCall::from_raw("c".into(), "t".into(), "{}".into());
        assert_eq!(
            call.result(answer, Vec::new()).model_text(),
            r#"{"error":"ValueError","output":{"error": "ValueError: boom"},"is_error":true}"#
        );
        let unnamed = map_callback_response(200, br#"{"output": "why", "is_error": 1}"#);
        assert_eq!(
            unnamed.error.as_deref(),
            Some("remote tool reported an error without a message")
        );
        assert_eq!(output_of(&unnamed), json!("why"));
    }

    #[test]
    fn an_error_without_output_keeps_its_other_fields() {
        let body = br#"{"is_error": true, "error": "QUOTA", "reason": "daily quota used up", "images": []}"#;
        let answer = map_callback_response(200, body);
        assert_eq!(answer.error.as_deref(), Some("QUOTA"));
        assert_eq!(output_of(&answer), json!({"reason": "daily quota used up"}));
        assert_eq!(answer.images, Some(json!([])));
    }

    #[test]
    fn business_dict_is_output_as_a_whole() {
        let body = br#"{"error": "x", "temp": 3}"#;
        let answer = map_callback_response(200, body);
        assert_eq!(answer.error, None);
        assert_eq!(answer.output.get(), r#"{"error": "x", "temp": 3}"#);
    }

    #[test]
    fn non_object_json_and_text() {
        assert_eq!(map_callback_response(200, b"[1,2]").output.get(), "[1,2]");
        assert_eq!(map_callback_response(200, b"\"hi\"").output.get(), "\"hi\"");
        assert_eq!(
            map_callback_response(200, b"plain text").output.get(),
            "\"plain text\""
        );
        assert_eq!(
            map_callback_response(200, b"\xff\xfeoops").output.get(),
            "\"\u{fffd}\u{fffd}oops\""
        );
    }

    #[test]
    fn json_deeper_than_the_depth_limit_is_read_in_full() {
        let nested = format!("{}{}", "[".repeat(1_000_000), "]".repeat(1_000_000));
        let deep = format!(r#"{{"is_error": true, "error": "deep", "output": {nested}}}"#);
        let answer = map_callback_response(200, deep.as_bytes());
        assert_eq!(answer.error.as_deref(), Some("deep"));
        assert_eq!(answer.output.get(), nested);
        // A deep `is_error` is honoured; the error's text, like any a peer sends, is cut.
        let flag = format!(r#"{{"is_error": {nested}, "error": {nested}}}"#);
        let answer = map_callback_response(200, flag.as_bytes());
        assert_eq!(
            answer.error,
            Some(peer_text::bounded_str(&nested)),
            "cut to the bound of peer text"
        );
        let bare = map_callback_response(200, nested.as_bytes());
        assert_eq!((bare.error, bare.output.get()), (None, nested.as_str()));
    }

    #[test]
    fn a_long_error_text_is_cut_and_marked() {
        let body = format!(
            r#"{{"is_error": true, "error": "{}"}}"#,
            "e".repeat(4 << 20)
        );
        let answer = map_callback_response(200, body.as_bytes());
        let error = answer.error.unwrap();
        assert!(error.len() <= peer_text::MAX_PEER_TEXT_BYTES);
        assert!(
            error.ends_with("… (cut: 4194304 bytes in all)"),
            "{error:.40}"
        );
    }

    #[test]
    fn http_errors_quote_200_characters() {
        let body = "é".repeat(300);
        let answer = map_callback_response(503, body.as_bytes());
        assert_eq!(
            answer.error,
            Some(format!(
                "remote tool callback returned HTTP 503: {}",
                "é".repeat(200)
            ))
        );
    }

    #[test]
    fn redirects_are_errors() {
        let answer = map_callback_response(302, b"");
        assert!(answer.error.unwrap().contains("redirect"));
    }

    #[test]
    fn model_text_carries_the_error() {
        let call = ToolCall::from_raw("c1".into(), "t".into(), "{}".into());
        let result = call.error("location not found".into());
        assert_eq!(
            result.model_text(),
            r#"{"error":"location not found","is_error":true}"#
        );
        let ok = call.result(ToolAnswer::from_local(Ok(json!({"t": 1}))), Vec::new());
        assert_eq!(ok.model_text(), r#"{"t":1}"#);
    }

    #[test]
    fn local_envelopes_are_read_like_callback_answers() {
        let error =
            ToolAnswer::from_local(Ok(json!({"is_error": true, "error": "E", "output": 1})));
        assert_eq!(error.error.as_deref(), Some("E"));
        assert_eq!(error.output.get(), "1");
        let images = ToolAnswer::from_local(Ok(json!({"output": "o", "images": []})));
        assert_eq!(images.output.get(), "\"o\"");
        assert_eq!(images.images, Some(json!([])));
        let data = ToolAnswer::from_local(Ok(json!({"output": "o", "n": 1})));
        assert_eq!(data.output.get(), r#"{"output":"o","n":1}"#);
    }

    #[test]
    fn image_warnings_go_into_the_output() {
        let call = ToolCall::from_raw("c".into(), "t".into(), "{}".into());
        let mut result = call.result(ToolAnswer::from_local(Ok(json!("plain"))), Vec::new());
        result.add_image_warnings(vec!["image #0 dropped".into()]);
        assert_eq!(
            result.output.get(),
            r#"{"result":"plain","_image_warnings":["image #0 dropped"]}"#
        );
        result.add_image_warnings(vec!["image #1 dropped".into()]);
        assert_eq!(
            result.output.get(),
            r#"{"result":"plain","_image_warnings":["image #0 dropped","image #1 dropped"]}"#
        );
        assert_eq!(result.image_warnings.len(), 2);
        let mut object = call.result(
            map_callback_response(200, br#"{"output": {"n": 1e400}}"#),
            Vec::new(),
        );
        object.add_image_warnings(vec!["w".into()]);
        assert_eq!(
            object.output.get(),
            r#"{"n":1e400,"_image_warnings":["w"]}"#
        );
    }

    #[test]
    fn from_arguments_keeps_raw_text_in_step() {
        let mut args = Map::new();
        args.insert("city".into(), json!("Tokyo"));
        let call = ToolCall::from_arguments("c".into(), "t".into(), args.clone());
        assert_eq!(call.raw_arguments, r#"{"city":"Tokyo"}"#);
        assert_eq!(call.arguments_text().get(), r#"{"city":"Tokyo"}"#);
        assert_eq!(call.arguments, args);
    }

    #[test]
    fn seconds_read_naturally() {
        assert_eq!(seconds(Duration::from_secs(30)), "30");
        assert_eq!(seconds(Duration::from_millis(500)), "0.5");
        assert_eq!(seconds(Duration::from_millis(2250)), "2.25");
        assert_eq!(seconds(Duration::from_micros(1_234_567)), "1.235");
    }

    #[test]
    fn an_interrupted_call_says_why_and_how_long_it_ran() {
        let result = ToolResult::interrupted(
            "call_1".into(),
            "get_weather".into(),
            Duration::from_millis(1500),
        );
        assert!(result.is_error);
        assert_eq!(
            serde_json::from_str::<Value>(&result.model_text()).unwrap(),
            json!({"error": "cancelled because the person interrupted: a new user turn began \
                             after the call had run 1.5 s, so its result was discarded",
                   "is_error": true})
        );
    }

    #[test]
    fn a_long_call_id_is_kept_cut_and_its_results_answer_the_models_own() {
        let sent = format!("call_{}", "x".repeat(10_000));
        let kept = peer_id::call_id(&sent).into_owned();
        for call in [
            ToolCall::from_raw(sent.clone(), "t".into(), "{}".into()),
            ToolCall::from_arguments(sent.clone(), "t".into(), Map::new()),
            ToolCall::from_text(sent.clone(), "t".into(), text_of("{}".into()), Map::new()),
        ] {
            assert_eq!(
                (call.call_id.as_str(), call.model_call_id()),
                (kept.as_str(), sent.as_str())
            );
            // The callback's body names the kept id.
            let body: Value = serde_json::to_value(&call).unwrap();
            assert_eq!(body["call_id"], json!(kept));
            let result = call.error("no".into());
            assert_eq!(
                (result.call_id.as_str(), result.model_call_id()),
                (kept.as_str(), sent.as_str())
            );
        }
        let short = ToolCall::from_raw("call_1".into(), "t".into(), "{}".into());
        assert_eq!(short.model_call_id(), "call_1");
        assert!(short.long_model_call_id().is_none());
        let again = ToolResult::interrupted(kept.clone(), "t".into(), Duration::ZERO)
            .answering(Some(sent.as_str().into()));
        assert_eq!(again.model_call_id(), sent);
    }
}
