//! Injecting a fault in cycles: a few seconds of calm, the fault, its repair, a few seconds to
//! recover, each cycle's window recorded for the checkers. The steps of each fault are
//! grouped by the Redis they need: one `redis-server` (and RedLock nodes), Sentinel, Cluster.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::Instant;

use super::Fault;
use crate::check::{FaultWindow, SERVED_WITHIN_US};
use crate::cluster::{Cluster, Promotion, Return};
use crate::workload::Shared;

/// Injects `fault` in cycles until `shared.running` is cleared; returns the cluster and the
/// windows the fault was on.
/// `strict`: failovers count as losing nothing even without acks (to show, once, that the
/// checkers catch what a failover without acks loses).
pub async fn inject(
    fault: Fault,
    mut cluster: Cluster,
    shared: Arc<Shared>,
    strict: bool,
) -> (Cluster, Vec<FaultWindow>) {
    let mut windows = Vec::new();
    let running = || shared.running.load(Ordering::Relaxed);
    let calm = Duration::from_secs(3);
    // Cluster mode: the faults pick the primaries that serve these names.
    let names: Vec<String> = shared
        .plan
        .families
        .iter()
        .flat_map(|&f| shared.plan.names(f))
        .collect();
    let mut cycle = 0;
    loop {
        // Calm (sampling the AOF meanwhile, for the power-loss cut).
        let until = Instant::now() + calm;
        while Instant::now() < until && running() {
            cluster.sample_aof();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !running() || shared.winding_down.load(Ordering::Relaxed) {
            break;
        }
        if fault.fails_over() {
            // Until its window says from when names must be served again.
            shared.hold_until(u64::MAX);
        }
        let mut cycle_of = Cycle {
            fault,
            cluster: &mut cluster,
            shared: &shared,
            strict,
            names: &names,
            cycle,
            start: shared.recorder.now(),
            windows: &mut windows,
        };
        if fault.sentinel_mode() {
            cycle_of.sentinel().await;
        } else if fault.cluster_mode() {
            cycle_of.cluster().await;
        } else {
            cycle_of.standalone().await;
        }
        cycle += 1;
    }
    (cluster, windows)
}

/// One cycle of a fault: what it needs, and where its windows go.
struct Cycle<'a> {
    fault: Fault,
    cluster: &'a mut Cluster,
    shared: &'a Shared,
    strict: bool,
    names: &'a [String],
    cycle: usize,
    /// When the fault began (the recorder's clock).
    start: u64,
    windows: &'a mut Vec<FaultWindow>,
}

impl Cycle<'_> {
    /// A window from `start` to now: `data_loss` at its start, `exempt` from answering in
    /// time and without 503s.
    fn window(&self, what: &str, data_loss: bool, exempt: bool, start: u64) -> FaultWindow {
        FaultWindow {
            what: what.to_owned(),
            start,
            end: self.shared.recorder.now(),
            data_loss,
            loss_throughout: false,
            exempt,
            answers_in_time: false,
            refuses_new: false,
            served_from: None,
        }
    }

    /// The fault's own window (from the cycle's start).
    fn this(&self, data_loss: bool, exempt: bool) -> FaultWindow {
        self.window(self.fault.name(), data_loss, exempt, self.start)
    }

    /// A failover: every name must be served again soon after the promotion (or, when the
    /// acks cannot be met without the failed node, after its return), and the run goes on
    /// long enough to show whether it was.
    fn served_from(&self, promotion: Option<Promotion>) -> Option<u64> {
        let at = match promotion {
            Some(p) if self.cluster.serves_after_promotion() => self.shared.recorder.at(p.promoted),
            Some(p) => self.shared.recorder.at(p.rejoined),
            None => self.shared.recorder.now(),
        };
        self.shared.hold_until(at + SERVED_WITHIN_US + 500_000);
        Some(at)
    }

    /// Whether a failover now may lose grants (fewer acks than replicas), unless `strict`.
    fn lossy(&self) -> bool {
        self.cluster.failover_may_lose() == Some(true) && !self.strict
    }

    /// A failover's window: lossy throughout when it may lose grants, served again from
    /// `promotion` (or now).
    fn failover_window(&mut self, promotion: Option<Promotion>) {
        let lossy = self.lossy();
        let window = FaultWindow {
            loss_throughout: lossy,
            served_from: self.served_from(promotion),
            ..self.this(lossy, true)
        };
        self.windows.push(window);
    }

    /// The faults of one `redis-server` (and the RedLock nodes).
    async fn standalone(&mut self) {
        let fault = self.fault;
        match fault {
            Fault::RedisCrashAofAlways
            | Fault::RedisCrashAofEverysec
            | Fault::RedisCrashNoPersistence => {
                let lossy = fault != Fault::RedisCrashAofAlways;
                if let Err(e) = self
                    .cluster
                    .crash_redis(fault == Fault::RedisCrashAofEverysec)
                    .await
                {
                    eprintln!("safety: could not restart Redis: {e:#}");
                }
                // Give the instances time to reconnect before calling it healed.
                tokio::time::sleep(Duration::from_millis(1500)).await;
                let window = self.this(lossy, true);
                self.windows.push(window);
            }
            Fault::RedlockNodeKill => {
                let n = self.cycle % self.cluster.redlock_count().max(1);
                self.cluster.kill_redlock_node(n).await;
                // Down longer than any lease's TTL (the longest a reentry asks for is 3 x
                // 1500 ms): a node that restarts empty sooner could let a second holder in
                // while the first still holds its other nodes (antirez's "delayed restart").
                tokio::time::sleep(Duration::from_secs(5)).await;
                if let Err(e) = self.cluster.restart_redlock_node(n).await {
                    eprintln!("safety: could not restart RedLock node {n}: {e:#}");
                }
                // Exempt: calls to the dead node wait out their per-node timeout.
                let window = self.this(false, true);
                self.windows.push(window);
            }
            Fault::RedisFreeze => {
                self.cluster.signal_redis(Signal::SIGSTOP);
                tokio::time::sleep(Duration::from_secs(2)).await;
                self.cluster.signal_redis(Signal::SIGCONT);
                let window = self.this(false, true);
                self.windows.push(window);
            }
            Fault::HolderPause => {
                self.shared.pausing.store(true, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(4)).await;
                self.shared.pausing.store(false, Ordering::Relaxed);
                // Not exempt: nothing but the pausing holders should notice.
                let window = self.this(false, false);
                self.windows.push(window);
            }
            Fault::InstanceKillStop => self.instance_kill_stop().await,
            Fault::SubscriberDrop => self.subscriber_drop().await,
            Fault::RedisFull => {
                let full = self.cluster.set_redis_maxmemory(1).await;
                if let Err(e) = &full {
                    eprintln!("safety: could not fill Redis: {e:#}");
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
                if let Err(e) = self.cluster.set_redis_maxmemory(0).await {
                    eprintln!("safety: could not empty Redis: {e:#}");
                }
                // Not exempt: only what takes memory may be refused (and only with 503).
                let window = FaultWindow {
                    refuses_new: true,
                    ..self.this(false, false)
                };
                self.windows.push(window);
            }
            Fault::Partition => {
                if let Err(e) = self.cluster.partition(true) {
                    eprintln!("safety: could not partition: {e:#}");
                }
                tokio::time::sleep(Duration::from_secs(3)).await;
                let _ = self.cluster.partition(false);
                // The cut-off instance needs a moment to find Redis again.
                tokio::time::sleep(Duration::from_millis(1500)).await;
                let window = self.this(false, true);
                self.windows.push(window);
            }
            // No fault, or another mode's (not run against one `redis-server`).
            _ => {}
        }
    }

    async fn instance_kill_stop(&mut self) {
        self.cluster.kill_instance(0).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        if let Err(e) = self.cluster.start_instance(0).await {
            eprintln!("safety: could not restart instance 0: {e:#}");
        }
        let window = self.window("instance 0 killed", false, true, self.start);
        self.windows.push(window);
        let start = self.shared.recorder.now();
        if self.cluster.instance_count() > 1 {
            self.cluster.signal_instance(1, Signal::SIGSTOP);
            tokio::time::sleep(Duration::from_secs(2)).await;
            self.cluster.signal_instance(1, Signal::SIGCONT);
            let window = self.window("instance 1 stopped", false, true, start);
            self.windows.push(window);
        }
    }

    async fn subscriber_drop(&mut self) {
        for _ in 0..3 {
            if let Ok(mut conn) = self.cluster.redis_conn().await {
                let _: redis::RedisResult<redis::Value> = redis::cmd("CLIENT")
                    .arg("KILL")
                    .arg("TYPE")
                    .arg("pubsub")
                    .query_async(&mut conn)
                    .await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        // Not exempt: clients should not notice.
        let window = self.this(false, false);
        self.windows.push(window);
    }

    /// The faults of a master with replicas and Sentinels.
    async fn sentinel(&mut self) {
        match self.fault {
            Fault::SentinelFailover | Fault::OldMasterReturns => {
                let how = if self.fault == Fault::SentinelFailover {
                    Return::AsReplica
                } else {
                    Return::AsMaster
                };
                let promotion = match self.cluster.fail_over(how).await {
                    Ok((_, promotion)) => Some(promotion),
                    Err(e) => {
                        eprintln!("safety: failover: {e:#}");
                        None
                    }
                };
                // The instances follow within a second; the replicas resync.
                tokio::time::sleep(Duration::from_millis(1500)).await;
                // With fewer acks than replicas, a grant the promoted replica lacks is lost:
                // what the book's safety page says of those modes.
                self.failover_window(promotion);
            }
            Fault::MasterPartition => {
                if let Err(e) = self.cluster.partition_master().await {
                    eprintln!("safety: master partition: {e:#}");
                }
                tokio::time::sleep(Duration::from_millis(1500)).await;
                // With fewer acks than replicas, what the cut-off master granted (or a grant
                // the promoted replica lacks) is lost when it rejoins. Served again from the
                // heal on (the old master is a replica by then).
                self.failover_window(None);
            }
            Fault::ReplicasStalled => {
                self.cluster.signal_replicas(Signal::SIGSTOP);
                tokio::time::sleep(Duration::from_secs(3)).await;
                self.cluster.signal_replicas(Signal::SIGCONT);
                tokio::time::sleep(Duration::from_millis(500)).await;
                let window = self.this(false, true);
                self.windows.push(window);
            }
            _ => {}
        }
    }

    /// The faults of a Redis Cluster.
    async fn cluster(&mut self) {
        let (fault, names, cycle) = (self.fault, self.names, self.cycle);
        match fault {
            Fault::ClusterFailover => {
                // Down longer than names may take to be served again: a shard that serves
                // only once its failed node is back shows.
                let down_for = Duration::from_micros(SERVED_WITHIN_US) + Duration::from_secs(2);
                let promotion = match self.cluster.kill_primary(names, cycle, down_for).await {
                    Ok((what, promotion)) => {
                        eprintln!("safety: {}: {what}", fault.name());
                        Some(promotion)
                    }
                    Err(e) => {
                        eprintln!("safety: {}: {e:#}", fault.name());
                        None
                    }
                };
                // The instances find the new primary within a second (MOVED, or their
                // topology read). Without acks, the promoted replica may lack the last grants.
                tokio::time::sleep(Duration::from_millis(1500)).await;
                self.failover_window(promotion);
            }
            Fault::SlotMigration => {
                match self
                    .cluster
                    .migrate_slots(names, cycle, Duration::from_millis(100))
                    .await
                {
                    Ok(what) => eprintln!("safety: {}: {what}", fault.name()),
                    Err(e) => eprintln!("safety: {}: {e:#}", fault.name()),
                }
                // Nothing is lost and every answer still comes in time; a call over keys on
                // both sides of a slot being moved gets TRYAGAIN until it is done, so 503s are
                // allowed.
                let window = FaultWindow {
                    answers_in_time: true,
                    ..self.this(false, true)
                };
                self.windows.push(window);
            }
            Fault::PrimaryPartition => {
                // Cut off from everything, and in the next cycle from the other nodes only
                // (the instances may write to it until it sees itself alone), in turn; a run
                // without acks starts with the first, one with acks with the second (so a
                // one-cycle smoke run of each sees both).
                let without_acks = self.cluster.failover_may_lose() == Some(true);
                let from_instances = (cycle + usize::from(!without_acks)) % 2 == 0;
                match self
                    .cluster
                    .partition_primary(names, cycle / 2, from_instances)
                    .await
                {
                    Ok(what) => eprintln!("safety: {}: {what}", fault.name()),
                    Err(e) => eprintln!("safety: {}: {e:#}", fault.name()),
                }
                tokio::time::sleep(Duration::from_millis(1500)).await;
                // Without acks, what the cut-off primary granted (or a grant its replica
                // lacks) is lost when it rejoins.
                self.failover_window(None);
            }
            Fault::ReplyLost => {
                match self.cluster.lose_replies(Duration::from_secs(3)).await {
                    Ok(cuts) => eprintln!(
                        "safety: {}: {cuts} connections cut after an FCALL went through",
                        fault.name()
                    ),
                    Err(e) => eprintln!("safety: {}: {e:#}", fault.name()),
                }
                tokio::time::sleep(Duration::from_millis(1000)).await;
                // Nothing is lost: the cut requests' answers are (503 allowed), and a call that
                // ran twice must have done what it would have done once.
                let window = self.this(false, true);
                self.windows.push(window);
            }
            _ => {}
        }
    }
}
