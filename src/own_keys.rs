//! Leasehold's own keys: the data of the deployment that is no lock (API keys, dashboard
//! sessions and their secret, the audit log, each key space's events backlog), under a hash
//! tag no lock, semaphore or tenant name can produce.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P{leasehold/}:keys`, `..:key-names`, `..:key:<sha256>` | hash, hash, string | API keys (see `auth::keys`) |
//! | `P{leasehold/}:session:<sha256>`, `..:dashboard-secret` | string | dashboard sessions (see `auth::session`) |
//! | `P{leasehold/}:audit` | stream | the audit log (see `audit`) |
//! | `P[tenant/]{leasehold/}:events:recent` | stream | a key space's events backlog (see `locks::journal`) |
//!
//! Why no lock reaches them: a lock's key is `L = P + [tenant + "/"] + name`, and a name ends
//! with one of `[A-Za-z0-9._:-]`, so `L` never ends with `/`; every other key of a lock holds
//! `{L}`, which is therefore never `{leasehold/}`; and `L` itself holds no brace (neither
//! names, tenants nor prefixes may). Before this layout the same data lived at
//! `P + "leasehold:keys"` and so on, which the lock named `leasehold:keys` is: [`migrate`]
//! moves a deployment's data from there on start. The one tag also puts all of it in one
//! Redis Cluster slot, so the key store's transactions stay in one slot.

use std::collections::HashMap;

use crate::redis::Redis;

pub use crate::locks::{OWN_TAG as TAG, own_key as key};

/// Where an earlier version kept own key `rest` of key space `space`.
fn legacy(space: &str, rest: &str) -> String {
    format!("{space}leasehold:{rest}")
}

/// What [`migrate`] moved.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Moved {
    /// Keys moved whole (renamed), or merged into what the new place held already.
    pub keys: usize,
    /// Fields moved out of a hash that a lock holds now (its lock fields stay).
    pub fields: usize,
}

/// Moves the own data an earlier version kept under `P + "leasehold:..."` to its place under
/// [`TAG`], idempotently (run on every start: an instance of the earlier version still running
/// beside this one may have written more since). A key is moved only when it has the type
/// and shape Leasehold wrote, so a lock or semaphore that took one of those names is left as it
/// is; where a lock took the key store's hash and Leasehold's records were written into it, the
/// records move and the lock's fields stay.
pub async fn migrate(conn: &mut Redis, base: &str) -> redis::RedisResult<Moved> {
    let mut moved = Moved::default();
    // The key store's two hashes: field by field, each kept where the new place has none.
    let records = move_fields(conn, &legacy(base, "keys"), &key(base, "keys"), |_, v| {
        v.starts_with('{')
    })
    .await?;
    let names = move_fields(
        conn,
        &legacy(base, "key-names"),
        &key(base, "key-names"),
        |f, _| f.contains('/'),
    )
    .await?;
    for (n, whole) in [records, names] {
        moved.fields += if whole { 0 } else { n };
        moved.keys += usize::from(whole && n > 0);
    }
    for rest in ["audit", "dashboard-secret"] {
        moved.keys += usize::from(move_key(conn, &legacy(base, rest), &key(base, rest)).await?);
    }
    // Sessions, key digests and every key space's events backlog: found by one walk.
    let pattern = format!("{base}*leasehold:*");
    let mut cursor = 0u64;
    loop {
        let (next, found) = conn.scan_page(cursor, &pattern, 1000).await?;
        for old in found {
            if let Some(new) = new_place(base, &old) {
                moved.keys += usize::from(move_key(conn, &old, &new).await?);
            }
        }
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    if moved != Moved::default() {
        tracing::info!(
            keys = moved.keys,
            fields = moved.fields,
            "moved Leasehold's own data under {TAG} (from an earlier version's layout)"
        );
    }
    Ok(moved)
}

/// The new place of a key the walk found, for the keys moved whole that it must find: a
/// session, a key digest, a key space's events backlog.
fn new_place(base: &str, old: &str) -> Option<String> {
    let rest = old.strip_prefix(base)?;
    if let Some(id) = rest.strip_prefix("leasehold:session:") {
        return Some(key(base, &format!("session:{id}")));
    }
    if let Some(digest) = rest.strip_prefix("leasehold:key:") {
        return Some(key(base, &format!("key:{digest}")));
    }
    let space = rest.strip_suffix("leasehold:events:recent")?;
    // The default space, or a tenant's (`<tenant>/`).
    (space.is_empty() || (space.ends_with('/') && !space[..space.len() - 1].contains('/')))
        .then(|| key(&format!("{base}{space}"), "events:recent"))
}

/// The type and shape Leasehold wrote at `old`: a stream (audit log, backlog) or a string
/// whose text is one Leasehold writes (a session's JSON, a key id, a 43-character secret);
/// a semaphore's count or a lock's hash is none of them.
async fn ours(conn: &mut Redis, old: &str) -> redis::RedisResult<bool> {
    let kind: String = redis::cmd("TYPE").arg(old).query_async(conn).await?;
    Ok(match kind.as_str() {
        "stream" => true,
        "string" => {
            let text: Option<String> = redis::cmd("GET").arg(old).query_async(conn).await?;
            text.is_some_and(|t| {
                t.starts_with('{')
                    || uuid::Uuid::parse_str(&t).is_ok()
                    || (t.len() == 43
                        && t.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                        && !t.bytes().all(|b| b.is_ascii_digit()))
            })
        }
        _ => false,
    })
}

/// Moves `old` to `new` whole when it is Leasehold's and `new` is free (RENAMENX keeps its
/// expiry); a stream both places hold (written by an older instance after an earlier move)
/// has its entries appended to the new one. Whether anything moved.
async fn move_key(conn: &mut Redis, old: &str, new: &str) -> redis::RedisResult<bool> {
    if !ours(conn, old).await? {
        return Ok(false);
    }
    let renamed: bool = redis::cmd("RENAMENX")
        .arg(old)
        .arg(new)
        .query_async(conn)
        .await?;
    if renamed {
        return Ok(true);
    }
    let new_kind: String = redis::cmd("TYPE").arg(new).query_async(conn).await?;
    let old_kind: String = redis::cmd("TYPE").arg(old).query_async(conn).await?;
    if new_kind == "stream" && old_kind == "stream" {
        let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
            .arg(old)
            .arg("-")
            .arg("+")
            .query_async(conn)
            .await?;
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (_, fields) in &entries {
            pipe.cmd("XADD").arg(new).arg("*").arg(fields).ignore();
        }
        pipe.del(old).ignore();
        pipe.query_async::<()>(conn).await?;
        return Ok(true);
    }
    // Both places hold the same kind of record (a secret, a session): the new one stands.
    tracing::warn!(
        key = old,
        "left in place: the new layout holds {new} already"
    );
    Ok(false)
}

/// Moves the fields of hash `old` that `take` picks into hash `new` (each unless `new` has
/// it), then deletes them from `old`; the rest of `old` (a lock's fields) stays. Returns how
/// many moved and whether they were all of `old`.
async fn move_fields(
    conn: &mut Redis,
    old: &str,
    new: &str,
    take: impl Fn(&str, &str) -> bool,
) -> redis::RedisResult<(usize, bool)> {
    let kind: String = redis::cmd("TYPE").arg(old).query_async(conn).await?;
    if kind != "hash" {
        return Ok((0, false));
    }
    let all: HashMap<String, String> = redis::cmd("HGETALL").arg(old).query_async(conn).await?;
    let picked: Vec<(&String, &String)> = all.iter().filter(|(f, v)| take(f, v)).collect();
    if picked.is_empty() {
        return Ok((0, false));
    }
    let mut pipe = redis::pipe();
    pipe.atomic();
    for (field, value) in &picked {
        pipe.hset_nx(new, *field, *value).ignore();
        pipe.hdel(old, *field).ignore();
    }
    pipe.query_async::<()>(conn).await?;
    Ok((picked.len(), picked.len() == all.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_finds_each_moved_key_its_new_place() {
        let s = "0".repeat(64);
        assert_eq!(
            new_place("", &format!("leasehold:session:{s}")),
            Some(format!("{{leasehold/}}:session:{s}"))
        );
        assert_eq!(
            new_place("app:", &format!("app:leasehold:key:{s}")),
            Some(format!("app:{{leasehold/}}:key:{s}"))
        );
        assert_eq!(
            new_place("", "leasehold:events:recent"),
            Some("{leasehold/}:events:recent".into())
        );
        assert_eq!(
            new_place("p:", "p:acme/leasehold:events:recent"),
            Some("p:acme/{leasehold/}:events:recent".into())
        );
        // A lock whose name merely ends like a backlog is no key space's.
        assert_eq!(new_place("", "x:leasehold:events:recent"), None);
        assert_eq!(new_place("", "leasehold:audit"), None);
    }
}
