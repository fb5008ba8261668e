//! Gathering the managers' answers to one change into a [`ChangeReport`], against one deadline
//! for the whole request: one timer and one poll loop, whatever the number of characters.
//!
//! A manager that died before answering is brought back (by the router, from its last snapshot
//! plus the changes it lacks, this one included) before the report is returned, so whatever the
//! caller does next — a listing, an invoke — sees the change on that character too.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use actix::Recipient;
use tokio::sync::oneshot;

use super::directory::Directory;
use crate::actors::change::{ChangeFailure, ChangeReport, RoleFailure};
use crate::actors::manager::{ChangeOutcome, ManagerGone};
use crate::domain::failures::SharedFailures;
use crate::domain::role::RoleName;

/// One target of a change: its character, the incarnation of its manager, and its answer.
pub(super) struct Target {
    pub role: RoleName,
    pub generation: u64,
    pub reply: Reply,
}

/// A manager's answer to a change: still awaited, or settled.
pub(super) enum Reply {
    Waiting(oneshot::Receiver<ChangeOutcome>),
    /// The manager answered (a register, or a removal that removed nothing, still counts as
    /// answered: only what changed counts as affected).
    Answered(ChangeOutcome),
    /// The manager stopped without answering.
    Stopped,
    /// The change did not reach the character, for this reason.
    Failed(ChangeFailure),
}

/// What the gathering needs besides the targets.
pub(super) struct Gathering {
    /// Whether the change adds tools ([`Change::adds`](crate::domain::registry::Change::adds): a
    /// register, or a replacement that lists some, changes every target it reaches).
    pub adds: bool,
    /// The deadline of the whole request, and its length for the error text.
    pub deadline: tokio::time::Instant,
    pub wait: Duration,
    /// The router, told about managers that stopped without answering.
    pub router: Recipient<ManagerGone>,
    pub directory: Directory,
    pub failures: SharedFailures,
}

/// Waits for every answer (up to the deadline), has stopped managers restarted, forgets the
/// failure counts of origins no character holds any more, and builds the report.
pub(super) async fn gather(mut targets: Vec<Target>, how: Gathering) -> ChangeReport {
    settle(&mut targets, how.deadline, how.wait).await;
    for target in &targets {
        if matches!(target.reply, Reply::Stopped) {
            // The router restarts the manager only if it is still this incarnation (a second
            // notice of the same death, from its `Drop`, is then ignored), and replays what the
            // last snapshot lacks, this change included, before it answers.
            let _ = how
                .router
                .send(ManagerGone {
                    character: target.role.to_string(),
                    generation: target.generation,
                })
                .await;
        }
    }
    if !how.failures.lock().is_empty() {
        // The tools an unregister, a clear or a replacement removed may have been the last of a
        // plugin origin that had failed once or twice.
        how.failures
            .lock()
            .forget_unheld(|source, origin| how.directory.serves(source, origin));
    }
    let mut report = ChangeReport::default();
    for Target { role, reply, .. } in targets {
        match reply {
            Reply::Answered(ChangeOutcome { removed, sync }) => {
                report.removed += removed;
                match sync {
                    Err(error) => report.failed_roles.push(RoleFailure {
                        role: role.into(),
                        error,
                    }),
                    Ok(()) if how.adds || removed > 0 => report.affected_roles.push(role),
                    Ok(()) => {}
                }
            }
            Reply::Stopped => report.failed_roles.push(RoleFailure {
                role: role.into(),
                error: ChangeFailure::Stopped,
            }),
            Reply::Failed(error) => report.failed_roles.push(RoleFailure {
                role: role.into(),
                error,
            }),
            Reply::Waiting(_) => unreachable!("settle settles every reply"),
        }
    }
    report
}

/// Waits for every reply, up to `deadline`; a manager that is late is settled with the reason.
/// One timer serves the whole fan-out, and each wake-up polls only what is still open.
async fn settle(targets: &mut [Target], deadline: tokio::time::Instant, wait: Duration) {
    let mut timer = std::pin::pin!(tokio::time::sleep_until(deadline));
    std::future::poll_fn(|cx| {
        let mut open = false;
        for target in targets.iter_mut() {
            if let Reply::Waiting(rx) = &mut target.reply {
                match Pin::new(rx).poll(cx) {
                    Poll::Ready(Ok(outcome)) => target.reply = Reply::Answered(outcome),
                    Poll::Ready(Err(_)) => target.reply = Reply::Stopped,
                    Poll::Pending => open = true,
                }
            }
        }
        if !open {
            return Poll::Ready(());
        }
        if timer.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        for target in targets.iter_mut() {
            if matches!(target.reply, Reply::Waiting(_)) {
                target.reply = Reply::Failed(ChangeFailure::NoAnswer(wait));
            }
        }
        Poll::Ready(())
    })
    .await
}
