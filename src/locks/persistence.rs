//! What a restart of the Redis behind this instance would lose, for the operators' Redis page
//! (`crate::redis::durability` reads it).

use super::{LockError, Locks};
pub use crate::redis::durability::Persistence;

impl Locks {
    /// Redis's persistence now: AOF and its fsync, whether the last write to disk worked.
    pub async fn redis_persistence(&self) -> Result<Persistence, LockError> {
        Ok(self.inner.conn.persistence().await?)
    }
}
