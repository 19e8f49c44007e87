//! The secrets a client carries, a lease's token and an API key: both parse refusing an empty
//! value, and neither shows in `Debug` output.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

/// A lease's bearer token. Its `Debug` hides the secret, so it cannot leak through logs or
/// error messages.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct LeaseToken(String);

impl LeaseToken {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseToken(..)")
    }
}

/// The token was empty (an unset variable expanded in a script, most likely).
#[derive(Debug, thiserror::Error)]
#[error("the lease token is empty")]
pub struct EmptyToken;

impl FromStr for LeaseToken {
    type Err = EmptyToken;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(EmptyToken);
        }
        Ok(Self(raw.to_owned()))
    }
}

/// An API key (or the admin token). Its `Debug` hides the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(..)")
    }
}

/// The key was empty (an unset variable expanded in a script, most likely).
#[derive(Debug, thiserror::Error)]
#[error("the API key is empty")]
pub struct EmptyKey;

impl FromStr for ApiKey {
    type Err = EmptyKey;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(EmptyKey);
        }
        Ok(Self(raw.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_do_not_show_in_debug_output() {
        let token: LeaseToken = "lht_secret".parse().expect("token");
        assert!(!format!("{token:?}").contains("secret"));
        let key: ApiKey = "lhk_secret".parse().expect("key");
        assert!(!format!("{key:?}").contains("secret"));
        assert!(" ".parse::<LeaseToken>().is_err());
    }
}
