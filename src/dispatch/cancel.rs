//! Calls that can be cancelled while they run. A session runs each call of its model's with
//! [`Dispatcher::dispatch_cancellable`] and keeps the call's [`CallCanceller`]; when the person
//! interrupts, cancelling drops the call's dispatch at once. What dropping does depends on the
//! tool: a callback's exchange gives its slot back and closes its connection (the plugin sees
//! the close before it has answered), an MCP server's call sends `notifications/cancelled`, an
//! in-process tool's future is dropped.

use std::future::Future;
use std::pin::pin;

use futures_util::future::{Either, select};
use tokio::sync::oneshot;

use super::Dispatcher;
use crate::domain::call::{ToolCall, ToolResult};
use crate::domain::tool::SharedTool;

/// Cancels one running call (see [`Dispatcher::dispatch_cancellable`]). Dropping it without
/// cancelling lets the call run to its end.
#[derive(Debug)]
pub struct CallCanceller(oneshot::Sender<()>);

impl CallCanceller {
    /// Stops the call: its dispatch is dropped the next time its task runs, which the
    /// cancellation wakes at once.
    pub fn cancel(self) {
        let _ = self.0.send(());
    }
}

impl Dispatcher {
    /// [`Dispatcher::dispatch`], with a handle that stops it: the future gives `Some(result)`
    /// when the call finished, `None` when it was cancelled first (and then no result of the
    /// call's ever comes).
    pub fn dispatch_cancellable(
        &self,
        tool: SharedTool,
        call: ToolCall,
    ) -> (
        CallCanceller,
        impl Future<Output = Option<ToolResult>> + 'static,
    ) {
        let dispatcher = self.clone();
        Self::cancellable(async move { dispatcher.dispatch(&tool, call).await })
    }

    /// `work` (a call's run), with a handle that stops it, as [`Dispatcher::dispatch_cancellable`].
    pub fn cancellable(
        work: impl Future<Output = ToolResult> + 'static,
    ) -> (
        CallCanceller,
        impl Future<Output = Option<ToolResult>> + 'static,
    ) {
        let (cancel, cancelled) = oneshot::channel();
        let run = async move {
            let work = pin!(work);
            // A canceller dropped unused never cancels.
            let cancelled = pin!(async {
                if cancelled.await.is_err() {
                    std::future::pending::<()>().await;
                }
            });
            // Cancelled, the dispatch is dropped as this block returns, in the same poll: the
            // callback's connection closes then, not when the session next looks.
            match select(work, cancelled).await {
                Either::Left((result, _)) => Some(result),
                Either::Right(_) => None,
            }
        };
        (CallCanceller(cancel), run)
    }
}
