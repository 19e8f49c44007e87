//! Metrics an operator alerts on, read at scrape time rather than counted: whether Redis
//! answers and the subscriber is connected, the build, the oldest hold and the waiters over
//! every instance (a [`Census`] of the live locks, taken at most every [`CENSUS_EVERY`]), per
//! lock only with `--metrics-lock-names`, and the process's own CPU, memory and file
//! descriptors (`process_*`, as every Prometheus client library names them; Linux `/proc`).

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::locks::Census;

/// A census is taken at most this often (scrapes in between reuse the last one): it walks
/// every live lock.
pub const CENSUS_EVERY: Duration = Duration::from_secs(10);
/// Most live names a census reads.
pub const CENSUS_BUDGET: usize = 20_000;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LockLabels {
    lock: String,
}

/// A cluster node, by address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// What a scrape reads besides the counters.
pub struct Sampled {
    redis_up: Gauge,
    subscriber_connected: Gauge,
    subscriber_unlock_patterns: Gauge,
    live_locks: Gauge,
    census_truncated: Gauge,
    oldest_hold: Gauge<f64, AtomicU64>,
    waiters: Gauge,
    lock_held: Family<LockLabels, Gauge<f64, AtomicU64>>,
    lock_waiters: Family<LockLabels, Gauge>,
    redis_memory_used: Gauge,
    redis_memory_max: Gauge,
    redis_memory_ratio: Gauge<f64, AtomicU64>,
    census_at: Mutex<Option<Instant>>,
    process: Process,
    redis: RedisFigures,
}

/// The Redis topology's figures: read at scrape time from the seam's own counts (counters
/// are brought up to them).
#[derive(Default)]
struct RedisFigures {
    master_known: Gauge,
    replicas_online: Gauge,
    acks_required: Gauge,
    acks_last: Gauge,
    failovers: Counter,
    ack_waits: Counter,
    not_replicated: Counter,
    unacknowledged_heartbeats: Counter,
    no_replica: Counter,
    unreplicated: Gauge,
    masterless: Counter<f64, AtomicU64>,
    primaries: Gauge,
    topology_changes: Counter,
    node_keys: Family<NodeLabels, Gauge>,
    node_ops: Family<NodeLabels, Gauge>,
    node_memory: Family<NodeLabels, Gauge>,
    node_slots: Family<NodeLabels, Gauge>,
}

impl Sampled {
    /// Registers every metric in `registry` (prefixed `leasehold_`), except the process's.
    pub fn register(registry: &mut Registry) -> Self {
        let s = Self {
            redis_up: Gauge::default(),
            subscriber_connected: Gauge::default(),
            subscriber_unlock_patterns: Gauge::default(),
            live_locks: Gauge::default(),
            census_truncated: Gauge::default(),
            oldest_hold: Gauge::default(),
            waiters: Gauge::default(),
            lock_held: Family::default(),
            lock_waiters: Family::default(),
            redis_memory_used: Gauge::default(),
            redis_memory_max: Gauge::default(),
            redis_memory_ratio: Gauge::default(),
            census_at: Mutex::new(None),
            process: Process::default(),
            redis: RedisFigures::default(),
        };
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register("build_info", "This build: version; always 1", build);
        registry.register(
            "redis_up",
            "1 when Redis answered this scrape's PING, else 0",
            s.redis_up.clone(),
        );
        registry.register(
            "redis_memory_used_bytes",
            "Redis's used_memory at this scrape",
            s.redis_memory_used.clone(),
        );
        registry.register(
            "redis_memory_max_bytes",
            "Redis's maxmemory (0: no limit); at it, new leases are refused (503 redis_full) \
             while releases and heartbeats still work",
            s.redis_memory_max.clone(),
        );
        registry.register(
            "redis_memory_used_ratio",
            "Redis's used_memory over its maxmemory (0 without a limit); from 0.8 on, /readyz \
             reports the memory as running out",
            s.redis_memory_ratio.clone(),
        );
        registry.register(
            "subscriber_connected",
            "1 while this instance's unlock and events subscription is connected, else 0",
            s.subscriber_connected.clone(),
        );
        registry.register(
            "subscriber_unlock_patterns",
            "1 while this instance's subscriber listens for unlock messages (a request of this \
             instance waits, or did in the last 10 s), else 0",
            s.subscriber_unlock_patterns.clone(),
        );
        registry.register(
            "live_locks",
            "Live locks and semaphores (held, waited for, permits out) the last census counted",
            s.live_locks.clone(),
        );
        registry.register(
            "census_truncated",
            "1 when the last census stopped at its budget (20000 names) before the end",
            s.census_truncated.clone(),
        );
        registry.register(
            "oldest_hold_age_seconds",
            "Age of the oldest current hold of any lock or semaphore (heartbeats do not reset \
             it); 0 when nothing is held. Same on every instance: read from Redis",
            s.oldest_hold.clone(),
        );
        registry.register(
            "waiters",
            "Requests waiting for any lock or semaphore on every instance, fair tickets \
             included. Same on every instance: read from Redis",
            s.waiters.clone(),
        );
        registry.register(
            "lock_hold_age_seconds",
            "Per lock (only with --metrics-lock-names): age of its oldest current hold",
            s.lock_held.clone(),
        );
        registry.register(
            "lock_waiters",
            "Per lock (only with --metrics-lock-names): requests waiting on every instance",
            s.lock_waiters.clone(),
        );
        s.register_redis(registry);
        s
    }

    /// The Redis topology's series (see [`RedisFigures`]).
    fn register_redis(&self, registry: &mut Registry) {
        let r = &self.redis;
        registry.register(
            "redis_master_known",
            "1 while this instance knows a Redis master to write to (0 in Sentinel mode during \
             a failover)",
            r.master_known.clone(),
        );
        registry.register(
            "redis_replicas_online",
            "Replicas linked to the master at the last reading (INFO replication, every second)",
            r.replicas_online.clone(),
        );
        registry.register(
            "replica_acks_required",
            "Replicas each grant and heartbeat waits for now (--min-replica-acks; 0: none)",
            r.acks_required.clone(),
        );
        registry.register(
            "replica_acks_last",
            "Replicas that acknowledged the last call that waited for them",
            r.acks_last.clone(),
        );
        registry.register(
            "redis_failovers",
            "Redis masters this instance followed to a new address (Sentinel mode)",
            r.failovers.clone(),
        );
        registry.register(
            "replica_ack_waits",
            "Grants, reentries and heartbeats that waited for replica acknowledgements",
            r.ack_waits.clone(),
        );
        registry.register(
            "not_replicated",
            "Grants and reentries refused because too few replicas acknowledged them (503 \
             not_replicated)",
            r.not_replicated.clone(),
        );
        registry.register(
            "unacknowledged_heartbeats",
            "Heartbeats too few replicas acknowledged, answered all the same (degraded: \
             not_replicated)",
            r.unacknowledged_heartbeats.clone(),
        );
        registry.register(
            "no_replica_answers",
            "Grants and heartbeats answered on a shard with no replica to ask (degraded: \
             no_replica)",
            r.no_replica.clone(),
        );
        registry.register(
            "redis_unreplicated_shards",
            "Redis primaries (shards) whose grants stand on them alone now: --min-replica-acks \
             auto finds no replica there that a failover could promote",
            r.unreplicated.clone(),
        );
        registry.register(
            "redis_cluster_primaries",
            "Cluster mode: primaries serving slots at the last topology reading (every second)",
            r.primaries.clone(),
        );
        registry.register(
            "redis_cluster_topology_changes",
            "Cluster mode: topology changes seen (failovers, slot moves, nodes added)",
            r.topology_changes.clone(),
        );
        registry.register(
            "redis_node_keys",
            "Cluster mode, per primary: keys in its database (INFO keyspace, every second)",
            r.node_keys.clone(),
        );
        registry.register(
            "redis_node_ops_per_second",
            "Cluster mode, per primary: commands per second as Redis measures it",
            r.node_ops.clone(),
        );
        registry.register(
            "redis_node_memory_used_bytes",
            "Cluster mode, per primary: memory used",
            r.node_memory.clone(),
        );
        registry.register(
            "redis_node_slots",
            "Cluster mode, per primary: slots it serves",
            r.node_slots.clone(),
        );
        registry.register(
            "redis_masterless_seconds",
            "Time this instance knew no Redis master (Sentinel mode: failovers)",
            r.masterless.clone(),
        );
    }

    /// The Redis topology's figures at this scrape.
    pub fn record_redis(&self, status: &crate::locks::RedisStatus) {
        let r = &self.redis;
        r.master_known.set(i64::from(status.master.is_some()));
        let online = status.replication.as_ref().map_or(0, |rep| rep.online());
        r.replicas_online
            .set(i64::try_from(online).unwrap_or(i64::MAX));
        r.acks_required.set(i64::from(status.acks.required));
        r.acks_last.set(i64::from(status.acks.last_acked));
        let catch_up = |counter: &Counter, to: u64| {
            counter.inc_by(to.saturating_sub(counter.get()));
        };
        catch_up(
            &r.failovers,
            status.sentinel.as_ref().map_or(0, |s| s.failovers),
        );
        catch_up(&r.ack_waits, status.acks.waits);
        catch_up(&r.not_replicated, status.acks.not_replicated);
        catch_up(
            &r.unacknowledged_heartbeats,
            status.acks.unacknowledged_heartbeats,
        );
        catch_up(&r.no_replica, status.acks.no_replica);
        r.unreplicated
            .set(i64::try_from(status.acks.unreplicated.len()).unwrap_or(i64::MAX));
        let masterless = status
            .sentinel
            .as_ref()
            .map_or(0.0, |s| s.masterless_ms as f64 / 1000.0);
        let seen = r.masterless.get();
        if masterless > seen {
            r.masterless.inc_by(masterless - seen);
        }
        if let Some(cluster) = &status.cluster {
            r.primaries
                .set(i64::try_from(cluster.shards.len()).unwrap_or(i64::MAX));
            catch_up(&r.topology_changes, cluster.topology_changes);
            // Nodes that are no longer primaries drop out of the families.
            for family in [&r.node_keys, &r.node_ops, &r.node_memory, &r.node_slots] {
                family.clear();
            }
            let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            for shard in &cluster.shards {
                let labels = NodeLabels {
                    node: shard.primary.clone(),
                };
                r.node_slots
                    .get_or_create(&labels)
                    .set(i64::from(shard.slot_count));
                if let Some(n) = &shard.node {
                    r.node_keys.get_or_create(&labels).set(gauge(n.keys));
                    r.node_ops.get_or_create(&labels).set(gauge(n.ops_per_sec));
                    r.node_memory
                        .get_or_create(&labels)
                        .set(gauge(n.used_memory_bytes));
                }
            }
        }
    }

    /// Redis's memory at this scrape (when Redis said).
    pub fn record_memory(&self, memory: &crate::locks::RedisMemory) {
        self.redis_memory_used
            .set(i64::try_from(memory.used_bytes).unwrap_or(i64::MAX));
        self.redis_memory_max
            .set(i64::try_from(memory.max_bytes).unwrap_or(i64::MAX));
        self.redis_memory_ratio.set(memory.used_ratio());
    }

    /// Whether a new census is due (and, if so, marks it taken now).
    pub fn census_due(&self) -> bool {
        let Ok(mut at) = self.census_at.lock() else {
            return false;
        };
        if at.is_some_and(|t| t.elapsed() < CENSUS_EVERY) {
            return false;
        }
        *at = Some(Instant::now());
        true
    }

    /// The scrape's readings: Redis's and the subscriber's state (connected; listening for
    /// unlock messages), and a census when one was taken (`per_lock`: with lock names as
    /// labels).
    pub fn record(
        &self,
        redis_up: bool,
        subscriber_connected: bool,
        unlock_patterns: bool,
        census: Option<&Census>,
        per_lock: bool,
        now_ms: u64,
    ) {
        self.redis_up.set(i64::from(redis_up));
        self.subscriber_connected
            .set(i64::from(subscriber_connected));
        self.subscriber_unlock_patterns
            .set(i64::from(unlock_patterns));
        let Some(census) = census else {
            return;
        };
        let age = |since: Option<crate::locks::Timestamp>| {
            since.map_or(0.0, |s| {
                Duration::from_millis(now_ms.saturating_sub(s.0)).as_secs_f64()
            })
        };
        self.live_locks
            .set(i64::try_from(census.live).unwrap_or(i64::MAX));
        self.census_truncated.set(i64::from(census.truncated));
        self.oldest_hold.set(age(census.oldest_hold));
        self.waiters
            .set(i64::try_from(census.waiters).unwrap_or(i64::MAX));
        self.lock_held.clear();
        self.lock_waiters.clear();
        if per_lock {
            for (name, since, waiters) in &census.locks {
                let labels = LockLabels {
                    lock: name.as_str().to_owned(),
                };
                self.lock_held.get_or_create(&labels).set(age(*since));
                self.lock_waiters
                    .get_or_create(&labels)
                    .set(i64::try_from(*waiters).unwrap_or(i64::MAX));
            }
        }
    }

    /// The `process_*` metrics (unprefixed, in their own registry).
    pub fn encode_process(&self, out: &mut String) -> Result<(), std::fmt::Error> {
        self.process.sample();
        prometheus_client::encoding::text::encode(out, &self.process.registry)
    }
}

/// The process's own resources, read from `/proc/self` (zero elsewhere).
struct Process {
    registry: Registry,
    cpu: Counter<f64, AtomicU64>,
    resident: Gauge,
    fds: Gauge,
    start: Gauge<f64, AtomicU64>,
}

impl Default for Process {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("process");
        let p = Self {
            registry: Registry::default(),
            cpu: Counter::default(),
            resident: Gauge::default(),
            fds: Gauge::default(),
            start: Gauge::default(),
        };
        registry.register(
            "cpu_seconds",
            "User and system CPU time spent",
            p.cpu.clone(),
        );
        registry.register(
            "resident_memory_bytes",
            "Resident memory size",
            p.resident.clone(),
        );
        registry.register("open_fds", "Open file descriptors", p.fds.clone());
        registry.register(
            "start_time_seconds",
            "When the process started, in seconds since the Unix epoch",
            p.start.clone(),
        );
        #[allow(clippy::cast_precision_loss)] // ms since 1970 fit f64's 52 bits
        let started = crate::locks::wall_ms() as f64 / 1000.0;
        p.start.set(started);
        Self { registry, ..p }
    }
}

impl Process {
    fn sample(&self) {
        // /proc/self/stat: fields 14 and 15 are utime and stime in clock ticks (100 per
        // second on Linux); the command name (field 2) may hold spaces, so split after it.
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
            && let Some((_, rest)) = stat.rsplit_once(')')
        {
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let ticks = |i: usize| {
                fields
                    .get(i)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            let seconds = (ticks(11) + ticks(12)) / 100.0;
            let seen = self.cpu.get();
            if seconds > seen {
                self.cpu.inc_by(seconds - seen);
            }
        }
        if let Ok(statm) = std::fs::read_to_string("/proc/self/statm")
            && let Some(pages) = statm
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<i64>().ok())
        {
            self.resident.set(pages.saturating_mul(4096));
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            self.fds.set(i64::try_from(dir.count()).unwrap_or(i64::MAX));
        }
    }
}
