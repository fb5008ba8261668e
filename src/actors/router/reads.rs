//! Reads through the router's in-process API: listings and lookups come from the published
//! snapshots (the [`Directory`]), never from a manager round trip, so a busy or restarting
//! manager never blocks a read; sessions are asked of each manager.

use actix::prelude::*;
use futures_util::future::join_all;

use super::directory::{Directory, ResolvedTool, RoleTools};
use super::{MANAGER_REPLY_TIMEOUT, Router, RouterError};
use crate::actors::manager::ReportSession;
use crate::actors::manager::SessionReport;

/// The tools of one character or of every character, in configuration order.
#[derive(Message, Debug)]
#[rtype(result = "Result<Vec<RoleTools>, RouterError>")]
pub struct ListTools {
    pub role: Option<String>,
}

/// Find the tool a call names: in `role`, or (for `None`) in the first character, in
/// configuration order, that has it.
#[derive(Message, Debug)]
#[rtype(result = "Result<ResolvedTool, RouterError>")]
pub struct ResolveTool {
    pub name: String,
    pub role: Option<String>,
}

/// The characters, in configuration order.
#[derive(Message, Debug)]
#[rtype(result = "Vec<String>")]
pub struct ListCharacters;

/// Each character's model-session state, in configuration order.
#[derive(Message, Debug)]
#[rtype(result = "Vec<(String, SessionReport)>")]
pub struct ListSessions;

/// A read handle on every character's published tools, for callers that read on their own
/// thread (the HTTP listing and the invoke route) instead of asking the router each time.
#[derive(Message, Debug)]
#[rtype(result = "Directory")]
pub struct ShareDirectory;

impl Handler<ListTools> for Router {
    type Result = Result<Vec<RoleTools>, RouterError>;

    fn handle(&mut self, msg: ListTools, _: &mut Self::Context) -> Self::Result {
        self.directory.list(msg.role.as_deref())
    }
}

impl Handler<ResolveTool> for Router {
    type Result = Result<ResolvedTool, RouterError>;

    fn handle(&mut self, msg: ResolveTool, _: &mut Self::Context) -> Self::Result {
        self.directory.resolve(msg.role.as_deref(), &msg.name)
    }
}

impl Handler<ShareDirectory> for Router {
    type Result = MessageResult<ShareDirectory>;

    fn handle(&mut self, _: ShareDirectory, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.directory.clone())
    }
}

impl Handler<ListCharacters> for Router {
    type Result = Vec<String>;

    fn handle(&mut self, _: ListCharacters, _: &mut Self::Context) -> Self::Result {
        self.characters.iter().map(|c| c.name.to_string()).collect()
    }
}

impl Handler<ListSessions> for Router {
    type Result = ResponseFuture<Vec<(String, SessionReport)>>;

    fn handle(&mut self, _: ListSessions, _: &mut Self::Context) -> Self::Result {
        let reports: Vec<_> = self
            .characters
            .iter()
            .map(|c| {
                let role = c.name.to_string();
                let reply = c.manager.send(ReportSession).timeout(MANAGER_REPLY_TIMEOUT);
                let chat = c.chat.as_ref().map(|chat| chat.report());
                async move {
                    let mut report = reply.await.unwrap_or_else(|_| SessionReport::none());
                    report.chat = chat;
                    (role, report)
                }
            })
            .collect();
        Box::pin(join_all(reports))
    }
}
