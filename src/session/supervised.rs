//! What both of the server's own sessions — `RealtimeSession` (`client.rs`) and
//! `GeminiSession` (`live/client.rs`) — do around their connection, whatever they speak on it:
//! supervised, each connects as it starts and sends the current tools first; a connection that
//! fails or ends stops the actor, and its supervisor starts it again, which connects after a
//! capped exponential backoff; `CloseSession` closes it for good. An actor says what differs
//! through [`Reconnecting`]; [`reconnecting_actor!`](crate::reconnecting_actor) writes its
//! `Actor`, `Supervised` and `CloseSession` implementations.

use std::time::Duration;

use actix::prelude::*;
use awc::ws;
use futures_util::future::LocalBoxFuture;

use super::ConnectionState;
use super::shell::{self, Shell};
use super::wire::UpstreamSocket;

/// First reconnect delay; doubled per failed attempt up to [`MAX_BACKOFF`].
pub(crate) const INITIAL_BACKOFF: Duration = Duration::from_millis(250);

/// Longest reconnect delay: a provider outage is retried at least twice a minute.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The wait before reconnect attempt `attempt` (1 is the first after a failure): doubled per
/// attempt from [`INITIAL_BACKOFF`], at most [`MAX_BACKOFF`].
pub(crate) fn backoff(attempt: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
    INITIAL_BACKOFF.saturating_mul(factor).min(MAX_BACKOFF)
}

/// Where a supervised session stands between its connections.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Reconnects {
    /// Failed connection attempts in a row (drives the backoff).
    attempt: u32,
    /// Closed for good: it does not connect again.
    closing: bool,
}

impl Reconnects {
    /// The connection works: the next failure waits the shortest backoff again.
    pub(crate) fn succeeded(&mut self) {
        self.attempt = 0;
    }
}

/// A session the server opens itself and keeps open.
pub(crate) trait Reconnecting: Shell + actix::Supervised {
    /// What its log lines call it.
    const NAME: &'static str;

    fn reconnects(&mut self) -> &mut Reconnects;

    /// Opens its connection to the model.
    fn dial(&mut self) -> LocalBoxFuture<'static, Result<UpstreamSocket, String>>;

    /// Connection `id` is up and in use; the current tools go next.
    fn on_connected(&mut self, id: u64, ctx: &mut Context<Self>) {
        let _ = (id, ctx);
        self.reconnects().succeeded();
    }

    /// The connection could not be opened.
    fn dial_failed(&mut self) {}

    /// The actor stopped: what it keeps about its connections is let go.
    fn let_go(&mut self) {}
}

/// Starts a supervised session.
pub(crate) fn launch<A: Reconnecting>(session: A) -> Addr<A> {
    Supervisor::start(|ctx: &mut Context<A>| {
        // An unbounded mailbox never parks the manager that sends it tool lists.
        ctx.set_mailbox_capacity(0);
        session
    })
}

/// The actor (re)started: it connects, at once the first time, after the backoff later.
pub(crate) fn started<A: Reconnecting>(act: &mut A, ctx: &mut Context<A>) {
    let Reconnects { attempt, closing } = *act.reconnects();
    if closing {
        return;
    }
    if attempt == 0 {
        // A new session starts out connecting: say so, as every later state is said.
        act.link().core.announce();
        connect(act, ctx);
    } else {
        act.link().core.set_state(ConnectionState::Backoff);
        ctx.run_later(backoff(attempt), connect);
    }
}

fn connect<A: Reconnecting>(act: &mut A, ctx: &mut Context<A>) {
    act.link().core.set_state(ConnectionState::Connecting);
    let dialing = act.dial().into_actor(act).map(|result, act, ctx| match result {
        Ok(socket) => {
            let id = act.link().connected(socket, ctx);
            tracing::info!(character = %act.link().core.character(), session = A::NAME, "model session connected");
            act.on_connected(id, ctx);
            // Nobody else talks in this conversation: the tools go at once.
            act.link().core.sync_now();
            shell::run_effects(act, ctx);
        }
        Err(error) => {
            let core = &act.link().core;
            tracing::warn!(character = %core.character(), session = A::NAME, url = %core.upstream(), %error, "model session connection failed");
            act.dial_failed();
            ctx.stop();
        }
    });
    ctx.spawn(dialing);
}

/// The actor stopped: its connections, timers and calls went with its context.
pub(crate) fn stopped<A: Reconnecting>(act: &mut A) {
    let closing = act.reconnects().closing;
    let character = act.link().core.character().to_owned();
    if closing {
        tracing::debug!(%character, session = A::NAME, "model session closed");
    } else if act.link().core.state() == ConnectionState::Connected {
        tracing::warn!(%character, session = A::NAME, "model session disconnected");
    }
    act.let_go();
    // Closed for good (the character was removed or rebuilt): nothing to announce.
    if !closing {
        act.link().core.set_state(ConnectionState::Backoff);
    }
    act.link().gone();
}

/// The supervisor starts the actor again after a failure.
pub(crate) fn restarting<A: Reconnecting>(act: &mut A) {
    let reconnects = act.reconnects();
    reconnects.attempt = reconnects.attempt.saturating_add(1);
}

/// [`CloseSession`](super::CloseSession): closed for good; the reply comes when the session is
/// gone.
pub(crate) fn close<A: Reconnecting>(act: &mut A, ctx: &mut Context<A>) -> ResponseFuture<()> {
    act.reconnects().closing = true;
    shell::close_upstream(act, Some(ws::CloseCode::Normal.into()), ctx);
    act.link().closed()
}

/// The `Actor`, `Supervised` and `CloseSession` implementations of a [`Reconnecting`] actor,
/// the same for each. A macro, since actix's traits cannot be implemented once for every such
/// actor.
#[macro_export]
#[doc(hidden)]
macro_rules! reconnecting_actor {
    ($actor:ty) => {
        impl ::actix::Actor for $actor {
            type Context = ::actix::Context<Self>;

            fn started(&mut self, ctx: &mut Self::Context) {
                $crate::session::supervised::started(self, ctx);
            }

            fn stopped(&mut self, _: &mut Self::Context) {
                $crate::session::supervised::stopped(self);
            }
        }

        impl ::actix::Supervised for $actor {
            fn restarting(&mut self, _: &mut Self::Context) {
                $crate::session::supervised::restarting(self);
            }
        }

        impl ::actix::Handler<$crate::session::CloseSession> for $actor {
            type Result = ::actix::ResponseFuture<()>;

            fn handle(
                &mut self,
                _: $crate::session::CloseSession,
                ctx: &mut Self::Context,
            ) -> Self::Result {
                $crate::session::supervised::close(self, ctx)
            }
        }
    };
}
