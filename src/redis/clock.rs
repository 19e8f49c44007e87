//! Redis's clock, as this process estimates it: the offset between the local wall clock and
//! a Redis node's `TIME`, refreshed in the background. Scripts that change state get a
//! deadline in Redis time (now + the Redis timeout) after which they change nothing, so a
//! command whose request was already answered 503 (delayed by a partition, or queued in a
//! frozen Redis) never takes effect behind its client's back.
//!
//! The decision for several nodes: one offset per node, kept by the handle that talks to it.
//! A deadline only means something on the clock of the node that runs the script, and no
//! node's clock says anything about another's; "relative" deadlines (a duration the script
//! adds to its own `TIME`) cannot work, since the script cannot know how long the command
//! waited before it ran, which is the delay the deadline exists to bound. A standalone
//! server has one clock; a Sentinel deployment's clock is measured again when the master
//! changes. A Cluster measures every primary and goes by the slowest clock (the smallest
//! offset): a deadline so set comes no later on any node than meant (a node ahead by Δ
//! refuses Δ sooner, never later), and a wait past a deadline waits for the slowest node too.
//! The cost is Δ less time on the faster nodes, milliseconds with NTP; choosing the clock by
//! the key's slot would need the slot map at every call and could pick a node the slot just
//! left.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Redis;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How often the offset is measured again (clocks drift; NTP steps them).
const RESYNC_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub struct RedisClock {
    /// Redis time minus local time, in ms.
    offset_ms: AtomicI64,
    known: AtomicBool,
}

/// This machine's wall clock, in ms since the Unix epoch: the one definition the crate uses
/// for "now" where Redis's clock is not involved (audit entries, ages shown to people).
pub fn wall_ms() -> u64 {
    u64::try_from(local_ms()).unwrap_or(0)
}

fn local_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl RedisClock {
    /// The Redis-time deadline for a script sent now and answered (at the latest) within
    /// `within`; 0 (no deadline) until the offset has been measured once.
    pub fn deadline(&self, within: Duration) -> u64 {
        if !self.known.load(Ordering::Relaxed) {
            return 0;
        }
        let now = local_ms() + self.offset_ms.load(Ordering::Relaxed);
        let within = i64::try_from(within.as_millis()).unwrap_or(i64::MAX);
        u64::try_from(now.saturating_add(within)).unwrap_or(0)
    }

    /// Redis's clock now, as estimated here (ms since the Unix epoch; the local clock until
    /// the offset has been measured).
    pub fn now_ms(&self) -> u64 {
        let now = local_ms() + self.offset_ms.load(Ordering::Relaxed);
        u64::try_from(now).unwrap_or(0)
    }

    /// Returns once Redis's clock is past `deadline` (a script deadline; 0: none), by this
    /// estimate plus a margin for its error. A script whose answer was lost (the connection
    /// dropped, or was reset because another command timed out) may still be queued in Redis:
    /// its request is answered 503 only when it can no longer take effect.
    pub async fn wait_past(&self, deadline: u64) {
        const MARGIN_MS: u64 = 50;
        if deadline == 0 {
            return;
        }
        let left = (deadline + MARGIN_MS).saturating_sub(self.now_ms());
        tokio::time::sleep(std::time::Duration::from_millis(left)).await;
    }

    /// Measures the offset with one `TIME` per node (its round trip halved is the error);
    /// with several nodes, keeps the slowest clock's (see the module docs).
    pub async fn sync(&self, conn: &mut Redis) -> redis::RedisResult<()> {
        let mut slowest: Option<i64> = None;
        for node in conn.nodes() {
            let before = local_ms();
            let (secs, micros): (i64, i64) =
                conn.on_node(node.as_deref(), redis::cmd("TIME")).await?;
            let after = local_ms();
            let offset = secs * 1000 + micros / 1000 - (before + after) / 2;
            slowest = Some(slowest.map_or(offset, |s| s.min(offset)));
        }
        if let Some(offset) = slowest {
            self.offset_ms.store(offset, Ordering::Relaxed);
            self.known.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Keeps the offset fresh until `shutdown`.
    pub fn spawn_sync(
        self: std::sync::Arc<Self>,
        mut conn: Redis,
        shutdown: CancellationToken,
    ) -> JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                if let Err(e) = self.sync(&mut conn).await {
                    tracing::debug!(error = %e, "could not read Redis's clock");
                }
                tokio::select! {
                    () = tokio::time::sleep(RESYNC_EVERY) => {}
                    () = shutdown.cancelled() => return,
                }
            }
        })
    }
}
