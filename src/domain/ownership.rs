//! Which plugin owns a source: the `X-Plugin-Token` rule every change to a source's tools passes.
//!
//! A plugin may send a token (16 to 256 visible ASCII characters) with its changes. The first
//! registration of a `source` that carries one binds the source to it; from then on a change
//! that touches a tool of that source — register or replace, unregister by name, clear, an MCP
//! server's registration or removal, a tool of an MCP server's listing that would replace one
//! of its tools (with the token that server was registered with), progress for its calls — must
//! carry the same token. Only
//! the token's SHA-256 hash is kept ([`TokenHash`]), and nothing here prints it; the state file
//! keeps a salted hash of it instead ([`SaltedHash`]), so the same token bound twice, or in two
//! files, does not show. The router holds
//! one [`Owners`] behind a [`SharedOwners`] that the MCP registry and the progress route consult
//! too, so the rule lives here once.
//!
//! Changes made inside the process (an embedding application's messages, auto-removal, the
//! configured MCP servers) carry no credential and are not subject to the rule: the rule is
//! between plugins, which reach the server over HTTP.
//!
//! A source may also be bound before any plugin runs, by the configuration
//! (`[[security.source]]`, [`ConfiguredSource`]): nobody can take it first, and no operator can
//! free it at run time. A binding made at run time can be freed by the operator
//! ([`Owners::unbind`]); the next registration with a token binds the source again. The same
//! token proves a plugin is the owner of its source's restored tools (`domain::dormant`), and,
//! with `plugin_tokens = "required"`, names the source of a plugin's context and progress
//! ([`Owners::reporter`]).

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use ring::rand::SecureRandom as _;
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

/// Bytes of a binding's random salt: 128 bits, so no two bindings share one.
pub(crate) const SALT_LEN: usize = 16;

/// A token's hash as the state file keeps it: a random salt of its own, and the SHA-256 of that
/// salt followed by the token's [`TokenHash`]. A token is checked against it with the salt; the
/// stored bytes show neither the token nor its plain SHA-256, and two bindings of one token
/// look unrelated. Its `Debug` shows no byte of it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct SaltedHash {
    salt: [u8; SALT_LEN],
    hash: [u8; 32],
}

impl SaltedHash {
    /// Bytes of [`SaltedHash::to_bytes`]: the salt, then the hash.
    pub(crate) const LEN: usize = SALT_LEN + 32;

    /// `token`'s salted hash, with a new random salt.
    pub(crate) fn new(token: &TokenHash) -> Self {
        let mut salt = [0; SALT_LEN];
        ring::rand::SystemRandom::new()
            .fill(&mut salt)
            .expect("the system's random number generator works");
        Self::with_salt(token, salt)
    }

    fn with_salt(token: &TokenHash, salt: [u8; SALT_LEN]) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(salt);
        hasher.update(token.0);
        Self {
            salt,
            hash: hasher.finalize().into(),
        }
    }

    /// Whether `token` is the token this hash was made of.
    pub(crate) fn verifies(&self, token: &TokenHash) -> bool {
        Self::with_salt(token, self.salt).hash == self.hash
    }

    /// The salt, then the hash: what the state file stores.
    pub(crate) fn to_bytes(self) -> [u8; Self::LEN] {
        let mut bytes = [0; Self::LEN];
        bytes[..SALT_LEN].copy_from_slice(&self.salt);
        bytes[SALT_LEN..].copy_from_slice(&self.hash);
        bytes
    }

    /// Reads [`SaltedHash::to_bytes`] back; `None` for any other length.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != Self::LEN {
            return None;
        }
        let (salt, hash) = bytes.split_at(SALT_LEN);
        Some(Self {
            salt: salt.try_into().ok()?,
            hash: hash.try_into().ok()?,
        })
    }
}

impl fmt::Debug for SaltedHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SaltedHash(..)")
    }
}

/// What a bound source is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BoundTo {
    /// Bound during this run: the token's hash itself.
    Token(TokenHash),
    /// Restored from the state file: only the salted hash is known, so the plain hash is not.
    /// `stand_in` is a random credential, made at start and never sent by any plugin, that the
    /// MCP servers restored under the source act with until their plugin registers them again
    /// ([`Owners::owner_of`]).
    Stored {
        salted: SaltedHash,
        stand_in: TokenHash,
    },
}

impl BoundTo {
    fn admits(&self, token: &TokenHash) -> bool {
        match self {
            BoundTo::Token(bound) => bound == token,
            BoundTo::Stored { salted, stand_in } => stand_in == token || salted.verifies(token),
        }
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
    /// Under `plugin_tokens = "required"`, a context or a progress report whose token binds no
    /// source: nobody could tell whose text it is.
    #[error(
        "the X-Plugin-Token binds no source: with [security] plugin_tokens = \"required\" this \
         needs the token of a source a registration (or [[security.source]]) bound"
    )]
    UnboundToken,
    /// A wake of a source bound to another token (or sent without one).
    #[error(
        "source {tag:?} is bound to another token: waking its restored tools needs the \
         X-Plugin-Token it is bound to"
    )]
    NotWaker { tag: String },
    /// A wake of a source no token binds: there is no owner to prove.
    #[error(
        "source {tag:?} is bound to no token: its restored tools wake when their callback \
         answers HTTP, without a wake"
    )]
    Unbound { tag: String },
}

/// Why a binding could not be freed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnbindError {
    #[error("source {0:?} has no binding to free")]
    NotBound(String),
    #[error(
        "source {0:?} is bound by the configuration ([[security.source]]): remove it there and \
         restart to free it"
    )]
    Configured(String),
}

/// `[[security.source]]`: a source bound to the token in an environment variable, from start-up
/// on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredSource {
    pub source: String,
    /// The environment variable that holds the token (read at start-up; a missing variable or a
    /// value that is not a token stops it).
    pub token_env: String,
}

impl ConfiguredSource {
    /// The hash of the token the variable holds; the error names the variable, never its value.
    pub(crate) fn token(&self) -> Result<TokenHash, String> {
        // Held like the server's other keys: a peer that quotes it back has it redacted.
        let value = super::secrets::key_from_env(&self.token_env).map_err(|e| match e {
            std::env::VarError::NotPresent => format!(
                "environment variable {} is not set: it must hold the X-Plugin-Token of source \
                 {:?}",
                self.token_env, self.source
            ),
            std::env::VarError::NotUnicode(_) => format!(
                "the value of environment variable {} must be visible ASCII characters only",
                self.token_env
            ),
        })?;
        TokenHash::from_header(value.as_bytes())
            .map_err(|e| format!("the value of environment variable {} {e}", self.token_env))
    }
}

/// One bound source as the listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binding {
    pub source: String,
    /// Bound by `[[security.source]]` rather than by a registration.
    pub configured: bool,
}

/// The sources bound to a token, and the policy.
#[derive(Debug, Default)]
pub(crate) struct Owners {
    policy: TokenPolicy,
    bound: HashMap<String, BoundTo>,
    /// The sources bound by the configuration: never freed, never replaced by a stored binding.
    configured: BTreeSet<String>,
}

impl Owners {
    pub(crate) fn new(policy: TokenPolicy) -> Self {
        Self {
            policy,
            bound: HashMap::new(),
            configured: BTreeSet::new(),
        }
    }

    /// Whether `source` is bound to `token`: the one comparison every rule here makes. A
    /// binding restored from the store is checked against its salted hash (or its stand-in).
    fn holds(&self, source: &str, token: &TokenHash) -> bool {
        self.bound
            .get(source)
            .is_some_and(|bound| bound.admits(token))
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
            if self.bound.contains_key(source)
                && token.is_none_or(|token| !self.holds(source, &token))
            {
                return Err(OwnershipError::NotOwner {
                    tag: source.to_owned(),
                });
            }
        }
        match (binds, token) {
            (Some(source), Some(token)) if !self.bound.contains_key(source) => {
                self.bound.insert(source.to_owned(), BoundTo::Token(token));
                Ok(Some((source.to_owned(), token)))
            }
            _ => Ok(None),
        }
    }

    /// Binds `source` to a salted hash read back from the store; false (and nothing changes)
    /// when the configuration binds it: that binding wins.
    pub(crate) fn restore(&mut self, source: String, salted: SaltedHash) -> bool {
        if self.configured.contains(&source) {
            return false;
        }
        let mut stand_in = [0; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut stand_in)
            .expect("the system's random number generator works");
        let stand_in = TokenHash(stand_in);
        self.bound
            .insert(source, BoundTo::Stored { salted, stand_in });
        true
    }

    /// Binds `source` to `token` for good (`[[security.source]]`). Never stored: the
    /// configuration binds it again at each start.
    pub(crate) fn configure(&mut self, source: String, token: TokenHash) {
        self.bound.insert(source.clone(), BoundTo::Token(token));
        self.configured.insert(source);
    }

    /// Whether the binding of `source` can be freed ([`Owners::unbind`] would succeed now):
    /// the router asks before it stores the unbinding, and frees it once it is stored.
    pub(crate) fn may_unbind(&self, source: &str) -> Result<(), UnbindError> {
        if self.configured.contains(source) {
            return Err(UnbindError::Configured(source.to_owned()));
        }
        match self.bound.contains_key(source) {
            true => Ok(()),
            false => Err(UnbindError::NotBound(source.to_owned())),
        }
    }

    /// Frees the binding of `source` made at run time; its tools stay, and the next
    /// registration with a token binds it again.
    pub(crate) fn unbind(&mut self, source: &str) -> Result<(), UnbindError> {
        self.may_unbind(source)?;
        self.bound.remove(source);
        Ok(())
    }

    /// Whether `who` may wake the restored tools of `source`: it carries the token `source` is
    /// bound to.
    pub(crate) fn may_wake(
        &self,
        who: Option<TokenHash>,
        source: &str,
    ) -> Result<(), OwnershipError> {
        let tag = source.to_owned();
        if !self.bound.contains_key(source) {
            return Err(OwnershipError::Unbound { tag });
        }
        match who {
            Some(token) if self.holds(source, &token) => Ok(()),
            _ => Err(OwnershipError::NotWaker { tag }),
        }
    }

    /// Of `sources`, those bound to `who`'s token: a change carrying it proves their owner.
    pub(crate) fn owned_by(&self, who: Credential, sources: &[&str]) -> Vec<String> {
        let Credential::Plugin(Some(token)) = who else {
            return Vec::new();
        };
        sources
            .iter()
            .filter(|s| self.holds(s, &token))
            .map(|s| (*s).to_owned())
            .collect()
    }

    /// Who reports a context or a progress: the source `who`'s token binds (the first by name
    /// when it binds several), if any. Under `plugin_tokens = "required"` a token is needed
    /// (else [`OwnershipError::TokenRequired`]) and it must bind a source (else
    /// [`OwnershipError::UnboundToken`]).
    pub(crate) fn reporter(&self, who: Credential) -> Result<Option<String>, OwnershipError> {
        let Credential::Plugin(token) = who else {
            return Ok(None);
        };
        let required = self.policy == TokenPolicy::Required;
        let Some(token) = token else {
            return match required {
                true => Err(OwnershipError::TokenRequired),
                false => Ok(None),
            };
        };
        let source = self
            .bound
            .keys()
            .filter(|s| self.holds(s, &token))
            .min()
            .cloned();
        match source {
            None if required => Err(OwnershipError::UnboundToken),
            source => Ok(source),
        }
    }

    /// Every bound source, and whether the configuration bound it.
    pub(crate) fn bindings(&self) -> Vec<Binding> {
        self.bound
            .keys()
            .map(|source| Binding {
                source: source.clone(),
                configured: self.configured.contains(source),
            })
            .collect()
    }

    /// Undoes a binding [`Owners::authorize`] made for a change that was then not made (the
    /// state store could not keep it): `source` is unbound if it is still bound to `token`.
    pub(crate) fn undo_binding(&mut self, source: &str, token: &TokenHash) {
        if !self.configured.contains(source)
            && self.bound.get(source) == Some(&BoundTo::Token(*token))
        {
            self.bound.remove(source);
        }
    }

    /// The credential an MCP server restored under `source` acts with, if the source is bound
    /// (the server was registered with its token, or bound the source with it): the token's
    /// hash when it was bound during this run, else the binding's stand-in. A restored
    /// binding's stand-in is admitted by that source alone: whether another source is bound to
    /// the same token cannot be told from salted hashes, until the plugin sends its token.
    pub(crate) fn owner_of(&self, source: &str) -> Option<TokenHash> {
        self.bound.get(source).map(|binding| match binding {
            BoundTo::Token(token) => *token,
            BoundTo::Stored { stand_in, .. } => *stand_in,
        })
    }

    /// Whether `source` is bound to a token.
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
    fn a_configured_binding_stays_and_a_run_time_one_is_freed() {
        let hash = |text: &str| TokenHash::from_header(text.as_bytes()).unwrap();
        let mut owners = Owners::default();
        owners.configure("plugin:notes".into(), hash(A));
        assert!(
            !owners.restore("plugin:notes".into(), SaltedHash::new(&hash(B))),
            "the configuration wins"
        );
        assert_eq!(
            owners.authorize(token(B), [], Some("plugin:notes")),
            Err(OwnershipError::NotOwner {
                tag: "plugin:notes".into()
            })
        );
        owners.authorize(token(B), [], Some("plugin:b")).unwrap();
        let mut bindings = owners.bindings();
        bindings.sort_by(|x, y| x.source.cmp(&y.source));
        assert_eq!(
            bindings,
            [
                Binding {
                    source: "plugin:b".into(),
                    configured: false
                },
                Binding {
                    source: "plugin:notes".into(),
                    configured: true
                }
            ]
        );
        assert_eq!(
            owners.unbind("plugin:notes"),
            Err(UnbindError::Configured("plugin:notes".into()))
        );
        // A configured binding is never undone either: no change of this run made it.
        owners.undo_binding("plugin:notes", &hash(A));
        assert!(owners.is_bound("plugin:notes"));
        // Asking changes nothing; the unbinding itself frees it.
        assert_eq!(owners.may_unbind("plugin:b"), Ok(()));
        assert!(owners.is_bound("plugin:b"));
        assert_eq!(owners.unbind("plugin:b"), Ok(()));
        assert_eq!(
            owners.may_unbind("plugin:b"),
            Err(UnbindError::NotBound("plugin:b".into()))
        );
        assert_eq!(
            owners.unbind("plugin:b"),
            Err(UnbindError::NotBound("plugin:b".into()))
        );
        // Free again: the next tokened registration binds it.
        assert!(
            owners
                .authorize(token(A), [], Some("plugin:b"))
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn only_the_owner_wakes_and_its_token_names_its_source() {
        let hash = |text: &str| TokenHash::from_header(text.as_bytes()).unwrap();
        let mut owners = Owners::new(TokenPolicy::Required);
        owners.restore("plugin:z".into(), SaltedHash::new(&hash(A)));
        owners.restore("plugin:a".into(), SaltedHash::new(&hash(A)));
        let refused = OwnershipError::NotWaker {
            tag: "plugin:a".into(),
        };
        assert_eq!(owners.may_wake(None, "plugin:a"), Err(refused.clone()));
        assert_eq!(owners.may_wake(Some(hash(B)), "plugin:a"), Err(refused));
        assert_eq!(owners.may_wake(Some(hash(A)), "plugin:a"), Ok(()));
        assert_eq!(
            owners.may_wake(Some(hash(A)), "plugin:free"),
            Err(OwnershipError::Unbound {
                tag: "plugin:free".into()
            })
        );
        assert_eq!(
            owners.owned_by(token(A), &["plugin:a", "plugin:free", "plugin:z"]),
            ["plugin:a", "plugin:z"]
        );
        assert!(
            owners
                .owned_by(Credential::InProcess, &["plugin:a"])
                .is_empty()
        );
        // The first of its sources by name; a token of no source, or none, is refused.
        assert_eq!(owners.reporter(token(A)), Ok(Some("plugin:a".into())));
        assert_eq!(owners.reporter(token(B)), Err(OwnershipError::UnboundToken));
        assert_eq!(
            owners.reporter(Credential::Plugin(None)),
            Err(OwnershipError::TokenRequired)
        );
        assert_eq!(owners.reporter(Credential::InProcess), Ok(None));
        let optional = Owners::default();
        assert_eq!(optional.reporter(token(B)), Ok(None));
        assert_eq!(optional.reporter(Credential::Plugin(None)), Ok(None));
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

    #[test]
    fn a_salted_hash_verifies_its_token_only_and_never_shows_its_bytes() {
        let a = TokenHash::from_header(A.as_bytes()).unwrap();
        let b = TokenHash::from_header(B.as_bytes()).unwrap();
        let (one, two) = (SaltedHash::new(&a), SaltedHash::new(&a));
        assert!(one.verifies(&a) && two.verifies(&a) && !one.verifies(&b));
        assert_ne!(
            one.to_bytes(),
            two.to_bytes(),
            "a salt of its own each time"
        );
        assert_eq!(SaltedHash::from_bytes(&one.to_bytes()), Some(one));
        assert_eq!(
            SaltedHash::from_bytes(a.bytes()),
            None,
            "a plain hash is not one"
        );
        assert_eq!(format!("{one:?}"), "SaltedHash(..)");
    }

    #[test]
    fn a_restored_binding_admits_its_token_and_its_own_stand_in() {
        let mut owners = Owners::default();
        let a = TokenHash::from_header(A.as_bytes()).unwrap();
        owners.restore("plugin:a".into(), SaltedHash::new(&a));
        owners.restore("plugin:b".into(), SaltedHash::new(&a));
        assert_eq!(owners.authorize(token(A), ["plugin:a"], None), Ok(None));
        let refused = |tag: &str| {
            Err(OwnershipError::NotOwner {
                tag: tag.to_owned(),
            })
        };
        assert_eq!(
            owners.authorize(token(B), ["plugin:a"], None),
            refused("plugin:a")
        );
        // A restored MCP server acts with the stand-in: its own source admits it, another
        // source bound to the same token cannot tell, and does not.
        let stand_in = owners.owner_of("plugin:a").unwrap();
        assert_ne!(stand_in, a);
        let server = Credential::Plugin(Some(stand_in));
        assert_eq!(owners.authorize(server, ["plugin:a"], None), Ok(None));
        assert_eq!(
            owners.authorize(server, ["plugin:b"], None),
            refused("plugin:b")
        );
    }

    #[test]
    fn an_undone_binding_frees_its_source_and_no_other_binding() {
        let mut owners = Owners::default();
        let a = TokenHash::from_header(A.as_bytes()).unwrap();
        let b = TokenHash::from_header(B.as_bytes()).unwrap();
        let bound = owners.authorize(token(A), [], Some("plugin:a")).unwrap();
        assert_eq!(bound, Some(("plugin:a".to_owned(), a)));
        owners.undo_binding("plugin:a", &b);
        assert!(
            owners.is_bound("plugin:a"),
            "another token's undo changes nothing"
        );
        owners.undo_binding("plugin:a", &a);
        assert!(!owners.is_bound("plugin:a"));
        assert!(owners.authorize(token(B), [], Some("plugin:a")).is_ok());
        // A restored binding is never undone: only a change of this run binds.
        owners.restore("plugin:r".into(), SaltedHash::new(&a));
        owners.undo_binding("plugin:r", &a);
        assert!(owners.is_bound("plugin:r"));
    }
}
