//! What the Redis behind Leasehold can lose, read once at startup. A held lock that Redis
//! drops (evicted under memory pressure, or gone in a restart that lost data) can be granted
//! to a second holder; fencing tokens still never go backwards (see `lua/prelude.lua`), but
//! mutual exclusion is only as durable as Redis is. So: say clearly what this Redis keeps,
//! and refuse an eviction policy, which drops held locks in normal operation.

use std::collections::HashMap;

use redis::aio::ConnectionLike;

/// How this Redis keeps data, as far as it tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Durability {
    /// `appendonly yes`.
    pub aof: bool,
    /// `always`, `everysec`, `no`; `None` when CONFIG is not allowed.
    pub appendfsync: Option<String>,
    /// RDB snapshot rules (`save`), empty for none; `None` when CONFIG is not allowed.
    pub save: Option<String>,
    /// `maxmemory-policy`.
    pub eviction: String,
}

#[derive(Debug, thiserror::Error)]
pub enum DurabilityError {
    #[error(
        "Redis evicts keys under memory pressure (maxmemory-policy {0}): a held lock could \
         vanish and be granted twice. Set maxmemory-policy noeviction, or start with \
         --allow-eviction to accept that"
    )]
    Evicts(String),
    #[error("cannot read Redis's persistence settings: {0}")]
    Unreadable(#[source] redis::RedisError),
}

impl Durability {
    /// Reads INFO (allowed everywhere) and CONFIG GET (often not allowed on managed Redis).
    pub async fn read(conn: &mut impl ConnectionLike) -> Result<Self, DurabilityError> {
        let info = |section: &'static str| {
            let mut cmd = redis::cmd("INFO");
            cmd.arg(section);
            cmd
        };
        let persistence: String = info("persistence")
            .query_async(conn)
            .await
            .map_err(DurabilityError::Unreadable)?;
        let memory: String = info("memory")
            .query_async(conn)
            .await
            .map_err(DurabilityError::Unreadable)?;
        let fields: HashMap<&str, &str> = persistence
            .lines()
            .chain(memory.lines())
            .filter_map(|line| line.trim().split_once(':'))
            .collect();
        let appendfsync = config_get(conn, "appendfsync").await;
        let save = config_get(conn, "save").await;
        Ok(Self {
            aof: fields.get("aof_enabled") == Some(&"1"),
            appendfsync,
            save,
            eviction: fields
                .get("maxmemory_policy")
                .unwrap_or(&"noeviction")
                .to_string(),
        })
    }

    /// Logs what a restart of this Redis can lose, and refuses eviction unless allowed.
    pub fn judge(&self, allow_eviction: bool) -> Result<(), DurabilityError> {
        if self.eviction != "noeviction" {
            if !allow_eviction {
                return Err(DurabilityError::Evicts(self.eviction.clone()));
            }
            tracing::warn!(policy = %self.eviction,
                "Redis may evict held locks under memory pressure (--allow-eviction given)");
        }
        match (self.aof, self.appendfsync.as_deref(), self.save.as_deref()) {
            (true, Some("always"), _) => {
                tracing::info!(
                    "Redis writes every change to its AOF before answering: a restart loses no lock"
                );
            }
            (true, fsync, _) => tracing::warn!(
                appendfsync = fsync.unwrap_or("unknown"),
                "Redis may lose its last second of writes in a power loss: a lock granted then \
                 can be granted again after the restart; fencing tokens stay monotonic \
                 (appendfsync always avoids this)"
            ),
            (false, _, Some("")) => tracing::warn!(
                "Redis keeps nothing across a restart: a restart frees every held lock, and \
                 they can be granted again while their holders still work; fencing tokens stay \
                 monotonic (enable appendonly with appendfsync always to avoid this)"
            ),
            (false, _, _) => tracing::warn!(
                "Redis has no AOF: a restart loses the locks granted since its last snapshot \
                 and can grant them twice; fencing tokens stay monotonic (enable appendonly \
                 with appendfsync always to avoid this)"
            ),
        }
        Ok(())
    }
}

/// One `CONFIG GET` value, or `None` where CONFIG is not allowed.
async fn config_get(conn: &mut impl ConnectionLike, name: &str) -> Option<String> {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(name)
        .query_async(conn)
        .await
        .ok()?;
    pair.into_iter().nth(1)
}
