//! Whether this instance reaches Redis now, for the lease watches' `degraded` and
//! `recovered`: a probe (`PING`, bounded) every [`PROBE_EVERY`], run only while a watch asks
//! (a [`Health::subscribe`]r exists), so an instance nobody watches through sends nothing.
//! In Sentinel mode a follower that knows no master is unreachable without asking; in
//! Cluster mode every primary is pinged, and a watch confirms with a read of its own lease
//! (a node down takes only its slots' leases with it).

use std::sync::Arc;
use std::time::Duration;

use ::redis::Cmd;
use futures_util::future::join_all;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Redis;

/// How often Redis is probed while someone watches.
pub const PROBE_EVERY: Duration = Duration::from_millis(200);
/// How long a probe may take before Redis counts as unreachable.
pub const PROBE_WITHIN: Duration = Duration::from_millis(300);

/// What the last probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    Up,
    /// Since when (wall clock, ms) no probe was answered.
    Down {
        since_ms: u64,
    },
}

/// The probe's verdicts, for any number of watches.
pub struct Health {
    verdict: watch::Sender<Reach>,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            verdict: watch::Sender::new(Reach::Up),
        }
    }
}

impl Health {
    /// The verdicts from now on: the probe runs while a receiver exists.
    pub fn subscribe(&self) -> watch::Receiver<Reach> {
        self.verdict.subscribe()
    }

    /// The last verdict.
    pub fn reach(&self) -> Reach {
        *self.verdict.borrow()
    }
}

/// Probes `redis` until `shutdown`, while anyone listens to its [`Health`].
pub(super) fn spawn(redis: Redis, shutdown: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let health: Arc<Health> = redis.health.clone();
        let mut tick = tokio::time::interval(PROBE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = shutdown.cancelled() => return,
            }
            if health.verdict.receiver_count() == 0 {
                // Nobody asks: the next one starts from a fresh verdict.
                health.verdict.send_replace(Reach::Up);
                continue;
            }
            let up = tokio::select! {
                up = answers(&redis) => up,
                () = shutdown.cancelled() => return,
            };
            let now = super::wall_ms();
            health.verdict.send_if_modified(|reach| match (up, *reach) {
                (true, Reach::Down { .. }) => {
                    *reach = Reach::Up;
                    true
                }
                (false, Reach::Up) => {
                    *reach = Reach::Down { since_ms: now };
                    true
                }
                _ => false,
            });
        }
    })
}

/// Whether every node this instance writes to answers a `PING` within [`PROBE_WITHIN`].
async fn answers(redis: &Redis) -> bool {
    if redis.follower().is_some() && !redis.has_master() {
        return false;
    }
    let nodes = redis.nodes();
    let pings = nodes.iter().map(|node| async move {
        let ping = redis.on_node::<String>(node.as_deref(), Cmd::new().arg("PING").clone());
        matches!(tokio::time::timeout(PROBE_WITHIN, ping).await, Ok(Ok(_)))
    });
    join_all(pings).await.into_iter().all(|up| up)
}
