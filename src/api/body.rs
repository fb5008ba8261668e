//! `JsonObject`: the request-body extractor of every POST route.
//!
//! It insists on `Content-Type: application/json`, reads at most [`MAX_BODY_BYTES`] (413 past
//! that, whether or not a `Content-Length` was sent), and requires a JSON object (422 otherwise).

use actix_web::dev::Payload;
use actix_web::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use actix_web::{FromRequest, HttpRequest};
use futures_util::StreamExt;
use futures_util::future::LocalBoxFuture;
use serde_json::{Map, Value};

use super::error::{ApiError, FieldError};

/// Largest accepted request body: tool schemas are small; 1 MiB leaves ample room.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// A request body that is a JSON object.
#[derive(Debug)]
pub struct JsonObject(pub Map<String, Value>);

impl FromRequest for JsonObject {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let checked = check_headers(req);
        let mut payload = payload.take();
        Box::pin(async move {
            checked?;
            let mut body = Vec::new();
            while let Some(chunk) = payload.next().await {
                let chunk = chunk.map_err(|e| {
                    ApiError::Validation(vec![FieldError::body(
                        "",
                        "body_incomplete",
                        format!("request body could not be read: {e}"),
                    )])
                })?;
                if body.len() + chunk.len() > MAX_BODY_BYTES {
                    return Err(ApiError::PayloadTooLarge(MAX_BODY_BYTES));
                }
                body.extend_from_slice(&chunk);
            }
            parse_object(&body).map(JsonObject)
        })
    }
}

fn check_headers(req: &HttpRequest) -> Result<(), ApiError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(ApiError::PayloadTooLarge(MAX_BODY_BYTES));
    }
    let content_type = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !is_json_content_type(content_type) {
        return Err(ApiError::Validation(vec![FieldError::body(
            "",
            "content_type",
            format!(
                "Content-Type must be application/json, got {:?}",
                content_type
            ),
        )]));
    }
    Ok(())
}

/// `application/json` or `application/<anything>+json`, with any parameters.
fn is_json_content_type(value: &str) -> bool {
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|sub| sub.ends_with("+json"))
}

/// Parses a body that must be a JSON object.
pub fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::Validation(vec![FieldError::body(
            "",
            "model_attributes_type",
            "Input should be a valid dictionary or object to extract fields from",
        )])),
        Err(e) => Err(ApiError::Validation(vec![FieldError::body(
            "",
            "json_invalid",
            format!("JSON decode error: {e}"),
        )])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        assert!(is_json_content_type("application/json"));
        assert!(is_json_content_type("Application/JSON; charset=utf-8"));
        assert!(is_json_content_type("application/vnd.api+json"));
        assert!(!is_json_content_type("text/plain"));
        assert!(!is_json_content_type(""));
        assert!(!is_json_content_type("application/jsonx"));
    }

    #[test]
    fn only_objects() {
        assert!(parse_object(br#"{"a":1}"#).is_ok());
        for bad in [
            &b"[1]"[..],
            b"null",
            b"\"x\"",
            b"{",
            b"",
            b"\xff\xfe",
            b"1e400",
        ] {
            assert!(
                matches!(parse_object(bad), Err(ApiError::Validation(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn deep_nesting_is_refused_not_a_crash() {
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(
            parse_object(deep.as_bytes()),
            Err(ApiError::Validation(_))
        ));
    }
}
