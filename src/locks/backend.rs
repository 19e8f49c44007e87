//! The Redis behind this lock domain as operators and probes see it: whether it answers,
//! its memory, its persistence, its master, its function library.

use super::{LockError, Locks, scripts};
pub use crate::redis::durability::Persistence;
use crate::redis::{RedisMemory, RedisStatus};

/// What [`Locks::backend`] answers about the Redis behind it.
#[derive(Clone, Copy)]
pub struct Backend<'a> {
    locks: &'a Locks,
}

impl Locks {
    /// The Redis behind this domain, for health checks, metrics and the Redis page.
    pub fn backend(&self) -> Backend<'_> {
        Backend { locks: self }
    }
}

impl<'a> Backend<'a> {
    /// Redis's memory now (see `crate::redis::memory`).
    pub async fn memory(self) -> Result<RedisMemory, LockError> {
        Ok(self.locks.inner.conn.memory().await?)
    }

    /// Redis's persistence now: AOF and its fsync, whether the last write to disk worked
    /// (what a restart would lose; `crate::redis::durability` reads it).
    pub async fn persistence(self) -> Result<Persistence, LockError> {
        Ok(self.locks.inner.conn.persistence().await?)
    }

    /// What operators see of the Redis behind this instance (see `crate::redis::status`).
    pub fn status(self) -> RedisStatus {
        self.locks.inner.conn.status()
    }

    /// Whether a Redis master is known (false in Sentinel mode during a failover).
    pub fn master_known(self) -> bool {
        self.locks.inner.conn.has_master()
    }

    /// Checks that Redis answers.
    pub async fn ping(self) -> Result<(), LockError> {
        let mut conn = self.locks.inner.conn.clone();
        redis::cmd("PING").query_async::<()>(&mut conn).await?;
        Ok(())
    }

    /// Loads the library of Lua functions into Redis (see `scripts::library`). Calls load it
    /// on their own when Redis lost it; doing it at start-up finds a Redis without Functions
    /// (before 7.0) at once.
    pub async fn load_functions(self) -> Result<(), LockError> {
        scripts::library::load(&self.locks.inner.conn).await?;
        Ok(())
    }
}
