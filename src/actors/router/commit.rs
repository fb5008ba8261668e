//! The router's side of a change's commit, when the server keeps state (`--state`): a change is
//! stored first and made after, so the store never answers 503 for a change that was made, and
//! no change it could not keep is made.
//!
//! The router decides a change as it always does — the ownership check (which may bind a
//! source), the restored tools it takes over — and hands its ops to the store with the number of
//! store failures it has learned of. The change then waits in [`Commits`], in routing order,
//! until the store answers ([`Committed`]); the changes at the front whose commit is answered
//! are then made in that order: fanned out to their characters' managers, or, for a commit that
//! failed, undone — the binding it made forgotten, the restored tools it took given back — and
//! answered with the failure. A later change's ownership check sees the changes still waiting
//! ([`Commits::waiting_for`]), as it sees the ones its managers have not confirmed.
//!
//! Why not make the change first and undo it when its commit fails: by then sessions have been
//! sent the change, and later changes to the same names have been decided and sent on top of
//! it; undoing one in the middle has no clean meaning. Waiting costs the commit's latency,
//! which the answer waited for already.
//!
//! A change decided before the router learned of a store failure may rest on a change that
//! failed (a binding, or a removal the check counted on), so the store refuses it too; the
//! router learns of failures in order, so it undoes exactly the changes that were refused.
//! A change with nothing to store still waits its turn behind those that are storing.
//!
//! The operator's unbinding of a source waits here the same way ([`Router::store_then_unbind`]):
//! the source stays bound until its `Op::Unbind` is durable, and is not freed (503) when it is
//! not. A restored tool's waking is a registration whose op ends its stored dormant time
//! (`Op::Awake`): one whose commit fails is given back dormant, its origin probed again after
//! [`PROBE_AGAIN_AFTER_NOT_STORED`].

use std::collections::VecDeque;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::oneshot;

use super::{Router, RouterError};
use crate::actors::change::ChangeReport;
use crate::domain::dormant::DormantTool;
use crate::domain::ownership::TokenHash;
use crate::domain::registry::Change;
use crate::domain::role::RoleName;
use crate::state::{Op, StateStore, StoreFailure};

/// How long restored tools that a change took stay unprobed when that change was not stored:
/// their origin may well answer at once, and the store, while it fails, tries again every
/// 5 s (`state::writer`); probing sooner would only fail another commit.
pub(super) const PROBE_AGAIN_AFTER_NOT_STORED: Duration = Duration::from_secs(5);

/// The store answered the commit of change `id`.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(super) struct Committed {
    id: u64,
    outcome: Result<(), StoreFailure>,
}

/// What a change did before it was stored, undone if it is not: the binding its registration
/// made and the restored tools it took.
#[derive(Debug, Default)]
pub(super) struct Undo {
    pub bound: Option<(String, TokenHash)>,
    pub dormant: Vec<DormantTool>,
}

/// A change's report once it is made, or why it was not.
pub(super) type Made = ResponseFuture<Result<ChangeReport, StoreFailure>>;

/// The changes decided and handed to the store, in routing order, not made yet.
#[derive(Default)]
pub(super) struct Commits {
    waiting: VecDeque<Waiting>,
    next_id: u64,
    /// The number of the last store failure the router learned of.
    seen: u64,
}

struct Waiting {
    id: u64,
    /// `None` while its commit runs.
    outcome: Option<Result<(), StoreFailure>>,
    undo: Undo,
    what: Pending,
}

/// What a waiting change makes once it is stored.
enum Pending {
    /// A tool change, fanned out to its characters.
    Change {
        /// Its characters, by name: one removed meanwhile is left out.
        roles: Vec<RoleName>,
        change: Change,
        made: oneshot::Sender<Result<ResponseFuture<ChangeReport>, StoreFailure>>,
    },
    /// The operator's unbinding of `source`.
    Unbind {
        source: String,
        done: oneshot::Sender<Result<(), RouterError>>,
    },
}

impl Commits {
    /// The changes waiting for their commit that target `role`, in order.
    pub(super) fn waiting_for<'a>(
        &'a self,
        role: &'a RoleName,
    ) -> impl Iterator<Item = &'a Change> {
        self.waiting.iter().filter_map(move |w| match &w.what {
            Pending::Change { roles, change, .. } if roles.contains(role) => Some(change),
            _ => None,
        })
    }
}

impl Router {
    /// Makes `change` on `targets` once `ops` are durable (at once without a store); a change
    /// the store could not keep is not made, and `undo` is undone.
    pub(super) fn store_then_make(
        &mut self,
        targets: Vec<usize>,
        ops: Vec<Op>,
        change: Change,
        undo: Undo,
    ) -> Made {
        let Some(store) = self.store.clone() else {
            let report = self.fan_out(targets, change);
            return Box::pin(async move { Ok(report.await) });
        };
        if ops.is_empty() && self.commits.waiting.is_empty() {
            let report = self.fan_out(targets, change);
            return Box::pin(async move { Ok(report.await) });
        }
        let (made, report) = oneshot::channel();
        let what = Pending::Change {
            roles: targets
                .iter()
                .map(|&i| self.characters[i].name.clone())
                .collect(),
            change,
            made,
        };
        self.wait_for_commit(&store, ops, undo, what);
        Box::pin(async move {
            match report.await {
                Ok(Ok(report)) => Ok(report.await),
                Ok(Err(failure)) => Err(failure),
                Err(_) => Err(StoreFailure::stopped()),
            }
        })
    }

    /// Frees the binding of `source` once its `Op::Unbind` is durable (at once without a
    /// store); a source whose unbinding the store could not keep stays bound (503).
    pub(super) fn store_then_unbind(
        &mut self,
        source: String,
        ctx: &mut Context<Self>,
    ) -> ResponseFuture<Result<(), RouterError>> {
        let Some(store) = self.store.clone() else {
            let unbound = self.unbind_now(&source, ctx).map_err(RouterError::from);
            return Box::pin(async move { unbound });
        };
        let (done, answer) = oneshot::channel();
        let ops = vec![Op::Unbind {
            source: source.clone(),
        }];
        let what = Pending::Unbind { source, done };
        self.wait_for_commit(&store, ops, Undo::default(), what);
        Box::pin(async move {
            answer
                .await
                .unwrap_or_else(|_| Err(RouterError::NotStored(StoreFailure::stopped().text)))
        })
    }

    /// Hands `ops` to the store (with a store) and queues `what` behind the changes waiting,
    /// to be made once they are durable.
    fn wait_for_commit(&mut self, store: &StateStore, ops: Vec<Op>, undo: Undo, what: Pending) {
        let id = self.commits.next_id;
        self.commits.next_id += 1;
        let stores = !ops.is_empty();
        if stores {
            let commit = store.submit_ordered(ops, self.commits.seen);
            let router = self.committed.clone();
            actix::spawn(async move {
                let outcome = commit
                    .await
                    .unwrap_or_else(|_| Err(StoreFailure::stopped()));
                router.do_send(Committed { id, outcome });
            });
        }
        self.commits.waiting.push_back(Waiting {
            id,
            // Nothing to store: ready, behind the changes before it.
            outcome: (!stores).then_some(Ok(())),
            undo,
            what,
        });
    }

    /// Makes, or undoes, the changes at the front whose commit is answered, in order.
    fn make_committed(&mut self, ctx: &mut Context<Self>) {
        while self
            .commits
            .waiting
            .front()
            .is_some_and(|w| w.outcome.is_some())
        {
            let waiting = self.commits.waiting.pop_front().expect("checked above");
            match (waiting.outcome.expect("checked above"), waiting.what) {
                (
                    Ok(()),
                    Pending::Change {
                        roles,
                        change,
                        made,
                    },
                ) => {
                    let targets = roles
                        .iter()
                        .filter_map(|role| self.position(role))
                        .collect();
                    let report = self.fan_out(targets, change);
                    // A requester that stopped waiting leaves the change made: it is stored.
                    let _ = made.send(Ok(report));
                }
                (Ok(()), Pending::Unbind { source, done }) => {
                    // Stored: an unbinding that another one beat is answered as that one's
                    // (the source has no binding to free).
                    let unbound = self.unbind_now(&source, ctx).map_err(RouterError::from);
                    let _ = done.send(unbound);
                }
                (Err(failure), what) => {
                    self.commits.seen = self.commits.seen.max(failure.number);
                    self.undo(waiting.undo, ctx);
                    match what {
                        Pending::Change { made, .. } => {
                            let _ = made.send(Err(failure));
                        }
                        Pending::Unbind { source, done } => {
                            tracing::warn!(%source, "the operator's unbinding of the source could not be stored: it stays bound");
                            let _ = done.send(Err(RouterError::NotStored(failure.text)));
                        }
                    }
                }
            }
        }
    }

    /// Undoes what a change that was not made did when it was decided.
    fn undo(&mut self, undo: Undo, ctx: &mut Context<Self>) {
        if let Some((source, token)) = undo.bound {
            self.owners
                .with(|owners| owners.undo_binding(&source, &token));
        }
        if undo.dormant.is_empty() {
            return;
        }
        // Restored tools go back to waiting, and their callbacks are probed again (a probe
        // stops once no tool waits for its origin).
        self.give_back_dormant(undo.dormant, PROBE_AGAIN_AFTER_NOT_STORED, ctx);
    }
}

impl Handler<Committed> for Router {
    type Result = ();

    fn handle(&mut self, msg: Committed, ctx: &mut Self::Context) {
        if let Some(waiting) = self.commits.waiting.iter_mut().find(|w| w.id == msg.id) {
            waiting.outcome = Some(msg.outcome);
        }
        self.make_committed(ctx);
    }
}
