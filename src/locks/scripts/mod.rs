//! The Lua functions in `lua/`, each with one Rust twin of the same name here: the function's
//! typed arguments and its reply. [`super::Locks::call`] runs any of them: FCALL with the
//! KEYS and the two ARGV every function takes first (`lua/prelude.lua`), the twin's own ARGV,
//! the observer's timing, and the reply parsed.
//!
//! The functions live in one Redis Function library ([`library`]): the shared helpers are
//! defined once when it loads, not on every call.

pub(super) mod acquire;
pub(super) mod evict;
pub(super) mod force_release;
pub(super) mod inspect_lease;
pub(super) mod inspect_lock;
pub(super) mod leave;
pub(super) mod library;
pub(super) mod release;
pub(super) mod renew;
pub(super) mod semaphore_acquire;
pub(super) mod semaphore_force_release;
pub(super) mod semaphore_inspect;
pub(super) mod semaphore_limit;
pub(super) mod semaphore_release;
pub(super) mod semaphore_renew;
pub(super) mod sweep;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use super::error::LockError;
use super::types::{LeaseId, LeaseKind, LeaseState, LeaseToken};

/// One function of `lua/` and how to call it.
pub(super) trait Script {
    /// The file's name in `lua/` (without `.lua`): the function's name in the library, and
    /// the metrics label.
    const FILE: &'static str;
    /// Whether a call names a lock that may be live now (an acquire): its name goes into the
    /// names index (see `locks::index`).
    const NOTES_NAME: bool = false;
    type Reply: DeserializeOwned;

    /// This function's own ARGV, after the two every function takes.
    fn args(&self, cmd: &mut redis::Cmd);

    /// Reads the function's reply.
    fn parse(raw: &str) -> Result<Self::Reply, LockError> {
        parse(raw)
    }
}

/// Why a script refused to touch a lease on behalf of a token.
#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(super) enum Refusal {
    UnknownLease,
    Forbidden,
    LeaseLost {
        state: Option<LeaseState>,
    },
    /// The token is a fair ticket's that has not been granted yet.
    Queued,
    ModeNotHeld {
        mode: String,
    },
    /// The script ran after its deadline and changed nothing.
    TooLate,
}

impl From<Refusal> for LockError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::UnknownLease => LockError::UnknownLease,
            Refusal::Forbidden => LockError::TokenMismatch,
            Refusal::LeaseLost { state } => lost(state),
            Refusal::Queued => LockError::TicketPending,
            Refusal::ModeNotHeld { mode } => LockError::ModeNotHeld(mode),
            Refusal::TooLate => LockError::TooLate,
        }
    }
}

/// A lease that no longer holds its lock; a record still saying "held" means it ran out.
pub(super) fn lost(state: Option<LeaseState>) -> LockError {
    match state {
        None | Some(LeaseState::Held | LeaseState::Queued) => {
            LockError::LeaseLost(LeaseState::Expired)
        }
        Some(s) => LockError::LeaseLost(s),
    }
}

/// One holder of a lock (or permits of a semaphore) in a reply.
#[derive(Debug, Deserialize)]
pub(super) struct HolderEntry {
    pub holder_id: String,
    pub lease_id: Option<String>,
    pub holder: Option<String>,
    #[serde(default)]
    pub reentry_count: u64,
    pub read_count: Option<u64>,
    pub write_count: Option<u64>,
    pub kind: Option<LeaseKind>,
    pub metadata: Option<String>,
    pub fencing_token: Option<u64>,
    /// When the hold began (`since_ms` in the force-release and eviction replies).
    #[serde(alias = "since_ms")]
    pub created_ms: Option<u64>,
}

/// Lua's cjson writes an empty table as `{}`; read that as an empty list.
pub(super) fn list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrEmpty<T> {
        List(Vec<T>),
        Empty {},
    }
    Ok(match ListOrEmpty::deserialize(d)? {
        ListOrEmpty::List(v) => v,
        ListOrEmpty::Empty {} => Vec::new(),
    })
}

/// Parses a function's JSON reply.
pub(super) fn parse<T: DeserializeOwned>(raw: &str) -> Result<T, LockError> {
    serde_json::from_str(raw).map_err(|e| LockError::BadReply(format!("{e}: {raw}")))
}

/// The `status` a function's reply opens with (every function writes it first), for the
/// replies parsed by status: serde reads an enum tagged by `status` into a buffer of every
/// member first. Read that way, the replies cost 8.7 % of the server's instructions per
/// lock cycle; the usual grant and release read straight into their struct, 4.1 %
/// (callgrind, 300 cycles over HTTP).
pub(super) fn status_of(raw: &str) -> Option<&str> {
    raw.strip_prefix(r#"{"status":""#)?.split('"').next()
}

/// Empty strings are how scripts store "none".
pub(super) fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// Adds `parts` to a function's ARGV without its trailing empty ones: the function reads a
/// missing argument as "". Every argument costs Redis a Lua string (hashed byte by byte) and a
/// table slot on each call, and the optional ones at the end are empty on most calls.
pub(super) fn args_trimmed<S: AsRef<str>>(cmd: &mut redis::Cmd, parts: &[S]) {
    let used = parts
        .iter()
        .rposition(|p| !p.as_ref().is_empty())
        .map_or(0, |last| last + 1);
    for part in &parts[..used] {
        cmd.arg(part.as_ref());
    }
}

/// The "proven" argument every lease-bound function takes: "1" when the presented token proves
/// the lease id in the path (the id is derived from the token), "" when it does not.
pub(in crate::locks) fn proven(token: &LeaseToken, id: LeaseId) -> &'static str {
    if token.proves(id) { "1" } else { "" }
}

#[cfg(test)]
mod tests {
    use super::acquire::AcquireReply;
    use super::release::ReleaseReply;
    use super::status_of;

    #[test]
    fn the_status_is_read_from_the_front_of_a_reply() {
        assert_eq!(
            status_of(r#"{"status":"acquired","x":1}"#),
            Some("acquired")
        );
        assert_eq!(status_of(r#"{"x":1,"status":"acquired"}"#), None);
        assert_eq!(status_of(""), None);
    }

    #[test]
    fn grants_and_releases_read_directly_and_the_rest_by_their_tag() {
        let granted = r#"{"status":"acquired","lease_id":"l","kind":"reentrant","reentry_count":1,"fencing_token":7,"ttl_ms":100,"now_ms":5,"now_us":5000,"created_ms":5,"holder":null,"ev":[{"type":"acquired"}]}"#;
        match AcquireReply::read(granted) {
            Ok(AcquireReply::Acquired(g)) => assert_eq!((g.fencing_token, g.ttl_ms), (7, 100)),
            other => panic!("{other:?}"),
        }
        let held = r#"{"status":"held","pttl":40,"holder_id":null,"lease_id":null,"holder":null,"arrived_ms":5}"#;
        assert!(matches!(
            AcquireReply::read(held),
            Ok(AcquireReply::Held { pttl: 40, .. })
        ));
        // A grant missing a field is a bad reply, not some other variant.
        assert!(AcquireReply::read(r#"{"status":"acquired","lease_id":"l"}"#).is_err());
        let released =
            r#"{"status":"released","kind":"reentrant","since_ms":30,"now_ms":42,"ev":[]}"#;
        assert!(matches!(
            ReleaseReply::read(released),
            Ok(ReleaseReply::Released(r)) if r.held() == Some(std::time::Duration::from_millis(12))
        ));
        assert!(matches!(
            ReleaseReply::read(r#"{"status":"lease_lost","state":"expired"}"#),
            Ok(ReleaseReply::Refused(_))
        ));
    }
}
