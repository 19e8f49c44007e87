//! The other lock kinds in Redisson's layouts: read/write (RReadWriteLock, whose scripts a
//! Redisson client runs here too), fair (RFairLock's queue and timeout set), exclusive (RLock).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;

use crate::helpers::spawn_app;

use super::{REDISSON_HOLDER, hgetall, redisson_lock};

/// RedissonReadLock.tryLockInnerAsync. KEYS = [lock, "{lock}:<holder>:rwlock_timeout"],
/// ARGV = [leaseTime, holder, "<holder>:write"].
const REDISSON_READ_LOCK: &str = "local mode = redis.call('hget', KEYS[1], 'mode'); if (mode == false) then redis.call('hset', KEYS[1], 'mode', 'read'); redis.call('hset', KEYS[1], ARGV[2], 1); redis.call('set', KEYS[2] .. ':1', 1); redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); local key = KEYS[2] .. ':' .. ind; redis.call('set', key, 1); redis.call('pexpire', key, ARGV[1]); local remainTime = redis.call('pttl', KEYS[1]); redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); return nil; end; return redis.call('pttl', KEYS[1]);";

/// RedissonWriteLock.tryLockInnerAsync. KEYS = [lock], ARGV = [leaseTime, "<holder>:write"].
const REDISSON_WRITE_LOCK: &str = "local mode = redis.call('hget', KEYS[1], 'mode'); if (mode == false) then redis.call('hset', KEYS[1], 'mode', 'write'); redis.call('hset', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; if (mode == 'write') then if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('hincrby', KEYS[1], ARGV[2], 1); local currentExpire = redis.call('pttl', KEYS[1]); redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); return nil; end; end; return redis.call('pttl', KEYS[1]);";

async fn redisson_read(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<i64> {
    redis::Script::new(REDISSON_READ_LOCK)
        .key(key)
        .key(format!("{{{key}}}:{REDISSON_HOLDER}:rwlock_timeout"))
        .arg(30_000)
        .arg(REDISSON_HOLDER)
        .arg(format!("{REDISSON_HOLDER}:write"))
        .invoke_async(conn)
        .await
        .expect("redisson read lock script")
}

async fn redisson_write(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<i64> {
    redis::Script::new(REDISSON_WRITE_LOCK)
        .key(key)
        .arg(30_000)
        .arg(format!("{REDISSON_HOLDER}:write"))
        .invoke_async(conn)
        .await
        .expect("redisson write lock script")
}

#[tokio::test]
async fn read_write_locks_use_redissons_rwlock_layout() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let reader = app
        .lease("doc", json!({"kind": "read", "ttl_ms": 20_000}))
        .await;
    assert_eq!(
        hgetall(&mut conn, "doc").await,
        HashMap::from([
            ("mode".to_owned(), "read".to_owned()),
            (format!("{}:1", reader.id), "1".to_owned())
        ])
    );
    let timeout_key = format!("{{doc}}:{}:1:rwlock_timeout:1", reader.id);
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&timeout_key)
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(
        pttl > 15_000,
        "Redisson's per-hold timeout key {timeout_key}: {pttl}"
    );

    // A Redisson reader shares; a Redisson writer is kept out.
    assert_eq!(redisson_read(&mut conn, "doc").await, None);
    assert!(redisson_write(&mut conn, "doc").await.is_some());
    app.release(&reader, false).await.assert_status(200);
    // Redisson's reader still holds: our writer is kept out.
    app.acquire("doc", json!({"kind": "write"}))
        .await
        .assert_problem(409, "lock_held");

    let writer = app.lease("doc2", json!({"kind": "write"})).await;
    assert_eq!(
        hgetall(&mut conn, "doc2").await,
        HashMap::from([
            ("mode".to_owned(), "write".to_owned()),
            (format!("{}:1:write", writer.id), "1".to_owned())
        ])
    );
    assert!(
        redisson_read(&mut conn, "doc2").await.is_some(),
        "a Redisson reader waits"
    );
}

#[tokio::test]
async fn a_redisson_rwlock_unlock_wakes_our_waiter() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    assert_eq!(redisson_write(&mut conn, "doc").await, None);
    let waiter = app.spawn_post(
        "/v1/locks/doc/leases?wait_ms=20000",
        json!({"kind": "read"}),
    );
    app.wait_for_waiters(1).await;
    // Redisson's write unlock: drop the hold and publish on redisson_rwlock:{doc}.
    redis::cmd("DEL")
        .arg("doc")
        .query_async::<()>(&mut conn)
        .await
        .expect("DEL");
    redis::cmd("PUBLISH")
        .arg("redisson_rwlock:{doc}")
        .arg(0)
        .query_async::<()>(&mut conn)
        .await
        .expect("PUBLISH");
    let reply = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken")
        .expect("task");
    reply.assert_status(201);
}

#[tokio::test]
async fn fair_locks_use_redissons_queue_and_timeout_set() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let holder = app.lease("fifo", json!({"kind": "fair"})).await;
    assert_eq!(
        hgetall(&mut conn, "fifo").await,
        HashMap::from([(format!("{}:1", holder.id), "1".to_owned())])
    );
    let queued = app.acquire("fifo", json!({"kind": "fair"})).await;
    queued.assert_status(202);
    let ticket = format!("{}:1", queued.str("ticket_id"));
    let queue: Vec<String> = redis::cmd("LRANGE")
        .arg("redisson_lock_queue:{fifo}")
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .expect("LRANGE");
    assert_eq!(queue, vec![ticket.clone()]);
    let deadline: Option<f64> = redis::cmd("ZSCORE")
        .arg("redisson_lock_timeout:{fifo}")
        .arg(&ticket)
        .query_async(&mut conn)
        .await
        .expect("ZSCORE");
    assert!(
        deadline.is_some(),
        "the waiter has a deadline in Redisson's timeout set"
    );
    // A Redisson RLock on the same name is excluded while the fair lock is held.
    assert!(redisson_lock(&mut conn, "fifo").await.is_some());
}

#[tokio::test]
async fn exclusive_locks_use_the_rlock_layout() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let lease = app.lease("cron", json!({"kind": "exclusive"})).await;
    assert_eq!(
        hgetall(&mut conn, "cron").await,
        HashMap::from([(format!("{}:1", lease.id), "1".to_owned())])
    );
    assert!(
        redisson_lock(&mut conn, "cron").await.is_some(),
        "Redisson is kept out"
    );
}
