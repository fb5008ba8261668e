//! The tools restored from the state store: dormant (listed, given to no model) until they
//! wake, when they become registrations like any other (announced as `tools.changed` with op
//! `restored`); a plugin that registers one again, unregisters it or clears its source takes it
//! over or removes it (`routing`). Those still dormant when their time is up — counted from when
//! they went dormant, across restarts — are removed, from the store too, as an auto-removal.
//!
//! What wakes one (`domain::dormant`): for a source bound to a token, its owner first proves
//! itself — a change carrying the token, or [`WakeSource`] (`POST /api/sources/{source}/wake`)
//! — and then its callback's origin answers HTTP; for an unbound source, the HTTP answer alone.
//! One probe task per origin that a released tool waits for sends a `HEAD` with a growing
//! backoff (`dispatch::answers_http`). The MCP registry is told when a source's restored tools
//! may wake ([`SourceMayWake`]): its restored servers follow the same rule. The operator's
//! [`UnbindSource`] frees a binding made at run time, which also lets its restored tools wake
//! as an unbound source's.
//!
//! With a state store, a waking and an unbinding are stored first and made after, like every
//! change (`commit`): a tool wakes once its `Op::Awake` is durable (if it is not, the tool stays
//! dormant and its origin is probed again later), and an unbinding is made, and answered, once
//! its `Op::Unbind` is (if it is not, the source stays bound and the operator gets 503).

use std::time::{Duration, SystemTime};

use actix::prelude::*;

use super::commit::Undo;
use super::routing::Subject;
use super::{Router, RouterError};
use crate::dispatch::answers_http;
use crate::domain::callback_url::{CallbackOrigin, CallbackUrl};
use crate::domain::dormant::DormantTool;
use crate::domain::dormant::{FIRST_PROBE_BACKOFF, next_backoff};
use crate::domain::ownership::{Credential, TokenHash, UnbindError};
use crate::domain::registry::Change;
use crate::events::ChangeOp;
use crate::state::Op;

/// A plugin proves it owns `source` (its `X-Plugin-Token`) and lets the source's restored tools
/// wake: `POST /api/sources/{source}/wake`. Answers how many tools it released.
#[derive(Message, Debug)]
#[rtype(result = "Result<usize, RouterError>")]
pub(crate) struct WakeSource {
    pub source: String,
    pub token: Option<TokenHash>,
}

/// Free the binding of `source` made at run time (the operator's
/// `DELETE /api/sources/{source}/binding`); answered once the store keeps it, when the server
/// keeps state.
#[derive(Message, Debug)]
#[rtype(result = "Result<(), RouterError>")]
pub(crate) struct UnbindSource {
    pub source: String,
}

/// The restored tools of `source` may wake from now on (its owner proved itself, or its binding
/// was freed): told to whoever watches wakes (the MCP registry, whose restored servers of that
/// source wait for it).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct SourceMayWake {
    pub source: String,
}

/// From now on, tell `0` whenever a source's restored tools may wake ([`SourceMayWake`]).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct WatchWakes(pub Recipient<SourceMayWake>);

/// A probe found the callback origin of restored tools answering HTTP: those that may wake
/// become registrations.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(super) struct OriginAnswered(pub CallbackOrigin);

/// Whether restored tools that may wake still wait for this origin (a probe goes on only while
/// some do).
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub(super) struct StillDormant(pub CallbackOrigin);

/// The next dormant tool's time is up.
#[derive(Message, Debug)]
#[rtype(result = "()")]
struct DormantExpired;

impl Router {
    /// Removes the restored tools whose time was up before this start, starts a probe for each
    /// origin the others may wake from, and the timer that removes those still dormant at the
    /// end.
    pub(super) fn watch_dormant(&mut self, ctx: &mut Context<Self>) {
        if self.dormant.is_empty() {
            return;
        }
        tracing::info!(
            dormant = self.dormant.len(),
            "restored tools are dormant until they wake (a bound source's after its owner's \
             token is seen again)"
        );
        self.expire_dormant(ctx);
        self.publish_roster();
        self.probe_dormant(Duration::ZERO, ctx);
    }

    /// Starts a probe, its first try `after` from now, for each origin that a tool that may
    /// wake waits for and none probes yet.
    fn probe_dormant(&mut self, after: Duration, ctx: &mut Context<Self>) {
        for url in self.dormant.start_probing() {
            ctx.spawn(actix::fut::wrap_future(probe_until_back(
                url,
                after,
                ctx.address(),
            )));
        }
    }

    /// Puts back restored tools that a change took and that change was not made (the state
    /// store could not keep it): dormant again, with the time they went dormant, their origins
    /// probed again from `after` on.
    pub(super) fn give_back_dormant(
        &mut self,
        tools: Vec<DormantTool>,
        after: Duration,
        ctx: &mut Context<Self>,
    ) {
        self.dormant.give_back(tools);
        self.publish_roster();
        self.probe_dormant(after, ctx);
        self.schedule_expiry(ctx);
    }

    /// The restored tools of `source` may wake from now on; how many were waiting for their
    /// owner.
    fn release(&mut self, source: &str, ctx: &mut Context<Self>) -> usize {
        let released = self.dormant.release(source);
        if released > 0 {
            tracing::info!(%source, tools = released, "restored tools may wake: their callback's HTTP answer gives them to the models");
            self.probe_dormant(Duration::ZERO, ctx);
        }
        if let Some(watcher) = &self.wake_watcher {
            // Low rate (a wake, an unbinding, a plugin's first change after a restart).
            watcher.do_send(SourceMayWake {
                source: source.to_owned(),
            });
        }
        released
    }

    /// A change of `who` to `sources` passed the token rule: the sources its token is bound to
    /// have their owner back, so their restored tools may wake.
    pub(super) fn owner_seen(
        &mut self,
        who: Credential,
        sources: &[&str],
        ctx: &mut Context<Self>,
    ) {
        for source in self.owners.with(|owners| owners.owned_by(who, sources)) {
            self.release(&source, ctx);
        }
    }

    /// Removes the dormant tools whose time is up (from the store too), and sets the timer for
    /// the next.
    fn expire_dormant(&mut self, ctx: &mut Context<Self>) {
        let expired = self.dormant.take_expired(SystemTime::now());
        if !expired.is_empty() {
            self.publish_roster();
        }
        for gone in expired {
            // An MCP server's row is the MCP registry's to remove (its own time is up too).
            if !gone.mcp {
                let op = Op::Unregister {
                    characters: vec![gone.character.clone()],
                    name: gone.tool.name.clone(),
                };
                // Not stored first: a removal that fails is made all the same, since the
                // stored dormant time removes the tool at the next start too (and refusing it
                // would only fire this timer again at once).
                drop(self.journal(op));
            }
            tracing::warn!(
                character = %gone.character,
                name = %gone.tool.name,
                source = %gone.tool.source,
                origin = ?gone.tool.callback_origin().map(ToString::to_string),
                waited_for_owner = gone.awaits_owner,
                "removed a restored tool that did not wake within the dormant time"
            );
            let subject = Subject {
                op: ChangeOp::AutoRemoved,
                name: Some(gone.tool.name.clone()),
                source: Some(gone.tool.source.clone()),
            };
            let report = crate::actors::change::ChangeReport {
                affected_roles: vec![gone.character.as_str().into()],
                failed_roles: Vec::new(),
                removed: 1,
            };
            subject.announce(&self.events, &report);
        }
        self.schedule_expiry(ctx);
    }

    /// Sets the timer for the next dormant tool's time, in place of the one set before (a
    /// timer that finds nothing expired only sets the next one).
    fn schedule_expiry(&mut self, ctx: &mut Context<Self>) {
        // One timer at a time: tools given back would otherwise start a second one.
        if let Some(timer) = self.expiry_timer.take() {
            ctx.cancel_future(timer);
        }
        if let Some(next) = self.dormant.next_deadline() {
            let wait = next.duration_since(SystemTime::now()).unwrap_or_default();
            self.expiry_timer = Some(ctx.notify_later(DormantExpired, wait));
        }
    }

    /// Whether the server knows `source`: a binding, or a tool (dormant or not) of it.
    fn knows_source(&self, source: &str) -> bool {
        self.owners.with(|owners| owners.is_bound(source))
            || self.dormant.holds_source(source)
            || self.directory.list(None).is_ok_and(|roster| {
                roster
                    .iter()
                    .any(|r| r.tools.tools().any(|t| t.source == source))
            })
    }
}

/// Probes `url`'s origin, from `after` on, until it answers HTTP (and tells the router) or no
/// restored tool that may wake waits for it any more.
async fn probe_until_back(url: CallbackUrl, after: Duration, router: Addr<Router>) {
    let origin = url.origin().clone();
    let mut backoff = FIRST_PROBE_BACKOFF;
    if !after.is_zero() {
        tokio::time::sleep(after).await;
    }
    loop {
        match answers_http(&url).await {
            Ok(status) => {
                tracing::debug!(origin = %origin, status, "a restored tool's callback origin answers HTTP");
                let _ = router.send(OriginAnswered(origin)).await;
                return;
            }
            Err(e) => {
                tracing::debug!(origin = %origin, error = %e, "a restored tool's callback origin does not answer yet");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = next_backoff(backoff);
        if !router
            .send(StillDormant(origin.clone()))
            .await
            .unwrap_or(false)
        {
            return;
        }
    }
}

impl Handler<OriginAnswered> for Router {
    type Result = ();

    fn handle(&mut self, OriginAnswered(origin): OriginAnswered, ctx: &mut Self::Context) {
        self.dormant.stop_probing(&origin);
        let back = self.dormant.take_origin(&origin);
        if back.is_empty() {
            return;
        }
        tracing::info!(origin = %origin, tools = back.len(), "restored tools' callback answers HTTP: given to the models");
        for restored in back {
            let Some(i) = self.position(&restored.character) else {
                continue;
            };
            let change = Change::Register(restored.tool.clone());
            let mut subject = Subject::of(&change);
            subject.op = ChangeOp::Restored;
            // Its record is in the store already; its dormant time ends with this commit, and
            // a tool whose end is not stored stays dormant (given back by the undo).
            let awake = Op::Awake {
                tools: vec![(restored.character.clone(), restored.tool.name.clone())],
            };
            let undo = Undo {
                dormant: vec![restored],
                ..Undo::default()
            };
            let routed = self.route_to(vec![i], Vec::new(), change, vec![awake], subject, undo);
            ctx.spawn(actix::fut::wrap_future(async move {
                let _ = routed.await;
            }));
        }
        self.publish_roster();
    }
}

impl Handler<StillDormant> for Router {
    type Result = bool;

    fn handle(&mut self, StillDormant(origin): StillDormant, _: &mut Self::Context) -> bool {
        self.dormant.waits_for(&origin)
    }
}

impl Handler<DormantExpired> for Router {
    type Result = ();

    fn handle(&mut self, _: DormantExpired, ctx: &mut Self::Context) {
        self.expire_dormant(ctx);
    }
}

impl Handler<WakeSource> for Router {
    type Result = Result<usize, RouterError>;

    fn handle(&mut self, msg: WakeSource, ctx: &mut Self::Context) -> Self::Result {
        if !self.knows_source(&msg.source) {
            return Err(RouterError::UnknownSource(msg.source));
        }
        self.owners
            .with(|owners| owners.may_wake(msg.token, &msg.source))?;
        Ok(self.release(&msg.source, ctx))
    }
}

impl Handler<UnbindSource> for Router {
    type Result = ResponseFuture<Result<(), RouterError>>;

    fn handle(&mut self, msg: UnbindSource, ctx: &mut Self::Context) -> Self::Result {
        if let Err(e) = self.owners.with(|owners| owners.may_unbind(&msg.source)) {
            return Box::pin(async move { Err(RouterError::Unbind(e)) });
        }
        self.store_then_unbind(msg.source, ctx)
    }
}

impl Router {
    /// Makes the operator's unbinding of `source` (its commit durable, with a store): an error
    /// when another unbinding freed it meanwhile.
    pub(super) fn unbind_now(
        &mut self,
        source: &str,
        ctx: &mut Context<Self>,
    ) -> Result<(), UnbindError> {
        self.owners.with(|owners| owners.unbind(source))?;
        tracing::warn!(%source, "the operator freed the source's binding: the next registration with a token binds it");
        // Unbound now: its restored tools go to whoever answers on their callback's origin.
        self.release(source, ctx);
        Ok(())
    }
}

impl Handler<WatchWakes> for Router {
    type Result = ();

    fn handle(&mut self, WatchWakes(watcher): WatchWakes, _: &mut Self::Context) {
        self.wake_watcher = Some(watcher);
    }
}
