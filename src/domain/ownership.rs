//! Which plugin owns a source: the `X-Plugin-Token` rule every change to a source's tools passes.
//!
//! A plugin may send a token (16 to 256 visible ASCII characters) with its changes. The first
//! registration of a `source` that carries one binds the source to it; from then on a change
//! that touches a tool of that source — register or replace, unregister by name, clear, an MCP
//! server's registration or removal, a tool of an MCP server's listing that would replace one
//! of its tools (with the token that server was registered with), progress for its calls — must
//! carry the same token. Only
//! the token's SHA-256 hash is kept ([`TokenHash`]), and nothing here prints it. The router holds
//! one [`Owners`] behind a [`SharedOwners`] that the MCP registry and the progress route consult
//! too, so the rule lives here once.
//!
//! Changes made inside the process (an embedding application's messages, auto-removal, the
//! configured MCP servers) carry no credential and are not subject to the rule: the rule is
//! between plugins, which reach the server over HTTP.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// Fewer characters than this is too easy to guess for a secret that guards a plugin's tools.
pub(crate) const MIN_TOKEN_LEN: usize = 16;

/// More than this is not a token but a payload; a header this long is refused before hashing.
pub(crate) const MAX_TOKEN_LEN: usize = 256;

/// The header a plugin's token travels in.
pub(crate) const TOKEN_HEADER: &str = "x-plugin-token";

/// The SHA-256 hash of a plugin's token: all the server keeps. Its `Debug` shows no byte of it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct TokenHash([u8; 32]);

impl TokenHash {
    /// Reads a token as a plugin sent it: 16 to 256 visible ASCII characters (`!` to `~`).
    /// The error says what is wrong without repeating the token.
    pub(crate) fn from_header(value: &[u8]) -> Result<Self, String> {
        if value.len() < MIN_TOKEN_LEN || value.len() > MAX_TOKEN_LEN {
            return Err(format!(
                "must be {MIN_TOKEN_LEN} to {MAX_TOKEN_LEN} visible ASCII characters, got {}",
                value.len()
            ));
        }
        if !value.iter().all(u8::is_ascii_graphic) {
            return Err(
                "must be visible ASCII characters only (no spaces, control or non-ASCII \
                 characters)"
                    .to_owned(),
            );
        }
        Ok(Self(Sha256::digest(value).into()))
    }

    /// The hash as stored.
    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// A hash read back from the store.
    pub(crate) fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenHash(..)")
    }
}

/// `[security] plugin_tokens`: whether a plugin's change needs a token at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenPolicy {
    /// The contract's behaviour: a source registered without a token is anyone's on loopback.
    #[default]
    Optional,
    /// Every change a plugin makes carries a token (401 without one).
    Required,
}

/// Who asks for a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credential {
    /// A plugin over HTTP, with the hash of its `X-Plugin-Token`, if it sent one.
    Plugin(Option<TokenHash>),
    /// Code inside the process (an embedding application, auto-removal, a configured MCP
    /// server): trusted, not subject to the rule.
    InProcess,
}

/// Why a change was refused; the text never contains a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OwnershipError {
    #[error(
        "an X-Plugin-Token header is required for every change: the server is configured with \
         [security] plugin_tokens = \"required\""
    )]
    TokenRequired,
    #[error(
        "source {tag:?} belongs to another plugin: a change to its tools needs the \
         X-Plugin-Token it was registered with"
    )]
    NotOwner { tag: String },
}

/// The sources bound to a token, and the policy.
#[derive(Debug, Default)]
pub(crate) struct Owners {
    policy: TokenPolicy,
    bound: HashMap<String, TokenHash>,
}

impl Owners {
    pub(crate) fn new(policy: TokenPolicy) -> Self {
        Self {
            policy,
            bound: HashMap::new(),
        }
    }

    /// Whether `who` may change the tools of every source in `touched`: each bound one needs
    /// its own token. With `binds`, the source a registration names is bound to `who`'s token
    /// when it is not bound yet (returned as `Some`, for the store); nothing is bound when the
    /// change is refused.
    pub(crate) fn authorize<'a>(
        &mut self,
        who: Credential,
        touched: impl IntoIterator<Item = &'a str>,
        binds: Option<&'a str>,
    ) -> Result<Option<(String, TokenHash)>, OwnershipError> {
        let Credential::Plugin(token) = who else {
            return Ok(None);
        };
        if token.is_none() && self.policy == TokenPolicy::Required {
            return Err(OwnershipError::TokenRequired);
        }
        for source in touched.into_iter().chain(binds) {
            if let Some(owner) = self.bound.get(source)
                && Some(owner) != token.as_ref()
            {
                return Err(OwnershipError::NotOwner {
                    tag: source.to_owned(),
                });
            }
        }
        match (binds, token) {
            (Some(source), Some(token)) if !self.bound.contains_key(source) => {
                self.bound.insert(source.to_owned(), token);
                Ok(Some((source.to_owned(), token)))
            }
            _ => Ok(None),
        }
    }

    /// Binds `source` to a hash read back from the store.
    pub(crate) fn restore(&mut self, source: String, token: TokenHash) {
        self.bound.insert(source, token);
    }

    /// The token hash `source` is bound to, if it is: the credential of an MCP server restored
    /// under it (which was registered with that token, or bound the source with it).
    pub(crate) fn owner_of(&self, source: &str) -> Option<TokenHash> {
        self.bound.get(source).copied()
    }

    /// Whether `source` is bound to a token.
    #[cfg(test)]
    pub(crate) fn is_bound(&self, source: &str) -> bool {
        self.bound.contains_key(source)
    }
}

/// One [`Owners`] shared by the router, the MCP registry and the progress route.
#[derive(Debug, Clone, Default)]
pub(crate) struct SharedOwners(Arc<Mutex<Owners>>);

impl SharedOwners {
    pub(crate) fn new(policy: TokenPolicy) -> Self {
        Self(Arc::new(Mutex::new(Owners::new(policy))))
    }

    /// [`Owners::authorize`], under the lock.
    pub(crate) fn authorize<'a>(
        &self,
        who: Credential,
        touched: impl IntoIterator<Item = &'a str>,
        binds: Option<&'a str>,
    ) -> Result<Option<(String, TokenHash)>, OwnershipError> {
        self.lock().authorize(who, touched, binds)
    }

    /// Runs `f` on the owners, under the lock (restoring, reading).
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut Owners) -> T) -> T {
        f(&mut self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Owners> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> Credential {
        Credential::Plugin(Some(TokenHash::from_header(text.as_bytes()).unwrap()))
    }

    const A: &str = "token-of-plugin-a-0001";
    const B: &str = "token-of-plugin-b-0002";

    #[test]
    fn token_format() {
        assert!(TokenHash::from_header(b"0123456789abcdef").is_ok());
        assert!(TokenHash::from_header(&[b'x'; 256]).is_ok());
        let short = TokenHash::from_header(b"short").unwrap_err();
        assert_eq!(short, "must be 16 to 256 visible ASCII characters, got 5");
        assert!(TokenHash::from_header(&[b'x'; 257]).is_err());
        let spaced = TokenHash::from_header(b"has a space in it!!").unwrap_err();
        assert!(spaced.starts_with("must be visible ASCII"), "{spaced}");
        assert!(TokenHash::from_header("ünicode-characters-here".as_bytes()).is_err());
        let hash = TokenHash::from_header(A.as_bytes()).unwrap();
        assert_eq!(format!("{hash:?}"), "TokenHash(..)");
    }

    #[test]
    fn first_tokened_registration_binds_and_others_are_refused() {
        let mut owners = Owners::default();
        // Unbound: anyone, with or without a token, as the contract says.
        assert_eq!(
            owners.authorize(Credential::Plugin(None), [], Some("plugin:a")),
            Ok(None)
        );
        assert!(!owners.is_bound("plugin:a"));
        let bound = owners.authorize(token(A), [], Some("plugin:a")).unwrap();
        assert_eq!(bound.map(|(s, _)| s).as_deref(), Some("plugin:a"));
        assert_eq!(owners.authorize(token(A), [], Some("plugin:a")), Ok(None));
        let refused = OwnershipError::NotOwner {
            tag: "plugin:a".into(),
        };
        assert_eq!(
            owners.authorize(token(B), [], Some("plugin:a")),
            Err(refused.clone())
        );
        assert_eq!(
            owners.authorize(Credential::Plugin(None), ["plugin:a"], None),
            Err(refused.clone())
        );
        // Another source's registration that would replace a tool of plugin:a.
        assert_eq!(
            owners.authorize(token(B), ["plugin:a"], Some("plugin:b")),
            Err(refused)
        );
        assert!(
            !owners.is_bound("plugin:b"),
            "a refused change binds nothing"
        );
        assert_eq!(
            owners.authorize(Credential::InProcess, ["plugin:a"], None),
            Ok(None)
        );
    }

    #[test]
    fn required_policy_needs_a_token() {
        let mut owners = Owners::new(TokenPolicy::Required);
        assert_eq!(
            owners.authorize(Credential::Plugin(None), [], Some("plugin:a")),
            Err(OwnershipError::TokenRequired)
        );
        assert!(owners.authorize(token(A), [], Some("plugin:a")).is_ok());
        assert_eq!(owners.authorize(Credential::InProcess, [], None), Ok(None));
    }
}
