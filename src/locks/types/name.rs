//! Lock (and semaphore) names: parsed once at the edge, trusted everywhere inside.

use std::fmt;

use super::InvalidInput;

/// A lock's name as clients write it in URLs.
///
/// ASCII letters, digits and `.` `_` `-` `:`, 1 to 200 characters. Braces are refused so a name
/// can never carry a Redis Cluster hash tag of its own: every key of a lock hashes on the whole
/// (prefixed) name, which keeps each script in one slot.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockName(String);

impl LockName {
    pub const MAX_LEN: usize = 200;
    /// What [`Self::parse`] accepts as a regular expression (RE2 and ECMA alike), for the API
    /// document; `.` and `..` are refused besides.
    pub const PATTERN: &str = "^[A-Za-z0-9._:-]{1,200}$";

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() || raw.len() > Self::MAX_LEN {
            return Err(InvalidInput::LockName(format!(
                "a lock name has 1 to {} characters, this one has {}",
                Self::MAX_LEN,
                raw.chars().count()
            )));
        }
        if let Some(bad) = raw
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':')))
        {
            return Err(InvalidInput::LockName(format!(
                "a lock name may hold ASCII letters, digits and . _ - : only, not {bad:?}"
            )));
        }
        // A path segment URLs normalise away: its `Location` and its dashboard page would
        // point elsewhere.
        if raw == "." || raw == ".." {
            return Err(InvalidInput::LockName(
                "a lock name may not be . or .. (URLs normalise them away)".into(),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A name of the server's own that no client can write (an election's lock,
    /// `election/<name>`: lock names refuse `/`), made from names already parsed.
    pub(crate) fn internal(name: String) -> Self {
        Self(name)
    }

    /// A name read back from Redis (the lock index): a client's, or one of the server's own
    /// (two parsed names joined by `/`). Without the second, an election's lock would never
    /// be listed, nor forgotten from the index once dead.
    pub(crate) fn stored(raw: &str) -> Option<Self> {
        if let Ok(name) = Self::parse(raw) {
            return Some(name);
        }
        let (kind, name) = raw.split_once('/')?;
        Self::parse(kind).ok()?;
        Self::parse(name).ok()?;
        Some(Self::internal(raw.to_owned()))
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_names_refuse_braces_slashes_and_length() {
        assert!(LockName::parse("orders:42.v2_x-y").is_ok());
        for bad in ["", "a{b}", "a}b", "a/b", "a b", "é", &"x".repeat(201)] {
            assert!(LockName::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn stored_names_are_a_clients_or_the_servers_own() {
        assert_eq!(
            LockName::stored("election/cron").map(|n| n.0),
            Some("election/cron".to_owned())
        );
        assert!(LockName::stored("orders").is_some());
        for bad in ["a/b/c", "/x", "x/", "a{b}/c", ""] {
            assert!(LockName::stored(bad).is_none(), "{bad:?} was accepted");
        }
    }
}
