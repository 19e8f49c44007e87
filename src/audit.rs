//! The audit log: every admin action (force releases, semaphore limits, API key changes) with
//! who did it, why and what it removed, in one capped Redis stream (`P{leasehold/}:audit`, about
//! the last 10,000 entries), so every instance writes to and reads from the same log and it
//! outlives restarts. A lock's own history records its force releases as well.

use crate::redis::Redis;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::locks::ForcedRelease;
use crate::tenant::Tenant;

/// Entries kept (approximately: trimming is `MAXLEN ~`).
const KEPT: u64 = 10_000;

/// One admin action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When, on this instance's clock (ms since the Unix epoch).
    pub at_ms: u64,
    /// Who: an API key's name, `admin token`, or `dashboard admin` (with the key's name when
    /// signed in with a key).
    pub by: String,
    /// `force_release`, `force_release_semaphore`, `semaphore_limit`, `key_created`,
    /// `key_rotated`, `key_revoked`.
    pub action: String,
    /// The tenant acted in (or the key's).
    pub tenant: Tenant,
    /// The lock, semaphore or key acted on.
    pub target: String,
    #[serde(default)]
    pub reason: String,
    /// What the action removed or changed (lease ids, the old limit, the key's roles).
    #[serde(default)]
    pub details: Value,
}

/// The details of a force release: the leases (or Redisson holders) it removed.
pub fn removed(forced: &ForcedRelease) -> Value {
    let removed: Vec<String> = forced
        .removed
        .iter()
        .map(|h| {
            h.lease_id
                .map_or_else(|| h.holder_id.clone(), |id| id.to_string())
        })
        .collect();
    serde_json::json!({ "removed": removed })
}

#[derive(Clone)]
pub struct AuditLog {
    conn: Redis,
    stream: String,
}

impl AuditLog {
    pub fn new(conn: Redis, base: &str) -> Self {
        Self {
            conn,
            stream: crate::locks::own_key(base, "audit"),
        }
    }

    /// Appends `entry`. A Redis failure is logged, not raised: the action already happened,
    /// and its answer (and the lock's history) still say so.
    pub async fn record(&self, entry: &AuditEntry) {
        let json = match serde_json::to_string(entry) {
            Ok(json) => json,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode an audit entry");
                return;
            }
        };
        let written = redis::cmd("XADD")
            .arg(&self.stream)
            .arg("MAXLEN")
            .arg("~")
            .arg(KEPT)
            .arg("*")
            .arg("entry")
            .arg(&json)
            .query_async::<String>(&mut self.conn.clone())
            .await;
        match written {
            Ok(_) => tracing::info!(audit = %json, "admin action"),
            Err(e) => tracing::error!(error = %e, audit = %json, "cannot write the audit log"),
        }
    }

    /// The newest entries first, at most `count`, only `tenant`'s when given.
    pub async fn recent(
        &self,
        tenant: Option<&Tenant>,
        count: usize,
    ) -> Result<Vec<AuditEntry>, redis::RedisError> {
        // Reads a bounded window and filters it: a tenant sees its own among the newest.
        let window = if tenant.is_some() { count * 10 } else { count };
        let entries: Vec<(String, Vec<String>)> = redis::cmd("XREVRANGE")
            .arg(&self.stream)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(window)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(entries
            .iter()
            .filter_map(|(_, fields)| {
                let at = fields.iter().position(|f| f == "entry")?;
                serde_json::from_str::<AuditEntry>(fields.get(at + 1)?).ok()
            })
            .filter(|e| tenant.is_none_or(|t| &e.tenant == t))
            .take(count)
            .collect())
    }
}
