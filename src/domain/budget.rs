//! A character's tool budget: how many of its tools any one model session is given at once, and
//! `find_tools`, the built-in tool a session calls to find the rest.
//!
//! A character may hold hundreds of tools; a model given all of them chooses worse, pays for
//! every definition in every turn, and some APIs refuse more than 128. So each session is
//! offered a set within `[character.tools] budget`: while the character holds no more tools than
//! its budget, all of them; beyond it, with search on, the pinned tools, `find_tools` and the
//! tools that session found, most recently found kept; with search off, the pinned tools and the
//! most recently registered ones ([`Budget::offer`]). Every kind of session — realtime, Gemini
//! Live, chat, the Responses API, `/mcp` — asks the same [`Budget`] with its own [`Found`], so
//! the rule is written once; what differs is only how each tells its model of a new set.
//!
//! Plain: no actix. The search itself is the character's snapshot's
//! ([`ToolSnapshot::search`](super::snapshot::ToolSnapshot::search)).

use std::collections::VecDeque;
use std::sync::{Arc, LazyLock};

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::arguments::Parameters;
use super::call::{Outcome, ToolAnswer, ToolCall, ToolResult};
use super::json_text::text_of;
use super::search::Hit;
use super::tool::{BuiltIn, SharedTool, ToolHandler, ToolSpec};

/// The name of the built-in search tool. No registration may take it
/// (`is_reserved_name`).
pub const FIND_TOOLS: &str = "find_tools";

/// The name of the built-in tool through which a Gemini Live session calls the tools
/// `find_tools` found (its declarations change only with a new connection). No registration may
/// take it either.
pub const CALL_TOOL: &str = "call_tool";

/// Tools a session is given at most when the configuration says nothing: OpenAI's chat API
/// refuses more than 128 tools in one request.
pub(crate) const DEFAULT_BUDGET: usize = 128;

/// The largest budget a character may have: past a thousand definitions a session's every turn
/// carries hundreds of kilobytes of tools, which no model reads well.
pub(crate) const MAX_BUDGET: usize = 1024;

/// Longest `query` a `find_tools` call may send (characters): a request in words, not a
/// document.
pub(crate) const MAX_QUERY_CHARS: usize = 512;

/// Most tools one `find_tools` call may return, and how many it returns unless asked.
pub(crate) const MAX_FIND_LIMIT: u64 = 10;
pub(crate) const DEFAULT_FIND_LIMIT: u64 = 5;

/// What `find_tools` tells the model of the tools it returns.
pub(crate) const FOUND_NOTE: &str = "these tools can be called now";

/// `[character.tools] search`: when sessions get `find_tools`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    /// Only while the character holds more tools than its budget.
    #[default]
    Auto,
    /// Always, even when every tool fits.
    Always,
    /// Never: beyond the budget a session gets the pinned and the most recently registered
    /// tools, and says it is over budget.
    Off,
}

/// `[character.tools]`: a character's budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// Most server tools one session is given at once (`find_tools` included), 1 to
    /// `MAX_BUDGET`.
    pub budget: usize,
    /// Tools always in the set, when the character holds them.
    pub pinned: Vec<String>,
    pub search: SearchMode,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            budget: DEFAULT_BUDGET,
            pinned: Vec::new(),
            search: SearchMode::default(),
        }
    }
}

/// The tools one session is offered now.
#[derive(Debug, Clone)]
pub struct Offer {
    /// In the order the session shows them: pinned, `find_tools`, found (or every tool, in
    /// registration order, when all fit).
    pub tools: Vec<SharedTool>,
    /// Whether `find_tools` is among them.
    pub searching: bool,
    /// The character holds more tools than this session is given and it cannot search for the
    /// rest (`search = "off"`).
    pub over_budget: bool,
}

impl Budget {
    /// Whether sessions get `find_tools` while the character holds `held` tools.
    pub fn searches(&self, held: usize) -> bool {
        match self.search {
            SearchMode::Off => false,
            SearchMode::Always => true,
            SearchMode::Auto => held > self.budget,
        }
    }

    /// The set a session that found `found` is offered out of the character's `tools` (in
    /// registration order).
    pub fn offer(&self, tools: &[SharedTool], found: &Found) -> Offer {
        let budget = self.budget.max(1);
        let searching = self.searches(tools.len());
        if !searching {
            if tools.len() <= budget {
                return Offer {
                    tools: tools.to_vec(),
                    searching,
                    over_budget: false,
                };
            }
            // The pinned, then the most recently registered (the end of the order), kept in
            // registration order.
            let mut keep = vec![false; tools.len()];
            let mut left = budget;
            for (i, tool) in tools.iter().enumerate() {
                if left > 0 && self.is_pinned(&tool.name) {
                    keep[i] = true;
                    left -= 1;
                }
            }
            for i in (0..tools.len()).rev() {
                if left == 0 {
                    break;
                }
                if !keep[i] {
                    keep[i] = true;
                    left -= 1;
                }
            }
            return Offer {
                tools: tools
                    .iter()
                    .zip(keep)
                    .filter(|(_, k)| *k)
                    .map(|(t, _)| t.clone())
                    .collect(),
                searching,
                over_budget: true,
            };
        }
        if tools.len() < budget {
            // Everything fits beside `find_tools` (`search = "always"`).
            let mut all = tools.to_vec();
            all.push(find_tools());
            return Offer {
                tools: all,
                searching,
                over_budget: false,
            };
        }
        let mut offered: Vec<SharedTool> = Vec::with_capacity(budget);
        for tool in tools {
            if offered.len() + 1 < budget && self.is_pinned(&tool.name) {
                offered.push(tool.clone());
            }
        }
        offered.push(find_tools());
        // The most recently found that the character still holds, as many as fit, shown in
        // the order they were found (a newly found tool goes last: the others keep their place).
        let room = budget - offered.len();
        let mut shown: Vec<SharedTool> = found
            .newest_first()
            .filter(|name| !self.is_pinned(name))
            .filter_map(|name| tools.iter().find(|t| t.name == name))
            .take(room)
            .cloned()
            .collect();
        shown.reverse();
        offered.extend(shown);
        Offer {
            tools: offered,
            searching,
            over_budget: false,
        }
    }

    fn is_pinned(&self, name: &str) -> bool {
        self.pinned.iter().any(|p| p == name)
    }

    /// The pinned names the character does not hold: a configuration that names a tool which
    /// may register later is not wrong, but worth a warning at start.
    pub fn unknown_pinned<'a>(&'a self, held: &'a [&str]) -> impl Iterator<Item = &'a str> {
        self.pinned
            .iter()
            .map(String::as_str)
            .filter(|p| !held.contains(p))
    }
}

/// The tools one session found with `find_tools`, most recently found last; at most
/// `MAX_BUDGET` names, the oldest forgotten first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    names: VecDeque<String>,
}

impl Found {
    /// `names` were found now (a name found again becomes the most recent).
    pub fn reveal<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            if let Some(at) = self.names.iter().position(|n| n == name) {
                self.names.remove(at);
            }
            self.names.push_back(name.to_owned());
            if self.names.len() > MAX_BUDGET {
                self.names.pop_front();
            }
        }
    }

    /// The names found, most recent first.
    pub fn newest_first(&self) -> impl Iterator<Item = &str> {
        self.names.iter().rev().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The `n` most recently found names, oldest first: what a continuation of the session's
    /// conversation starts with (more could never be offered at once).
    pub(crate) fn latest(&self, n: usize) -> Vec<String> {
        let skip = self.names.len().saturating_sub(n);
        self.names.iter().skip(skip).cloned().collect()
    }
}

/// Whether a registration may not take `name`: the server's built-in tools' names.
pub(crate) fn is_reserved_name(name: &str) -> bool {
    name == FIND_TOOLS || name == CALL_TOOL
}

/// The built-in `find_tools`, one definition for the whole process. It is answered by whoever
/// offered it (the session, the chat loop, `/mcp`), never by a callback.
pub(crate) fn find_tools() -> SharedTool {
    static TOOL: LazyLock<SharedTool> = LazyLock::new(|| {
        let schema = json!({
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUERY_CHARS,
                    "description": "What you want to do, in a few words (e.g. \"turn on the \
                                    lights\", \"weather forecast\")"
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_FIND_LIMIT,
                    "default": DEFAULT_FIND_LIMIT,
                    "description": "How many tools to return at most"
                }
            },
            "required": ["query"],
            "additionalProperties": false
        });
        let Value::Object(schema) = schema else {
            unreachable!("an object literal")
        };
        let parameters = Parameters::new(schema).expect("find_tools' schema is valid");
        Arc::new(ToolSpec::built_in(
            FIND_TOOLS,
            "Finds more tools for what you want to do: call it with a short description of the \
             task when none of your tools fits, then call the tools it returns.",
            parameters,
        ))
    });
    TOOL.clone()
}

/// The built-in `call_tool`, one definition for the whole process: how a session whose tool
/// declarations cannot change without a new connection (Gemini Live) calls a tool `find_tools`
/// found. Answered by the session: it checks `arguments` against the named tool's parameters and
/// runs that tool.
pub(crate) fn call_tool() -> SharedTool {
    static TOOL: LazyLock<SharedTool> = LazyLock::new(|| {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The name of a tool find_tools returned"
                },
                "arguments": {
                    "type": "object",
                    "description": "The tool's arguments, as its parameters (from find_tools) \
                                    describe them"
                }
            },
            "required": ["name", "arguments"],
            "additionalProperties": false
        });
        let Value::Object(schema) = schema else {
            unreachable!("an object literal")
        };
        let parameters = Parameters::new(schema).expect("call_tool's schema is valid");
        let mut tool = ToolSpec::built_in(
            CALL_TOOL,
            "Calls a tool that find_tools returned, by its name, with its arguments.",
            parameters,
        );
        tool.handler = ToolHandler::BuiltIn(BuiltIn::CallTool);
        Arc::new(tool)
    });
    TOOL.clone()
}

/// A `call_tool` call's arguments, read from the model's argument text: the tool's name and its
/// arguments' exact text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallTool {
    pub(crate) name: String,
    pub(crate) arguments: String,
}

impl CallTool {
    /// Reads arguments `call_tool`'s schema accepted; `None` when they are not that.
    pub(crate) fn read(text: &str) -> Option<Self> {
        #[derive(serde::Deserialize)]
        struct Raw<'a> {
            name: String,
            #[serde(borrow)]
            arguments: &'a serde_json::value::RawValue,
        }
        let raw: Raw<'_> = serde_json::from_str(text).ok()?;
        Some(Self {
            name: raw.name,
            arguments: raw.arguments.get().to_owned(),
        })
    }
}

/// A `find_tools` call's arguments, read from arguments its schema already accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FindTools {
    pub(crate) query: String,
    pub(crate) limit: usize,
}

impl FindTools {
    /// Reads checked arguments; `None` when they are not what the schema allows (a call whose
    /// arguments were not checked).
    pub(crate) fn read(arguments: &Map<String, Value>) -> Option<Self> {
        let query = arguments.get("query")?.as_str()?;
        let chars = query.chars().count();
        if chars == 0 || chars > MAX_QUERY_CHARS {
            return None;
        }
        let limit = match arguments.get("limit") {
            None => DEFAULT_FIND_LIMIT,
            Some(limit) => limit
                .as_u64()
                .filter(|l| (1..=MAX_FIND_LIMIT).contains(l))?,
        };
        Some(Self {
            query: query.to_owned(),
            limit: limit as usize,
        })
    }
}

impl FindTools {
    /// A model's `find_tools` call, its arguments checked against the tool's schema; when they
    /// do not match, the call's error result, which tells the model what to fix.
    pub(crate) fn from_call(call: &mut ToolCall) -> Result<Self, Box<ToolResult>> {
        let tool = find_tools();
        if let Err(refused) = call.check_arguments(&tool.parameters) {
            return Err(Box::new(
                call.failed(Outcome::InvalidArguments, refused.message(FIND_TOOLS)),
            ));
        }
        // The schema bounds the query in characters as `read` does: this is a backstop.
        Self::read(&call.arguments).ok_or_else(|| {
            Box::new(call.failed(
                Outcome::InvalidArguments,
                format!(
                    "arguments for {FIND_TOOLS} do not match its parameters: query must be 1 to \
                     {MAX_QUERY_CHARS} characters and limit 1 to {MAX_FIND_LIMIT}. Call \
                     {FIND_TOOLS} again with arguments that match."
                ),
            ))
        })
    }
}

/// The result of a `find_tools` call whose answer is `output` ([`found_output`]).
pub(crate) fn found_result(call: &ToolCall, output: String) -> ToolResult {
    call.result(ToolAnswer::output(text_of(output)), Vec::new())
}

/// What `find_tools` answers the model: the tools found, best first, with the note that they
/// can be called now. `with_parameters` adds each tool's parameters schema, for a session that
/// calls found tools through a tool of its own rather than by name.
pub(crate) fn found_output(hits: &[Hit<'_, SharedTool>], with_parameters: bool) -> String {
    #[derive(Serialize)]
    struct Found<'a> {
        name: &'a str,
        description: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        parameters: Option<&'a Map<String, Value>>,
    }
    #[derive(Serialize)]
    struct Output<'a> {
        tools: Vec<Found<'a>>,
        note: &'static str,
    }
    let output = Output {
        tools: hits
            .iter()
            .map(|hit| Found {
                name: &hit.item.name,
                description: &hit.item.description,
                parameters: with_parameters.then(|| hit.item.parameters.schema()),
            })
            .collect(),
        note: FOUND_NOTE,
    };
    serde_json::to_string(&output).expect("the output serialises")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::tool::test_tool;

    fn tools(n: usize) -> Vec<SharedTool> {
        (0..n)
            .map(|i| test_tool(&format!("t{i}"), "a tool"))
            .collect()
    }

    fn names(offer: &Offer) -> Vec<&str> {
        offer.tools.iter().map(|t| t.name.as_str()).collect()
    }

    fn budget(budget: usize, pinned: &[&str], search: SearchMode) -> Budget {
        Budget {
            budget,
            pinned: pinned.iter().map(|p| (*p).to_owned()).collect(),
            search,
        }
    }

    #[test]
    fn within_the_budget_every_tool_is_offered_as_registered() {
        let all = tools(3);
        let offer = budget(3, &[], SearchMode::Auto).offer(&all, &Found::default());
        assert_eq!(names(&offer), ["t0", "t1", "t2"]);
        assert!(!offer.searching && !offer.over_budget);
    }

    #[test]
    fn over_the_budget_a_session_starts_with_the_pinned_and_find_tools() {
        let all = tools(40);
        let rule = budget(8, &["t5", "t1", "nowhere"], SearchMode::Auto);
        let offer = rule.offer(&all, &Found::default());
        assert_eq!(names(&offer), ["t1", "t5", FIND_TOOLS]);
        assert!(offer.searching && !offer.over_budget);
    }

    #[test]
    fn found_tools_join_at_the_end_and_the_oldest_go_first_beyond_the_budget() {
        let all = tools(40);
        let rule = budget(5, &["t0"], SearchMode::Auto);
        let mut found = Found::default();
        found.reveal(["t10", "t11"]);
        assert_eq!(
            names(&rule.offer(&all, &found)),
            ["t0", FIND_TOOLS, "t10", "t11"]
        );
        found.reveal(["t12", "t13"]);
        // Room for three found: t10, the oldest, goes; the others keep their order.
        assert_eq!(
            names(&rule.offer(&all, &found)),
            ["t0", FIND_TOOLS, "t11", "t12", "t13"]
        );
        // Found again: the most recent.
        found.reveal(["t11"]);
        assert_eq!(
            names(&rule.offer(&all, &found)),
            ["t0", FIND_TOOLS, "t12", "t13", "t11"]
        );
        // A pinned tool found is not shown twice; a found tool removed since is left out, and
        // the room it leaves goes to the next most recently found (t10, in its place).
        found.reveal(["t0"]);
        let fewer: Vec<_> = all.iter().filter(|t| t.name != "t13").cloned().collect();
        assert_eq!(
            names(&rule.offer(&fewer, &found)),
            ["t0", FIND_TOOLS, "t10", "t12", "t11"]
        );
    }

    #[test]
    fn with_search_off_the_pinned_and_the_most_recently_registered_fill_the_budget() {
        let all = tools(10);
        let offer = budget(4, &["t2"], SearchMode::Off).offer(&all, &Found::default());
        assert_eq!(names(&offer), ["t2", "t7", "t8", "t9"]);
        assert!(!offer.searching && offer.over_budget);
        let fits = budget(10, &[], SearchMode::Off).offer(&all, &Found::default());
        assert!(!fits.over_budget && fits.tools.len() == 10);
    }

    #[test]
    fn with_search_always_find_tools_is_offered_even_when_every_tool_fits() {
        let all = tools(3);
        let offer = budget(8, &[], SearchMode::Always).offer(&all, &Found::default());
        assert_eq!(names(&offer), ["t0", "t1", "t2", FIND_TOOLS]);
        assert!(offer.searching);
        // Auto does not search while everything fits.
        assert!(!budget(8, &[], SearchMode::Auto).searches(8));
        assert!(budget(8, &[], SearchMode::Auto).searches(9));
    }

    #[test]
    fn pinned_tools_never_crowd_out_find_tools() {
        let all = tools(10);
        let offer = budget(2, &["t0", "t1", "t2"], SearchMode::Auto).offer(&all, &Found::default());
        assert_eq!(names(&offer), ["t0", FIND_TOOLS]);
    }

    #[test]
    fn the_offer_never_exceeds_the_budget() {
        let all = tools(50);
        for b in 1..12 {
            let mut found = Found::default();
            found.reveal(all.iter().map(|t| t.name.as_str()));
            for search in [SearchMode::Auto, SearchMode::Always, SearchMode::Off] {
                let offer = budget(b, &["t3", "t9"], search).offer(&all, &found);
                assert!(
                    offer.tools.len() <= b,
                    "{b} {search:?}: {}",
                    offer.tools.len()
                );
            }
        }
    }

    #[test]
    fn find_tools_arguments_are_read_within_their_bounds() {
        let read = |v: Value| FindTools::read(v.as_object().unwrap());
        assert_eq!(
            read(json!({"query": "lights"})),
            Some(FindTools {
                query: "lights".into(),
                limit: 5
            })
        );
        assert_eq!(read(json!({"query": "x", "limit": 10})).unwrap().limit, 10);
        assert_eq!(read(json!({"query": "x", "limit": 11})), None);
        assert_eq!(read(json!({"query": ""})), None);
        assert_eq!(read(json!({"query": "é".repeat(512)})).unwrap().limit, 5);
        assert_eq!(read(json!({"query": "é".repeat(513)})), None);
    }

    #[test]
    fn find_tools_is_one_definition_whose_schema_the_checker_takes() {
        let tool = find_tools();
        assert!(Arc::ptr_eq(&tool, &find_tools()));
        assert_eq!(tool.name, FIND_TOOLS);
        assert!(tool.is_built_in());
        let checked = tool
            .parameters
            .check(r#"{"query": "turn on the lights", "limit": 3}"#);
        assert!(checked.is_ok(), "{checked:?}");
        assert!(tool.parameters.check(r#"{"limit": 3}"#).is_err());
        assert!(is_reserved_name(FIND_TOOLS) && !is_reserved_name("find_tool"));
    }

    #[test]
    fn call_tool_names_a_tool_and_keeps_its_arguments_text() {
        let tool = call_tool();
        assert!(Arc::ptr_eq(&tool, &call_tool()));
        assert!(matches!(
            tool.handler,
            ToolHandler::BuiltIn(BuiltIn::CallTool)
        ));
        assert!(is_reserved_name(CALL_TOOL));
        let text = r#"{"name": "lights_on", "arguments": {"room": "hall",  "level": 3}}"#;
        assert!(tool.parameters.check(text).is_ok());
        assert_eq!(
            CallTool::read(text),
            Some(CallTool {
                name: "lights_on".into(),
                arguments: r#"{"room": "hall",  "level": 3}"#.into()
            })
        );
        assert!(tool.parameters.check(r#"{"name": "x"}"#).is_err());
        assert_eq!(CallTool::read(r#"{"name": 3, "arguments": {}}"#), None);
    }

    #[test]
    fn the_output_names_the_tools_best_first_with_the_note() {
        let a = test_tool("lights_on", "Turns the lights on");
        let b = test_tool("lights_off", "Turns the lights off");
        let hits = [
            Hit {
                item: &a,
                score: 2.0,
            },
            Hit {
                item: &b,
                score: 1.0,
            },
        ];
        assert_eq!(
            serde_json::from_str::<Value>(&found_output(&hits, false)).unwrap(),
            json!({"tools": [{"name": "lights_on", "description": "Turns the lights on"},
                             {"name": "lights_off", "description": "Turns the lights off"}],
                   "note": FOUND_NOTE})
        );
        let with = serde_json::from_str::<Value>(&found_output(&hits[..1], true)).unwrap();
        assert_eq!(with["tools"][0]["parameters"]["type"], json!("object"));
    }
}
