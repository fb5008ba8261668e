//! Text chat: `POST /v1/chat/completions` and `POST /v1/responses` for apps on any
//! OpenAI-compatible model, with the tool loop run by the server.
//!
//! A character with `[character.chat]` has a [`ChatEndpoint`]: its upstream, what its requests
//! did (for `GET /api/sessions` and the `chat.state` event), the models that refused tools, and
//! the turns handed back to apps with only their own calls. The router creates it with the
//! character and publishes it in the `Directory`, so a request finds it on its HTTP worker's
//! thread, like an invoke. Each request is one conversation of its wire format (plain: what each
//! round sends and what its answer leads to, around the shared [`round::ToolLoop`]), driven by
//! the one [`run`] (the upstream exchanges, the calls through the dispatcher, the app's stream
//! or whole answer).
//!
//! - [`conversation`] and [`wire`], [`answer`], [`turns`]: chat completions (requests, chunks,
//!   messages, usage, errors; the handed-back turns);
//! - [`responses`]: the Responses API;
//! - [`round`]: the tool loop's rules and what the driver asks of a wire format;
//! - [`kept`]: the bounded store of what requests leave for the next, each turn kept for its own
//!   conversation, bounded by count, bytes and age;
//! - [`upstream`]: the HTTP client of the upstream;
//! - [`settings`]: the `[character.chat]` table.

pub(crate) mod answer;
pub(crate) mod conversation;
pub(crate) mod kept;
pub(crate) mod plain;
pub(crate) mod responses;
pub(crate) mod round;
pub(crate) mod run;
pub(crate) mod settings;
pub(crate) mod stream;
pub(crate) mod turns;
pub(crate) mod upstream;
pub(crate) mod wire;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use indexmap::IndexMap;
use serde::Serialize;

use self::conversation::Conversation;
use self::kept::{Owner, Restored, TooLarge};
use self::responses::ResponsesConversation;
use self::responses::issued::IssuedIds;
use self::responses::kept::{KeptResponse, KeptResponses};
use self::responses::request::ResponsesRequest;
use self::run::{ChatContext, Reply};
use self::settings::ChatSettings;
use self::turns::{HandedTurn, HandedTurns};
use self::upstream::Upstream;
use self::wire::{ChatRequest, Raw};
use crate::session::core::rfc3339_now;

/// Requests with more items (messages, input items) than this are put together again with
/// their kept turns on the blocking pool, not on the HTTP worker: that takes about a
/// microsecond per item in a release build (tens in a debug one), and a worker busy with one
/// history would hold up every other connection it serves.
pub(crate) const INLINE_ITEMS: usize = 1024;

/// Runs `start` where it does not hold up the worker: on its thread for a request of at most
/// [`INLINE_ITEMS`] items, on the blocking pool otherwise.
async fn begin<T: Send + 'static>(items: usize, start: impl FnOnce() -> T + Send + 'static) -> T {
    if items <= INLINE_ITEMS {
        return start();
    }
    match actix_web::rt::task::spawn_blocking(start).await {
        Ok(started) => started,
        // A panic in `start` is the request's, as it would be on the worker.
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => panic!("the blocking pool shut down under a chat request"),
        },
    }
}

/// Serves one `POST /v1/chat/completions` request.
pub(crate) async fn complete(ctx: ChatContext, request: ChatRequest) -> Reply {
    let (endpoint, role) = (ctx.endpoint.clone(), ctx.role.clone());
    let conversation = begin(request.messages.len(), move || {
        Conversation::start(&endpoint, &role, request)
    })
    .await;
    run::serve(ctx, conversation).await
}

/// Serves one `POST /v1/responses` request.
pub(crate) async fn respond(ctx: ChatContext, request: ResponsesRequest) -> Reply {
    let (endpoint, role) = (ctx.endpoint.clone(), ctx.role.clone());
    let conversation = begin(request.input.len(), move || {
        ResponsesConversation::start(&endpoint, &role, request)
    })
    .await;
    run::serve(ctx, conversation).await
}

/// Whether a response id `endpoint`'s character never returned was returned by another
/// character's endpoint (`others` may include `endpoint` itself).
pub(crate) fn issued_elsewhere<'a>(
    endpoint: &ChatEndpoint,
    others: impl Iterator<Item = &'a ChatEndpoint>,
    id: &str,
) -> bool {
    !endpoint.has_issued(id)
        && others
            .filter(|other| !std::ptr::eq(*other, endpoint))
            .any(|other| other.has_issued(id))
}

/// A character's chat endpoint: its upstream and what its requests left behind. Shared by
/// every HTTP worker (a short lock per event of a request, never across an await).
#[derive(Debug)]
pub struct ChatEndpoint {
    settings: ChatSettings,
    upstream: Upstream,
    state: Mutex<ChatState>,
    /// Requests running now (each holds a [`RequestPermit`]).
    running: Arc<AtomicUsize>,
}

/// A request's place among the character's running requests, given back when dropped (with
/// the request's future, or its stream's task).
#[derive(Debug)]
pub struct RequestPermit(Arc<AtomicUsize>);

impl Drop for RequestPermit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request refused because the character already runs as many as it may.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the character's chat is already running {max} requests (chat.max_concurrent_requests): \
     try again when one has ended"
)]
pub struct TooManyRequests {
    pub max: usize,
}

#[derive(Debug, Default)]
struct ChatState {
    requests: u64,
    /// Of them, Responses API requests.
    responses: u64,
    rounds: u64,
    calls: u64,
    last_error: Option<ChatFailure>,
    clashes: Vec<String>,
    /// Models that refused tools, with the character's tool list then (its snapshot number):
    /// tools are withheld from them until the list changes.
    refusals: IndexMap<String, (u64, ChatFailure)>,
    turns: HandedTurns,
    responses_kept: KeptResponses,
    /// The ids of the responses apps got from this character.
    issued: IssuedIds,
    /// Plugins' context for the next request, oldest first, with when it came.
    context: std::collections::VecDeque<(Instant, std::sync::Arc<str>)>,
}

/// Plugins' context kept for a character's next chat request: the latest 16 texts...
pub const MAX_KEPT_CONTEXT: usize = 16;

/// ...of the last hour: older news is no news to the person.
pub const KEPT_CONTEXT_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// An error, and when it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatFailure {
    /// RFC 3339, UTC.
    pub at: String,
    pub message: String,
}

/// A model that refused tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolsRefused {
    pub model: String,
    /// When it refused (RFC 3339, UTC), and what the upstream said.
    pub at: String,
    pub error: String,
}

/// A character's chat endpoint, for `GET /api/sessions` and the `chat.state` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatReport {
    /// The upstream's base URL, as configured.
    pub upstream: String,
    /// The model used when a request names none.
    pub model: Option<String>,
    /// Requests served (chat completions and the Responses API).
    pub requests: u64,
    /// Of them, requests to `POST /v1/responses`.
    pub responses: u64,
    /// Upstream calls made for them (one per round).
    pub rounds: u64,
    /// Calls of registered tools the server ran.
    pub calls: u64,
    /// The last request's failure (an upstream that could not be reached, or answered with an
    /// error), or null.
    pub last_error: Option<ChatFailure>,
    /// Registered tools left out of the last request because the app has tools of the same
    /// names.
    pub clashes: Vec<String>,
    /// Models that refused tools: their requests go without tools until the character's tools
    /// change.
    pub tools_refused: Vec<ToolsRefused>,
    /// Turns handed back to apps whose server calls are kept for their next request (and, for
    /// the Responses API, the ids of streamed answers whose last response has another id).
    pub handed_turns: usize,
}

/// Plugins' context since the last request, as system messages (the same in chat's messages and
/// the Responses API's input), the expired left out.
fn take_context(state: &mut ChatState, now: Instant) -> Vec<Raw> {
    std::mem::take(&mut state.context)
        .into_iter()
        .filter(|(at, _)| now.duration_since(*at) <= KEPT_CONTEXT_AGE)
        .map(|(_, text)| {
            let message = serde_json::json!({"role": "system", "content": &*text});
            serde_json::value::to_raw_value(&message).expect("a message serialises")
        })
        .collect()
}

impl ChatEndpoint {
    /// Reads the upstream's key (an error when the variable the configuration names is not set).
    pub fn new(settings: ChatSettings) -> anyhow::Result<Self> {
        Ok(Self {
            upstream: Upstream::new(&settings)?,
            settings,
            state: Mutex::new(ChatState::default()),
            running: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// A place for one more request (of either wire format), unless the character runs its
    /// maximum already. Taken before the body is read, so what waits in memory is bounded too.
    pub fn admit(&self) -> Result<RequestPermit, TooManyRequests> {
        let max = self.settings.max_concurrent_requests;
        self.running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .map(|_| RequestPermit(self.running.clone()))
            .map_err(|_| TooManyRequests { max })
    }

    pub fn settings(&self) -> &ChatSettings {
        &self.settings
    }

    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ChatState> {
        // Counters and a bounded store: a panic under the lock leaves nothing worth refusing.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A chat-completions request begins: its conversation with the handed-back turns put
    /// together again, and the plugins' context after it. The messages are read and put
    /// together outside the lock; under it, only the store's expiry, one lookup per assistant
    /// message that carries calls, and the used turns marked.
    pub(crate) fn begin_chat(&self, messages: Vec<Raw>, now: Instant) -> (Vec<Raw>, Restored) {
        let idle = {
            let mut state = self.state();
            state.requests += 1;
            state.turns.expire(now);
            state.turns.is_idle()
        };
        let (mut messages, restored) = if idle {
            (messages, Restored::default())
        } else {
            let replay = turns::Replay::read(&messages);
            let looked = replay.look_up(&self.state().turns);
            turns::restore(messages, replay, looked)
        };
        let mut state = self.state();
        state.turns.used(&restored.used, now);
        messages.extend(take_context(&mut state, now));
        (messages, restored)
    }

    /// A Responses API request begins: its input put together again with the kept turns it
    /// continues (and the `previous_response_id` the upstream must see), the plugins' context
    /// after it. Read and put together outside the lock, as [`Self::begin_chat`].
    pub(crate) fn begin_responses(
        &self,
        input: Vec<Raw>,
        previous: Option<String>,
        now: Instant,
    ) -> (Vec<Raw>, Option<String>, Restored) {
        let idle = {
            let mut state = self.state();
            state.requests += 1;
            state.responses += 1;
            state.responses_kept.expire(now);
            state.responses_kept.is_idle()
        };
        let (mut input, previous, restored) = if idle {
            (input, previous, Restored::default())
        } else {
            let replay = responses::kept::Replay::read(&input);
            let looked = replay.look_up(&self.state().responses_kept, previous.as_deref());
            responses::kept::restore(input, replay, looked, previous)
        };
        let mut state = self.state();
        state.responses_kept.used(&restored.used, now);
        input.extend(take_context(&mut state, now));
        (input, previous, restored)
    }

    /// Keeps a plugin's context for the next request (`POST /api/sessions/context`): at most
    /// [`MAX_KEPT_CONTEXT`] texts, none older than [`KEPT_CONTEXT_AGE`].
    pub(crate) fn add_context(&self, text: &str) {
        let mut state = self.state();
        let now = Instant::now();
        state
            .context
            .retain(|(at, _)| now.duration_since(*at) <= KEPT_CONTEXT_AGE);
        if state.context.len() == MAX_KEPT_CONTEXT {
            state.context.pop_front();
        }
        state.context.push_back((now, text.into()));
    }

    /// Whether `model` takes tools, as far as the character knows while its tool list is the
    /// one numbered `applied`. A refusal made under another list is forgotten (true, and the
    /// second value says the report changed).
    pub fn takes_tools(&self, model: &str, applied: u64) -> (bool, bool) {
        let mut state = self.state();
        match state.refusals.get(model) {
            None => (true, false),
            Some((at, _)) if *at == applied => (false, false),
            Some(_) => {
                state.refusals.shift_remove(model);
                (true, true)
            }
        }
    }

    /// `model` refused tools while the character's list was the one numbered `applied`.
    pub fn refused_tools(&self, model: &str, applied: u64, error: String) {
        let failure = ChatFailure {
            at: rfc3339_now(),
            message: error,
        };
        self.state()
            .refusals
            .insert(model.to_owned(), (applied, failure));
    }

    /// One upstream call made.
    pub fn round(&self) {
        self.state().rounds += 1;
    }

    /// `n` calls of registered tools ran.
    pub fn ran_calls(&self, n: usize) {
        self.state().calls += n as u64;
    }

    /// A request failed.
    pub fn failed(&self, message: String) {
        self.state().last_error = Some(ChatFailure {
            at: rfc3339_now(),
            message,
        });
    }

    /// The clashes of the latest request; true when they differ from the previous one's.
    pub fn clashes(&self, clashes: &[String]) -> bool {
        let mut state = self.state();
        if state.clashes == clashes {
            return false;
        }
        state.clashes = clashes.to_vec();
        true
    }

    /// Keeps a turn handed back to the app for its next request, charged to the app's
    /// connection and the turn's conversation (not one larger than the whole store: its next
    /// request goes with only the app's calls, and is logged as a miss).
    pub fn keep(&self, turn: HandedTurn, client: Option<SocketAddr>) -> Result<(), TooLarge> {
        let owner = Owner {
            client,
            conversation: turn.conversation,
        };
        self.state().turns.keep(turn, owner, Instant::now())
    }

    /// Keeps a response's turn for the app's next request (as [`Self::keep`]).
    pub fn keep_response(
        &self,
        turn: KeptResponse,
        client: Option<SocketAddr>,
    ) -> Result<(), TooLarge> {
        let owner = Owner {
            client,
            conversation: turn.conversation,
        };
        self.state()
            .responses_kept
            .keep(turn, owner, Instant::now())
    }

    /// The app got a response with this id (`POST /v1/responses`): a later request that goes
    /// on from it belongs to this character.
    pub(crate) fn issued(&self, id: &str) {
        self.state().issued.add(id);
    }

    /// Whether this character gave an app a response with this id (of the last
    /// [`responses::issued::MAX_ISSUED_IDS`]).
    pub(crate) fn has_issued(&self, id: &str) -> bool {
        self.state().issued.contains(id)
    }

    pub fn report(&self) -> ChatReport {
        let state = self.state();
        ChatReport {
            upstream: self.settings.url.clone(),
            model: self.settings.model.clone(),
            requests: state.requests,
            responses: state.responses,
            rounds: state.rounds,
            calls: state.calls,
            last_error: state.last_error.clone(),
            clashes: state.clashes.clone(),
            tools_refused: state
                .refusals
                .iter()
                .map(|(model, (_, failure))| ToolsRefused {
                    model: model.clone(),
                    at: failure.at.clone(),
                    error: failure.message.clone(),
                })
                .collect(),
            handed_turns: state.turns.len() + state.responses_kept.len(),
        }
    }
}
