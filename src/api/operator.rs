//! The operator routes' check: `Authorization: Bearer TOKEN` with the person's token
//! (`domain::operator`). A route that acts for the person takes [`AsOperator`] as its first
//! extractor, naming its act (an [`OperatorAct`]), so the check comes before its body is read:
//! 401 without the header, 403 with any other value — a plugin's token included. The answer
//! says where the token is found, never the token. `[security] decisions = "loopback"` waives
//! the check for deciding an approval only.

use std::marker::PhantomData;

use actix_web::dev::Payload;
use actix_web::http::header::AUTHORIZATION;
use actix_web::{FromRequest, HttpRequest, web};
use futures_util::future::{Ready, ready};

use super::AppState;
use super::error::ApiError;
use crate::domain::operator::{Decisions, OperatorToken};

/// An act only the operator may do: what its errors call it, and whether the configuration
/// lets any loopback caller do it.
pub(crate) trait OperatorAct {
    /// The act, as an error begins: "deciding an approval".
    const WHAT: &'static str;

    /// Whether `decisions` lets any loopback caller do it.
    fn waived(_decisions: Decisions) -> bool {
        false
    }
}

/// Deciding an approval (`POST /api/approvals/{id}`).
pub(crate) struct Decide;

impl OperatorAct for Decide {
    const WHAT: &'static str = "deciding an approval";

    fn waived(decisions: Decisions) -> bool {
        decisions == Decisions::Loopback
    }
}

/// Proof that the request carries the operator token (or that its act is waived).
pub(crate) struct AsOperator<A>(PhantomData<A>);

impl<A: OperatorAct> FromRequest for AsOperator<A> {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let Some(state) = req.app_data::<web::Data<AppState>>() else {
            return ready(Err(ApiError::Internal("no application state".into())));
        };
        let operator = &state.operator;
        ready(if A::waived(operator.decisions) {
            Ok(Self(PhantomData))
        } else {
            operator.require(req, A::WHAT).map(|()| Self(PhantomData))
        })
    }
}

/// The scheme the token travels in (RFC 6750), compared without regard to case as RFC 9110 says
/// of every authentication scheme.
const BEARER: &str = "bearer ";

/// The operator's credential and the rule for decisions, shared by the handlers.
#[derive(Debug, Clone)]
pub(crate) struct Operator {
    token: OperatorToken,
    decisions: Decisions,
}

impl Operator {
    pub(crate) fn new(token: OperatorToken, decisions: Decisions) -> Self {
        Self { token, decisions }
    }

    /// Who may decide an approval (`GET /api/health` says it, for the inspector).
    pub(crate) fn decisions(&self) -> Decisions {
        self.decisions
    }

    /// Whether `req` carries the operator token; `what` names the act in the error ("deciding
    /// an approval").
    pub(crate) fn require(&self, req: &HttpRequest, what: &str) -> Result<(), ApiError> {
        let where_to_find = self.token.where_to_find();
        let mut values = req.headers().get_all(AUTHORIZATION);
        let presented = match (values.next(), values.next()) {
            (Some(value), None) => bearer(value.as_bytes()),
            (Some(_), Some(_)) => {
                return Err(ApiError::Forbidden(format!(
                    "{what} needs the operator token once: the Authorization header was sent \
                     twice"
                )));
            }
            (None, _) => None,
        };
        let Some(presented) = presented else {
            return Err(ApiError::Unauthorized(format!(
                "{what} needs the operator token: {where_to_find}"
            )));
        };
        if self.token.matches(presented) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(format!(
                "{what} needs the operator token, and the bearer token sent is not it (a \
                 plugin's token is not the operator's): {where_to_find}"
            )))
        }
    }
}

/// The credentials of a `Bearer` value, or `None` for another scheme or an empty one.
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(BEARER.len())?;
    if !scheme.eq_ignore_ascii_case(BEARER.as_bytes()) {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_value_gives_its_token() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"BEARER abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Basic YWJj"), None);
        assert_eq!(bearer(b"Bearerabc"), None);
        assert_eq!(bearer(b""), None);
    }
}
