//! A Redisson client's session: Redisson's own RLock scripts on the reentrant names, straight
//! at Redis.

use std::time::Duration;

use rand::RngExt as _;

use super::Client;
use crate::history::{Family, Outcome, Request};

/// Redisson's RLock scripts, verbatim (RedissonLock.tryLockInnerAsync, renewExpirationAsync,
/// unlockInnerAsync), with Redisson's KEYS and ARGV.
const REDISSON_LOCK: &str = "if (redis.call('exists', KEYS[1]) == 0) then redis.call('hset', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);";
const REDISSON_RENEW: &str = "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('pexpire', KEYS[1], ARGV[1]); return 1; end; return 0;";
const REDISSON_UNLOCK: &str = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end; return nil;";

impl Client {
    pub(super) async fn redisson_session(&mut self, name: String) {
        if self.redis.is_none() {
            match redis::Client::open(self.shared.redis_url.as_str()) {
                Ok(c) => self.redis = c.get_multiplexed_async_connection().await.ok(),
                Err(_) => return,
            }
        }
        let holder = format!("{}:{}", self.redisson_id, self.sessions);
        let ttl_ms: u64 = self.rng.random_range(300..=1500);
        for _ in 0..10 {
            if !self.running() {
                return;
            }
            let send = self.now();
            let result = self
                .eval(
                    REDISSON_LOCK,
                    std::slice::from_ref(&name),
                    &[ttl_ms.to_string(), holder.clone()],
                )
                .await;
            let outcome = match &result {
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
            if locked {
                let mut renewed_at = send;
                let rounds = self.rng.random_range(0..3);
                for _ in 0..rounds {
                    self.pause(ttl_ms / 2).await;
                    let send = self.now();
                    let ok = matches!(
                        self.eval(
                            REDISSON_RENEW,
                            std::slice::from_ref(&name),
                            &[ttl_ms.to_string(), holder.clone()]
                        )
                        .await,
                        Ok(redis::Value::Int(1))
                    );
                    self.shared.recorder.record(
                        self.id,
                        usize::MAX,
                        &name,
                        Family::Reentrant,
                        send,
                        Request::RedissonRenew {
                            holder: holder.clone(),
                            ttl_ms,
                        },
                        Outcome::RedissonDone { ok },
                    );
                    if !ok {
                        return;
                    }
                    renewed_at = send;
                }
                if self.now() + 50_000 < renewed_at + ttl_ms * 1000 {
                    self.pause(ttl_ms / 3).await;
                }
                let send = self.now();
                let channel = format!("redisson_lock__channel:{{{name}}}");
                let ok = matches!(
                    self.eval(
                        REDISSON_UNLOCK,
                        &[name.clone(), channel],
                        &["0".to_owned(), ttl_ms.to_string(), holder.clone()]
                    )
                    .await,
                    Ok(redis::Value::Int(1))
                );
                self.shared.recorder.record(
                    self.id,
                    usize::MAX,
                    &name,
                    Family::Reentrant,
                    send,
                    Request::RedissonUnlock {
                        holder: holder.clone(),
                    },
                    Outcome::RedissonDone { ok },
                );
                return;
            }
            if !busy {
                return;
            }
            self.pause(100).await;
        }
    }

    async fn eval(
        &mut self,
        script: &str,
        keys: &[String],
        args: &[String],
    ) -> redis::RedisResult<redis::Value> {
        let Some(conn) = self.redis.as_mut() else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "no connection",
            )));
        };
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
        tokio::time::timeout(Duration::from_secs(2), cmd.query_async(conn))
            .await
            .unwrap_or_else(|_| Err(redis::RedisError::from((redis::ErrorKind::Io, "timeout"))))
    }
}
