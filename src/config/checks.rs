//! What clap cannot check field by field: combinations of `serve` flags, the RedLock node
//! list, the key prefix's alphabet.

use super::server::{MIN_ADMIN_TOKEN_CHARS, ServeArgs};

/// A combination of `serve` flags that cannot work together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("--min-ttl-ms must be at least 1 and at most --max-ttl-ms")]
    TtlBounds,
    #[error("--default-ttl-ms must lie between --min-ttl-ms and --max-ttl-ms")]
    DefaultTtl,
    #[error("--admin-token must be at least {MIN_ADMIN_TOKEN_CHARS} characters")]
    ShortAdminToken,
    #[error("--redis-timeout-ms must be at least 1")]
    RedisTimeout,
    #[error("--max-permits must be between 1 and 100000")]
    MaxPermits,
    #[error("--max-connections, --max-h2-streams and the timeouts must be at least 1")]
    HttpLimits,
    #[error("a Redis Cluster has only database 0: --redis-db cannot be used with --redis-cluster")]
    ClusterDb,
    #[error(
        "--redlock-nodes needs an odd number of nodes, at least 3 (a majority of an even \
         number tolerates no more failures than one node fewer), got {0}"
    )]
    RedlockCount(usize),
    #[error("--redlock-nodes names {0} twice")]
    RedlockDuplicate(String),
}

/// `--redlock-nodes`: none, or an odd number of at least 3, each once (the same server under
/// two URLs is found at start, by its run id).
pub fn check_redlock_nodes(nodes: &[String]) -> Result<(), ConfigError> {
    if nodes.is_empty() {
        return Ok(());
    }
    if nodes.len() < 3 || nodes.len().is_multiple_of(2) {
        return Err(ConfigError::RedlockCount(nodes.len()));
    }
    let mut seen = std::collections::HashSet::new();
    for node in nodes {
        if !seen.insert(node.trim_end_matches('/')) {
            return Err(ConfigError::RedlockDuplicate(
                crate::redis::connect::redacted(node),
            ));
        }
    }
    Ok(())
}

impl ServeArgs {
    /// Checks what clap cannot check field by field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.min_ttl_ms == 0 || self.min_ttl_ms > self.max_ttl_ms {
            return Err(ConfigError::TtlBounds);
        }
        if !(self.min_ttl_ms..=self.max_ttl_ms).contains(&self.default_ttl_ms) {
            return Err(ConfigError::DefaultTtl);
        }
        if self
            .admin_token
            .as_ref()
            .is_some_and(|t| t.len() < MIN_ADMIN_TOKEN_CHARS)
        {
            return Err(ConfigError::ShortAdminToken);
        }
        if self.redis_timeout_ms == 0 {
            return Err(ConfigError::RedisTimeout);
        }
        if !self.redis_cluster.is_empty() && self.redis_db != 0 {
            return Err(ConfigError::ClusterDb);
        }
        if !(1..=100_000).contains(&self.max_permits) {
            return Err(ConfigError::MaxPermits);
        }
        if self.max_connections == 0
            || self.max_h2_streams == 0
            || [
                self.header_timeout_ms,
                self.idle_timeout_ms,
                self.request_timeout_ms,
                self.body_timeout_ms,
            ]
            .contains(&0)
        {
            return Err(ConfigError::HttpLimits);
        }
        check_redlock_nodes(&self.redlock_nodes)?;
        Ok(())
    }
}
