//! A Redisson client's session: Redisson's own RLock scripts on the reentrant names, straight
//! at Redis.
//!
//! In Cluster mode the sessions stay in, on a redis-rs cluster client (each script routed by
//! its first key, the lock's name, to the slot's primary; MOVED and ASK followed), doing what
//! Redisson's cluster client does on Redis 7: the unlock publishes with SPUBLISH (its
//! `shardedSubscriptionMode` AUTO), and each lock and renewal is followed on the same
//! connection by `WAIT 1` (its `checkLockSyncedSlaves`: with no replica acknowledging, the lock
//! is given back and the call fails). Without that WAIT a Redisson grant lost in a failover
//! would be the harness's overlap, not Leasehold's.

use std::time::Duration;

use rand::RngExt as _;

use super::Client;
use crate::history::{Family, Outcome, Request};

/// Redisson's RLock scripts, verbatim (RedissonLock.tryLockInnerAsync, renewExpirationAsync,
/// unlockInnerAsync), with Redisson's KEYS and ARGV.
const REDISSON_LOCK: &str = "if (redis.call('exists', KEYS[1]) == 0) then redis.call('hset', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);";
const REDISSON_RENEW: &str = "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('pexpire', KEYS[1], ARGV[1]); return 1; end; return 0;";
const REDISSON_UNLOCK: &str = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end; return nil;";

/// The Redisson client's connection.
pub(super) enum RedisConn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

/// A script's reply, and whether a replica acknowledged it (always, outside Cluster mode and
/// for calls that do not ask).
type Synced = (redis::RedisResult<redis::Value>, bool);

impl Client {
    async fn connect_redisson(&mut self) {
        self.redis = match &self.shared.redis_cluster {
            Some(nodes) => {
                let built = redis::cluster::ClusterClientBuilder::new(
                    nodes.iter().map(|n| format!("redis://{n}")),
                )
                .connection_timeout(Duration::from_secs(1))
                .response_timeout(Duration::from_secs(2))
                .build();
                match built {
                    Ok(client) => client
                        .get_async_connection()
                        .await
                        .ok()
                        .map(RedisConn::Cluster),
                    Err(_) => None,
                }
            }
            None => match redis::Client::open(self.shared.redis_url.as_str()) {
                Ok(c) => c
                    .get_multiplexed_async_connection()
                    .await
                    .ok()
                    .map(RedisConn::Single),
                Err(_) => None,
            },
        };
    }

    pub(super) async fn redisson_session(&mut self, name: String) {
        if self.redis.is_none() {
            self.connect_redisson().await;
            if self.redis.is_none() {
                return;
            }
        }
        let cluster = matches!(self.redis, Some(RedisConn::Cluster(_)));
        let holder = format!("{}:{}", self.redisson_id, self.sessions);
        let ttl_ms: u64 = self.rng.random_range(300..=1500);
        for _ in 0..10 {
            if !self.running() {
                return;
            }
            let send = self.now();
            let (result, synced) = self
                .eval_synced(
                    REDISSON_LOCK,
                    std::slice::from_ref(&name),
                    &[ttl_ms.to_string(), holder.clone()],
                )
                .await;
            let outcome = match &result {
                Ok(redis::Value::Nil) if !synced => Outcome::Failed {
                    status: None,
                    what: "no replica synced the lock (given back)".to_owned(),
                },
                Ok(redis::Value::Nil) => Outcome::RedissonLocked,
                Ok(redis::Value::Int(pttl)) => Outcome::RedissonBusy { pttl: *pttl },
                Ok(other) => Outcome::Failed {
                    status: None,
                    what: format!("{other:?}"),
                },
                Err(e) => Outcome::Failed {
                    status: None,
                    what: e.to_string(),
                },
            };
            let locked = outcome == Outcome::RedissonLocked;
            let busy = matches!(outcome, Outcome::RedissonBusy { .. });
            self.shared.recorder.record(
                self.id,
                usize::MAX,
                &name,
                Family::Reentrant,
                send,
                Request::RedissonLock {
                    holder: holder.clone(),
                    ttl_ms,
                },
                outcome,
            );
            if matches!(result, Ok(redis::Value::Nil)) && !synced {
                // Redisson's handleNoSync: unlock, then fail the call.
                self.redisson_unlock(&name, &holder, ttl_ms, cluster).await;
                return;
            }
            if locked {
                self.redisson_hold(&name, &holder, ttl_ms, cluster, send)
                    .await;
                return;
            }
            if !busy {
                return;
            }
            self.pause(100).await;
        }
    }

    /// Holds a lock Redisson's script granted at `send`: renews it a few times (each at half
    /// the TTL, as its watchdog does), then unlocks; a renewal refused or unsynced ends it.
    async fn redisson_hold(
        &mut self,
        name: &str,
        holder: &str,
        ttl_ms: u64,
        cluster: bool,
        send: u64,
    ) {
        let mut renewed_at = send;
        let rounds = self.rng.random_range(0..3);
        for _ in 0..rounds {
            self.pause(ttl_ms / 2).await;
            let send = self.now();
            let (result, synced) = self
                .eval_synced(
                    REDISSON_RENEW,
                    &[name.to_owned()],
                    &[ttl_ms.to_string(), holder.to_owned()],
                )
                .await;
            let ok = matches!(result, Ok(redis::Value::Int(1)));
            let outcome = if ok && !synced {
                // Renewed on the primary only: the client cannot count on it.
                Outcome::Failed {
                    status: None,
                    what: "no replica synced the renewal".to_owned(),
                }
            } else {
                Outcome::RedissonDone { ok }
            };
            self.shared.recorder.record(
                self.id,
                usize::MAX,
                name,
                Family::Reentrant,
                send,
                Request::RedissonRenew {
                    holder: holder.to_owned(),
                    ttl_ms,
                },
                outcome,
            );
            if !ok || !synced {
                return;
            }
            renewed_at = send;
        }
        if self.now() + 50_000 < renewed_at + ttl_ms * 1000 {
            self.pause(ttl_ms / 3).await;
        }
        self.redisson_unlock(name, holder, ttl_ms, cluster).await;
    }

    async fn redisson_unlock(&mut self, name: &str, holder: &str, ttl_ms: u64, cluster: bool) {
        let send = self.now();
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let script = if cluster {
            REDISSON_UNLOCK.replace("'publish'", "'spublish'")
        } else {
            REDISSON_UNLOCK.to_owned()
        };
        let ok = matches!(
            self.eval(
                &script,
                &[name.to_owned(), channel],
                &["0".to_owned(), ttl_ms.to_string(), holder.to_owned()]
            )
            .await,
            Ok(redis::Value::Int(1))
        );
        self.shared.recorder.record(
            self.id,
            usize::MAX,
            name,
            Family::Reentrant,
            send,
            Request::RedissonUnlock {
                holder: holder.to_owned(),
            },
            Outcome::RedissonDone { ok },
        );
    }

    async fn eval(
        &mut self,
        script: &str,
        keys: &[String],
        args: &[String],
    ) -> redis::RedisResult<redis::Value> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
        let call = async {
            match self.redis.as_mut() {
                Some(RedisConn::Single(conn)) => cmd.query_async(conn).await,
                Some(RedisConn::Cluster(conn)) => cmd.query_async(conn).await,
                None => Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "no connection",
                ))),
            }
        };
        tokio::time::timeout(Duration::from_secs(2), call)
            .await
            .unwrap_or_else(|_| Err(redis::RedisError::from((redis::ErrorKind::Io, "timeout"))))
    }

    /// [`Self::eval`]; in Cluster mode followed by `WAIT 1 500` in one pipeline (routed by the
    /// script's key, so on the same primary's connection), as Redisson's synced eval does.
    async fn eval_synced(&mut self, script: &str, keys: &[String], args: &[String]) -> Synced {
        let Some(RedisConn::Cluster(conn)) = self.redis.as_mut() else {
            return (self.eval(script, keys, args).await, true);
        };
        let mut pipe = redis::pipe();
        pipe.cmd("EVAL")
            .arg(script)
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .cmd("WAIT")
            .arg(1)
            .arg(500);
        match tokio::time::timeout(
            Duration::from_secs(2),
            pipe.query_async::<(redis::Value, i64)>(conn),
        )
        .await
        {
            Ok(Ok((value, acked))) => (Ok(value), acked >= 1),
            Ok(Err(e)) => (Err(e), false),
            Err(_) => (
                Err(redis::RedisError::from((redis::ErrorKind::Io, "timeout"))),
                false,
            ),
        }
    }
}
