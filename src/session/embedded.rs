//! An application's in-process session under its character's budget: the set it is handed, and
//! its model's `find_tools` answered by the server.
//!
//! The server does not see an in-process session's model, so it cannot answer its calls itself
//! as it does a realtime session's. Instead the `find_tools` an in-process session is handed is
//! its own: an in-process tool whose handler asks the character's
//! [`SessionManager`](crate::actors::manager::SessionManager) ([`SearchFor`]). The application
//! runs it with the dispatcher like any tool of the character (its arguments are checked
//! against `find_tools`' schema there); the manager searches the character's tools, records
//! what that session found, hands the session the set with them appended ([`SyncTools`], the
//! order of the others unchanged) and answers the call only once the session acknowledged it,
//! so the model never hears of a tool its session does not have yet.
//!
//! The manager holds one [`Budgeted`] per in-process session in its
//! [`SessionHandle`](super::SessionHandle); only the manager touches it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use actix::WeakRecipient;
use actix::prelude::*;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::Value;

use super::shell::SYNC_FALLBACK_MARGIN;
use super::{CharacterTools, SessionHandle, SyncError, SyncTools};
use crate::domain::budget::{FIND_TOOLS, FindTools, Found, MAX_QUERY_CHARS, find_tools};
use crate::domain::call::{LocalHandler, LocalToolHandler, ToolCall, ToolOutcome};
use crate::domain::tool::{SharedTool, ToolSpec};
use crate::events::{EventHub, SearchKind};

/// What a call of `find_tools` answers when the session it was handed to is no longer one of
/// its character's sessions (it stopped, or the character was removed or rebuilt).
const NOT_JOINED: &str =
    "this session is no longer one of its character's sessions: join again to search its tools";

/// Numbers the in-process sessions, so a `find_tools` call names the session it was handed to.
static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

/// A model's `find_tools` call in the in-process session `session`, to its character's manager.
/// Answers the call's output, or the error the model is given.
#[derive(Message, Debug)]
#[rtype(result = "ToolOutcome")]
pub(crate) struct SearchFor {
    pub(crate) session: u64,
    pub(crate) call: ToolCall,
}

/// What the manager holds of one in-process session: what its model found and the set it was
/// last handed.
#[derive(Debug, Clone)]
pub(crate) struct Budgeted {
    id: u64,
    found: Found,
    /// The list it was last handed; `None` before the first.
    handed: Option<Arc<[SharedTool]>>,
    /// Whether its character holds more tools than it is handed and it cannot search for them.
    over_budget: bool,
    /// Its own `find_tools`: the built-in's name, description and schema, answered through
    /// `manager`.
    find_tools: SharedTool,
}

impl Budgeted {
    /// A new in-process session of the character whose manager is `manager`.
    pub(crate) fn new(manager: WeakRecipient<SearchFor>) -> Self {
        let id = NEXT_SESSION.fetch_add(1, Ordering::Relaxed);
        let built_in = find_tools();
        let handler = LocalToolHandler(Arc::new(FindForSession {
            manager,
            session: id,
        }));
        let tool = ToolSpec::local(
            built_in.name.clone(),
            built_in.description.clone(),
            built_in.parameters.clone(),
            built_in.source.clone(),
            handler,
        );
        Self {
            id,
            found: Found::default(),
            handed: None,
            over_budget: false,
            find_tools: Arc::new(tool),
        }
    }

    /// The set the session is handed now out of `tools`: the budget's offer for what it found,
    /// with its own `find_tools`. `None` when that is the list it was last handed (a change to
    /// a tool it is not offered sends it nothing).
    pub(crate) fn offer(&mut self, tools: &CharacterTools) -> Option<Arc<[SharedTool]>> {
        let offer = tools.budget.offer(&tools.list, &self.found);
        self.over_budget = offer.over_budget;
        let list: Arc<[SharedTool]> = offer
            .tools
            .into_iter()
            .map(|tool| {
                if tool.is_built_in() && tool.name == FIND_TOOLS {
                    self.find_tools.clone()
                } else {
                    tool
                }
            })
            .collect();
        let same = self.handed.as_ref().is_some_and(|handed| {
            handed.len() == list.len()
                && handed
                    .iter()
                    .zip(list.iter())
                    .all(|(a, b)| Arc::ptr_eq(a, b))
        });
        if same {
            return None;
        }
        self.handed = Some(list.clone());
        Some(list)
    }

    /// Whether the character holds more tools than the session is handed and it cannot search
    /// for the rest (`search = "off"`): what `GET /api/sessions` says of it.
    pub(crate) fn over_budget(&self) -> bool {
        self.over_budget
    }
}

/// The handler of an in-process session's own `find_tools`.
struct FindForSession {
    /// Weak: a tool the application still holds must not keep a stopped manager's mailbox open.
    manager: WeakRecipient<SearchFor>,
    session: u64,
}

impl LocalHandler for FindForSession {
    fn call(&self, call: ToolCall) -> BoxFuture<'static, ToolOutcome> {
        let Some(manager) = self.manager.upgrade() else {
            return futures_util::future::ready(Err(NOT_JOINED.to_owned())).boxed();
        };
        let session = self.session;
        async move {
            manager
                .send(SearchFor { session, call })
                .await
                .unwrap_or_else(|_| Err(NOT_JOINED.to_owned()))
        }
        .boxed()
    }
}

/// Answers the `find_tools` call of the in-process session `session` among `sessions`: the
/// character's `tools` searched (announced as `tool.search` of the session's kind), what it
/// found recorded for that session and, when that changes its set, the new set handed to it;
/// the answer waits for the session's acknowledgement of it (up to `timeout`).
pub(crate) fn search(
    sessions: &mut [SessionHandle],
    SearchFor { session, call }: SearchFor,
    character: &str,
    tools: &CharacterTools,
    events: &EventHub,
    timeout: Duration,
) -> BoxFuture<'static, ToolOutcome> {
    let ready = |outcome: ToolOutcome| futures_util::future::ready(outcome).boxed();
    let Some(handle) = sessions
        .iter_mut()
        .find(|s| s.is_open() && s.budgeted.as_ref().is_some_and(|b| b.id == session))
    else {
        return ready(Err(NOT_JOINED.to_owned()));
    };
    // The dispatcher checked the arguments against the schema: this is a backstop.
    let Some(ask) = FindTools::read(&call.arguments) else {
        return ready(Err(format!(
            "{FIND_TOOLS} takes a query of 1 to {MAX_QUERY_CHARS} characters"
        )));
    };
    let found = events.find_tools(
        character,
        &tools.snapshot,
        &ask,
        SearchKind::Session(handle.kind),
        false,
    );
    let output = serde_json::from_str(&found.output).unwrap_or(Value::String(found.output));
    let Some(budgeted) = handle.budgeted.as_mut() else {
        return ready(Err(NOT_JOINED.to_owned()));
    };
    budgeted
        .found
        .reveal(found.tools.iter().map(|tool| tool.name.as_str()));
    let Some(list) = budgeted.offer(tools) else {
        // Nothing new joins its set: the model may call what it found at once.
        return ready(Ok(output));
    };
    let reply = handle.sync.send(SyncTools(list));
    async move {
        // The session settles the list within `timeout` itself; this bound only catches one
        // that never answers.
        let bound = timeout + 2 * SYNC_FALLBACK_MARGIN;
        let outcome = match tokio::time::timeout(bound, reply).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(SyncError::Gone),
            Err(_) => Err(SyncError::NotAcknowledged(timeout)),
        };
        match outcome {
            Ok(()) => Ok(output),
            Err(error) => Err(format!(
                "the tools found could not be added to the session: {error}"
            )),
        }
    }
    .boxed()
}
