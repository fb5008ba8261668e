//! `Attachment`: a second websocket to a live call the app started elsewhere — a browser over
//! WebRTC or a phone line over SIP — joined with `POST /api/sessions/attach` (OpenAI's GA
//! Realtime API accepts `wss://…/v1/realtime?call_id=…` for this).
//!
//! It reads the call's tools from the session's own events (`session.created`, then every
//! `session.updated` it did not ask for) before it sends its update, so the app's tools are
//! kept, and puts the registered tools back when the app's own update leaves them out; it
//! answers the calls of registered tools and leaves the app's to the app. It ends when the call
//! ends (the socket closes) or on detach; it does not reconnect.

use actix::io::WriteHandler;
use actix::prelude::*;
use awc::error::WsProtocolError;
use awc::ws::{self, Frame};
use tokio::sync::oneshot;

use super::core::{ForeignTool, Seen, SessionCore, SyncError};
use super::realtime::{self, Realtime};
use super::settings::SessionSettings;
use super::shell::{self, Link, Shell, Whole};
use super::wire::FromUpstream;
use super::{CloseSession, ConnectionState};
use crate::dispatch::Dispatcher;
use crate::domain::connection::ConnectionKind;
use crate::events::EventHub;
use crate::policy::Policy;
use crate::session::CharacterTools;

/// How joining a call went: `Err` when the websocket could not be opened, otherwise the outcome
/// of the first tool update (`Err` says why the call did not take the tools).
pub type Joined = Result<Result<(), SyncError>, JoinError>;

/// Why no websocket to the call was opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    /// The handshake failed (the websocket client's own words).
    #[error("{0}")]
    Connect(String),
    #[error("the attachment ended before it connected")]
    Ended,
}

pub(crate) struct Attachment {
    link: Link,
    authorization: Option<String>,
    /// Who waits for the join, until it is settled.
    joined: Option<oneshot::Sender<Joined>>,
    /// A close frame was sent: the call's answer ends the attachment.
    closing: bool,
}

impl Attachment {
    /// Joins the call at `url` for `character`; the receiver hears how it went. Its state and
    /// the calls it answers are announced on `events`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch(
        character: String,
        settings: &SessionSettings,
        url: String,
        api_key: Option<String>,
        dispatcher: Dispatcher,
        events: EventHub,
        policy: Policy,
        tools: CharacterTools,
    ) -> (Addr<Self>, oneshot::Receiver<Joined>) {
        let (joined, outcome) = oneshot::channel();
        // The app updates the call's session over its own connection too: an acknowledgement
        // that matches nothing awaited here is the app's.
        let core = SessionCore::new(
            character,
            ConnectionKind::Attach,
            Box::new(Realtime(settings.dialect)),
            url,
            settings,
            events,
            policy,
            tools,
            true,
        );
        let attachment = Attachment {
            link: Link::new(core, dispatcher),
            authorization: api_key.as_deref().map(shell::bearer),
            joined: Some(joined),
            closing: false,
        };
        let addr = Attachment::create(|ctx| {
            ctx.set_mailbox_capacity(0);
            attachment
        });
        (addr, outcome)
    }
}

/// The call's session described itself: its tools, less the ones the server put there, are
/// the app's (a session that lists no tools as it starts has none), and its settings are kept.
/// The first description lets the waiting update go. When an update of the app's left the
/// registered tools out, they are put back.
fn learn(core: &mut SessionCore, text: &str, started: bool, tools: Option<Vec<ForeignTool>>) {
    let tools = if started {
        Some(tools.unwrap_or_default())
    } else {
        tools
    };
    let settings = realtime::session_settings(text);
    let present: Vec<String> = tools.iter().flatten().map(|t| t.name.clone()).collect();
    match tools {
        Some(tools) => {
            let ours: Vec<&str> = core
                .sent_registered()
                .iter()
                .map(|t| t.name.as_str())
                .collect();
            let own = tools
                .into_iter()
                .filter(|t| !ours.contains(&t.name.as_str()))
                .collect();
            core.described(own, settings);
        }
        None => {
            if let Some(settings) = settings {
                core.described_settings(settings);
            }
        }
    }
    if !started
        && core
            .sent_registered()
            .iter()
            .any(|t| !present.contains(&t.name))
    {
        core.resend();
    }
}

impl Shell for Attachment {
    fn link(&mut self) -> &mut Link {
        &mut self.link
    }

    fn upstream(&mut self, item: FromUpstream, ctx: &mut Context<Self>) {
        self.call_frame(item, ctx);
    }
}

impl Actor for Attachment {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // It starts out connecting: say so, as every later state is said.
        self.link.core.announce();
        let url = self.link.core.upstream().to_owned();
        let authorization = self.authorization.clone();
        ctx.spawn(
            async move { shell::connect(&url, authorization.as_deref()).await }
                .into_actor(self)
                .map(|result, act, ctx| match result {
                    Ok(framed) => {
                        tracing::info!(character = %act.link.core.character(), url = %act.link.core.upstream(), "attached to a call");
                        let (first, settled) = oneshot::channel();
                        act.link.connected(framed, ctx);
                        // The call's session says which tools it has first, so the app's are
                        // kept.
                        let timeout = act.link.core.sync_timeout();
                        act.link
                            .core
                            .hold_until_described(Some(first), SyncError::NotDescribed(timeout));
                        shell::run_effects(act, ctx);
                        if let Some(joined) = act.joined.take() {
                            actix::spawn(async move {
                                let outcome = settled.await.unwrap_or(Err(SyncError::Closed));
                                let _ = joined.send(Ok(outcome));
                            });
                        }
                    }
                    Err(error) => {
                        if let Some(joined) = act.joined.take() {
                            let _ = joined.send(Err(JoinError::Connect(error)));
                        }
                        ctx.stop();
                    }
                }),
        );
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        tracing::info!(character = %self.link.core.character(), url = %self.link.core.upstream(), "attachment ended");
        // Its running calls go with it, announced before it says it closed.
        self.link.gone();
        self.link.core.set_state(ConnectionState::Closed);
    }
}

impl WriteHandler<WsProtocolError> for Attachment {
    fn error(&mut self, err: WsProtocolError, _: &mut Self::Context) -> Running {
        tracing::warn!(character = %self.link.core.character(), error = %err, "attachment write failed");
        Running::Stop
    }
}

impl Attachment {
    /// A frame of the call's, or the end of its connection.
    fn call_frame(&mut self, item: FromUpstream, ctx: &mut Context<Self>) {
        let frame = match item {
            FromUpstream::Frame(_, frame) => frame,
            FromUpstream::Ended(_) => {
                ctx.stop();
                return;
            }
        };
        let whole = match frame {
            Ok(Frame::Text(bytes)) => shell::text_of(bytes).map(|t| Some(Whole::Text(t))),
            // A broken fragmented message is a protocol error, as in the client: the attachment
            // ends rather than buffer what the call sends.
            Ok(Frame::Continuation(item)) => match self.link.fragments.push(item) {
                Err(error) => {
                    tracing::warn!(character = %self.link.core.character(), %error, "attachment protocol error");
                    ctx.stop();
                    return;
                }
                whole => whole,
            },
            Ok(Frame::Ping(payload)) => {
                shell::send_upstream(self, ws::Message::Pong(payload), ctx);
                Ok(None)
            }
            Ok(Frame::Binary(_) | Frame::Pong(_)) => Ok(None),
            Ok(Frame::Close(reason)) => {
                tracing::debug!(character = %self.link.core.character(), ?reason, "the call ended");
                if self.closing {
                    ctx.stop();
                } else {
                    self.closing = true;
                    shell::close_upstream(self, reason, ctx);
                }
                return;
            }
            Err(e) => {
                tracing::warn!(character = %self.link.core.character(), error = %e, "attachment protocol error");
                ctx.stop();
                return;
            }
        };
        match whole {
            Ok(Some(Whole::Text(text))) => {
                let character = self.link.core.character().to_owned();
                match self.link.core.on_upstream(&text) {
                    Seen::Described { started, tools } => {
                        learn(&mut self.link.core, &text, started, tools)
                    }
                    Seen::Error { message, event_id } => {
                        tracing::warn!(%character, error = %message, event_id = ?event_id, "model session reported an error");
                    }
                    Seen::Unreadable(e) => {
                        tracing::warn!(%character, error = %e, "ignoring a malformed event from the model session");
                    }
                    Seen::Pass | Seen::Ours => {}
                }
                shell::run_effects(self, ctx);
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(character = %self.link.core.character(), %error, "ignoring a malformed message from the call");
            }
        }
    }
}

crate::session_handlers!(Attachment);

impl Handler<CloseSession> for Attachment {
    type Result = ResponseFuture<()>;

    /// The reply comes when the attachment is gone.
    fn handle(&mut self, _: CloseSession, ctx: &mut Self::Context) -> Self::Result {
        if !self.closing {
            self.closing = true;
            shell::close_upstream(self, Some(ws::CloseCode::Normal.into()), ctx);
        }
        self.link.closed()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::domain::tool::test_tools;
    use crate::events::{EventHub, EventSettings};
    use crate::session::core::Effect;
    use crate::session::settings::Dialect;

    /// What the attachment sends upstream since the last look, as JSON.
    fn sent(core: &mut SessionCore) -> Vec<Value> {
        core.take_effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::Upstream(text) => Some(serde_json::from_str(&text).unwrap()),
                _ => None,
            })
            .collect()
    }

    fn names(update: &Value) -> Vec<&str> {
        update["session"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect()
    }

    /// A frame of the call's, as the attachment reads it.
    fn from_call(core: &mut SessionCore, text: &str) {
        if let Seen::Described { started, tools } = core.on_upstream(text) {
            learn(core, text, started, tools);
        }
    }

    fn updated(names: &[&str]) -> String {
        let tools: Vec<Value> = names
            .iter()
            .map(|n| json!({"type": "function", "name": n}))
            .collect();
        json!({"type": "session.updated", "session": {"type": "realtime", "tools": tools}})
            .to_string()
    }

    #[test]
    fn an_attachment_waits_for_the_calls_tools_and_keeps_them() {
        let url = "ws://127.0.0.1:9/v1/realtime?call_id=c";
        let settings = SessionSettings::new(url, Dialect::Openai);
        let mut core = SessionCore::new(
            "Mio".into(),
            ConnectionKind::Attach,
            Box::new(Realtime(Dialect::Openai)),
            url.into(),
            &settings,
            EventHub::new(&EventSettings::default()),
            Policy::new(EventHub::new(&EventSettings::default())),
            CharacterTools::listed(test_tools(&["lookup"]).into()),
            true,
        );
        let (w, mut rx) = oneshot::channel();
        core.connected();
        core.hold_until_described(Some(w), SyncError::NotDescribed(settings.sync_timeout));
        assert!(
            sent(&mut core).is_empty(),
            "nothing before the session describes itself"
        );
        let created = json!({"type": "session.created", "session": {"type": "realtime",
            "tool_choice": "required", "tools": [{"type": "function", "name": "app_tool"}]}});
        from_call(&mut core, &created.to_string());
        let update = sent(&mut core).remove(0);
        assert_eq!(names(&update), ["app_tool", "lookup"]);
        assert_eq!(update["session"]["tool_choice"], "required");
        from_call(&mut core, &updated(&["app_tool", "lookup"]));
        assert_eq!(rx.try_recv().unwrap(), Ok(()));

        // The app replaces its tools over its own connection, leaving ours out: put back.
        from_call(&mut core, &updated(&["app_tool_2"]));
        let again = sent(&mut core).remove(0);
        assert_eq!(names(&again), ["app_tool_2", "lookup"]);
    }

    #[test]
    fn a_call_that_never_says_which_tools_it_has_fails_the_first_update_with_the_reason() {
        let url = "ws://127.0.0.1:9/v1/realtime?call_id=c";
        let settings = SessionSettings::new(url, Dialect::Openai);
        let mut core = SessionCore::new(
            "Mio".into(),
            ConnectionKind::Attach,
            Box::new(Realtime(Dialect::Openai)),
            url.into(),
            &settings,
            EventHub::new(&EventSettings::default()),
            Policy::new(EventHub::new(&EventSettings::default())),
            CharacterTools::listed(test_tools(&["lookup"]).into()),
            true,
        );
        let (w, mut rx) = oneshot::channel();
        core.connected();
        core.hold_until_described(Some(w), SyncError::NotDescribed(settings.sync_timeout));
        let Some(Effect::ArmSyncTimer(version)) = core.take_effects().pop() else {
            panic!("the wait is bounded by the sync timer")
        };
        core.sync_timer_fired(version);
        assert_eq!(
            rx.try_recv().unwrap().unwrap_err().to_string(),
            "the call's session did not say which tools it has (no session.created or \
             session.updated within 5 s); the tools were not sent, so the app's are kept"
        );
    }
}
