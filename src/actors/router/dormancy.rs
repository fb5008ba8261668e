//! The tools restored from the state store: dormant (listed, given to no model) until their
//! callback's origin accepts a TCP connection — probed as the router starts, then with a
//! growing backoff — when they become registrations like any other (announced as
//! `tools.changed` with op `restored`); a plugin that registers one again, unregisters it or
//! clears its source takes it over or removes it (`routing`). Those still dormant when the
//! configured time is up are removed, from the store too, as an auto-removal.

use actix::prelude::*;

use super::Router;
use super::commit::Undo;
use super::routing::Subject;
use crate::dispatch::probe;
use crate::domain::callback_url::{CallbackOrigin, CallbackUrl};
use crate::domain::dormant::{FIRST_PROBE_BACKOFF, next_backoff};
use crate::domain::registry::Change;
use crate::events::ChangeOp;
use crate::state::Op;

/// A probe found the callback origin of restored tools listening: they become registrations.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(super) struct OriginListening(pub CallbackOrigin);

/// Whether restored tools still wait for this origin (a probe goes on only while some do).
#[derive(Message, Debug)]
#[rtype(result = "bool")]
pub(super) struct StillDormant(pub CallbackOrigin);

/// The dormant tools' time is up.
#[derive(Message, Debug)]
#[rtype(result = "()")]
struct DormantExpired;

impl Router {
    /// Starts a probe for each origin the restored tools wait for, and the timer that removes
    /// those still dormant at the end.
    pub(super) fn watch_dormant(&mut self, ctx: &mut Context<Self>) {
        if self.dormant.is_empty() {
            return;
        }
        tracing::info!(
            dormant = self.dormant.len(),
            "restored tools are dormant until their callbacks accept connections"
        );
        self.publish_roster();
        self.probe(self.dormant.origins(), ctx);
        let wait = self
            .dormant
            .deadline()
            .saturating_duration_since(std::time::Instant::now());
        ctx.notify_later(DormantExpired, wait);
    }

    /// Probes each of `urls`' origins until it accepts a connection or no restored tool waits
    /// for it any more.
    pub(super) fn probe(&self, urls: Vec<CallbackUrl>, ctx: &mut Context<Self>) {
        for url in urls {
            ctx.spawn(actix::fut::wrap_future(probe_until_back(
                url,
                ctx.address(),
            )));
        }
    }
}

/// Probes `url`'s origin until it accepts a connection (and tells the router) or no restored
/// tool waits for it any more.
async fn probe_until_back(url: CallbackUrl, router: Addr<Router>) {
    let origin = url.origin().clone();
    let mut backoff = FIRST_PROBE_BACKOFF;
    loop {
        if probe(url.url()).await.is_ok() {
            let _ = router.send(OriginListening(origin)).await;
            return;
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

impl Handler<OriginListening> for Router {
    type Result = ();

    fn handle(&mut self, OriginListening(origin): OriginListening, ctx: &mut Self::Context) {
        let back = self.dormant.take_origin(&origin);
        if back.is_empty() {
            return;
        }
        tracing::info!(origin = %origin, tools = back.len(), "restored tools' callback accepts connections: given to the models");
        for restored in back {
            let Some(i) = self.position(&restored.character) else {
                continue;
            };
            let change = Change::Register(restored.tool);
            let mut subject = Subject::of(&change);
            subject.op = ChangeOp::Restored;
            // Already in the store: nothing to write.
            let undo = Undo::default();
            let routed = self.route_to(vec![i], Vec::new(), change, Vec::new(), subject, undo);
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

    fn handle(&mut self, _: DormantExpired, _: &mut Self::Context) {
        let expired = self.dormant.take_expired(std::time::Instant::now());
        if expired.is_empty() {
            return;
        }
        self.publish_roster();
        for gone in expired {
            // An MCP server's row is the MCP registry's to remove (its own time is up too).
            if !gone.mcp {
                let op = Op::Unregister {
                    characters: vec![gone.character.clone()],
                    name: gone.tool.name.clone(),
                };
                // A failure is logged by the store; the tool is gone from this run either way.
                drop(self.journal(op));
            }
            tracing::warn!(
                character = %gone.character,
                name = %gone.tool.name,
                source = %gone.tool.source,
                origin = ?gone.tool.callback_origin().map(ToString::to_string),
                "removed a restored tool whose callback never accepted a connection"
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
    }
}
