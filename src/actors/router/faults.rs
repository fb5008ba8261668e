//! Fault injection for the containment tests: a manager that panics, a router that stops.

use actix::prelude::*;

use super::{Router, RouterError};
use crate::actors::manager::InjectPanic;

/// Fault injection for tests of panic containment: makes a character's manager panic.
#[doc(hidden)]
#[derive(Message, Debug)]
#[rtype(result = "Result<(), RouterError>")]
pub struct InjectManagerPanic {
    pub role: String,
}

/// Fault injection for tests of the 503 path: stops the router, as a panic in it would.
#[doc(hidden)]
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct InjectRouterStop;

impl Handler<InjectManagerPanic> for Router {
    type Result = Result<(), RouterError>;

    fn handle(&mut self, msg: InjectManagerPanic, _: &mut Self::Context) -> Self::Result {
        let i = self
            .position(&msg.role)
            .ok_or(RouterError::UnknownRole(msg.role))?;
        self.characters[i].manager.do_send(InjectPanic);
        Ok(())
    }
}

impl Handler<InjectRouterStop> for Router {
    type Result = ();

    fn handle(&mut self, _: InjectRouterStop, ctx: &mut Self::Context) {
        ctx.stop();
    }
}
