//! The one way a Lua function of `lua/` is called: FCALL with its KEYS, the two ARGV every
//! function takes first (deadline, tombstone time), the function's own, then its reply
//! parsed. What differs between calls is an option ([`On`], a turn already taken), not
//! another path: a lock's calls note its name in the names index, publish the events their
//! reply carries and wait for replicas when they change a lease; calls on Leasehold's own
//! records do none of that.

use std::time::Instant;

use super::handle::Turn;
use super::scripts::{self, Script};
use super::types::LockName;
use super::{LockError, Locks};
use crate::redis::{Acked, Redis};

/// What a function runs on.
#[derive(Clone, Copy)]
pub(in crate::locks) enum On<'a> {
    /// The lock or semaphore `name`: its key and state hash (and, where keys must be
    /// declared, its fixed keys).
    Lock(&'a LockName),
    /// Two keys of Leasehold's own in one slot (a multilease's record twice, the RedLock
    /// index and due list): no names index, no events, no replicas to wait for.
    Own([&'a str; 2]),
}

impl Locks {
    /// Runs `script` for the lock `name` in a turn of its own; the reply only.
    pub(in crate::locks) async fn call<S: Script>(
        &self,
        name: &LockName,
        script: &S,
    ) -> Result<S::Reply, LockError> {
        Ok(self.call_with(On::Lock(name), script, None).await?.0)
    }

    /// Runs `script` on two keys of Leasehold's own (see [`On::Own`]); the reply only.
    pub(in crate::locks) async fn call_own<S: Script>(
        &self,
        keys: [&str; 2],
        script: &S,
    ) -> Result<S::Reply, LockError> {
        Ok(self.call_with(On::Own(keys), script, None).await?.0)
    }

    /// Runs `script` on `on`, in `turn` when the caller took one already (the waiting loop
    /// takes its turn before it makes the attempt's future), else in one taken here. Answers
    /// the reply and what replicas acknowledged: for a [`Script::REPLICATED`] function while
    /// replicas are required (`None` otherwise); the caller, which knows whether the reply
    /// granted or extended anything, refuses it when they are too few. The observer times
    /// every call; a Redis that lost the library gets it again and the call is sent once more.
    pub(in crate::locks) async fn call_with<S: Script>(
        &self,
        on: On<'_>,
        script: &S,
        turn: Option<&Turn<'_>>,
    ) -> Result<(S::Reply, Option<Acked>), LockError> {
        let _own_turn = match turn {
            Some(_) => None,
            None => Some(self.turn().await.ok_or(LockError::Busy)?),
        };
        let mut conn = self.inner.conn.clone();
        let settings = &self.inner.settings;
        let deadline = conn.clock().deadline(settings.redis_timeout);
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(scripts::library::for_redis(&conn).function(S::FILE));
        let lock_keys;
        let (first, declared) = match on {
            On::Lock(name) => {
                lock_keys = self.inner.keys.lock(name);
                // The functions read KEYS[1] and KEYS[2]; where keys must be declared, every
                // key whose name is fixed is declared too (see `LockKeys::fixed_keys`).
                let fixed = conn
                    .capabilities()
                    .declared_keys
                    .then(|| lock_keys.fixed_keys());
                let declared = 2 + fixed.as_ref().map_or(0, |f| f.len());
                cmd.arg(declared)
                    .arg(lock_keys.lock())
                    .arg(lock_keys.state());
                if let Some(fixed) = &fixed {
                    cmd.arg(fixed);
                }
                (lock_keys.lock(), declared)
            }
            On::Own([a, b]) => {
                cmd.arg(2).arg(a).arg(b);
                (a, 2)
            }
        };
        cmd.arg(deadline).arg(settings.tombstone_ms);
        script.args(&mut cmd);
        // FCALL, its name, the key count, the keys and two shared ARGV, then the twin's own,
        // which its `ARGS` names (and the Lua file's header, by a test).
        debug_assert!(
            cmd.args_iter().count() <= 5 + declared + S::ARGS.len(),
            "{} sent more arguments than its ARGS name",
            S::FILE
        );
        let started = Instant::now();
        let mut result = self.send::<S>(&mut conn, &cmd, on, first, true).await;
        if let Err(e) = &result
            && crate::redis::functions::is_missing(e)
        {
            tracing::info!("loading the Lua function library into Redis");
            result = match scripts::library::load(&conn).await {
                Ok(()) => self.send::<S>(&mut conn, &cmd, on, first, false).await,
                Err(e) => Err(e),
            };
        }
        self.inner
            .observer
            .script_call(S::FILE, started.elapsed(), result.is_ok());
        // No answer (the connection failed or was reset under it): the function may still
        // run, so the request may not be answered 503 before its deadline has passed.
        if let Err(e) = &result
            && (e.is_io_error() || e.is_timeout() || e.is_connection_dropped())
        {
            conn.clock().wait_past(deadline).await;
        }
        let (raw, acked) = result?;
        if let On::Lock(name) = on {
            self.publish_reply_events(name, &raw);
        }
        Ok((S::parse(&raw)?, acked))
    }

    /// Sends the call: a lock's with its name noted in the names index on the first try
    /// (sent together on the one connection, the index's writes first; their own failure,
    /// Redis full, is the function's to report), and with its `WAIT` for replicas when `S`
    /// changes what a lease holds and replicas of `key`'s shard are required.
    async fn send<S: Script>(
        &self,
        conn: &mut Redis,
        cmd: &redis::Cmd,
        on: On<'_>,
        key: &str,
        first_try: bool,
    ) -> redis::RedisResult<(String, Option<Acked>)> {
        let On::Lock(name) = on else {
            return Ok((cmd.query_async(conn).await?, None));
        };
        let mut index = redis::Pipeline::new();
        if first_try && S::NOTES_NAME && self.note_name(&mut index, name) {
            let mut index_conn = conn.clone();
            let (_, reply) = tokio::join!(
                index.query_async::<()>(&mut index_conn),
                send_on_lock::<S>(conn, cmd, key)
            );
            return reply;
        }
        send_on_lock::<S>(conn, cmd, key).await
    }

    /// A turn to send one script call (see [`super::LockSettings::calls_in_flight`]). `None`:
    /// not had within the Redis timeout, so Redis is too far behind; the call is refused
    /// ([`LockError::Busy`]) and nothing is sent. (An `Option`, not a `Result`: the waiting
    /// loop keeps the answer while its attempt runs, and a `LockError` is 88 bytes.)
    pub(in crate::locks) async fn turn(&self) -> Option<Turn<'_>> {
        if let Some(turn) = self.free_turn() {
            return Some(turn);
        }
        let turn = self.inner.calls.acquire();
        // The semaphore is never closed.
        match tokio::time::timeout(self.inner.settings.redis_timeout, turn).await {
            Ok(Ok(turn)) => Some(turn),
            Ok(Err(_)) | Err(_) => None,
        }
    }

    /// A turn, if one is free now: below the cap, nearly always. It skips the timer (and, in
    /// the waiting loop, the boxed future) that waiting for a turn needs. It never jumps the
    /// queue: while calls wait for turns, no turn is free.
    pub(in crate::locks) fn free_turn(&self) -> Option<Turn<'_>> {
        self.inner.calls.try_acquire().ok()
    }
}

/// Sends one function call on the lock key `key`: with its `WAIT` for replicas when `S`
/// changes what a lease holds and replicas of the key's shard are required.
async fn send_on_lock<S: Script>(
    conn: &mut Redis,
    cmd: &redis::Cmd,
    key: &str,
) -> redis::RedisResult<(String, Option<Acked>)> {
    if S::REPLICATED {
        let changed = |value: &redis::Value| {
            redis::from_redis_value_ref::<String>(value)
                .ok()
                .and_then(|raw| S::parse(&raw).ok())
                .is_some_and(|reply| S::changes_lease(&reply))
        };
        let (value, acked) = conn.call_replicated(cmd, key, changed).await?;
        Ok((redis::from_redis_value(value)?, acked))
    } else {
        Ok((cmd.query_async(conn).await?, None))
    }
}
