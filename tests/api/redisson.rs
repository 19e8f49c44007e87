//! Redisson interoperability: the lock hash is exactly Redisson's RLock layout, and a Redisson
//! client (played here by Redisson's own lock and unlock scripts, verbatim) and Leasehold
//! exclude each other and wake each other's waiters.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt as _;
use serde_json::{Value, json};

use crate::helpers::{AppOptions, spawn_app, spawn_app_with};

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

#[tokio::test]
async fn the_lock_hash_is_exactly_redissons_rlock() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let lease = app.lease("jobs", json!({"ttl_ms": 20_000})).await;
    let kind: String = redis::cmd("TYPE")
        .arg("jobs")
        .query_async(&mut conn)
        .await
        .expect("TYPE");
    assert_eq!(kind, "hash");
    let fields: HashMap<String, String> = redis::cmd("HGETALL")
        .arg("jobs")
        .query_async(&mut conn)
        .await
        .expect("HGETALL");
    assert_eq!(
        fields,
        HashMap::from([(format!("{}:1", lease.id), "1".to_owned())])
    );
    let pttl: i64 = redis::cmd("PTTL")
        .arg("jobs")
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(pttl > 15_000 && pttl <= 20_000, "PTTL {pttl}");

    app.acquire_with("jobs", 0, json!({}), Some(&lease.token))
        .await
        .assert_status(200);
    let count: String = redis::cmd("HGET")
        .arg("jobs")
        .arg(format!("{}:1", lease.id))
        .query_async(&mut conn)
        .await
        .expect("HGET");
    assert_eq!(count, "2");

    // Every other key of the lock shares its hash tag (one cluster slot); the one key of no
    // lock is the instances' journal of recent events.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    for key in &keys {
        assert!(
            key == "jobs"
                || key.starts_with("{jobs}:leasehold")
                || key.starts_with("{leasehold/}:"),
            "stray key {key}"
        );
    }
}

#[tokio::test]
async fn release_publishes_redissons_unlock_message() {
    let app = spawn_app().await;
    let mut pubsub = app.redis.client().get_async_pubsub().await.expect("pubsub");
    pubsub
        .subscribe("redisson_lock__channel:{jobs}")
        .await
        .expect("subscribe");
    let lease = app.lease("jobs", json!({})).await;
    app.release(&lease, false).await.assert_status(200);
    let msg = tokio::time::timeout(Duration::from_secs(5), pubsub.on_message().next())
        .await
        .expect("an unlock message")
        .expect("stream open");
    assert_eq!(msg.get_payload::<String>().expect("payload"), "0");
    let mut conn = app.redis.conn().await;
    let exists: bool = redis::cmd("EXISTS")
        .arg("jobs")
        .query_async(&mut conn)
        .await
        .expect("EXISTS");
    assert!(!exists);
}

#[tokio::test]
async fn a_redisson_holder_excludes_leasehold_and_its_unlock_wakes_our_waiter() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    assert_eq!(
        redisson_lock(&mut conn, "jobs").await,
        None,
        "Redisson got the lock"
    );

    let refused = app.acquire("jobs", json!({})).await;
    refused.assert_problem(409, "lock_held");
    assert_eq!(refused.body["holder_id"], REDISSON_HOLDER);
    assert!(refused.body["lease_id"].is_null());

    let lock = app.inspect_lock("jobs").await;
    assert_eq!(lock.body["holders"][0]["holder_id"], REDISSON_HOLDER);
    assert!(lock.body["holders"][0]["lease_id"].is_null());

    let waiter = app.spawn_waiter("jobs", 20000);
    app.wait_for_waiters(1).await;
    assert_eq!(redisson_unlock(&mut conn, "jobs").await, Some(1));
    let granted = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by Redisson's unlock message, well before the 30 s TTL")
        .expect("task");
    granted.assert_status(201);
}

#[tokio::test]
async fn a_leasehold_holder_excludes_redisson() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let lease = app.lease("jobs", json!({"ttl_ms": 20_000})).await;
    let ttl = redisson_lock(&mut conn, "jobs")
        .await
        .expect("Redisson is refused with a TTL");
    assert!(ttl > 15_000, "pttl {ttl}");
    app.release(&lease, false).await.assert_status(200);
    assert_eq!(redisson_lock(&mut conn, "jobs").await, None);
}

#[tokio::test]
async fn force_release_also_removes_a_redisson_holder() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    redisson_lock(&mut conn, "jobs").await;
    let reply = app
        .force_release("jobs", Some(crate::helpers::ADMIN_TOKEN))
        .await;
    reply.assert_status(200);
    assert_eq!(reply.body["removed"][0]["holder_id"], REDISSON_HOLDER);
    app.acquire("jobs", json!({})).await.assert_status(201);
}

#[tokio::test]
async fn a_key_prefix_applies_to_keys_and_channels_alike() {
    let app = spawn_app_with(AppOptions {
        key_prefix: "app:".into(),
        ..Default::default()
    })
    .await;
    let mut conn = app.redis.conn().await;
    assert_eq!(redisson_lock(&mut conn, "app:jobs").await, None);
    app.acquire("jobs", json!({}))
        .await
        .assert_problem(409, "lock_held");
    let waiter = app.spawn_waiter("jobs", 20000);
    app.wait_for_waiters(1).await;
    redisson_unlock(&mut conn, "app:jobs").await;
    let granted = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken")
        .expect("task");
    granted.assert_status(201);
    let fields: HashMap<String, String> = redis::cmd("HGETALL")
        .arg("app:jobs")
        .query_async(&mut conn)
        .await
        .expect("HGETALL");
    assert_eq!(fields.len(), 1);
}

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

/// RedissonPermitExpirableSemaphore.tryAcquireAsync (4.7.0), verbatim. KEYS = [name,
/// {name}:timeout, redisson_sc:{name}], ARGV = [n, timeoutDate, now, nonExpirableTimeout,
/// publish command, id...] (ids: 16 raw bytes each).
const REDISSON_SEMAPHORE_ACQUIRE: &str = "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); local value = redis.call('incrby', KEYS[1], #expiredIds); if tonumber(value) > 0 then redis.call(ARGV[5], KEYS[3], value); end;end; local value = redis.call('get', KEYS[1]); if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then redis.call('decrby', KEYS[1], ARGV[1]); for i = 6, #ARGV, 1 do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); end; local ttl = redis.call('pttl', KEYS[1]); if ttl > 0 then redis.call('pexpire', KEYS[2], ttl); end; return 'OK'; end; local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); if v[1] ~= nil and v[2] ~= ARGV[4] then return ':' .. tostring(v[2]); end return nil;";

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

/// Redisson takes `n` permits of `name` for `lease_ms` with fresh random ids.
async fn redisson_permits(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
    n: usize,
    lease_ms: u64,
) -> Option<String> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(REDISSON_SEMAPHORE_ACQUIRE)
        .arg(3)
        .arg(name)
        .arg(format!("{{{name}}}:timeout"))
        .arg(format!("redisson_sc:{{{name}}}"))
        .arg(n)
        .arg(now_ms() + lease_ms)
        .arg(now_ms())
        .arg(922_337_203_685_477_u64)
        .arg("publish");
    for i in 0..n {
        let id: [u8; 16] = std::array::from_fn(|b| (b as u8) ^ (i as u8) ^ 0xa5);
        cmd.arg(&id[..]);
    }
    cmd.query_async(conn)
        .await
        .expect("redisson semaphore script")
}

#[tokio::test]
async fn semaphores_use_redissons_permit_expirable_layout() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let reply = app
        .acquire_permits(
            "pool",
            0,
            json!({"limit": 5, "permits": 2, "ttl_ms": 20_000}),
        )
        .await;
    let lease = crate::helpers::Lease::from_reply("pool", &reply);
    let available: String = redis::cmd("GET")
        .arg("pool")
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(available, "3");
    // Redisson's timeout zset: one member per permit, 16 raw bytes each, scored by expiry.
    let permits: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
        .arg("{pool}:timeout")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .expect("ZRANGE");
    assert_eq!(permits.len(), 2);
    let uuid = uuid::Uuid::parse_str(&lease.id).expect("lease id");
    for (i, (id, expiry)) in permits.iter().enumerate() {
        assert_eq!(id.len(), 16, "a Redisson permit id is 16 bytes");
        assert_eq!(&id[..12], &uuid.as_bytes()[..12]);
        assert_eq!(&id[12..], &(i as u32 + 1).to_be_bytes());
        assert!(*expiry > now_ms() as f64 + 15_000.0);
    }
    // Redisson sees the same counter: 3 more fit, a fourth does not.
    assert_eq!(
        redisson_permits(&mut conn, "pool", 3, 20_000)
            .await
            .as_deref(),
        Some("OK")
    );
    assert_ne!(
        redisson_permits(&mut conn, "pool", 1, 20_000)
            .await
            .as_deref(),
        Some("OK")
    );
    app.acquire_permits("pool", 0, json!({"limit": 5}))
        .await
        .assert_problem(409, "no_permits");
    let view = app.get("/v1/semaphores/pool").await;
    assert_eq!(view.body["used"], 5);
    assert_eq!(view.body["holders"].as_array().map(Vec::len), Some(2));
    assert_eq!(view.body["holders"][1]["lease_id"], Value::Null);
    assert_eq!(view.body["holders"][1]["permits"], 3);
}

#[tokio::test]
async fn permit_ids_keep_the_layout_past_the_first_byte_of_their_number() {
    // A lease's permit ids are its UUID's first 12 bytes and the permit's number, 4 bytes
    // big-endian: also past 64 (made on the spot, not looked up) and past 255 (two bytes).
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    let reply = app
        .acquire_permits(
            "big-pool",
            0,
            json!({"limit": 400, "permits": 300, "ttl_ms": 20_000}),
        )
        .await;
    let lease = crate::helpers::Lease::from_reply("big-pool", &reply);
    let uuid = uuid::Uuid::parse_str(&lease.id).expect("lease id");
    let mut ids: Vec<Vec<u8>> = redis::cmd("ZRANGE")
        .arg("{big-pool}:timeout")
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .expect("ZRANGE");
    ids.sort();
    let expected: Vec<Vec<u8>> = (1..=300u32)
        .map(|n| [&uuid.as_bytes()[..12], &n.to_be_bytes()[..]].concat())
        .collect();
    assert_eq!(ids, expected);
    // The release finds every one of them again.
    app.release(&lease, false).await.assert_status(200);
    let left: u64 = redis::cmd("ZCARD")
        .arg("{big-pool}:timeout")
        .query_async(&mut conn)
        .await
        .expect("ZCARD");
    assert_eq!(left, 0);
    let available: String = redis::cmd("GET")
        .arg("big-pool")
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(available, "400");
}

#[tokio::test]
async fn expired_permits_are_reclaimed_by_either_side() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    // Leasehold's permits run out; Redisson's own script takes them back.
    let short = app
        .acquire_permits("pool", 0, json!({"limit": 2, "permits": 2, "ttl_ms": 150}))
        .await;
    short.assert_status(201);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if redisson_permits(&mut conn, "pool", 2, 150).await.as_deref() == Some("OK") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Redisson never got the expired permits"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Redisson's run out too; a waiting Leasehold acquire takes them back.
    let reply = app
        .acquire_permits("pool", 5_000, json!({"limit": 2, "permits": 2}))
        .await;
    reply.assert_status(201);
    let lease = crate::helpers::Lease::from_reply("pool", &short);
    let seen = app
        .get(&format!("/v1/semaphores/pool/leases/{}", lease.id))
        .await;
    assert_eq!(seen.body["state"], "expired", "{}", seen.body);
}

/// A lock only a Redisson client holds (Leasehold never saw the name) is listed, as `foreign`,
/// on `/v1/locks` and the overview's data; another program's keys are not.
#[tokio::test]
async fn a_lock_only_redisson_holds_is_listed_as_foreign() {
    let app = spawn_app().await;
    let mut conn = app.redis.conn().await;
    assert_eq!(redisson_lock(&mut conn, "nightly-report").await, None);
    redis::cmd("HSET")
        .arg("user:42")
        .arg("name")
        .arg("ann")
        .query_async::<()>(&mut conn)
        .await
        .expect("HSET");
    redis::cmd("SET")
        .arg("cache-entry")
        .arg("x")
        .query_async::<()>(&mut conn)
        .await
        .expect("SET");
    app.lease("leasehold-lock", json!({})).await;

    // Leasehold never saw the name: the sweepers' periodic pass (every 2 s) finds it.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let listing = loop {
        let listing = app.get("/v1/locks").await;
        listing.assert_status(200);
        if listing.body["locks"].as_array().map(Vec::len) == Some(2) {
            break listing;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", listing.body);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let locks = listing.body["locks"].as_array().expect("locks");
    let names: Vec<&str> = locks.iter().filter_map(|l| l["name"].as_str()).collect();
    assert_eq!(names, ["leasehold-lock", "nightly-report"], "{locks:?}");
    let foreign = &locks[1];
    assert_eq!(foreign["kind"], "foreign");
    assert_eq!(foreign["holders"], 1);
    assert_eq!(foreign["holder"], REDISSON_HOLDER);
    // Once Redisson lets go, it is gone from the list.
    assert_eq!(redisson_unlock(&mut conn, "nightly-report").await, Some(1));
    let listing = app.get("/v1/locks").await;
    assert_eq!(listing.body["locks"].as_array().map(Vec::len), Some(1));
}
