//! The flags of `leasehold serve` (each with its `LEASEHOLD_*` variable) and of
//! `leasehold healthcheck`; the checks clap cannot make field by field are in `checks.rs`.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::{Args, FromArgMatches as _, ValueEnum};

use crate::redis::AckRule;

/// Where `serve` listens and `healthcheck` looks unless told otherwise (the client
/// subcommands' default `--server` is this address too).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// The shortest admin token `serve` accepts, given on the command line or read from a file.
pub const MIN_ADMIN_TOKEN_CHARS: usize = 16;

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address the HTTP API listens on.
    #[arg(long, env = "LEASEHOLD_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,

    /// Redis to keep lock state in (redis://host:port/db, rediss://..., redis+unix:///path).
    /// Without it, Leasehold starts its own private redis-server in --data-dir.
    #[arg(long, env = "LEASEHOLD_REDIS_URL")]
    pub redis_url: Option<String>,

    /// Prefix for every Redis key and channel; Redisson clients that should exclude our leases
    /// must use the same one. Empty by default, like Redisson.
    #[arg(long, env = "LEASEHOLD_KEY_PREFIX", default_value = "", value_parser = parse_key_prefix)]
    pub key_prefix: String,

    /// Lease TTL when a request names none, in milliseconds (Redisson's default is 30 s).
    #[arg(long, env = "LEASEHOLD_DEFAULT_TTL_MS", default_value_t = 30_000)]
    pub default_ttl_ms: u64,

    /// Smallest TTL a request may ask for, in milliseconds.
    #[arg(long, env = "LEASEHOLD_MIN_TTL_MS", default_value_t = 1_000)]
    pub min_ttl_ms: u64,

    /// Largest TTL a request may ask for, in milliseconds (default 24 h).
    #[arg(long, env = "LEASEHOLD_MAX_TTL_MS", default_value_t = 86_400_000)]
    pub max_ttl_ms: u64,

    /// Longest lock-delay an acquire may ask for (`lock_delay_ms`), in milliseconds: after a
    /// lease ends other than by a release (its TTL ran out, an admin removed it), its name
    /// refuses new leases that long. Chubby's ceiling is 60 s; longer asks get 422.
    #[arg(long, env = "LEASEHOLD_MAX_LOCK_DELAY_MS", default_value_t = 60_000)]
    pub max_lock_delay_ms: u64,

    /// Longest server-side wait an acquire may ask for with ?wait_ms=, in milliseconds; longer
    /// waits are cut to this.
    #[arg(long, env = "LEASEHOLD_MAX_WAIT_MS", default_value_t = 60_000)]
    pub max_wait_ms: u64,

    /// How long a fair-lock ticket keeps its place in the queue without a poll, in ms.
    /// Redisson's fair lock waits 5 minutes for a silent waiter; an HTTP waiter either keeps
    /// its request open or polls, so 5 s of silence is already a waiter gone.
    #[arg(long, env = "LEASEHOLD_TICKET_TIMEOUT_MS", default_value_t = 5_000)]
    pub ticket_timeout_ms: u64,

    /// The largest semaphore a request may declare (`limit`, and so `permits`). A lease holds
    /// one Redis entry per permit (Redisson's layout), so this bounds what one request costs.
    #[arg(long, env = "LEASEHOLD_MAX_PERMITS", default_value_t = 1_000)]
    pub max_permits: u32,

    /// How many lease watches (GET .../watch, server-sent events) this instance keeps open at
    /// once; one more is refused with 503 too_many_watches. Each costs a connection and a
    /// few hundred bytes.
    #[arg(long, env = "LEASEHOLD_MAX_WATCHES", default_value_t = 10_000)]
    pub max_watches: usize,

    /// How long a released or expired lease keeps answering 410 (rather than 404), in ms.
    #[arg(long, env = "LEASEHOLD_TOMBSTONE_MS", default_value_t = 60_000)]
    pub tombstone_ms: u64,

    /// The operator's token for /v1/admin routes and API key management (at least 16
    /// characters), sent as Authorization: Bearer or in the Leasehold-Key header. With the
    /// embedded Redis and no token given, one is generated into <data-dir>/admin-token (0600;
    /// its path is printed, never the token). With --redis-url and no token, only admin API
    /// keys reach admin routes.
    #[arg(
        long,
        env = "LEASEHOLD_ADMIN_TOKEN",
        hide_env_values = true,
        conflicts_with = "admin_token_file"
    )]
    pub admin_token: Option<String>,

    /// Read the admin token from this file (its first line), e.g. a container secret.
    #[arg(long, env = "LEASEHOLD_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,

    /// Let callers without an API key in, on any address and even once keys exist (as
    /// clients and readers of the default tenant, limited per address). Without it,
    /// anonymous callers are served only on a loopback address while no key exists, and a
    /// server on another address with no key and no admin token refuses to start.
    #[arg(long, env = "LEASEHOLD_ALLOW_ANONYMOUS")]
    pub allow_anonymous: bool,

    /// Host names this server answers to (comma-separated), against DNS rebinding: a request
    /// whose Host header names another gets 403. Default: localhost, 127.0.0.1 and ::1 on a
    /// loopback address, any name otherwise.
    #[arg(long, env = "LEASEHOLD_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,

    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, env = "LEASEHOLD_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "LEASEHOLD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Redis Sentinels (host:port, comma-separated) that name the master to keep lock state
    /// in, followed through every failover; with --redis-master-name, instead of
    /// --redis-url.
    #[arg(
        long,
        env = "LEASEHOLD_REDIS_SENTINEL",
        value_delimiter = ',',
        conflicts_with = "redis_url",
        requires = "redis_master_name"
    )]
    pub redis_sentinel: Vec<String>,

    /// Redis Cluster mode: seed nodes (host:port, comma-separated; any few of the cluster's
    /// nodes, the rest are discovered), instead of --redis-url. Credentials and TLS as in
    /// Sentinel mode (--redis-username, --redis-password, --redis-tls).
    #[arg(
        long,
        env = "LEASEHOLD_REDIS_CLUSTER",
        value_delimiter = ',',
        conflicts_with_all = ["redis_url", "redis_sentinel"]
    )]
    pub redis_cluster: Vec<String>,

    /// The name the Sentinels monitor the master under (`sentinel monitor NAME ...`).
    #[arg(long, env = "LEASEHOLD_REDIS_MASTER_NAME", requires = "redis_sentinel")]
    pub redis_master_name: Option<String>,

    /// The Sentinels' password (their `requirepass`), if they have one.
    #[arg(
        long,
        env = "LEASEHOLD_REDIS_SENTINEL_PASSWORD",
        hide_env_values = true
    )]
    pub redis_sentinel_password: Option<String>,

    /// The data nodes' ACL user and password in Sentinel and Cluster mode (with --redis-url,
    /// put them in the URL).
    #[arg(long, env = "LEASEHOLD_REDIS_USERNAME")]
    pub redis_username: Option<String>,
    /// The data nodes' ACL password in Sentinel and Cluster mode (see --redis-username).
    #[arg(long, env = "LEASEHOLD_REDIS_PASSWORD", hide_env_values = true)]
    pub redis_password: Option<String>,

    /// TLS to the data nodes (and Sentinels) in Sentinel and Cluster mode (--redis-ca-file
    /// for a private CA is for --redis-url only).
    #[arg(long, env = "LEASEHOLD_REDIS_TLS")]
    pub redis_tls: bool,

    /// The database in Sentinel mode (with --redis-url, in the URL). A cluster has only
    /// database 0: another is refused with --redis-cluster.
    #[arg(long, env = "LEASEHOLD_REDIS_DB", default_value_t = 0)]
    pub redis_db: i64,

    /// Replicas that must acknowledge a grant, reentry or heartbeat (Redis WAIT) before it is
    /// answered: a number, or `auto`, one while the lock's shard (its primary) has a replica
    /// a failover could promote and none while it has none (then grants there are answered
    /// marked `degraded: no_replica`). Fewer within --replica-ack-timeout-ms: a grant is
    /// rolled back and answered 503 not_replicated; a heartbeat is answered, marked
    /// `degraded: not_replicated`.
    #[arg(long, env = "LEASEHOLD_MIN_REPLICA_ACKS", default_value = "auto")]
    pub min_replica_acks: AckRule,

    /// How long a grant waits for its replica acknowledgements, in ms.
    #[arg(
        long,
        env = "LEASEHOLD_REPLICA_ACK_TIMEOUT_MS",
        default_value_t = 1_000
    )]
    pub replica_ack_timeout_ms: u64,

    /// Connections kept for calls that wait for replicas (WAIT blocks its connection, so
    /// these calls do not share the one multiplexed connection).
    #[arg(long, env = "LEASEHOLD_REPLICA_ACK_CONNECTIONS", default_value = "16")]
    pub replica_ack_connections: NonZeroUsize,

    /// PEM file of the CA that signed a rediss:// Redis's certificate (the system's roots
    /// otherwise).
    #[arg(long, env = "LEASEHOLD_REDIS_CA_FILE")]
    pub redis_ca_file: Option<PathBuf>,

    /// Memory limit of the embedded Redis (its maxmemory, with noeviction: when full, new
    /// leases are refused with 503 instead of held ones being dropped).
    #[arg(long, env = "LEASEHOLD_REDIS_MAXMEMORY", default_value = "512mb")]
    pub redis_maxmemory: String,

    /// Threads that serve requests. Default: one per core, less one for the embedded
    /// redis-server when it runs (Redis is single-threaded and needs a core of its own), at
    /// least one. With --redis-url and Redis on this same machine, leave it a core the same
    /// way (see the book's Sizing page, docs/book/src/operating/sizing.md).
    #[arg(long, env = "LEASEHOLD_WORKER_THREADS")]
    pub worker_threads: Option<NonZeroUsize>,

    /// Requests per second one caller (an API key, or an address when anonymous) may send,
    /// sustained, on each instance; more answer 429 with Retry-After. 0: no limit.
    #[arg(long, env = "LEASEHOLD_RATE_LIMIT", default_value_t = 1_000)]
    pub rate_limit: u32,

    /// Requests one caller may send in a burst above --rate-limit.
    #[arg(long, env = "LEASEHOLD_RATE_BURST", default_value_t = 2_000)]
    pub rate_burst: u32,

    /// Live leases (and fair tickets) one caller may hold at once, across every instance,
    /// unless its key says otherwise; more answer 429.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_LEASES_PER_CLIENT",
        default_value_t = 10_000
    )]
    pub max_leases_per_client: u64,

    /// Requests one caller may have waiting server-side at once, across every instance;
    /// more answer 429.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_WAITERS_PER_CLIENT",
        default_value_t = 1_000
    )]
    pub max_waiters_per_client: u64,

    /// Distinct lock and semaphore names one caller may give Redis state to (each counts
    /// until its lease ended and its history, about an hour later), across every instance,
    /// unless its key says otherwise; more answer 429.
    #[arg(long, env = "LEASEHOLD_MAX_NAMES_PER_CLIENT", default_value_t = 10_000)]
    pub max_names_per_client: u64,

    /// The same for every caller of one tenant together (the default tenant too).
    #[arg(long, env = "LEASEHOLD_MAX_NAMES_PER_TENANT", default_value_t = 50_000)]
    pub max_names_per_tenant: u64,

    /// API keys an admin key may make in its tenant (the admin token may make more); more
    /// answer 409 too_many_keys.
    #[arg(long, env = "LEASEHOLD_MAX_KEYS_PER_TENANT", default_value_t = 100)]
    pub max_keys_per_tenant: u64,

    /// Requests per second of every rate-limited caller of one tenant together, on one
    /// instance (0: none): keys minted by a tenant's admin share it.
    #[arg(long, env = "LEASEHOLD_RATE_LIMIT_PER_TENANT", default_value_t = 5_000)]
    pub rate_limit_per_tenant: u32,

    /// Requests a tenant's callers together may send in a burst above that rate.
    #[arg(
        long,
        env = "LEASEHOLD_RATE_BURST_PER_TENANT",
        default_value_t = 10_000
    )]
    pub rate_burst_per_tenant: u32,

    /// Bytes of Redis state one caller may make Redis keep, estimated (its names' state, its
    /// leases' records, holders, metadata and permits, the history entries its calls add),
    /// across every instance, unless its key says otherwise; an acquire past it answers 429
    /// quota_exceeded. What bounds one caller's Redis memory (32 MiB: 1/16 of the embedded
    /// Redis's 512 MB).
    #[arg(long, env = "LEASEHOLD_MAX_STATE_BYTES_PER_CLIENT", default_value_t = 32 << 20)]
    pub max_state_bytes_per_client: u64,

    /// The same for every caller of one tenant together (the default tenant too): 128 MiB,
    /// a quarter of the embedded Redis's 512 MB.
    #[arg(long, env = "LEASEHOLD_MAX_STATE_BYTES_PER_TENANT", default_value_t = 128 << 20)]
    pub max_state_bytes_per_tenant: u64,

    /// Event streams (GET /v1/events) and lease watches one caller may hold open on one
    /// instance, together.
    #[arg(long, env = "LEASEHOLD_MAX_STREAMS_PER_CLIENT", default_value_t = 16)]
    pub max_streams_per_client: u64,

    /// Limit anonymous callers on loopback by their address too. Off by default: on loopback
    /// every local process shares one address, so it would be one budget for the machine.
    #[arg(long, env = "LEASEHOLD_LIMIT_LOOPBACK_CLIENTS")]
    pub limit_loopback_clients: bool,

    /// Requests waiting for one lock on one instance; more answer 503.
    #[arg(long, env = "LEASEHOLD_MAX_WAITERS_PER_LOCK", default_value_t = 1_000)]
    pub max_waiters_per_lock: u64,

    /// Tickets in one fair lock's queue; a fair acquire that would join a fuller queue
    /// answers 503.
    #[arg(long, env = "LEASEHOLD_MAX_FAIR_QUEUE", default_value_t = 1_000)]
    pub max_fair_queue: u64,

    /// How deep one lease may re-enter; deeper answers 409 reentry_too_deep.
    #[arg(long, env = "LEASEHOLD_MAX_REENTRY_DEPTH", default_value_t = 1_000)]
    pub max_reentry_depth: u64,

    /// Longest admin `reason`, in characters; longer answers 422.
    #[arg(long, env = "LEASEHOLD_MAX_REASON_CHARS", default_value_t = 500)]
    pub max_reason_chars: usize,

    /// How long a client may take to send a request's headers (and a TLS handshake), in ms.
    #[arg(long, env = "LEASEHOLD_HEADER_TIMEOUT_MS", default_value_t = 10_000)]
    pub header_timeout_ms: u64,

    /// How long a connection may stay open with no request in flight, in ms.
    #[arg(long, env = "LEASEHOLD_IDLE_TIMEOUT_MS", default_value_t = 60_000)]
    pub idle_timeout_ms: u64,

    /// How long a request may take beyond the wait it asked for, in ms; later answers 504.
    #[arg(long, env = "LEASEHOLD_REQUEST_TIMEOUT_MS", default_value_t = 30_000)]
    pub request_timeout_ms: u64,

    /// How long a request body may take to arrive, in ms; later answers 408.
    #[arg(long, env = "LEASEHOLD_BODY_TIMEOUT_MS", default_value_t = 10_000)]
    pub body_timeout_ms: u64,

    /// Open connections at once; past it a connection gets one 503 and is closed.
    #[arg(long, env = "LEASEHOLD_MAX_CONNECTIONS", default_value_t = 16_384)]
    pub max_connections: usize,

    /// Open connections at once from one client address; past it a connection gets one 503
    /// and is closed. 0: a quarter of --max-connections. Loopback addresses are exempt unless
    /// --limit-loopback-clients. Behind a proxy every client shares its address: raise it.
    #[arg(
        long,
        env = "LEASEHOLD_MAX_CONNECTIONS_PER_ADDRESS",
        default_value_t = 0
    )]
    pub max_connections_per_address: usize,

    /// Concurrent streams on one HTTP/2 connection.
    #[arg(long, env = "LEASEHOLD_MAX_H2_STREAMS", default_value_t = 200)]
    pub max_h2_streams: u32,

    /// Require a sign-in (or a key) for the dashboard's read-only pages and GET /v1/events
    /// even where anonymous callers are let in (by default they may look; only actions need
    /// the sign-in).
    #[arg(long, env = "LEASEHOLD_DASHBOARD_PRIVATE")]
    pub dashboard_private: bool,

    /// Directory of the embedded Redis (AOF persistence, socket, log) and the admin token;
    /// created 0700, and refused when another user owns it or others may read it.
    #[arg(long, env = "LEASEHOLD_DATA_DIR", default_value = "./leasehold-data")]
    pub data_dir: PathBuf,

    /// How long one Redis command may take before the request fails with 503, in ms.
    #[arg(long, env = "LEASEHOLD_REDIS_TIMEOUT_MS", default_value_t = 1_000)]
    pub redis_timeout_ms: u64,

    /// Lock operations this instance sends to Redis at once, at most; more wait for their turn
    /// (at most --redis-timeout-ms, then 503), holding less memory than a call in flight.
    #[arg(long, env = "LEASEHOLD_MAX_REDIS_CALLS", default_value = "256")]
    pub max_redis_calls: NonZeroUsize,

    /// Log format.
    #[arg(long, env = "LEASEHOLD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Start even when Redis's maxmemory-policy may evict keys. Eviction can drop a held lock
    /// and grant it twice, so by default Leasehold refuses such a Redis.
    #[arg(long, env = "LEASEHOLD_ALLOW_EVICTION")]
    pub allow_eviction: bool,

    /// RedLock: independent Redis masters (URLs, comma-separated; an odd number, at least 3,
    /// none a replica of another or the same server twice) on which `"kind": "redlock"`
    /// leases are taken, granted when a majority grants within the lease's validity. Not
    /// safe for correctness without fencing: see the book's RedLock page. Without it,
    /// `"kind": "redlock"` answers 422 redlock_disabled.
    #[arg(long, env = "LEASEHOLD_REDLOCK_NODES", value_delimiter = ',')]
    pub redlock_nodes: Vec<String>,

    /// Label the acquisition metrics of GET /metrics with lock names. Off by default: every
    /// distinct name becomes a time series, so turn it on only for a few well-known locks.
    #[arg(long, env = "LEASEHOLD_METRICS_LOCK_NAMES")]
    pub metrics_lock_names: bool,
}

#[derive(Debug, Clone, Args)]
pub struct HealthcheckArgs {
    /// Address of the server to check.
    #[arg(long, env = "LEASEHOLD_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,

    /// The server serves HTTPS (with this certificate): check over TLS. The check only asks
    /// whether the local process answers, so it does not verify the certificate.
    #[arg(long, env = "LEASEHOLD_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

impl ServeArgs {
    /// What `leasehold serve` runs with when given no flag, whatever the environment holds.
    /// The flags' `default_value`s are where the server's defaults are stated, so a
    /// configuration built without a command line (for tests and benchmarks) should start
    /// from this rather than state them again.
    pub fn defaults() -> Self {
        // Parsed from an empty command line, with every flag's `LEASEHOLD_*` variable
        // unhooked so that the caller's environment cannot leak in.
        let command = Self::augment_args(clap::Command::new("serve")).mut_args(|arg| arg.env(None));
        let matches = command
            .try_get_matches_from(["serve"])
            .expect("every serve flag is optional or has a default");
        Self::from_arg_matches(&matches).expect("the matches come from this very command")
    }

    /// How many threads serve requests on a machine with `cores` cores (see --worker-threads).
    pub fn worker_threads(&self, cores: usize) -> usize {
        match self.worker_threads {
            Some(n) => n.get(),
            None if !self.external_redis() => cores.saturating_sub(1).max(1),
            None => cores.max(1),
        }
    }

    /// Whether lock state lives in a Redis of the user's (a URL, Sentinels or a Cluster) rather than the
    /// embedded one.
    pub fn external_redis(&self) -> bool {
        self.redis_url.is_some()
            || !self.redis_sentinel.is_empty()
            || !self.redis_cluster.is_empty()
    }
}

/// A prefix keeps to the lock-name alphabet, so it can neither carry a cluster hash tag nor
/// a glob character into the subscriber's pattern.
fn parse_key_prefix(raw: &str) -> Result<String, String> {
    if raw.len() > 64
        || !raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'))
    {
        return Err("a key prefix has at most 64 ASCII letters, digits and . _ - :".into());
    }
    Ok(raw.to_owned())
}
