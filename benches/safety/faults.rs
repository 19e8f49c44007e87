//! The faults, each injected again and again while the clients run: a few seconds of calm,
//! the fault, its repair, a few seconds to recover. Every fault's window is recorded for the
//! checkers (which answers may be 503 or slow, and when Redis lost data).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::Instant;

use crate::check::{FaultWindow, SERVED_WITHIN_US};
use crate::cluster::{Cluster, Persistence, Promotion, Return};
use crate::workload::Shared;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No fault: the baseline.
    None,
    /// `kill -9` of Redis and a restart, AOF with fsync before every reply.
    RedisCrashAofAlways,
    /// `kill -9` of Redis, its AOF cut back by the last second (as a power loss under
    /// `appendfsync everysec` leaves it), and a restart.
    RedisCrashAofEverysec,
    /// `kill -9` of Redis without persistence: it comes back empty.
    RedisCrashNoPersistence,
    /// Redis SIGSTOPped for longer than any lease's TTL, then resumed.
    RedisFreeze,
    /// A holder stops heartbeating past its TTL and then writes to the fenced resource.
    HolderPause,
    /// One Leasehold instance `kill -9` (and restarted), another SIGSTOPped and resumed.
    InstanceKillStop,
    /// `CLIENT KILL TYPE pubsub` while waiters are parked.
    SubscriberDrop,
    /// Every packet between one instance and Redis dropped (iptables on a veth pair into a
    /// network namespace of its own), then let through again.
    Partition,
    /// Redis at its `maxmemory` (`noeviction`) for 2 s: new leases are refused (503
    /// `redis_full`), every release, heartbeat and ticket leave must still be answered.
    RedisFull,
    /// Sentinel mode: `kill -9` of the master; the Sentinels promote a replica, the
    /// instances follow, the killed node comes back as a replica.
    SentinelFailover,
    /// Sentinel mode: the killed master restarts with its data right after the promotion,
    /// a writable master until the Sentinels demote it; nothing may be written to it.
    OldMasterReturns,
    /// Sentinel mode: every replica SIGSTOPped for 3 s: with acks, grants are refused (503
    /// `not_replicated`) and none may stand.
    ReplicasStalled,
    /// Sentinel mode: the master cut off from its replicas and the Sentinels (iptables)
    /// while the instances still reach it, until the Sentinels promote a replica.
    MasterPartition,
    /// Cluster mode: `kill -9` of a primary serving live locks; its replica is promoted, the
    /// node comes back (empty) and rejoins as a replica.
    ClusterFailover,
    /// Cluster mode: the slots of live locks moved key by key (`MIGRATE`, pausing) from one
    /// primary to another and back while the clients work: MOVED, ASK and TRYAGAIN.
    SlotMigration,
    /// Cluster mode: a primary serving live locks cut off by iptables until its replica is
    /// promoted (in turn from everything, and from the other nodes only while the instances
    /// still reach it), then let back in to rejoin as a replica.
    PrimaryPartition,
    /// Cluster mode, each node behind a proxy: for 3 s the instances' connections are cut
    /// right after a request with an FCALL went through, before its reply: the function ran,
    /// redis-rs re-sends it, it runs again.
    ReplyLost,
    /// RedLock (3 nodes; the workload takes RedLock leases besides the rest): `kill -9` of
    /// one RedLock node in turn, kept down longer than any TTL (antirez's delayed restart),
    /// then restarted empty. A majority is left throughout: grants go on, and no two holders.
    RedlockNodeKill,
}

impl Fault {
    pub const ALL: [Self; 19] = [
        Self::None,
        Self::RedisCrashAofAlways,
        Self::RedisCrashAofEverysec,
        Self::RedisCrashNoPersistence,
        Self::RedisFreeze,
        Self::HolderPause,
        Self::InstanceKillStop,
        Self::SubscriberDrop,
        Self::Partition,
        Self::RedisFull,
        Self::SentinelFailover,
        Self::OldMasterReturns,
        Self::ReplicasStalled,
        Self::MasterPartition,
        Self::ClusterFailover,
        Self::SlotMigration,
        Self::PrimaryPartition,
        Self::ReplyLost,
        Self::RedlockNodeKill,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::RedisCrashAofAlways => "redis-crash-aof-always",
            Self::RedisCrashAofEverysec => "redis-crash-aof-everysec",
            Self::RedisCrashNoPersistence => "redis-crash-no-persistence",
            Self::RedisFreeze => "redis-freeze",
            Self::HolderPause => "holder-pause",
            Self::InstanceKillStop => "instance-kill-stop",
            Self::SubscriberDrop => "subscriber-drop",
            Self::Partition => "partition",
            Self::RedisFull => "redis-full",
            Self::SentinelFailover => "sentinel-failover",
            Self::OldMasterReturns => "old-master-returns",
            Self::ReplicasStalled => "replicas-stalled",
            Self::MasterPartition => "master-partition",
            Self::ClusterFailover => "cluster-failover",
            Self::SlotMigration => "slot-migration",
            Self::PrimaryPartition => "primary-partition",
            Self::ReplyLost => "reply-lost",
            Self::RedlockNodeKill => "redlock-node-kill",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == raw)
    }

    pub fn describe(self) -> &'static str {
        match self {
            Self::None => "no fault",
            Self::RedisCrashAofAlways => "Redis kill -9 + restart, AOF fsync always",
            Self::RedisCrashAofEverysec => {
                "Redis kill -9, AOF cut by its last second (power loss under everysec), restart"
            }
            Self::RedisCrashNoPersistence => "Redis kill -9 + restart without persistence",
            Self::RedisFreeze => "Redis SIGSTOP for 2 s (> every TTL), then SIGCONT",
            Self::HolderPause => "holders stop heartbeating past their TTL, then write",
            Self::InstanceKillStop => {
                "instance 0 kill -9 (restarted after 2 s), instance 1 SIGSTOP for 2 s"
            }
            Self::SubscriberDrop => "CLIENT KILL TYPE pubsub three times while waiters park",
            Self::Partition => "iptables drops all packets between one instance and Redis for 3 s",
            Self::RedisFull => "Redis at its maxmemory (noeviction) for 2 s",
            Self::SentinelFailover => {
                "Sentinel mode (2 replicas, 3 Sentinels): master kill -9, a replica promoted, the old one back as a replica"
            }
            Self::OldMasterReturns => {
                "Sentinel mode: master kill -9, restarted with its data as a master right after the promotion, until demoted"
            }
            Self::ReplicasStalled => "Sentinel mode: every replica SIGSTOP for 3 s",
            Self::MasterPartition => {
                "Sentinel mode: iptables cuts the master off from replicas and Sentinels (not from the instances) until a replica is promoted"
            }
            Self::ClusterFailover => {
                "Cluster mode (3 primaries, 1 replica each): a primary serving locks kill -9, its replica promoted, the node back as a replica"
            }
            Self::SlotMigration => {
                "Cluster mode: up to 3 slots of live locks moved key by key (MIGRATE, 100 ms pauses) to another primary and back"
            }
            Self::PrimaryPartition => {
                "Cluster mode: iptables cuts a primary off (in turn from everything, and from the other nodes only) until its replica is promoted"
            }
            Self::ReplyLost => {
                "Cluster mode, nodes behind proxies: for 3 s the instances' connections cut after an FCALL went through, before its reply (redis-rs re-sends it)"
            }
            Self::RedlockNodeKill => {
                "RedLock (3 nodes, RedLock leases in the workload): one node kill -9 in turn, down 5 s (> every TTL), restarted empty"
            }
        }
    }

    pub fn persistence(self) -> Persistence {
        match self {
            Self::RedisCrashAofEverysec => Persistence::AofEverysec,
            Self::RedisCrashNoPersistence => Persistence::None,
            _ => Persistence::AofAlways,
        }
    }

    pub fn needs_netns(self) -> bool {
        self == Self::Partition
    }

    /// Needs root and iptables (the network namespace's, or loopback rules).
    pub fn needs_root(self) -> bool {
        matches!(
            self,
            Self::Partition | Self::MasterPartition | Self::PrimaryPartition
        )
    }

    /// Runs against a master with replicas and Sentinels (the instances follow them).
    pub fn sentinel_mode(self) -> bool {
        matches!(
            self,
            Self::SentinelFailover
                | Self::OldMasterReturns
                | Self::ReplicasStalled
                | Self::MasterPartition
        )
    }

    /// Starts RedLock nodes (the instances get `--redlock-nodes`), and the workload takes
    /// RedLock leases too.
    pub fn redlock_mode(self) -> bool {
        self == Self::RedlockNodeKill
    }

    /// A replica is promoted: every name must be served again soon after.
    pub fn fails_over(self) -> bool {
        matches!(
            self,
            Self::SentinelFailover
                | Self::OldMasterReturns
                | Self::MasterPartition
                | Self::ClusterFailover
                | Self::PrimaryPartition
        )
    }

    /// Runs against a Redis Cluster (the instances get `--redis-cluster`).
    pub fn cluster_mode(self) -> bool {
        matches!(
            self,
            Self::ClusterFailover | Self::SlotMigration | Self::PrimaryPartition | Self::ReplyLost
        )
    }
}

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
    let now = || shared.recorder.now();
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
        let start = now();
        let window = |what: &str, data_loss: bool, exempt: bool, start: u64| FaultWindow {
            what: what.to_owned(),
            start,
            end: now(),
            data_loss,
            loss_throughout: false,
            exempt,
            answers_in_time: false,
            refuses_new: false,
            served_from: None,
        };
        // A failover: every name must be served again soon after the promotion (or, when
        // the acks cannot be met without the failed node, after its return), and the run
        // goes on long enough to show whether it was.
        let served_from = |cluster: &Cluster, promotion: Option<Promotion>| {
            let at = match promotion {
                Some(p) if cluster.serves_after_promotion() => shared.recorder.at(p.promoted),
                Some(p) => shared.recorder.at(p.rejoined),
                None => now(),
            };
            shared.hold_until(at + SERVED_WITHIN_US + 500_000);
            Some(at)
        };
        match fault {
            Fault::None => {}
            Fault::RedisCrashAofAlways
            | Fault::RedisCrashAofEverysec
            | Fault::RedisCrashNoPersistence => {
                let lossy = fault != Fault::RedisCrashAofAlways;
                if let Err(e) = cluster
                    .crash_redis(fault == Fault::RedisCrashAofEverysec)
                    .await
                {
                    eprintln!("safety: could not restart Redis: {e:#}");
                }
                // Give the instances time to reconnect before calling it healed.
                tokio::time::sleep(Duration::from_millis(1500)).await;
                windows.push(window(fault.name(), lossy, true, start));
            }
            Fault::RedlockNodeKill => {
                let n = cycle % cluster.redlock_count().max(1);
                cluster.kill_redlock_node(n).await;
                // Down longer than any lease's TTL (the longest a reentry asks for is 3 x
                // 1500 ms): a node that restarts empty sooner could let a second holder in
                // while the first still holds its other nodes (antirez's "delayed restart").
                tokio::time::sleep(Duration::from_secs(5)).await;
                if let Err(e) = cluster.restart_redlock_node(n).await {
                    eprintln!("safety: could not restart RedLock node {n}: {e:#}");
                }
                // Exempt: calls to the dead node wait out their per-node timeout.
                windows.push(window(fault.name(), false, true, start));
            }
            Fault::RedisFreeze => {
                cluster.signal_redis(Signal::SIGSTOP);
                tokio::time::sleep(Duration::from_secs(2)).await;
                cluster.signal_redis(Signal::SIGCONT);
                windows.push(window(fault.name(), false, true, start));
            }
            Fault::HolderPause => {
                shared.pausing.store(true, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(4)).await;
                shared.pausing.store(false, Ordering::Relaxed);
                // Not exempt: nothing but the pausing holders should notice.
                windows.push(window(fault.name(), false, false, start));
            }
            Fault::InstanceKillStop => {
                cluster.kill_instance(0).await;
                tokio::time::sleep(Duration::from_secs(2)).await;
                if let Err(e) = cluster.start_instance(0).await {
                    eprintln!("safety: could not restart instance 0: {e:#}");
                }
                windows.push(window("instance 0 killed", false, true, start));
                let start = now();
                if cluster.instance_count() > 1 {
                    cluster.signal_instance(1, Signal::SIGSTOP);
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    cluster.signal_instance(1, Signal::SIGCONT);
                    windows.push(window("instance 1 stopped", false, true, start));
                }
            }
            Fault::SubscriberDrop => {
                for _ in 0..3 {
                    if let Ok(mut conn) = cluster.redis_conn().await {
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
                windows.push(window(fault.name(), false, false, start));
            }
            Fault::RedisFull => {
                let full = cluster.set_redis_maxmemory(1).await;
                if let Err(e) = &full {
                    eprintln!("safety: could not fill Redis: {e:#}");
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
                if let Err(e) = cluster.set_redis_maxmemory(0).await {
                    eprintln!("safety: could not empty Redis: {e:#}");
                }
                // Not exempt: only what takes memory may be refused (and only with 503).
                windows.push(FaultWindow {
                    refuses_new: true,
                    ..window(fault.name(), false, false, start)
                });
            }
            Fault::SentinelFailover | Fault::OldMasterReturns => {
                let how = if fault == Fault::SentinelFailover {
                    Return::AsReplica
                } else {
                    Return::AsMaster
                };
                let promotion = match cluster.fail_over(how).await {
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
                let lossy = cluster.failover_may_lose() == Some(true) && !strict;
                windows.push(FaultWindow {
                    loss_throughout: lossy,
                    served_from: served_from(&cluster, promotion),
                    ..window(fault.name(), lossy, true, start)
                });
            }
            Fault::MasterPartition => {
                if let Err(e) = cluster.partition_master().await {
                    eprintln!("safety: master partition: {e:#}");
                }
                tokio::time::sleep(Duration::from_millis(1500)).await;
                // With fewer acks than replicas, what the cut-off master granted (or a grant
                // the promoted replica lacks) is lost when it rejoins.
                let lossy = cluster.failover_may_lose() == Some(true) && !strict;
                // Served again from the heal on (the old master is a replica by then).
                windows.push(FaultWindow {
                    loss_throughout: lossy,
                    served_from: served_from(&cluster, None),
                    ..window(fault.name(), lossy, true, start)
                });
            }
            Fault::ReplicasStalled => {
                cluster.signal_replicas(Signal::SIGSTOP);
                tokio::time::sleep(Duration::from_secs(3)).await;
                cluster.signal_replicas(Signal::SIGCONT);
                tokio::time::sleep(Duration::from_millis(500)).await;
                windows.push(window(fault.name(), false, true, start));
            }
            Fault::ClusterFailover => {
                // Down longer than names may take to be served again: a shard that serves
                // only once its failed node is back shows.
                let down_for = Duration::from_micros(SERVED_WITHIN_US) + Duration::from_secs(2);
                let promotion = match cluster.kill_primary(&names, cycle, down_for).await {
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
                // topology read).
                tokio::time::sleep(Duration::from_millis(1500)).await;
                // Without acks, the promoted replica may lack the last grants.
                let lossy = cluster.failover_may_lose() == Some(true) && !strict;
                windows.push(FaultWindow {
                    loss_throughout: lossy,
                    served_from: served_from(&cluster, promotion),
                    ..window(fault.name(), lossy, true, start)
                });
            }
            Fault::SlotMigration => {
                match cluster
                    .migrate_slots(&names, cycle, Duration::from_millis(100))
                    .await
                {
                    Ok(what) => eprintln!("safety: {}: {what}", fault.name()),
                    Err(e) => eprintln!("safety: {}: {e:#}", fault.name()),
                }
                // Nothing is lost and every answer still comes in time; a call over keys on
                // both sides of a slot being moved gets TRYAGAIN until it is done, so 503s are
                // allowed.
                windows.push(FaultWindow {
                    answers_in_time: true,
                    ..window(fault.name(), false, true, start)
                });
            }
            Fault::PrimaryPartition => {
                // Cut off from everything, and in the next cycle from the other nodes only
                // (the instances may write to it until it sees itself alone), in turn; a run
                // without acks starts with the first, one with acks with the second (so a
                // one-cycle smoke run of each sees both).
                let lossy = cluster.failover_may_lose() == Some(true);
                let from_instances = (cycle + usize::from(!lossy)) % 2 == 0;
                match cluster
                    .partition_primary(&names, cycle / 2, from_instances)
                    .await
                {
                    Ok(what) => eprintln!("safety: {}: {what}", fault.name()),
                    Err(e) => eprintln!("safety: {}: {e:#}", fault.name()),
                }
                tokio::time::sleep(Duration::from_millis(1500)).await;
                // Without acks, what the cut-off primary granted (or a grant its replica
                // lacks) is lost when it rejoins.
                let lossy = cluster.failover_may_lose() == Some(true) && !strict;
                windows.push(FaultWindow {
                    loss_throughout: lossy,
                    served_from: served_from(&cluster, None),
                    ..window(fault.name(), lossy, true, start)
                });
            }
            Fault::ReplyLost => {
                match cluster.lose_replies(Duration::from_secs(3)).await {
                    Ok(cuts) => eprintln!(
                        "safety: {}: {cuts} connections cut after an FCALL went through",
                        fault.name()
                    ),
                    Err(e) => eprintln!("safety: {}: {e:#}", fault.name()),
                }
                tokio::time::sleep(Duration::from_millis(1000)).await;
                // Nothing is lost: the cut requests' answers are (503 allowed), and a call that
                // ran twice must have done what it would have done once.
                windows.push(window(fault.name(), false, true, start));
            }
            Fault::Partition => {
                if let Err(e) = cluster.partition(true) {
                    eprintln!("safety: could not partition: {e:#}");
                }
                tokio::time::sleep(Duration::from_secs(3)).await;
                let _ = cluster.partition(false);
                // The cut-off instance needs a moment to find Redis again.
                tokio::time::sleep(Duration::from_millis(1500)).await;
                windows.push(window(fault.name(), false, true, start));
            }
        }
        cycle += 1;
    }
    (cluster, windows)
}
