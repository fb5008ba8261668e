//! `PluginToken`: the `X-Plugin-Token` header of a change, read and hashed before anything else
//! sees it (`domain::ownership`). A header that is not 16 to 256 visible ASCII characters (or is
//! sent twice) is a 422 naming the header; its text is never repeated, logged or kept.

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest};
use futures_util::future::{Ready, ready};

use super::error::{ApiError, FieldError};
use crate::domain::ownership::{TOKEN_HEADER, TokenHash};

/// The hash of the request's `X-Plugin-Token`, if it sent one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PluginToken(pub Option<TokenHash>);

impl FromRequest for PluginToken {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(read(req).map(PluginToken))
    }
}

fn read(req: &HttpRequest) -> Result<Option<TokenHash>, ApiError> {
    let mut values = req.headers().get_all(TOKEN_HEADER);
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let refused = |msg: String| {
        ApiError::Validation(vec![FieldError {
            loc: vec!["header".into(), "X-Plugin-Token".into()],
            msg: format!("X-Plugin-Token {msg}"),
            kind: "value_error",
        }])
    };
    if values.next().is_some() {
        return Err(refused("must be sent once".into()));
    }
    TokenHash::from_header(value.as_bytes())
        .map(Some)
        .map_err(refused)
}
