//! The operator token: the credential of the person at the machine, as Jupyter's token is.
//!
//! Plugins hold tokens of their own (`domain::ownership`), and any local process can reach the
//! API, so a route that acts for the person — deciding an approval, freeing a source's binding —
//! needs a credential no plugin has. The server holds exactly one: from the environment variable
//! `[security] operator_token_env` names, or, without it, 128 random bits made at each start and
//! printed once, on standard output, in the inspector's address (`#token=`). The token is held
//! like the server's other keys (`domain::secrets`), so it is redacted from every log line and
//! peer text; no type here prints it, and nothing stores it.

use std::fmt;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Fewer characters than this is too easy to guess for the person's credential (the same bound
/// as a plugin's token).
pub(crate) const MIN_OPERATOR_TOKEN_LEN: usize = crate::domain::ownership::MIN_TOKEN_LEN;

/// More than this is not a token but a payload (the same bound as a plugin's token).
pub(crate) const MAX_OPERATOR_TOKEN_LEN: usize = crate::domain::ownership::MAX_TOKEN_LEN;

/// Random bytes in a generated token: 128 bits, as an approval id, beyond any guessing over
/// loopback.
const GENERATED_BYTES: usize = 16;

/// Where the token came from: what an error tells a caller that lacks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOrigin {
    /// Made at start and printed on the `inspector:` line.
    Generated,
    /// Read from this environment variable (`[security] operator_token_env`).
    Env(String),
}

/// The person's credential. Its `Debug` shows where it came from, never the token.
#[derive(Clone, PartialEq, Eq)]
pub struct OperatorToken {
    secret: String,
    /// The SHA-256 of `secret`: what a presented token's hash is compared with, in constant time.
    digest: [u8; 32],
    origin: TokenOrigin,
}

impl OperatorToken {
    /// Reads the token from the environment variable `name`: 16 to 256 visible ASCII
    /// characters. The error names the variable, never its value.
    pub fn from_env(name: &str) -> Result<Self, String> {
        let value = crate::domain::secrets::key_from_env(name).map_err(|e| match e {
            std::env::VarError::NotPresent => format!("environment variable {name} is not set"),
            std::env::VarError::NotUnicode(_) => {
                format!("environment variable {name} is not valid UTF-8")
            }
        })?;
        check(&value).map_err(|why| format!("environment variable {name}: the token {why}"))?;
        Ok(Self::new(value, TokenOrigin::Env(name.to_owned())))
    }

    /// A new token of 128 random bits from the system's generator, in hex, held for redaction.
    pub fn generate() -> Self {
        use ring::rand::SecureRandom as _;
        let mut bytes = [0u8; GENERATED_BYTES];
        ring::rand::SystemRandom::new()
            .fill(&mut bytes)
            .expect("the system's random generator works");
        let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        crate::domain::secrets::hold(&secret);
        Self::new(secret, TokenOrigin::Generated)
    }

    fn new(secret: String, origin: TokenOrigin) -> Self {
        let digest = Sha256::digest(secret.as_bytes()).into();
        Self {
            secret,
            digest,
            origin,
        }
    }

    /// Whether `presented` is the token. Both are hashed first, and the hashes compared in
    /// constant time, so neither the token's bytes nor its length leak through timing.
    pub fn matches(&self, presented: &[u8]) -> bool {
        let presented: [u8; 32] = Sha256::digest(presented).into();
        presented.ct_eq(&self.digest).into()
    }

    /// The token itself: for the one line that prints it at start, and for an embedding
    /// application or a test that acts as the person.
    pub fn expose(&self) -> &str {
        &self.secret
    }

    /// Where it came from.
    pub fn origin(&self) -> &TokenOrigin {
        &self.origin
    }

    /// Where a caller finds the token, in a sentence an error can end with.
    pub(crate) fn where_to_find(&self) -> String {
        match &self.origin {
            TokenOrigin::Generated => "send it as \"Authorization: Bearer TOKEN\"; the server \
                                       printed it at start on its standard output, on the line \
                                       \"inspector: http://HOST:PORT/#token=TOKEN\""
                .to_owned(),
            TokenOrigin::Env(name) => format!(
                "send it as \"Authorization: Bearer TOKEN\"; it is the value of the \
                 environment variable {name} ([security] operator_token_env)"
            ),
        }
    }
}

impl fmt::Debug for OperatorToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorToken")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// Checks a configured token's form; the reason never repeats it.
fn check(value: &str) -> Result<(), String> {
    if value.len() < MIN_OPERATOR_TOKEN_LEN || value.len() > MAX_OPERATOR_TOKEN_LEN {
        return Err(format!(
            "must be {MIN_OPERATOR_TOKEN_LEN} to {MAX_OPERATOR_TOKEN_LEN} visible ASCII \
             characters, got {}",
            value.len()
        ));
    }
    if !value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(
            "must be visible ASCII characters only (no spaces, control or non-ASCII \
                    characters)"
                .to_owned(),
        );
    }
    Ok(())
}

/// `[security] decisions`: who may decide an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decisions {
    /// Only a caller with the operator token (the default).
    #[default]
    Operator,
    /// Any loopback caller: for a single-user machine where every local process is the person's.
    Loopback,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_token_is_128_bits_in_hex_and_new_each_time() {
        let a = OperatorToken::generate();
        let b = OperatorToken::generate();
        assert_eq!(a.expose().len(), 32);
        assert!(a.expose().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.expose(), b.expose());
        assert_eq!(a.origin(), &TokenOrigin::Generated);
    }

    #[test]
    fn only_the_token_itself_matches() {
        let token = OperatorToken::generate();
        assert!(token.matches(token.expose().as_bytes()));
        assert!(!token.matches(b""));
        assert!(!token.matches(&token.expose().as_bytes()[1..]));
        let mut other = token.expose().as_bytes().to_vec();
        other[0] ^= 1;
        assert!(!token.matches(&other));
    }

    #[test]
    fn debug_never_shows_the_token() {
        let token = OperatorToken::generate();
        let shown = format!("{token:?}");
        assert!(!shown.contains(token.expose()), "{shown}");
        assert!(shown.contains("Generated"), "{shown}");
    }

    #[test]
    fn a_configured_token_must_be_16_to_256_visible_ascii_characters() {
        assert!(check("0123456789abcdef").is_ok());
        assert!(check(&"x".repeat(256)).is_ok());
        let short = check("short").unwrap_err();
        assert!(
            short.contains("16 to 256") && short.contains("got 5"),
            "{short}"
        );
        assert!(check(&"x".repeat(257)).is_err());
        let spaced = check("0123456789 abcdef").unwrap_err();
        assert!(spaced.contains("visible ASCII"), "{spaced}");
        assert!(
            !spaced.contains("0123456789"),
            "the reason never repeats the value"
        );
    }

    #[test]
    fn a_missing_variable_is_named() {
        let e = OperatorToken::from_env("RUNTIME_TOOLS_TEST_NO_SUCH_VARIABLE").unwrap_err();
        assert_eq!(
            e,
            "environment variable RUNTIME_TOOLS_TEST_NO_SUCH_VARIABLE is not set"
        );
    }
}
