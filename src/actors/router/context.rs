//! A plugin's context for the conversation (`POST /api/sessions/context`): the text goes to
//! each live session of the character (or of every character), through its manager, and to a
//! character's text chat, which keeps it for its next request. Answered like a change: the
//! characters that took it, and those that could not, with why.

use actix::prelude::*;
use futures_util::future::join_all;

use super::{MANAGER_REPLY_TIMEOUT, Router, RouterError};
use crate::actors::change::{ChangeFailure, ChangeReport, RoleFailure};
use crate::actors::manager::TellSessions;
use crate::session::AddContext;

/// Tell the live sessions of `role` (`None`: of every character that has one) the context.
#[derive(Message, Debug)]
#[rtype(result = "Result<ChangeReport, RouterError>")]
pub(crate) struct AddContextTo {
    pub role: Option<String>,
    pub context: AddContext,
}

impl Handler<AddContextTo> for Router {
    type Result = ResponseFuture<Result<ChangeReport, RouterError>>;

    fn handle(&mut self, msg: AddContextTo, _: &mut Self::Context) -> Self::Result {
        let every = msg.role.is_none();
        let targets: Vec<_> = match &msg.role {
            Some(role) => match self.characters.iter().find(|c| c.name == role.as_str()) {
                Some(c) => vec![c],
                None => {
                    let role = role.clone();
                    return Box::pin(async move { Err(RouterError::UnknownRole(role)) });
                }
            },
            None => self.characters.iter().collect(),
        };
        let told: Vec<_> = targets
            .into_iter()
            .map(|c| {
                let role = c.name.clone();
                let chat_kept = c
                    .chat
                    .as_ref()
                    .map(|chat| chat.add_context(&msg.context.text));
                let reply = c
                    .manager
                    .send(TellSessions(msg.context.clone()))
                    .timeout(MANAGER_REPLY_TIMEOUT);
                async move {
                    let sessions = match reply.await {
                        Ok(outcome) => outcome,
                        Err(_) => Err(ChangeFailure::NoAnswer(MANAGER_REPLY_TIMEOUT)),
                    };
                    (role, chat_kept.is_some(), sessions)
                }
            })
            .collect();
        Box::pin(async move {
            let mut report = ChangeReport::default();
            for (role, chat_kept, sessions) in join_all(told).await {
                match sessions {
                    Ok(()) => report.affected_roles.push(role),
                    Err(_) if chat_kept => report.affected_roles.push(role),
                    // Every character was asked: one without a live session is no failure.
                    Err(ChangeFailure::NoLiveSession) if every => {}
                    Err(error) => report.failed_roles.push(RoleFailure {
                        role: role.to_string(),
                        error,
                    }),
                }
            }
            Ok(report)
        })
    }
}
