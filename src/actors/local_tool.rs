//! In-process tools: an actor of an in-process plugin handles [`CallLocalTool`] and is registered
//! as a tool through the router like any other.
//!
//! ```ignore
//! let handler = local_handler(my_actor.start().recipient());
//! let parameters = Parameters::new(schema)?; // checked and compiled like a registration's
//! let tool = ToolSpec::local("roll_dice", "Roll a die.", parameters, "inproc:dice", handler);
//! router.send(RegisterTool { tool, role: None }).await?;
//! ```

use actix::prelude::*;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use crate::domain::call::{LocalHandler, LocalToolHandler, ToolCall, ToolOutcome};

/// Runs one call of an in-process tool. Reply `Ok(output)` or `Err(error text for the model)`.
#[derive(Message, Debug)]
#[rtype(result = "ToolOutcome")]
pub struct CallLocalTool(pub ToolCall);

struct RecipientHandler(Recipient<CallLocalTool>);

impl LocalHandler for RecipientHandler {
    fn call(&self, call: ToolCall) -> BoxFuture<'static, ToolOutcome> {
        let name = call.name.clone();
        self.0
            .send(CallLocalTool(call))
            .map(move |reply| {
                reply.unwrap_or_else(|e| match e {
                    MailboxError::Closed => Err(format!(
                        "in-process tool '{name}' stopped before answering (it may have panicked)"
                    )),
                    MailboxError::Timeout => {
                        Err(format!("in-process tool '{name}' did not answer in time"))
                    }
                })
            })
            .boxed()
    }
}

/// Makes an actor's recipient the handler of an in-process tool.
pub fn local_handler(recipient: Recipient<CallLocalTool>) -> LocalToolHandler {
    LocalToolHandler(std::sync::Arc::new(RecipientHandler(recipient)))
}
