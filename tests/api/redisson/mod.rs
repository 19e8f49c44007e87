//! Redisson interoperability: the lock hash is exactly Redisson's RLock layout, and a Redisson
//! client (played here by Redisson's own lock and unlock scripts, verbatim) and Leasehold
//! exclude each other and wake each other's waiters.

mod kinds;
mod ports;
mod rlock;
mod semaphores;

use std::collections::HashMap;

/// RedissonLock.tryLockInnerAsync. KEYS[1] = lock, ARGV = [leaseTime ms, "<uuid>:<thread>"].
const REDISSON_LOCK: &str = "if (redis.call('exists', KEYS[1]) == 0) then redis.call('hset', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);";

/// RedissonLock.unlockInnerAsync. KEYS = [lock, channel], ARGV = [0, leaseTime, holder].
const REDISSON_UNLOCK: &str = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end; return nil;";

const REDISSON_HOLDER: &str = "6f1c7a64-5d5e-4c3b-9a8f-0c2b1d4e5f60:1";

async fn redisson_lock(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<i64> {
    redis::Script::new(REDISSON_LOCK)
        .key(key)
        .arg(30_000)
        .arg(REDISSON_HOLDER)
        .invoke_async(conn)
        .await
        .expect("redisson lock script")
}

async fn redisson_unlock(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<i64> {
    redis::Script::new(REDISSON_UNLOCK)
        .key(key)
        .key(format!("redisson_lock__channel:{{{key}}}"))
        .arg(0)
        .arg(30_000)
        .arg(REDISSON_HOLDER)
        .invoke_async(conn)
        .await
        .expect("redisson unlock script")
}

async fn hgetall(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> HashMap<String, String> {
    redis::cmd("HGETALL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("HGETALL")
}
