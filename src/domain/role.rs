//! A character's name as a change report, a `tools.changed` event and the events' role filter
//! carry it: shared, not copied. A change over many characters names each of them several times
//! (its report, its event, the event's scope), and copying every name each time was a visible
//! part of what such a change costs; a [`RoleName`] is cloned by a reference count.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use serde::{Serialize, Serializer};

/// A character's name, cheap to clone. Reads, prints and serialises as the name itself, and
/// compares equal to the same text (`report.affected_roles == ["Lanlan"]`).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RoleName(Arc<str>);

impl RoleName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for RoleName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for RoleName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for RoleName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RoleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for RoleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for RoleName {
    fn from(name: &str) -> Self {
        Self(name.into())
    }
}

impl From<Arc<str>> for RoleName {
    fn from(name: Arc<str>) -> Self {
        Self(name)
    }
}

impl From<String> for RoleName {
    fn from(name: String) -> Self {
        Self(name.into())
    }
}

impl From<&RoleName> for String {
    fn from(name: &RoleName) -> Self {
        name.as_str().to_owned()
    }
}

impl From<RoleName> for String {
    fn from(name: RoleName) -> Self {
        name.as_str().to_owned()
    }
}

impl PartialEq<str> for RoleName {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for RoleName {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for RoleName {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl Serialize for RoleName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_name_is_its_text() {
        let name = RoleName::from("Lanlan");
        assert_eq!(name, "Lanlan");
        assert_eq!(vec![name.clone()], ["Lanlan"]);
        assert_eq!(format!("{name} {name:?}"), r#"Lanlan "Lanlan""#);
        assert_eq!(serde_json::to_string(&[&name]).unwrap(), r#"["Lanlan"]"#);
        assert_eq!(String::from(&name), "Lanlan");
        assert_ne!(name, "Mio");
    }
}
