//! What a tool is: its model-facing definition and how a call to it is handled.
//!
//! A [`ToolSpec`] is immutable once built and shared as `Arc<ToolSpec>`: one registration that
//! applies to many characters is one allocation, whatever the number of characters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use serde::Serialize;
use serde_json::Map;
use serde_json::value::RawValue;

use super::approval::Approval;
use super::arguments::Parameters;
use super::call::LocalToolHandler;
use super::callback_url::{CallbackOrigin, CallbackUrl};
use super::limits::CallLimits;
use super::search::ToolTerms;

/// `source` of a registration that names none.
pub(crate) const DEFAULT_SOURCE: &str = "external";

/// Timeout of a remote tool that names none (the spec's default).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest a tool call may run: the contract caps `timeout_seconds` at 300 s. Every other wait
/// on a call is bounded by it: a registration's and an MCP server's timeout, an in-process tool's
/// run, the grace a stopping server gives running calls.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);

/// `source` of the server's own tools (`find_tools`).
pub(crate) const BUILT_IN_SOURCE: &str = "built-in";

/// Sources with this prefix are plugins whose dead callback origins are removed automatically.
pub(crate) const PLUGIN_SOURCE_PREFIX: &str = "plugin:";

/// One tool as the model sees it, plus how to run it.
#[derive(Debug)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments (always an object schema), compiled: checked before every
    /// call.
    pub parameters: Parameters,
    /// Lifecycle tag used by `clear`.
    pub source: String,
    pub handler: ToolHandler,
    /// Whether a live conversation waits for its calls.
    pub behavior: Behavior,
    /// Whether its calls wait for a person's approval (`approval`, `approval_timeout_seconds`).
    pub approval: Approval,
    /// Its bounds on how its calls run (`max_concurrent`, `rate`, `dedupe_seconds`); their state
    /// belongs to this registration, so a replacing one starts fresh.
    pub limits: CallLimits,
    /// This registration's number, unique in the process: a pending approval names the
    /// registration it was asked under, and a new registration of the same name voids it.
    pub generation: u64,
    /// Its definition as chat requests send it, written once on first use: every round of
    /// every request sends the same text.
    wire: WireForms,
    /// What search finds it by, worked out on first use (when a registry first indexes it) and
    /// shared by every character's index.
    search: OnceLock<Arc<ToolTerms>>,
}

/// A tool's definition serialised in the chat wire formats' shapes ([`NestedTool`],
/// [`FlatTool::loose`]).
#[derive(Debug, Default)]
struct WireForms {
    nested: OnceLock<Box<RawValue>>,
    flat_loose: OnceLock<Box<RawValue>>,
}

/// The next registration number.
fn next_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Whether the model's conversation waits for a tool's calls (`behavior` of a registration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Behavior {
    /// The call is answered when the tool answers (the contract's behaviour).
    #[default]
    Blocking,
    /// In a live session the call is answered at once as running, and the tool's result reaches
    /// the model when it comes.
    NonBlocking,
}

impl Behavior {
    /// The name a registration uses.
    pub fn name(self) -> &'static str {
        match self {
            Behavior::Blocking => "blocking",
            Behavior::NonBlocking => "non_blocking",
        }
    }

    /// The behavior a registration names.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "blocking" => Some(Behavior::Blocking),
            "non_blocking" => Some(Behavior::NonBlocking),
            _ => None,
        }
    }
}

/// How a tool call is carried out.
#[derive(Debug, Clone)]
pub enum ToolHandler {
    /// An HTTP callback of a local plugin process.
    Remote(RemoteEndpoint),
    /// An actor of an in-process plugin.
    Local(LocalToolHandler),
    /// A tool of the server's own, answered by whoever offered it to the model, never by a
    /// callback (`BuiltIn`).
    BuiltIn(BuiltIn),
}

/// The server's own tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltIn {
    /// `find_tools` (`domain::budget`): the character's tools searched, the ones found added to
    /// the caller's session.
    FindTools,
    /// `call_tool` (`domain::budget`): a found tool called by name, for a session whose tool
    /// declarations change only with a new connection (Gemini Live).
    CallTool,
}

/// Where and how long to call a remote tool.
#[derive(Debug, Clone)]
pub struct RemoteEndpoint {
    pub callback_url: CallbackUrl,
    pub timeout: Duration,
}

impl ToolSpec {
    /// A remote tool.
    pub fn remote(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Parameters,
        source: impl Into<String>,
        callback_url: CallbackUrl,
        timeout: Duration,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
            source: source.into(),
            handler: ToolHandler::Remote(RemoteEndpoint {
                callback_url,
                timeout,
            }),
            behavior: Behavior::Blocking,
            approval: Approval::default(),
            limits: CallLimits::default(),
            generation: next_generation(),
            wire: WireForms::default(),
            search: OnceLock::new(),
        }
    }

    /// The same tool with `behavior`.
    pub fn with_behavior(mut self, behavior: Behavior) -> Self {
        self.behavior = behavior;
        self
    }

    /// The same tool with `approval`.
    pub fn with_approval(mut self, approval: Approval) -> Self {
        self.approval = approval;
        self
    }

    /// The same tool with `limits`.
    pub fn with_limits(mut self, limits: CallLimits) -> Self {
        self.limits = limits;
        self
    }

    /// An in-process tool handled by an actor. Its `parameters` are checked like a remote
    /// tool's: build them with [`Parameters::new`], which refuses a schema the register route
    /// would refuse.
    pub fn local(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Parameters,
        source: impl Into<String>,
        handler: LocalToolHandler,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
            source: source.into(),
            handler: ToolHandler::Local(handler),
            behavior: Behavior::Blocking,
            approval: Approval::default(),
            limits: CallLimits::default(),
            generation: next_generation(),
            wire: WireForms::default(),
            search: OnceLock::new(),
        }
    }

    /// One of the server's own tools (`domain::budget::find_tools`): no registration, no
    /// callback; its calls are answered by whoever offered it.
    pub(crate) fn built_in(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Parameters,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
            source: BUILT_IN_SOURCE.to_owned(),
            handler: ToolHandler::BuiltIn(BuiltIn::FindTools),
            behavior: Behavior::Blocking,
            approval: Approval::default(),
            limits: CallLimits::default(),
            generation: next_generation(),
            wire: WireForms::default(),
            search: OnceLock::new(),
        }
    }

    pub fn is_remote(&self) -> bool {
        matches!(self.handler, ToolHandler::Remote(_))
    }

    /// Whether this is one of the server's own tools.
    pub fn is_built_in(&self) -> bool {
        matches!(self.handler, ToolHandler::BuiltIn(_))
    }

    /// The callback URL exactly as registered, for remote tools.
    pub fn callback_url(&self) -> Option<&str> {
        match &self.handler {
            ToolHandler::Remote(r) => Some(r.callback_url.as_written()),
            ToolHandler::Local(_) | ToolHandler::BuiltIn(_) => None,
        }
    }

    /// The longest a call may take, when the tool sets its own bound: a remote tool's timeout,
    /// or what an in-process handler declares (`None`: the dispatcher's bound for in-process
    /// tools applies).
    pub fn timeout(&self) -> Option<Duration> {
        match &self.handler {
            ToolHandler::Remote(r) => Some(r.timeout),
            ToolHandler::Local(handler) => handler.0.timeout(),
            ToolHandler::BuiltIn(_) => None,
        }
    }

    pub fn callback_origin(&self) -> Option<&CallbackOrigin> {
        match &self.handler {
            ToolHandler::Remote(r) => Some(r.callback_url.origin()),
            ToolHandler::Local(_) | ToolHandler::BuiltIn(_) => None,
        }
    }

    /// Whether this is an in-process tool run by `handler` (the same handler, not an equal one).
    pub fn is_handled_by(&self, handler: &LocalToolHandler) -> bool {
        match &self.handler {
            // The data pointers, not the fat pointers: the same object may be reached through
            // vtables of different codegen units.
            ToolHandler::Local(own) => {
                std::ptr::addr_eq(Arc::as_ptr(&own.0), Arc::as_ptr(&handler.0))
            }
            ToolHandler::Remote(_) | ToolHandler::BuiltIn(_) => false,
        }
    }

    /// [`NestedTool`] of this tool, as JSON (chat completions' `tools`).
    pub(crate) fn nested_json(&self) -> &RawValue {
        self.wire
            .nested
            .get_or_init(|| raw_json(&NestedTool::new(self)))
    }

    /// [`FlatTool::loose`] of this tool, as JSON (the Responses API's `tools`).
    pub(crate) fn flat_loose_json(&self) -> &RawValue {
        self.wire
            .flat_loose
            .get_or_init(|| raw_json(&FlatTool::loose(self)))
    }

    /// The terms search finds this tool by. Worked out once: a `ToolSpec` is not changed once
    /// it is shared.
    pub(crate) fn search_terms(&self) -> &Arc<ToolTerms> {
        self.search.get_or_init(|| {
            Arc::new(ToolTerms::new(
                &self.name,
                &self.description,
                self.parameters.schema(),
                &self.source,
            ))
        })
    }

    /// Whether `other` has the same definition as far as search and the model can tell: name,
    /// description, parameters and source.
    pub(crate) fn same_definition(&self, other: &ToolSpec) -> bool {
        self.name == other.name
            && self.description == other.description
            && self.source == other.source
            && self.parameters.same_schema(&other.parameters)
    }

    /// The terms a search worked out for this tool, if one did.
    pub(crate) fn worked_out_search_terms(&self) -> Option<&Arc<ToolTerms>> {
        self.search.get()
    }

    /// Takes the search terms `other` has worked out, if this tool has none yet (`other` has the
    /// same definition: [`ToolSpec::same_definition`]).
    pub(crate) fn adopt_search_terms(&self, other: &ToolSpec) {
        if let Some(terms) = other.search.get() {
            let _ = self.search.set(terms.clone());
        }
    }

    /// Whether this is a remote tool of `source` whose callback lives at `origin`.
    pub fn is_served_by(&self, source: &str, origin: &CallbackOrigin) -> bool {
        self.source == source && self.callback_origin() == Some(origin)
    }
}

/// The parameters of a registration that gives none: `{"type": "object", "properties": {}}`,
/// compiled once per process.
pub fn empty_parameters() -> Parameters {
    static EMPTY: LazyLock<Parameters> =
        LazyLock::new(|| Parameters::new(Map::new()).expect("the empty object schema is valid"));
    EMPTY.clone()
}

fn raw_json(value: &impl Serialize) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).expect("a tool definition serialises")
}

/// A shared, immutable tool definition.
pub type SharedTool = Arc<ToolSpec>;

/// A remote tool for unit tests: `name`, `description`, no parameters, a `plugin:w` callback
/// on loopback.
#[cfg(test)]
pub(crate) fn test_tool(name: &str, description: &str) -> SharedTool {
    Arc::new(ToolSpec::remote(
        name,
        description,
        empty_parameters(),
        "plugin:w",
        crate::domain::callback_url::CallbackUrl::parse("http://127.0.0.1:9/cb")
            .expect("a loopback URL"),
        std::time::Duration::from_secs(5),
    ))
}

/// A tool's model-facing definition: name, description and the parameters schema.
#[derive(Serialize)]
struct FunctionBody<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Map<String, serde_json::Value>,
}

impl<'a> FunctionBody<'a> {
    fn new(tool: &'a ToolSpec) -> Self {
        Self {
            name: &tool.name,
            description: &tool.description,
            parameters: tool.parameters.schema(),
        }
    }
}

/// A tool as OpenAI's chat completions (and Qwen's realtime) take it:
/// `{"type": "function", "function": {"name", "description", "parameters"}}`, serialised
/// straight from the shared tool.
#[derive(Serialize)]
pub(crate) struct NestedTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionBody<'a>,
}

impl<'a> NestedTool<'a> {
    pub(crate) fn new(tool: &'a ToolSpec) -> Self {
        Self {
            kind: "function",
            function: FunctionBody::new(tool),
        }
    }
}

/// A tool as OpenAI's realtime sessions take it:
/// `{"type": "function", "name", "description", "parameters"}`; and as the Responses API takes
/// it, with `"strict": false` stated ([`FlatTool::loose`]).
#[derive(Serialize)]
pub(crate) struct FlatTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    body: FunctionBody<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

impl<'a> FlatTool<'a> {
    pub(crate) fn new(tool: &'a ToolSpec) -> Self {
        Self {
            kind: "function",
            body: FunctionBody::new(tool),
            strict: None,
        }
    }

    /// The Responses API's shape: its `strict` defaults to true, which makes a model fill in
    /// every optional argument and refuses schemas strict mode cannot take, so it is stated
    /// false (the server checks the arguments against the schema itself).
    pub(crate) fn loose(tool: &'a ToolSpec) -> Self {
        Self {
            strict: Some(false),
            ..Self::new(tool)
        }
    }
}

/// A tool as Gemini takes it in `functionDeclarations`:
/// `{"name", "description", "parametersJsonSchema"}` (no type wrapper; the schema as JSON
/// Schema, which Gemini takes whole).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GeminiDeclaration<'a> {
    name: &'a str,
    description: &'a str,
    parameters_json_schema: &'a Map<String, serde_json::Value>,
    /// `NON_BLOCKING` for a non-blocking tool (Gemini's own mechanism); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    behavior: Option<&'static str>,
}

impl<'a> GeminiDeclaration<'a> {
    pub(crate) fn new(tool: &'a ToolSpec) -> Self {
        Self {
            name: &tool.name,
            description: &tool.description,
            parameters_json_schema: tool.parameters.schema(),
            behavior: (tool.behavior == Behavior::NonBlocking).then_some("NON_BLOCKING"),
        }
    }
}

/// Remote tools of these names (empty description and schema, `plugin:w`), for unit tests.
#[cfg(test)]
pub(crate) fn test_tools(names: &[&str]) -> Vec<SharedTool> {
    names
        .iter()
        .map(|n| {
            Arc::new(ToolSpec::remote(
                *n,
                "",
                empty_parameters(),
                "plugin:w",
                CallbackUrl::parse("http://127.0.0.1:9/cb").expect("a loopback URL"),
                Duration::from_secs(5),
            ))
        })
        .collect()
}
