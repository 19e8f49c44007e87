//! The faults, each injected again and again while the clients run: a few seconds of calm,
//! the fault, its repair, a few seconds to recover. Every fault's window is recorded for the
//! checkers (which answers may be 503 or slow, and when Redis lost data).

mod inject;

pub use self::inject::inject;
use crate::cluster::Persistence;

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
