//! The Lua functions in `lua/`, each with one Rust twin of the same name here: the function's
//! typed arguments and its reply. [`super::Locks::call`] runs any of them: FCALL with the
//! KEYS and the two ARGV every function takes first (`lua/prelude.lua`), the twin's own ARGV,
//! the observer's timing, and the reply parsed.
//!
//! The functions live in one Redis Function library ([`library`]): the shared helpers are
//! defined once when it loads, not on every call.

pub(super) mod library;

/// The one list of operations: each is a file of `lua/` (its function in the library) and a
/// module here with its Rust twin. `grows`: the operation may take Redis memory (registered
/// without `allow-oom`; see [`library`]).
macro_rules! operations {
    ($($op:ident: $twin:ty $(, $grows:ident)?;)+) => {
        $(pub(super) mod $op;)+

        /// One operation of the library.
        pub(super) struct Operation {
            /// The file's name in `lua/`, without `.lua`.
            pub file: &'static str,
            pub source: &'static str,
            /// Registered without `allow-oom`: refused by a full Redis.
            pub grows: bool,
        }

        pub(super) const OPERATIONS: &[Operation] = &[$(Operation {
            file: stringify!($op),
            source: include_str!(concat!("../../../lua/", stringify!($op), ".lua")),
            grows: operations!(@grows $($grows)?),
        },)+];

        /// Each operation's twin: its `FILE` and `ARGS`, for the tests that hold them to the
        /// list and to the Lua headers.
        #[cfg(test)]
        pub(super) const TWINS: &[(&str, &str, &[&str])] = &[$((
            stringify!($op),
            <$twin as Script>::FILE,
            <$twin as Script>::ARGS,
        ),)+];
    };
    (@grows grows) => { true };
    (@grows) => { false };
}

operations! {
    acquire: acquire::Acquire<'static>, grows;
    release: release::Release<'static>;
    renew: renew::Renew<'static>;
    leave: leave::Leave<'static>;
    force_release: force_release::ForceRelease<'static>;
    inspect_lock: inspect_lock::InspectLock;
    inspect_lease: inspect_lease::InspectLease;
    semaphore_acquire: semaphore_acquire::SemaphoreAcquire<'static>, grows;
    semaphore_release: semaphore_release::SemaphoreRelease<'static>;
    semaphore_renew: semaphore_renew::SemaphoreRenew<'static>;
    semaphore_inspect: semaphore_inspect::SemaphoreInspect;
    semaphore_force_release: semaphore_force_release::SemaphoreForceRelease<'static>;
    // A limit may be set on a semaphore nobody has used yet: it makes the semaphore.
    semaphore_limit: semaphore_limit::SemaphoreLimit<'static>, grows;
    sweep: sweep::Sweep;
    evict: evict::Evict<'static>;
    // Not `grows`: an operator may ask a holder to let go on a full Redis too (the record
    // is a few bytes per lease).
    revoke: revoke::Revoke<'static>;
    // A multilease's record: the members are ordinary leases, taken by `acquire` (which a
    // full Redis refuses). Not `grows`: its heartbeat and end must work on a full Redis, and
    // a record is written only once every member was granted (an Idempotency-Key's claim
    // just before: let go again when a member is refused).
    multilease: multilease::Multilease<'static>;
    // The main Redis's index of RedLock leases (which live on the RedLock nodes). Not
    // `grows`: it is written once a majority of the nodes granted, and a lease granted must
    // be indexed even by a full Redis (it holds a few bytes per lease).
    redlock: redlock::RedlockIndex<'static>;
    // An election leader's new value (its metadata, a bigger one perhaps): refused by a full
    // Redis, as an acquire is.
    proclaim: proclaim::Proclaim<'static>, grows;
}

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use super::error::LockError;
use super::types::{LeaseId, LeaseKind, LeaseState, LeaseToken};

/// One function of `lua/` and how to call it.
pub(super) trait Script {
    /// The file's name in `lua/` (without `.lua`): the function's name in the library, and
    /// the metrics label.
    const FILE: &'static str;
    /// The names of the function's own ARGV, in order, as its Lua file's header names them
    /// (`-- A(n) name: ...`); a unit test holds the two together.
    const ARGS: &'static [&'static str];
    /// Whether a call names a lock that may be live now (an acquire): its name goes into the
    /// names index (see `locks::index`).
    const NOTES_NAME: bool = false;
    /// Whether a call grants, re-enters or extends a lease: replicas must then acknowledge
    /// it before it is answered (`WAIT`, see `redis::replicas`).
    const REPLICATED: bool = false;
    /// Whether a reply says the call granted, re-entered or extended a lease (what a
    /// [`Self::REPLICATED`] call waits for replicas to have).
    fn changes_lease(_reply: &Self::Reply) -> bool {
        false
    }
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
        None | Some(LeaseState::Held | LeaseState::Queued | LeaseState::Unknown) => {
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
/// member first, which cost twice what reading the usual grant and release straight into
/// their struct does (BENCHMARKS.md, W7).
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
            Ok(AcquireReply::Held(
                crate::locks::scripts::acquire::HeldReply { pttl: 40, .. }
            ))
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

#[cfg(test)]
mod registry_tests {
    use super::{OPERATIONS, TWINS};

    /// `-- A(n) name:` lines of a Lua file's header, in order (`n` counted from 1).
    fn header_names(source: &str) -> Vec<&str> {
        let mut names = Vec::new();
        for line in source.lines() {
            let Some(rest) = line.strip_prefix("-- A(") else {
                continue;
            };
            let (n, rest) = rest.split_once(')').expect("-- A(n)");
            assert_eq!(
                n.parse::<usize>().ok(),
                Some(names.len() + 1),
                "argument {n} is out of order in: {line}"
            );
            let name = rest
                .trim_start()
                .split_once(':')
                .map(|(name, _)| name)
                .expect("-- A(n) name: what");
            names.push(name);
        }
        names
    }

    #[test]
    fn each_lua_files_argument_header_names_its_twins_arguments_in_order() {
        for (op, (module, file, args)) in OPERATIONS.iter().zip(TWINS) {
            assert_eq!(op.file, *module);
            assert_eq!(*file, op.file, "the twin in {module}.rs names another file");
            assert_eq!(
                header_names(op.source),
                *args,
                "lua/{}.lua's header and its Rust twin name other arguments",
                op.file
            );
        }
    }

    #[test]
    fn every_file_of_lua_is_an_operation_or_a_helper() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("lua/")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|f| f.strip_suffix(".lua").map(str::to_owned))
            .collect();
        files.sort();
        let mut known: Vec<String> = OPERATIONS.iter().map(|o| o.file.to_owned()).collect();
        known.extend(super::library::HELPERS.iter().map(|(f, _)| (*f).to_owned()));
        known.extend(super::library::PARTS.iter().map(|(f, _)| (*f).to_owned()));
        // The quota library's (`limits::budget`), a library of its own.
        known.push("quota".to_owned());
        known.sort();
        assert_eq!(files, known);
    }
}
