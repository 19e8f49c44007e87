//! API keys: `lhk_` + 256 random bits, shown once; Redis keeps only their SHA-256, so every
//! instance agrees on which keys exist. Keys belong to the deployment (under its key prefix,
//! outside every tenant's key space): an operator lists and revokes them in one place.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P{leasehold/}:keys` | hash | key id → the key's record (JSON): name, tenant, roles, name patterns, quotas, the digests of its valid secrets |
//! | `P{leasehold/}:key-names` | hash | `<tenant>/<name>` → key id (names are unique within a tenant) |
//! | `P{leasehold/}:key:<sha256>` | string | key id; expires with a rotated-out secret's grace |
//! | `P{leasehold/}:key-counts` | hash | tenant → its keys (what `--max-keys-per-tenant` caps) |
//!
//! (`{leasehold/}`: no lock name reaches these keys, see `own_keys`.)
//!
//! Lookups are cached in-process for at most [`CACHE_TTL`]: a revocation (or a rotation's
//! end) is seen by every instance within that long, and a request costs no Redis round trip
//! for its key most of the time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::redis::{Redis, wall_ms};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use super::key_cache::CACHE_TTL;
use super::key_cache::{CacheKey, Identified, KeyCache};
use super::principal::{NamePatterns, Role};
use crate::locks::{TokenDigest, own_key, random_secret};
use crate::tenant::Tenant;

/// What every API key starts with, so secret scanners can spot one.
pub const KEY_PREFIX: &str = "lhk_";
/// Longest key name.
pub const NAME_MAX: usize = 100;

/// Optional per-key bounds; `None` takes the server's default for keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyQuotas {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leases: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiters: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<u64>,
    /// Bytes of Redis state (see `limits::budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_permits: Option<u32>,
}

/// One secret a key can be presented with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Secret {
    /// SHA-256 of the secret, hex.
    digest: String,
    /// When a rotated-out secret stops working (ms since the epoch); `None`: the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at_ms: Option<u64>,
}

/// An API key as Redis keeps it (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub id: String,
    pub name: String,
    pub tenant: Tenant,
    pub roles: Vec<Role>,
    pub patterns: Vec<String>,
    #[serde(default)]
    pub quotas: KeyQuotas,
    pub created_at_ms: u64,
    pub created_by: String,
    secrets: Vec<Secret>,
}

impl Identified for KeyRecord {
    fn id(&self) -> &str {
        &self.id
    }
}

impl KeyRecord {
    /// Until when a rotated-out secret still works, while one does.
    pub fn rotating_until_ms(&self, now_ms: u64) -> Option<u64> {
        self.secrets
            .iter()
            .filter_map(|s| s.expires_at_ms)
            .find(|&at| at > now_ms)
    }

    fn accepts(&self, digest: &str, now_ms: u64) -> bool {
        self.secrets
            .iter()
            .any(|s| s.digest == digest && s.expires_at_ms.is_none_or(|at| at > now_ms))
    }
}

/// What a new key is made of.
#[derive(Debug, Clone)]
pub struct NewKey {
    pub name: String,
    pub tenant: Tenant,
    pub roles: Vec<Role>,
    pub patterns: NamePatterns,
    pub quotas: KeyQuotas,
}

/// A key's secret, shown once. Its `Debug` hides it.
#[derive(Clone)]
pub struct KeySecret(String);

impl KeySecret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeySecret(..)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("a key named {0:?} exists in this tenant")]
    NameTaken(String),
    #[error("no such API key")]
    NotFound,
    #[error("a key name has 1 to {NAME_MAX} printable ASCII characters")]
    InvalidName,
    #[error("a key needs at least one role")]
    NoRole,
    #[error("tenant {tenant} has {cap} keys, as many as it may (--max-keys-per-tenant)")]
    TenantFull { tenant: Tenant, cap: u64 },
    #[error("Redis is unavailable: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("a stored key record is unreadable: {0}")]
    Corrupt(#[from] serde_json::Error),
}

/// The API keys of the deployment; cheap to clone.
#[derive(Clone)]
pub struct KeyStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Redis,
    records: String,
    names: String,
    by_digest: String,
    counts: String,
    cache: KeyCache<KeyRecord>,
    any: Mutex<Option<(Instant, bool)>>,
}

impl KeyStore {
    /// The store under the deployment's key prefix `base`.
    pub fn new(conn: Redis, base: &str) -> Self {
        Self {
            inner: Arc::new(Inner {
                conn,
                records: own_key(base, "keys"),
                names: own_key(base, "key-names"),
                by_digest: own_key(base, "key:"),
                counts: own_key(base, "key-counts"),
                cache: KeyCache::default(),
                any: Mutex::default(),
            }),
        }
    }

    fn conn(&self) -> Redis {
        self.inner.conn.clone()
    }

    /// The key `secret` proves, if it is a valid one (cached up to [`CACHE_TTL`]).
    pub async fn resolve(&self, secret: &str) -> Result<Option<Arc<KeyRecord>>, KeyError> {
        let digest = TokenDigest::of(secret).hex();
        let cache_key = CacheKey::Digest(digest.clone());
        if let Some(hit) = self.cached(&cache_key) {
            return Ok(hit);
        }
        let id: Option<String> = redis::cmd("GET")
            .arg(format!("{}{digest}", self.inner.by_digest))
            .query_async(&mut self.conn())
            .await?;
        let record = match id {
            Some(id) => self
                .read(&id)
                .await?
                .filter(|r| r.accepts(&digest, wall_ms())),
            None => None,
        };
        let record = record.map(Arc::new);
        self.remember(cache_key, record.clone());
        Ok(record)
    }

    /// The key with this id, if it still exists (cached up to [`CACHE_TTL`]): how dashboard
    /// sessions signed in with a key follow its revocation.
    pub async fn by_id(&self, id: &str) -> Result<Option<Arc<KeyRecord>>, KeyError> {
        let cache_key = CacheKey::Id(id.to_owned());
        if let Some(hit) = self.cached(&cache_key) {
            return Ok(hit);
        }
        let record = self.read(id).await?.map(Arc::new);
        self.remember(cache_key, record.clone());
        Ok(record)
    }

    /// Whether any key exists (cached up to [`CACHE_TTL`]); while none does, a loopback
    /// server lets anonymous callers in.
    pub async fn any_exist(&self) -> Result<bool, KeyError> {
        if let Some((at, any)) = *self
            .inner
            .any
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            && at.elapsed() < CACHE_TTL
        {
            return Ok(any);
        }
        let count: u64 = redis::cmd("HLEN")
            .arg(&self.inner.records)
            .query_async(&mut self.conn())
            .await?;
        *self
            .inner
            .any
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), count > 0));
        Ok(count > 0)
    }

    /// Makes a key; the secret is returned here and never again.
    /// [`Self::create`], when `new`'s tenant has fewer than `cap` keys (counted atomically:
    /// keys made at once cannot pass the cap together).
    pub async fn create_within(
        &self,
        new: NewKey,
        by: &str,
        cap: u64,
    ) -> Result<(KeyRecord, KeySecret), KeyError> {
        let tenant = new.tenant.clone();
        self.take_slot(&tenant, cap).await?;
        let made = self.create(new, by).await;
        if made.is_err() {
            self.give_slot(&tenant).await;
        }
        made
    }

    /// One more key of `tenant`, unless it has `cap` already. A tenant counted for the first
    /// time (keys made before the count existed) is counted from its keys first.
    async fn take_slot(&self, tenant: &Tenant, cap: u64) -> Result<(), KeyError> {
        if cap == u64::MAX {
            return Ok(());
        }
        let counted: bool = redis::cmd("HEXISTS")
            .arg(&self.inner.counts)
            .arg(tenant.as_str())
            .query_async(&mut self.conn())
            .await?;
        if !counted {
            let existing = self.list(Some(tenant)).await?.len();
            let _: () = redis::cmd("HSETNX")
                .arg(&self.inner.counts)
                .arg(tenant.as_str())
                .arg(existing)
                .query_async(&mut self.conn())
                .await?;
        }
        let n: u64 = redis::cmd("HINCRBY")
            .arg(&self.inner.counts)
            .arg(tenant.as_str())
            .arg(1)
            .query_async(&mut self.conn())
            .await?;
        if n > cap {
            self.give_slot(tenant).await;
            return Err(KeyError::TenantFull {
                tenant: tenant.clone(),
                cap,
            });
        }
        Ok(())
    }

    async fn give_slot(&self, tenant: &Tenant) {
        let given: redis::RedisResult<i64> = redis::cmd("HINCRBY")
            .arg(&self.inner.counts)
            .arg(tenant.as_str())
            .arg(-1)
            .query_async(&mut self.conn())
            .await;
        if let Err(e) = given {
            tracing::warn!(error = %e, "cannot count a key out of its tenant's keys");
        }
    }

    pub async fn create(&self, new: NewKey, by: &str) -> Result<(KeyRecord, KeySecret), KeyError> {
        let name = new.name.trim().to_owned();
        if name.is_empty()
            || name.len() > NAME_MAX
            || !name.chars().all(|c| c.is_ascii_graphic() || c == ' ')
        {
            return Err(KeyError::InvalidName);
        }
        let mut roles = new.roles;
        roles.sort_by_key(|r| r.as_str());
        roles.dedup();
        if roles.is_empty() {
            return Err(KeyError::NoRole);
        }
        let id = Uuid::now_v7().to_string();
        let name_field = format!("{}/{name}", new.tenant.as_str());
        let claimed: bool = redis::cmd("HSETNX")
            .arg(&self.inner.names)
            .arg(&name_field)
            .arg(&id)
            .query_async(&mut self.conn())
            .await?;
        if !claimed {
            return Err(KeyError::NameTaken(name));
        }
        let secret = KeySecret(random_secret(KEY_PREFIX, 32));
        let digest = TokenDigest::of(secret.expose()).hex();
        let record = KeyRecord {
            id: id.clone(),
            name,
            tenant: new.tenant,
            roles,
            patterns: new.patterns.as_slice().to_vec(),
            quotas: new.quotas,
            created_at_ms: wall_ms(),
            created_by: by.to_owned(),
            secrets: vec![Secret {
                digest: digest.clone(),
                expires_at_ms: None,
            }],
        };
        redis::pipe()
            .atomic()
            .hset(&self.inner.records, &id, serde_json::to_string(&record)?)
            .set(format!("{}{digest}", self.inner.by_digest), &id)
            .query_async::<()>(&mut self.conn())
            .await?;
        self.forget_any();
        Ok((record, secret))
    }

    /// Every key, or only `tenant`'s, by name.
    pub async fn list(&self, tenant: Option<&Tenant>) -> Result<Vec<KeyRecord>, KeyError> {
        let all: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(&self.inner.records)
            .query_async(&mut self.conn())
            .await?;
        let mut keys = all
            .values()
            .map(|json| serde_json::from_str::<KeyRecord>(json))
            .collect::<Result<Vec<_>, _>>()?;
        keys.retain(|k| tenant.is_none_or(|t| &k.tenant == t));
        keys.sort_by(|a, b| (&a.tenant, &a.name).cmp(&(&b.tenant, &b.name)));
        Ok(keys)
    }

    /// The key with this id, read from Redis (no cache).
    pub async fn read(&self, id: &str) -> Result<Option<KeyRecord>, KeyError> {
        let json: Option<String> = redis::cmd("HGET")
            .arg(&self.inner.records)
            .arg(id)
            .query_async(&mut self.conn())
            .await?;
        Ok(json.map(|j| serde_json::from_str(&j)).transpose()?)
    }

    /// Gives the key a new secret; the current one keeps working for `grace` (two valid
    /// secrets while clients switch), any older one stops now.
    pub async fn rotate(
        &self,
        id: &str,
        grace: Duration,
    ) -> Result<(KeyRecord, KeySecret), KeyError> {
        let mut record = self.read(id).await?.ok_or(KeyError::NotFound)?;
        let now = wall_ms();
        let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        let secret = KeySecret(random_secret(KEY_PREFIX, 32));
        let digest = TokenDigest::of(secret.expose()).hex();
        let mut pipe = redis::pipe();
        pipe.atomic();
        let mut kept = vec![Secret {
            digest: digest.clone(),
            expires_at_ms: None,
        }];
        for old in record.secrets.drain(..) {
            let key = format!("{}{}", self.inner.by_digest, old.digest);
            match old.expires_at_ms {
                None if grace_ms > 0 => {
                    pipe.pexpire(&key, i64::try_from(grace_ms).unwrap_or(i64::MAX));
                    kept.push(Secret {
                        digest: old.digest,
                        expires_at_ms: Some(now.saturating_add(grace_ms)),
                    });
                }
                _ => {
                    pipe.del(&key);
                }
            }
        }
        record.secrets = kept;
        pipe.hset(&self.inner.records, id, serde_json::to_string(&record)?)
            .set(format!("{}{digest}", self.inner.by_digest), id);
        pipe.query_async::<()>(&mut self.conn()).await?;
        self.forget(id);
        Ok((record, secret))
    }

    /// Deletes the key: every instance refuses it within [`CACHE_TTL`].
    pub async fn revoke(&self, id: &str) -> Result<KeyRecord, KeyError> {
        let record = self.read(id).await?.ok_or(KeyError::NotFound)?;
        let mut pipe = redis::pipe();
        pipe.atomic().hdel(&self.inner.records, id).hdel(
            &self.inner.names,
            format!("{}/{}", record.tenant.as_str(), record.name),
        );
        for s in &record.secrets {
            pipe.del(format!("{}{}", self.inner.by_digest, s.digest));
        }
        pipe.query_async::<()>(&mut self.conn()).await?;
        self.forget(id);
        self.forget_any();
        self.give_slot(&record.tenant).await;
        Ok(record)
    }

    fn cached(&self, key: &CacheKey) -> Option<Option<Arc<KeyRecord>>> {
        self.inner.cache.get(key)
    }

    fn remember(&self, key: CacheKey, record: Option<Arc<KeyRecord>>) {
        self.inner.cache.put(key, record);
    }

    /// Drops this instance's cached view of key `id` (others' expire within the TTL).
    fn forget(&self, id: &str) {
        self.inner.cache.forget(id);
    }

    fn forget_any(&self) {
        *self
            .inner
            .any
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
    }
}
