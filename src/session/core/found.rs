//! The character's tool budget in a session: the set the session is offered (the budget's
//! offer for what its model found), the model's `find_tools` answered from the character's
//! snapshot, and — on a protocol whose tools need a new connection — `call_tool`, through which
//! the model calls what it found.
//!
//! A realtime session's found tools join its set: the update that appends them goes, and the
//! answer of `find_tools` is held until that update is acknowledged, so the model never hears
//! of a tool it cannot call yet. A Gemini Live session takes new declarations only on a new
//! connection, which it may open only with no call running — and `find_tools` is one — so its
//! declarations stay as they are: `find_tools` answers with each tool's parameters at once, and
//! the model calls the tool through `call_tool`, whose arguments the named tool's schema checks.

use super::{Call, SessionCore, SyncError};
use crate::domain::budget::{CALL_TOOL, CallTool, FIND_TOOLS, FindTools, Found, call_tool};
use crate::domain::call::{Outcome, ToolAnswer, ToolCall, ToolResult};
use crate::domain::json_text::text_of;
use crate::domain::tool::SharedTool;
use crate::events::CallWatch;

/// A `find_tools` answer that waits for the update carrying the tools it found.
#[derive(Debug)]
pub(super) struct Held {
    /// The sync version that carries them: its update's outcome releases the answer.
    version: u64,
    turn: Option<String>,
    call: ToolCall,
    output: String,
    watch: CallWatch,
}

impl SessionCore {
    /// Works out the set the session is offered now; `true` when it differs from the one before
    /// (the same tools in the same order are no change).
    pub(super) fn reoffer(&mut self) -> bool {
        let tools = &self.character_tools;
        let (offered, over_budget) = if self.protocol.calls_found_tools_by_name() {
            let offer = tools.budget.offer(&tools.list, &self.found);
            (offer.tools, offer.over_budget)
        } else {
            // Found tools are reached through `call_tool`, which joins `find_tools` (and counts
            // toward the budget with it): the declarations never change with a search.
            let offer = tools.budget.offer(&tools.list, &Found::default());
            let mut offered = offer.tools;
            if offer.searching {
                if offered.len() >= tools.budget.budget
                    && let Some(at) = offered.iter().position(|t| t.name == FIND_TOOLS)
                    && at > 0
                {
                    offered.remove(at - 1);
                }
                offered.push(call_tool());
            }
            (offered, offer.over_budget)
        };
        self.over_budget = over_budget;
        let changed = !super::same_tools(&self.registered, &offered);
        if changed {
            self.registered = offered.into();
        }
        changed
    }

    /// Whether the session offers the built-in tool `name`.
    fn offers(&self, name: &str) -> bool {
        self.registered
            .iter()
            .any(|t| t.name == name && t.is_built_in())
    }

    /// A call of `call_tool` that names one of the character's tools and gives it an arguments
    /// object becomes a call of that tool (its answer goes back under `call_tool`'s name, see
    /// [`answered_as`](Self::answered_as)); any other is left as it is, for
    /// [`built_in`](Self::built_in) to answer.
    pub(super) fn through_call_tool(&mut self, call: &mut Call) {
        if call.name != CALL_TOOL || !self.offers(CALL_TOOL) {
            return;
        }
        let Some(inner) = CallTool::read(&call.arguments) else {
            return;
        };
        if !self
            .character_tools
            .list
            .iter()
            .any(|t| t.name == inner.name)
        {
            return;
        }
        self.through_call_tool.insert(
            crate::domain::peer_id::call_id(&call.call_id).into_owned(),
            CALL_TOOL,
        );
        call.name = inner.name;
        call.arguments = inner.arguments;
    }

    /// A result about to be sent: under `call_tool`'s name when the call came through it.
    pub(super) fn answered_as(&mut self, result: &mut ToolResult) {
        if let Some(name) = self.through_call_tool.remove(&result.call_id) {
            if result.outcome == Outcome::InvalidArguments
                && let Some(error) = &mut result.error
            {
                // The model fixes them in its next call of `call_tool`, not of the tool.
                error.push_str(&format!(
                    " (Through {name}: the tool's arguments go in \"arguments\".)"
                ));
            }
            result.name = name.to_owned();
        }
    }

    /// The session's own tool of this name (`find_tools`, `call_tool`), when it offers it.
    pub(super) fn built_in_tool(&self, name: &str) -> Option<&SharedTool> {
        self.registered
            .iter()
            .find(|t| t.name == name && t.is_built_in())
    }

    /// Answers a call of one of the session's own tools (`tool`). `find_tools`: its arguments
    /// checked, the character's tools searched, the ones found revealed; when they change the
    /// set, the answer waits for the update that carries them. `call_tool` that reached here
    /// names no tool of the character's, or has no arguments object: the model is told which.
    pub(super) fn built_in(
        &mut self,
        turn: Option<String>,
        mut call: ToolCall,
        tool: &SharedTool,
        watch: CallWatch,
    ) {
        if let Err(refused) = call.check_arguments(&tool.parameters) {
            let result = call.failed(Outcome::InvalidArguments, refused.message(&tool.name));
            self.answer(turn, result, watch);
            return;
        }
        if tool.name == CALL_TOOL {
            let named = CallTool::read(&call.raw_arguments)
                .map(|c| c.name)
                .unwrap_or_default();
            let error = format!(
                "no tool named '{}': call find_tools to find a tool, then call_tool with a name \
                 it returned",
                crate::domain::peer_id::name(&named)
            );
            let result = call.failed(Outcome::UnknownTool, error);
            self.answer(turn, result, watch);
            return;
        }
        let Some(ask) = FindTools::read(&call.arguments) else {
            let error = format!("{FIND_TOOLS} takes a query of 1 to 512 characters");
            let result = call.failed(Outcome::InvalidArguments, error);
            self.answer(turn, result, watch);
            return;
        };
        let by_name = self.protocol.calls_found_tools_by_name();
        let found = self.events.find_tools(
            &self.character,
            &self.character_tools.snapshot,
            &ask,
            self.protocol.search_kind(self.kind),
            !by_name,
        );
        if by_name {
            self.found
                .reveal(found.tools.iter().map(|tool| tool.name.as_str()));
        }
        if by_name && self.reoffer() && self.connected && self.ready {
            // The update that appends them goes now, or after the one in flight; the model
            // hears of them when it is acknowledged.
            if self.sync.changed(None).is_some() {
                self.send_update();
            }
            self.held.push(Held {
                version: self.sync.latest(),
                turn,
                call,
                output: found.output,
                watch,
            });
            return;
        }
        let result = call.result(ToolAnswer::output(text_of(found.output)), Vec::new());
        self.answer(turn, result, watch);
    }

    /// The update of `version` settled with `outcome`: the `find_tools` answers it carried go to
    /// the model, in the order they came — their output when the session took the tools, an
    /// error saying why otherwise.
    pub(super) fn release_held(&mut self, version: u64, outcome: &Result<(), SyncError>) {
        if self.held.is_empty() {
            return;
        }
        let (ready, waiting): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|held| held.version <= version);
        self.held = waiting;
        for held in ready {
            let result = match outcome {
                Ok(()) => held
                    .call
                    .result(ToolAnswer::output(text_of(held.output)), Vec::new()),
                Err(error) => held.call.failed(
                    Outcome::ToolError,
                    format!("the tools found could not be added to the session: {error}"),
                ),
            };
            self.answer(held.turn, result, held.watch);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::super::{Effect, SessionCore};
    use crate::domain::budget::{Budget, SearchMode};
    use crate::domain::callback_url::CallbackUrl;
    use crate::domain::connection::ConnectionKind;
    use crate::domain::registry::Change;
    use crate::domain::snapshot::{ToolWriter, empty_cell};
    use crate::domain::tool::{ToolSpec, empty_parameters};
    use crate::events::{EventHub, EventSettings};
    use crate::policy::Policy;
    use crate::session::CharacterTools;
    use crate::session::realtime::Realtime;
    use crate::session::settings::{Dialect, SessionSettings};

    const URL: &str = "ws://127.0.0.1:9/v1/realtime";

    /// A client core of a character holding `names`, budget 2, nothing pinned.
    fn core(names: &[&str]) -> SessionCore {
        core_and_writer(names).0
    }

    fn budget() -> Arc<Budget> {
        Arc::new(Budget {
            budget: 2,
            pinned: Vec::new(),
            search: SearchMode::Auto,
        })
    }

    /// The same, with the writer of the character's tools.
    fn core_and_writer(names: &[&str]) -> (SessionCore, ToolWriter) {
        let mut writer = ToolWriter::resume(empty_cell(), []);
        for (i, name) in names.iter().enumerate() {
            let tool = ToolSpec::remote(
                *name,
                format!("{name} for a city"),
                empty_parameters(),
                "plugin:x",
                CallbackUrl::parse("http://127.0.0.1:9/cb").unwrap(),
                Duration::from_secs(30),
            );
            let change = Arc::new(Change::Register(Arc::new(tool)));
            writer.apply(i as u64 + 1, &change).unwrap();
        }
        let events = EventHub::new(&EventSettings::default());
        let mut core = SessionCore::new(
            "Mio".into(),
            ConnectionKind::Client,
            Box::new(Realtime(Dialect::Openai)),
            URL.into(),
            &SessionSettings::new(URL, Dialect::Openai),
            events.clone(),
            Policy::new(events),
            CharacterTools::of(writer.current(), &budget()),
            false,
        );
        core.connected();
        core.sync_now();
        (core, writer)
    }

    fn sent(core: &mut SessionCore) -> Vec<Value> {
        core.take_effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::Upstream(text) => Some(serde_json::from_str(&text).unwrap()),
                _ => None,
            })
            .collect()
    }

    fn tool_names(update: &Value) -> Vec<&str> {
        update["session"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect()
    }

    fn find(core: &mut SessionCore, call_id: &str, query: &str) {
        let arguments = json!({"query": query}).to_string();
        let call = json!({"type": "response.function_call_arguments.done", "response_id": "r1",
            "item_id": "i", "output_index": 0, "call_id": call_id, "name": "find_tools",
            "arguments": arguments});
        core.on_upstream(&call.to_string());
    }

    const ACK: &str = r#"{"type": "session.updated", "session": {}}"#;

    #[test]
    fn an_update_the_model_refuses_is_a_tool_error_for_the_search_and_the_session_keeps_its_set() {
        let mut core = core(&["weather", "lights", "clock"]);
        assert_eq!(tool_names(&sent(&mut core)[0]), ["find_tools"]);
        core.on_upstream(ACK);
        find(&mut core, "c1", "weather");
        let update = sent(&mut core);
        assert_eq!(update.len(), 1, "only the update goes: {update:?}");
        assert_eq!(tool_names(&update[0]), ["find_tools", "weather"]);
        core.on_upstream(r#"{"type": "error", "error": {"message": "too many tools"}}"#);
        let answer = sent(&mut core);
        assert_eq!(answer[0]["item"]["call_id"], "c1");
        let output: Value =
            serde_json::from_str(answer[0]["item"]["output"].as_str().unwrap()).unwrap();
        assert_eq!(
            output,
            json!({"error": "the tools found could not be added to the session: model session \
                             refused the tool update: too many tools", "is_error": true})
        );
    }

    #[test]
    fn searches_while_an_update_is_in_flight_are_answered_in_order_once_theirs_is_taken() {
        let mut core = core(&["weather", "lights", "clock"]);
        sent(&mut core);
        core.on_upstream(ACK);
        find(&mut core, "c1", "weather");
        find(&mut core, "c2", "clock");
        // The first search's update is in flight; the second's waits for it.
        let first = sent(&mut core);
        assert_eq!(first.len(), 1);
        core.on_upstream(ACK);
        let next = sent(&mut core);
        assert_eq!(next[0]["item"]["call_id"], "c1");
        // Room for one found tool: the most recent, clock, takes weather's place.
        assert_eq!(tool_names(&next[1]), ["find_tools", "clock"]);
        assert_eq!(next.len(), 2, "c2 waits for its own update: {next:?}");
        core.on_upstream(ACK);
        let last = sent(&mut core);
        assert_eq!(last[0]["item"]["call_id"], "c2");
        assert_eq!(core.report().offered_tools, 2);
    }

    #[test]
    fn a_found_tool_unregistered_since_leaves_the_set_and_a_change_it_is_not_offered_sends_nothing()
    {
        let (mut core, mut writer) =
            core_and_writer(&["weather", "lights", "clock", "fan", "door"]);
        sent(&mut core);
        core.on_upstream(ACK);
        find(&mut core, "c1", "weather");
        sent(&mut core);
        core.on_upstream(ACK);
        assert_eq!(sent(&mut core)[0]["item"]["call_id"], "c1");
        // A tool the session is not offered goes: nothing it sees changed.
        let change = Arc::new(Change::Unregister("lights".into()));
        writer.apply(6, &change).unwrap();
        let (tx, _rx) = tokio::sync::oneshot::channel();
        let waiter = core.tools_changed(CharacterTools::of(writer.current(), &budget()), Some(tx));
        assert!(waiter.is_some(), "answered at once");
        assert!(sent(&mut core).is_empty());
        // The found tool goes: it leaves the set.
        let change = Arc::new(Change::Unregister("weather".into()));
        writer.apply(7, &change).unwrap();
        core.tools_changed(CharacterTools::of(writer.current(), &budget()), None);
        assert_eq!(tool_names(&sent(&mut core)[0]), ["find_tools"]);
    }
}
