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

/// What a restart of Redis would lose now, for operators (the dashboard's Redis page): the
/// settings read at startup may have changed since, and a failing AOF write or snapshot is
/// only seen here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persistence {
    /// `aof_enabled`.
    pub aof: bool,
    /// `always`, `everysec`, `no`; `None` where CONFIG is not allowed.
    pub appendfsync: Option<String>,
    /// The last AOF write (with AOF) or snapshot (without) succeeded.
    pub writes_ok: bool,
    /// Changes since the last RDB snapshot.
    pub changes_since_save: u64,
    /// When the last RDB snapshot was taken, in Unix seconds.
    pub last_save_unix: u64,
}

impl Persistence {
    /// What a restart loses, in a sentence (as the startup log says it).
    pub fn verdict(&self) -> &'static str {
        match (self.aof, self.appendfsync.as_deref()) {
            (true, Some("always")) => "AOF, fsync before every answer: a restart loses no lock",
            (true, _) => {
                "AOF without fsync on every write: a power loss can lose the last second's grants"
            }
            (false, _) => "no AOF: a restart loses the locks granted since the last snapshot",
        }
    }

    fn parse(info: &str, appendfsync: Option<String>) -> Self {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
                .unwrap_or_default()
        };
        let aof = field("aof_enabled") == "1";
        let status = if aof {
            field("aof_last_write_status")
        } else {
            field("rdb_last_bgsave_status")
        };
        Self {
            aof,
            appendfsync,
            writes_ok: status.is_empty() || status == "ok",
            changes_since_save: field("rdb_changes_since_last_save").parse().unwrap_or(0),
            last_save_unix: field("rdb_last_save_time").parse().unwrap_or(0),
        }
    }
}

impl super::Redis {
    /// The master's persistence now (in a cluster, the first primary's).
    pub async fn persistence(&self) -> redis::RedisResult<Persistence> {
        let node = self.nodes().into_iter().next().flatten();
        let mut info = redis::cmd("INFO");
        info.arg("persistence");
        let text: String = self.on_node(node.as_deref(), info).await?;
        let mut config = redis::cmd("CONFIG");
        config.arg("GET").arg("appendfsync");
        let appendfsync = self
            .on_node::<Vec<String>>(node.as_deref(), config)
            .await
            .ok()
            .and_then(|pair| pair.into_iter().nth(1));
        Ok(Persistence::parse(&text, appendfsync))
    }
}
