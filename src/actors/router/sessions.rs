//! The sessions a character holds besides its own client connection: an app's relay resolved
//! to its character and joined as one of that character's active sessions, an application's
//! in-process session joined the same way, live calls attached and detached (the character's
//! settings, which the router holds, decide the call's host and the key sent with it), and every
//! relay and attachment closed when the server stops. The character's manager holds them all;
//! the router only finds the manager.

use actix::prelude::*;
use futures_util::future::join_all;

use super::{Character, MANAGER_REPLY_TIMEOUT, Router, RouterError};
use crate::actors::manager::{
    AddSession, AttachmentsFull, CloseConnections, JoinCall, LeaveCall, SessionManager,
};
use crate::domain::call_url::CallUrl;
use crate::session::SessionHandle;
use crate::session::attach::Joined;
use crate::session::settings::{
    DEFAULT_MAX_ATTACHMENTS, SessionProtocol, SessionSettings, attach_key,
};
use crate::session::shell::MODEL_CONNECT_TIMEOUT;

/// The character an app's relay serves and how its model is reached: `character`, or (for
/// `None`) the only character that has a session.
#[derive(Message, Debug)]
#[rtype(result = "Result<RelayTarget, RouterError>")]
pub struct ResolveRelay {
    pub character: Option<String>,
    /// The protocol the relay speaks; a character whose session speaks another is refused.
    pub protocol: SessionProtocol,
}

/// Make `session` one of `role`'s active sessions (a relay, or an application's in-process
/// session): from now on every change to the character's tools is sent to it and waits for
/// it. It gets the current tool list at once, before this is answered. It stays until it
/// stops.
#[derive(Message, Debug)]
#[rtype(result = "Result<(), RouterError>")]
pub struct JoinSession {
    pub role: String,
    pub session: SessionHandle,
}

/// Join the live call at `url` for `role`; see [`Joined`]. The character's configuration
/// decides whether it may: the hosts, the key, how many calls at once.
#[derive(Message, Debug)]
#[rtype(result = "Result<Joined, RouterError>")]
pub struct AttachCall {
    pub role: String,
    pub url: CallUrl,
    /// The variable whose key is sent as `Authorization: Bearer <key>`: one the character's
    /// configuration allows, or none.
    pub api_key_env: Option<String>,
}

/// Leave the live call at `url` that `role` joined; `true` if it had.
#[derive(Message, Debug)]
#[rtype(result = "Result<bool, RouterError>")]
pub struct DetachCall {
    pub role: String,
    pub url: String,
}

/// Where a relay goes.
#[derive(Debug, Clone)]
pub struct RelayTarget {
    pub character: String,
    pub settings: SessionSettings,
}

/// Close every character's relays (their apps get 1001 "going away") and attachments: the
/// server is stopping. Answers once every one of them is gone, its close frames sent (or its
/// manager did not answer in time). From then on [`JoinSession`] and `AttachCall` are refused
/// ([`RouterError::Stopping`]).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct CloseAllConnections;

impl Handler<ResolveRelay> for Router {
    type Result = Result<RelayTarget, RouterError>;

    fn handle(&mut self, msg: ResolveRelay, _: &mut Self::Context) -> Self::Result {
        let character = match msg.character.filter(|c| !c.is_empty()) {
            Some(name) => {
                let i = self
                    .position(&name)
                    .ok_or_else(|| RouterError::UnknownRole(name.clone()))?;
                &self.characters[i]
            }
            None => {
                let with: Vec<&Character> = self
                    .characters
                    .iter()
                    .filter(|c| {
                        c.session
                            .as_ref()
                            .is_some_and(|s| s.protocol == msg.protocol)
                    })
                    .collect();
                match with.as_slice() {
                    [only] => *only,
                    _ => {
                        return Err(RouterError::CharacterRequired(
                            with.iter().map(|c| c.name.to_string()).collect(),
                        ));
                    }
                }
            }
        };
        let settings = character
            .session
            .clone()
            .ok_or_else(|| RouterError::NoSession(character.name.to_string()))?;
        if settings.protocol != msg.protocol {
            return Err(RouterError::OtherProtocol {
                character: character.name.to_string(),
                protocol: settings.protocol.name(),
                relay: msg.protocol,
            });
        }
        Ok(RelayTarget {
            character: character.name.to_string(),
            settings,
        })
    }
}

impl Router {
    /// Sends `message` to `role`'s manager and waits up to `wait` (`None`: the manager's
    /// default) for its answer.
    fn ask_manager<M>(
        &self,
        role: String,
        wait: Option<std::time::Duration>,
        message: M,
    ) -> ResponseFuture<Result<M::Result, RouterError>>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        SessionManager: Handler<M>,
    {
        let Some(i) = self.position(&role) else {
            return Box::pin(async move { Err(RouterError::UnknownRole(role)) });
        };
        let character = &self.characters[i];
        let answer = character
            .manager
            .send(message)
            .timeout(wait.unwrap_or(MANAGER_REPLY_TIMEOUT));
        Box::pin(async move {
            answer
                .await
                .map_err(|_| RouterError::ManagerUnavailable(role))
        })
    }
}

impl Handler<JoinSession> for Router {
    type Result = ResponseFuture<Result<(), RouterError>>;

    fn handle(&mut self, msg: JoinSession, _: &mut Self::Context) -> Self::Result {
        if self.stopping {
            return Box::pin(async { Err(RouterError::Stopping) });
        }
        self.ask_manager(msg.role, None, AddSession(msg.session))
    }
}

impl Handler<AttachCall> for Router {
    type Result = ResponseFuture<Result<Joined, RouterError>>;

    fn handle(&mut self, msg: AttachCall, _: &mut Self::Context) -> Self::Result {
        if self.stopping {
            return Box::pin(async { Err(RouterError::Stopping) });
        }
        let Some(i) = self.position(&msg.role) else {
            return Box::pin(async move { Err(RouterError::UnknownRole(msg.role)) });
        };
        let character = &self.characters[i];
        let session = character.session.as_ref();
        if let Some(s) = session.filter(|s| s.protocol != SessionProtocol::OpenaiRealtime) {
            let refusal = RouterError::AttachRefused {
                field: "role",
                reason: format!(
                    "character {}'s session is {}: attach joins openai-realtime calls only",
                    character.name,
                    s.protocol.name()
                ),
            };
            return Box::pin(async move { Err(refusal) });
        }
        let api_key = match attach_key(session, &msg.url, msg.api_key_env.as_deref()) {
            Ok(key) => key,
            Err(refusal) => {
                return Box::pin(async move {
                    Err(RouterError::AttachRefused {
                        field: refusal.field,
                        reason: refusal.reason,
                    })
                });
            }
        };
        // The manager bounds the handshake and the first tool update to this, less the margin.
        let wait = MODEL_CONNECT_TIMEOUT + character.reply_timeout();
        let join = JoinCall {
            url: msg.url.as_written().to_owned(),
            api_key,
            max: session.map_or(DEFAULT_MAX_ATTACHMENTS, |s| s.attach.max_attachments),
        };
        let role = msg.role;
        let joined = self.ask_manager(role.clone(), Some(wait), join);
        Box::pin(async move {
            joined
                .await?
                .map_err(|AttachmentsFull(max)| RouterError::TooManyAttachments {
                    character: role,
                    max,
                })
        })
    }
}

impl Handler<DetachCall> for Router {
    type Result = ResponseFuture<Result<bool, RouterError>>;

    fn handle(&mut self, msg: DetachCall, _: &mut Self::Context) -> Self::Result {
        self.ask_manager(msg.role, None, LeaveCall { url: msg.url })
    }
}

impl Handler<CloseAllConnections> for Router {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: CloseAllConnections, _: &mut Self::Context) -> Self::Result {
        // A join sent to a manager before this reaches it before its `CloseConnections` (one
        // mailbox, in order), so it is closed with the others; every later one is refused.
        self.stopping = true;
        let closed: Vec<_> = self
            .characters
            .iter()
            .map(|c| {
                c.manager
                    .send(CloseConnections)
                    .timeout(MANAGER_REPLY_TIMEOUT)
            })
            .collect();
        Box::pin(async move {
            join_all(closed).await;
        })
    }
}
