//! The names index: which names of a key space may be live, so that listing them (the
//! overview, `GET /v1/locks`, the metrics' census) costs Redis work for the live names, not
//! for every key Redis holds. Before it, a listing walked the keyspace with SCAN: on a Redis
//! with 200,000 keys of names nobody used any more, one page cost Redis 243 ms of CPU.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P[tenant/]{leasehold/}:names` | zset (every score 0, read by name) | names that were acquired (or found held) lately |
//! | `P[tenant/]{leasehold/}:names:dead` | hash | name → when a listing first found it dead (ms) |
//!
//! A name enters when a request asks for it, in the same round trip as its acquire function
//! (so a name is in the index by the time its grant is answered), and, for locks nobody
//! asked Leasehold for (a Redisson client's) or an index Redis lost, when the sweepers'
//! periodic pass finds it held. An instance skips names it wrote within [`NOTED_FOR`], so a busy name costs Redis
//! one write a minute per instance, not one per acquire. A listing checks each name it reads
//! and takes out those found dead twice, [`DEAD_FOR`] apart: longer than an instance may skip
//! a name, so a name taken again meanwhile is always written again before it could be left
//! out (an instance that skipped it wrote it less than [`NOTED_FOR`] before the first
//! finding, and the name was dead at the second).
//! Both keys are Leasehold's own (see `own_keys`): in Redis Cluster they sit in one slot.

use std::collections::HashMap;
use std::hash::{BuildHasher as _, RandomState};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::locks::layout::KeySpace;
use crate::locks::{LockError, LockName, Locks};
use crate::redis::Batch;

/// How long an instance skips a name it wrote into the index.
pub const NOTED_FOR: Duration = Duration::from_secs(60);
/// How long after a listing first found a name dead it may take the name out, if it is still
/// dead then: more than [`NOTED_FOR`] (see the module docs).
pub const DEAD_FOR: Duration = Duration::from_secs(120);
/// Names remembered as written, at most; past it the stale go, then all.
const NOTED_MAX: usize = 100_000;

/// The index of the key space whose prefix is `space`.
pub fn index_key(space: &KeySpace) -> String {
    space.own("names")
}

/// Its marks of names found dead.
pub fn dead_key(space: &KeySpace) -> String {
    space.own("names:dead")
}

/// The names this instance wrote into an index lately, so that it skips them for
/// [`NOTED_FOR`]. Keyed by a 64-bit hash of (key space, name), so the usual acquire checks it
/// without allocating: two names sharing a hash (about 2^-64 for a pair) would only see one of
/// them written a minute late, by the sweepers' pass or the next acquire after that.
#[derive(Default)]
pub(in crate::locks) struct Noted {
    /// hash of (key space prefix, name) → when this instance last wrote it.
    at: Mutex<HashMap<u64, Instant>>,
    hasher: RandomState,
    /// No names are written (see [`Locks::stop_noting_names`]).
    off: std::sync::atomic::AtomicBool,
}

impl Noted {
    /// Whether this instance wrote `name` of the key space `space` within [`NOTED_FOR`]; if
    /// not, it counts as written from now (the caller writes it).
    fn fresh(&self, space: &str, name: &str) -> bool {
        let key = self.hasher.hash_one((space, name));
        let Ok(mut noted) = self.at.lock() else {
            return false;
        };
        let now = Instant::now();
        if noted
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < NOTED_FOR)
        {
            return true;
        }
        if noted.len() >= NOTED_MAX {
            noted.retain(|_, at| now.duration_since(*at) < NOTED_FOR);
            if noted.len() >= NOTED_MAX {
                noted.clear();
            }
        }
        noted.insert(key, now);
        false
    }
}

impl Locks {
    /// Adds to `pipe` the writes that put `name` into this key space's index, unless this
    /// instance wrote it within [`NOTED_FOR`]; whether it added them. An acquire sends them in
    /// the same round trip as its function call (before it, on the same connection), so a
    /// name is in the index by the time its grant is answered.
    pub(in crate::locks) fn note_name(&self, pipe: &mut redis::Pipeline, name: &LockName) -> bool {
        let keys = &self.inner.keys;
        if self
            .inner
            .noted
            .off
            .load(std::sync::atomic::Ordering::Relaxed)
            || self.inner.noted.fresh(keys.prefix(), name.as_str())
        {
            return false;
        }
        let index = index_key(keys);
        pipe.cmd("ZADD")
            .arg(&index)
            .arg(0)
            .arg(name.as_str())
            .ignore()
            .hdel(dead_key(&self.inner.keys), name.as_str())
            .ignore();
        true
    }
}

impl Locks {
    /// Writes no name into the names index any more (this handle and every clone): for a
    /// RedLock node, whose names the main Redis indexes (`lua/redlock.lua`) and which nobody
    /// lists, so that an index there would only grow.
    pub fn stop_noting_names(&self) {
        self.inner
            .noted
            .off
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Puts into the index those of `rests` (what follows the deployment's prefix in a lock
    /// key: `name` or `tenant/name`) that are held, waited for or have permits out: the
    /// sweepers' periodic pass hands over every name it finds, with or without Leasehold state
    /// (a Redisson client's lock has none). Names are checked in one pipelined round trip.
    pub(in crate::locks) async fn index_found(&self, rests: &[String]) -> Result<(), LockError> {
        let found: Vec<(Locks, LockName)> = rests
            .iter()
            .filter_map(|rest| self.space_of(rest))
            .collect();
        if found.is_empty() {
            return Ok(());
        }
        // (A batch: in a cluster the names sit on different slots.)
        let mut batch = Batch::new();
        for (locks, name) in &found {
            let keys = locks.inner.keys.lock(name);
            let [lock, queue, permits] = keys.liveness_keys();
            let mut exists = redis::cmd("EXISTS");
            exists.arg(&lock).arg(&queue).arg(&permits);
            let mut kind = redis::cmd("TYPE");
            kind.arg(&lock);
            let mut state = redis::cmd("EXISTS");
            state.arg(keys.state());
            batch.add(exists).add(kind).add(state);
        }
        let replies: Vec<redis::Value> = batch.run(&self.inner.conn).await?;
        let mut bare = Vec::new();
        let (mut writes, mut any) = (redis::pipe(), false);
        for ((locks, name), r) in found.iter().zip(replies.chunks(3)) {
            let live = matches!(r.first(), Some(redis::Value::Int(n)) if *n > 0);
            let state = matches!(r.get(2), Some(redis::Value::Int(1)));
            let hash = matches!(r.get(1), Some(redis::Value::SimpleString(t)) if t == "hash");
            if !live {
                continue;
            }
            if state {
                any |= locks.note_name(&mut writes, name);
            } else if hash {
                bare.push((locks, name.clone()));
            }
        }
        // A lock hash without Leasehold state: a Redisson client's lock, or another program's
        // hash that only happens to be named like one (left out).
        for (locks, name) in bare {
            for name in locks.redisson_only(vec![name]).await? {
                any |= locks.note_name(&mut writes, &name);
            }
        }
        // (Redis refuses an empty pipeline.)
        if any {
            writes
                .query_async::<()>(&mut self.inner.conn.clone())
                .await?;
        }
        Ok(())
    }

    /// The handle of the key space `rest` (after the deployment's prefix) belongs to, and the
    /// lock's name in it.
    pub(in crate::locks) fn space_of(&self, rest: &str) -> Option<(Locks, LockName)> {
        match rest.split_once('/') {
            None => Some((self.clone(), LockName::parse(rest).ok()?)),
            Some((tenant, name)) => {
                let prefix = format!("{}{tenant}/", self.inner.keys.prefix());
                Some((
                    self.in_space(crate::locks::KeySpace::new(prefix)),
                    LockName::parse(name).ok()?,
                ))
            }
        }
    }

    /// Those of `candidates` (bare lock keys) that are locks only a Redisson client knows: no
    /// state hash (a name with one is listed through it), and a hash shaped like Redisson's
    /// RLock or RReadWriteLock (fields `<client id>:<thread>`, `..:write`, `mode`). Any other
    /// program's key is left out. Listed, their inspection says `held_as: foreign`.
    async fn redisson_only(&self, candidates: Vec<LockName>) -> Result<Vec<LockName>, LockError> {
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let mut batch = Batch::new();
        for name in &candidates {
            let keys = self.inner.keys.lock(name);
            let mut state = redis::cmd("EXISTS");
            state.arg(keys.state());
            let mut kind = redis::cmd("TYPE");
            kind.arg(keys.lock());
            batch.add(state).add(kind);
        }
        let found: Vec<redis::Value> = batch.run(&self.inner.conn).await?;
        let hashes: Vec<LockName> = candidates
            .into_iter()
            .zip(found.chunks(2))
            .filter(|(_, f)| {
                matches!(f.first(), Some(redis::Value::Int(0)))
                    && matches!(f.get(1), Some(redis::Value::SimpleString(t)) if t == "hash")
            })
            .map(|(name, _)| name)
            .collect();
        if hashes.is_empty() {
            return Ok(hashes);
        }
        let mut batch = Batch::new();
        for name in &hashes {
            let mut field = redis::cmd("HRANDFIELD");
            field.arg(self.inner.keys.lock(name).lock());
            batch.add(field);
        }
        let fields: Vec<Option<String>> = batch.run(&self.inner.conn).await?;
        Ok(hashes
            .into_iter()
            .zip(fields)
            .filter(|(_, field)| field.as_deref().is_some_and(redisson_lock_field))
            .map(|(name, _)| name)
            .collect())
    }
}

/// Whether a field of a hash is one Redisson's RLock or RReadWriteLock writes: `mode`, or a
/// holder id (a read/write lock's writer also `..:write`): `<client id>:<thread id>` as
/// Redisson's Java client writes it, or `<uuid>:<id>` as its ports to other languages do (a
/// client UUID, then any id: a goroutine's number, another UUID). `prelude.lua`'s
/// `hash_is_lock` applies the same rule to every field.
fn redisson_lock_field(field: &str) -> bool {
    if field == "mode" || port_holder(field) {
        return true;
    }
    let field = field.strip_suffix(":write").unwrap_or(field);
    matches!(field.rsplit_once(':'), Some((client, thread))
        if !client.is_empty() && !thread.is_empty() && thread.bytes().all(|b| b.is_ascii_digit()))
}

/// `<uuid>:<anything>`: a UUID (8-4-4-4-12 hex digits), a colon, at least one more byte.
fn port_holder(field: &str) -> bool {
    let b = field.as_bytes();
    b.len() > 37
        && b[36] == b':'
        && b[..36].iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::redisson_lock_field;

    const UUID: &str = "6f1c7a64-5d5e-4c3b-9a8f-0c2b1d4e5f60";

    #[test]
    fn redisson_and_its_ports_holder_fields_are_lock_fields() {
        for field in [
            "mode".to_owned(),
            format!("{UUID}:1"),
            format!("{UUID}:57:write"),
            format!("{UUID}:2b0e86f5-5d4e-4a59-a6d8-2cbb2e4b1a36"),
            format!("{UUID}:2b0e86f5-5d4e-4a59-a6d8-2cbb2e4b1a36:write"),
            format!("{UUID}:worker-7"),
            "0123456789abcdef:1".to_owned(),
        ] {
            assert!(redisson_lock_field(&field), "{field}");
        }
    }

    #[test]
    fn other_programs_fields_are_not() {
        for field in [
            "email",
            "page:home",
            "user:ann:write",
            ":1",
            "client:",
            "6f1c7a64-5d5e-4c3b-9a8f-0c2b1d4e5f60",
            "6f1c7a64-5d5e-4c3b-9a8f-0c2b1d4e5f60:",
            "6f1c7a64-5d5e-4c3b-9a8f_0c2b1d4e5f60:x",
            "zf1c7a64-5d5e-4c3b-9a8f-0c2b1d4e5f60:x",
        ] {
            assert!(!redisson_lock_field(field), "{field}");
        }
    }

    proptest! {
        /// Any UUID followed by any id is a port's holder field, `:write` or not.
        #[test]
        fn any_uuid_then_any_id_is_a_holder(
            uuid in "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
            id in "\\PC{1,40}",
            write in any::<bool>(),
        ) {
            let field = format!("{uuid}:{id}{}", if write { ":write" } else { "" });
            prop_assert!(redisson_lock_field(&field));
        }

        /// A field without a colon (what most programs' hashes hold) is never a holder, but
        /// `mode`.
        #[test]
        fn no_colon_no_holder(field in "[^:]{0,60}") {
            prop_assert_eq!(redisson_lock_field(&field), field == "mode");
        }

        /// A word before the colon and a non-number after it (`page:home`) is no holder.
        #[test]
        fn words_are_not_holders(client in "[a-z_]{1,30}", thread in "[a-z_][a-z0-9_]{0,20}") {
            let field = format!("{client}:{thread}");
            prop_assert!(!redisson_lock_field(&field));
        }
    }
}
