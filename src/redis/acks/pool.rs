//! The connections that calls waiting for replicas run on. `WAIT` covers the writes of the
//! connection it runs on, and blocks that connection (a `PING` queued behind `WAIT 5 800`
//! came back after 848 ms), so the call and its `WAIT` go one after the other on a
//! connection of a small pool of their own ([`deadpool`]), never on the shared multiplexed
//! one. Connections to a master that is no longer the master are dropped when they come
//! back to the pool.

use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, Cmd, RedisResult, Value};
use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};

use crate::redis::sentinel::Follower;

/// Where the pool's connections go: the one server, the master the Sentinels name now, or
/// a cluster (each pooled connection then is a cluster connection of its own, and a call's
/// `WAIT` goes to the node its function ran on).
#[derive(Clone)]
pub(in crate::redis) enum Target {
    Fixed(Arc<::redis::Client>),
    Following(Arc<Follower>),
    Cluster(Arc<crate::redis::Cluster>),
}

/// A pooled connection, and the master epoch it was made for.
pub(super) struct AckConn {
    pub(super) conn: AckLink,
    pub(super) epoch: u64,
}

pub(super) enum AckLink {
    Node(MultiplexedConnection),
    Cluster(::redis::cluster_async::ClusterConnection),
}

impl AckLink {
    /// Runs `cmd` and, when `changed` says its reply granted or extended something, `WAIT`s
    /// for `required` replicas on the connection it ran on (`WAIT` counts the writes of its
    /// own connection): `(reply, acked)`.
    ///
    /// On a cluster the two go as one pipeline, which redis-rs routes by the call's key and
    /// sends again whole to wherever a `MOVED` or `ASK` points: a `WAIT` sent after the call
    /// would be routed by a slot map that may not know yet where the call went (after a
    /// failover, to the old primary, a replica by then, which refuses `WAIT`; during a slot
    /// move, to a node where this connection wrote nothing, which would count every replica
    /// as having it). The cost: a call that changed nothing waits too, at once while the
    /// replicas keep up, up to the ack timeout while they do not (when grants there are
    /// refused anyway).
    pub(super) async fn call_and_wait(
        &mut self,
        cmd: &Cmd,
        required: u32,
        wait_ms: u64,
        changed: impl FnOnce(&Value) -> bool,
    ) -> RedisResult<(Value, Option<u32>)> {
        let mut wait = ::redis::cmd("WAIT");
        wait.arg(required).arg(wait_ms);
        match self {
            Self::Node(conn) => {
                let value: Value = cmd.query_async(conn).await?;
                if !changed(&value) {
                    return Ok((value, None));
                }
                Ok((value, Some(wait.query_async(conn).await?)))
            }
            Self::Cluster(conn) => {
                let mut pipe = ::redis::pipe();
                pipe.add_command(cmd.clone()).add_command(wait);
                let (value, acked): (Value, u32) = pipe.query_async(conn).await?;
                let changed = changed(&value);
                Ok((value, changed.then_some(acked)))
            }
        }
    }
}

pub(super) struct Manager {
    pub(super) target: Target,
    /// `--redis-timeout-ms`: what a call may take.
    pub(super) timeout: Duration,
    /// The `WAIT` timeout, which a response may take on top of the call's: a `WAIT` that
    /// times out must be answered as `WAIT`'s count (too few: `not_replicated`), not cut
    /// short by the connection as if Redis did not answer (`redis_unavailable`).
    pub(super) wait: Duration,
}

impl Manager {
    fn connect_timeout(&self) -> Duration {
        self.timeout.min(Duration::from_millis(500))
    }

    fn config(&self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout()))
            .set_response_timeout(Some(self.timeout + self.wait))
    }
}

impl managed::Manager for Manager {
    type Type = AckConn;
    type Error = ::redis::RedisError;

    async fn create(&self) -> Result<AckConn, ::redis::RedisError> {
        let (client, epoch) = match &self.target {
            Target::Cluster(cluster) => {
                // A client of its own: the cluster client's per-node response timeout is the
                // Redis timeout, which a `WAIT` waiting its own timeout would race (and
                // lose, with both at their defaults of 1 s).
                let conn = cluster
                    .client_with_timeout(self.timeout + self.wait)?
                    .get_async_connection()
                    .await?;
                return Ok(AckConn {
                    conn: AckLink::Cluster(conn),
                    epoch: 0,
                });
            }
            Target::Fixed(client) => (client.clone(), 0),
            Target::Following(follower) => {
                let master = follower.master_within_timeout().await?;
                (master.client, master.epoch)
            }
        };
        let conn = client
            .get_multiplexed_async_connection_with_config(&self.config())
            .await?;
        Ok(AckConn {
            conn: AckLink::Node(conn),
            epoch,
        })
    }

    async fn recycle(&self, conn: &mut AckConn, _: &Metrics) -> RecycleResult<::redis::RedisError> {
        match &self.target {
            Target::Following(follower)
                if follower.master().map(|m| m.epoch) != Some(conn.epoch) =>
            {
                Err(RecycleError::message("made for an earlier master"))
            }
            _ => Ok(()),
        }
    }
}
