//! `JsonObject`: the request-body extractor of every POST route (`JsonObjectText` keeps the text
//! too, for the invoke route).
//!
//! It insists on `Content-Type: application/json`, reads at most [`MAX_BODY_BYTES`] (413 past
//! that, whether or not a `Content-Length` was sent), requires the whole body within
//! [`BODY_READ_TIMEOUT`] (408 otherwise), and requires a JSON object (422 otherwise).

use std::time::Duration;

use actix_web::dev::Payload;
use actix_web::error::PayloadError;
use actix_web::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use actix_web::{FromRequest, HttpRequest};
use bytes::Bytes;
use futures_util::future::LocalBoxFuture;
use futures_util::{FutureExt, StreamExt};
use serde_json::map::Entry;
use serde_json::{Map, Value};

use super::error::{ApiError, FieldError};
use crate::domain::json_text::JsonStr;

/// Largest accepted request body: tool schemas are small; 1 MiB leaves ample room.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Longest a request body may take to arrive. actix-web bounds only the request head
/// (`client_request_timeout`); without this a client that sends a head and then trickles (or
/// never finishes) its body would hold a connection and a handler forever. A 1 MiB body on
/// loopback arrives in milliseconds; 10 s leaves room for a plugin stalled on a busy machine.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A request body that is a JSON object.
#[derive(Debug)]
pub(crate) struct JsonObject(pub Map<String, Value>);

/// A request body that is a JSON object, with the text it was parsed from (for a route that
/// passes part of it on exactly as the client wrote it).
#[derive(Debug)]
pub(crate) struct JsonObjectText {
    pub object: Map<String, Value>,
    pub text: Vec<u8>,
}

impl FromRequest for JsonObject {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let body = read_body(req, payload, MAX_BODY_BYTES);
        Box::pin(async move { parse_object(&body.await?).map(JsonObject) })
    }
}

impl FromRequest for JsonObjectText {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let body = read_body(req, payload, MAX_BODY_BYTES);
        Box::pin(async move {
            let text = body.await?;
            let object = parse_object(&text)?;
            Ok(JsonObjectText { object, text })
        })
    }
}

/// The whole body, within `limit` bytes and the time limit, once the headers pass (a JSON
/// content type, a declared length within the limit).
pub(crate) fn read_body(
    req: &HttpRequest,
    payload: &mut Payload,
    limit: usize,
) -> impl std::future::Future<Output = Result<Vec<u8>, ApiError>> + 'static {
    let checked = check_headers(req, limit);
    let mut payload = payload.take();
    async move {
        checked?;
        let mut body = Vec::new();
        // A small body usually arrives with the request's head: what is there already is taken
        // without arming the timer.
        loop {
            match payload.next().now_or_never() {
                Some(Some(chunk)) => append(&mut body, chunk, limit)?,
                Some(None) => return Ok(body),
                None => break,
            }
        }
        let rest = async {
            while let Some(chunk) = payload.next().await {
                append(&mut body, chunk, limit)?;
            }
            Ok(body)
        };
        actix_web::rt::time::timeout(BODY_READ_TIMEOUT, rest)
            .await
            .map_err(|_| ApiError::RequestTimeout(BODY_READ_TIMEOUT.as_secs()))?
    }
}

/// Adds one chunk of the body, within the size limit.
fn append(
    body: &mut Vec<u8>,
    chunk: Result<Bytes, PayloadError>,
    limit: usize,
) -> Result<(), ApiError> {
    let chunk = chunk.map_err(|e| {
        ApiError::Validation(vec![FieldError::body(
            "",
            "body_incomplete",
            format!("request body could not be read: {e}"),
        )])
    })?;
    if body.len() + chunk.len() > limit {
        return Err(ApiError::PayloadTooLarge(limit));
    }
    body.extend_from_slice(&chunk);
    Ok(())
}

fn check_headers(req: &HttpRequest, limit: usize) -> Result<(), ApiError> {
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::PayloadTooLarge(limit));
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
pub(crate) fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<UniqueKeys>(body) {
        Ok(UniqueKeys(Value::Object(map))) => Ok(map),
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

/// A JSON value in which no object repeats a key, at any depth. JSON parsers disagree about
/// `{"name": "a", "name": "b"}` (first wins, last wins, or an error), so a body that a plugin,
/// a proxy or a log reads one way could be registered another: it is refused instead.
struct UniqueKeys(Value);

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(UniqueKeysVisitor)
            .map(UniqueKeys)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(UniqueKeys(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // One lookup: the key's slot is found (or refused) before its value is read.
            match object.entry(key) {
                Entry::Occupied(taken) => {
                    return Err(serde::de::Error::custom(format_args!(
                        "duplicate key {:?}",
                        taken.key()
                    )));
                }
                Entry::Vacant(slot) => {
                    let UniqueKeys(value) = map.next_value()?;
                    slot.insert(value);
                }
            }
        }
        Ok(Value::Object(object))
    }
}

/// Refuses a JSON body that repeats a key in any object (the reason, with where), as
/// [`parse_object`] does, for the routes that keep the body as text (the chat routes): only
/// the keys of the object being read are held, never the values. A body that is not JSON
/// passes, for the route's own parser to name the problem.
pub(crate) fn refuse_duplicate_keys(body: &[u8]) -> Result<(), String> {
    match serde_json::from_slice::<KeysOnce>(body) {
        Err(e) if e.classify() == serde_json::error::Category::Data => Err(e.to_string()),
        _ => Ok(()),
    }
}

/// Any JSON value whose objects each name a key once; nothing of it is kept.
struct KeysOnce;

impl<'de> serde::Deserialize<'de> for KeysOnce {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KeysOnceVisitor)
    }
}

struct KeysOnceVisitor;

impl<'de> serde::de::Visitor<'de> for KeysOnceVisitor {
    type Value = KeysOnce;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<KeysOnce, E> {
        Ok(KeysOnce)
    }

    fn visit_i64<E>(self, _: i64) -> Result<KeysOnce, E> {
        Ok(KeysOnce)
    }

    fn visit_u64<E>(self, _: u64) -> Result<KeysOnce, E> {
        Ok(KeysOnce)
    }

    fn visit_f64<E>(self, _: f64) -> Result<KeysOnce, E> {
        Ok(KeysOnce)
    }

    fn visit_str<E>(self, _: &str) -> Result<KeysOnce, E> {
        Ok(KeysOnce)
    }

    fn visit_unit<E>(self) -> Result<KeysOnce, E> {
        Ok(KeysOnce)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<KeysOnce, A::Error> {
        while seq.next_element::<KeysOnce>()?.is_some() {}
        Ok(KeysOnce)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<KeysOnce, A::Error> {
        // Most objects have a few keys: compared one by one until there are many.
        const FEW: usize = 16;
        let mut few: Vec<std::borrow::Cow<'de, str>> = Vec::new();
        let mut many = std::collections::HashSet::new();
        while let Some(JsonStr(key)) = map.next_key::<JsonStr<'de>>()? {
            let seen = if many.is_empty() {
                few.contains(&key)
            } else {
                many.contains(&key)
            };
            if seen {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate key {key:?}"
                )));
            }
            map.next_value::<KeysOnce>()?;
            if !many.is_empty() {
                many.insert(key);
            } else if few.len() < FEW {
                few.push(key);
            } else {
                many.extend(few.drain(..));
                many.insert(key);
            }
        }
        Ok(KeysOnce)
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use actix_web::test::TestRequest;

    use super::*;

    fn json_request() -> HttpRequest {
        TestRequest::default()
            .insert_header((CONTENT_TYPE, "application/json"))
            .to_http_request()
    }

    /// A request body fed by hand: each chunk as it would arrive from the socket.
    fn body_of(chunks: &[&'static [u8]], eof: bool) -> Payload {
        let (mut sender, payload) = actix_http::h1::Payload::create(false);
        for chunk in chunks {
            sender.feed_data(Bytes::from_static(chunk));
        }
        if eof {
            sender.feed_eof();
        }
        Payload::from(payload)
    }

    // No runtime here: arming the read deadline would panic, and a body that is all there
    // already never needs it.
    #[test]
    fn a_body_already_arrived_is_read_at_once() {
        let mut payload = body_of(&[b"{\"a\":", b"1}"], true);
        let body = read_body(&json_request(), &mut payload, MAX_BODY_BYTES).now_or_never();
        assert_eq!(body.expect("ready without waiting").unwrap(), b"{\"a\":1}");
    }

    #[test]
    fn a_body_already_arrived_still_has_the_size_limit() {
        static HALF: [u8; MAX_BODY_BYTES / 2 + 1] = [b' '; MAX_BODY_BYTES / 2 + 1];
        let mut payload = body_of(&[&HALF, &HALF], true);
        let body = read_body(&json_request(), &mut payload, MAX_BODY_BYTES).now_or_never();
        assert!(matches!(
            body.expect("refused without waiting"),
            Err(ApiError::PayloadTooLarge(MAX_BODY_BYTES))
        ));
    }

    #[actix_web::test]
    async fn the_rest_of_a_body_is_awaited() {
        let (mut sender, payload) = actix_http::h1::Payload::create(false);
        sender.feed_data(Bytes::from_static(b"{\"a\":"));
        let mut payload = Payload::from(payload);
        let mut read = pin!(read_body(&json_request(), &mut payload, MAX_BODY_BYTES));
        assert!(read.as_mut().now_or_never().is_none());
        sender.feed_data(Bytes::from_static(b"[1, 2]}"));
        assert!(read.as_mut().now_or_never().is_none());
        sender.feed_eof();
        assert_eq!(read.await.unwrap(), b"{\"a\":[1, 2]}");
    }

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
    fn duplicate_keys_are_refused_at_any_depth() {
        let error = |body: &str| match parse_object(body.as_bytes()) {
            Err(ApiError::Validation(errors)) => errors[0].msg.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            error(r#"{"name": "a", "name": "b"}"#),
            "JSON decode error: duplicate key \"name\" at line 1 column 20"
        );
        assert!(error(r#"{"p": [{"x": 1, "x": 1}]}"#).contains("duplicate key \"x\""));
        let same = parse_object(br#"{"a": {"b": [1, 2.5, -3, null, true, "s"]}, "c": {}}"#);
        assert_eq!(
            Value::Object(same.unwrap()),
            serde_json::json!({"a": {"b": [1, 2.5, -3, null, true, "s"]}, "c": {}})
        );
    }

    #[test]
    fn duplicate_keys_of_a_kept_body_are_found_at_any_depth() {
        assert_eq!(
            refuse_duplicate_keys(br#"{"model": "a", "model": "b"}"#),
            Err("duplicate key \"model\" at line 1 column 22".to_owned())
        );
        let nested = br#"{"messages": [{"role": "user", "content": "x", "role": "system"}]}"#;
        assert!(
            refuse_duplicate_keys(nested)
                .unwrap_err()
                .contains("\"role\"")
        );
        // Past the keys compared one by one, and at the switch.
        for repeated in [3, 16, 17, 30] {
            let keys: Vec<String> = (0..30).map(|i| format!("\"k{i}\": {i}")).collect();
            let body = format!("{{{}, \"k{repeated}\": 0}}", keys.join(", "));
            let found = refuse_duplicate_keys(body.as_bytes()).map_err(|e| e.contains("k"));
            if repeated < 30 {
                assert_eq!(found, Err(true), "{body}");
            } else {
                assert_eq!(found, Ok(()), "{body}");
            }
        }
        let escaped = br#"{"a\u0062": 1, "ab": 2}"#;
        assert!(
            refuse_duplicate_keys(escaped).is_err(),
            "the same key, written otherwise"
        );
        assert_eq!(
            refuse_duplicate_keys(br#"{"a": {"b": 1}, "b": [{"a": 1}]}"#),
            Ok(())
        );
        assert_eq!(
            refuse_duplicate_keys(b"not json"),
            Ok(()),
            "left to the route's parser"
        );
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
