//! Semaphores in RPermitExpirableSemaphore's layout, with Redisson's own acquire script:
//! permits taken by either side, ids past their first byte, expired permits reclaimed.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::spawn_app;

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
