//! Redis Function libraries: loaded with `FUNCTION LOAD REPLACE` (atomic and idempotent, so
//! every instance may do it, at start-up and whenever a call finds the library gone: a restart
//! without persistence, `FUNCTION FLUSH`, a failover to a node that never had it). On one
//! server that is one load; with several nodes each one that answers "not found" gets it.

use super::Redis;

/// Whether a Redis error says the called function is not there (so: load it and retry).
pub fn is_missing(error: &::redis::RedisError) -> bool {
    error.to_string().contains("Function not found")
}

impl Redis {
    /// Loads the library `text` (or replaces the library of the same name, which has the same
    /// text: its name carries a hash of it).
    pub async fn load_functions(&self, text: &str) -> ::redis::RedisResult<()> {
        ::redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(text)
            .query_async::<String>(&mut self.clone())
            .await?;
        Ok(())
    }
}
