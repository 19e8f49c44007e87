//! Command line and environment: the server's flags all read a `LEASEHOLD_*` variable too; the
//! client subcommands read one where a script or a shell profile would set it once.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::client::{ApiKey, LeaseId, LeaseToken, LockKind, ServerUrl};

/// `--kind`: the lock kinds of the wire format, as command-line values (the wire crate knows
/// nothing of clap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KindArg {
    /// Redisson RLock: the same lease may enter again (the default).
    Reentrant,
    /// Not reentrant.
    Exclusive,
    /// Strict FIFO among live waiters.
    Fair,
    /// The shared side of a read/write lock.
    Read,
    /// The exclusive side of a read/write lock.
    Write,
}

impl From<KindArg> for LockKind {
    fn from(kind: KindArg) -> Self {
        match kind {
            KindArg::Reentrant => Self::Reentrant,
            KindArg::Exclusive => Self::Exclusive,
            KindArg::Fair => Self::Fair,
            KindArg::Read => Self::Read,
            KindArg::Write => Self::Write,
        }
    }
}
/// Leasehold: a distributed lock service over HTTP, backed by Redis with Redisson's data layout.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the lock service.
    Serve(ServeArgs),
    /// Exit 0 when a local server answers /healthz (for container health checks).
    Healthcheck(HealthcheckArgs),
    /// Run a command while holding a lock: acquire, heartbeat, release when it exits.
    #[command(after_help = RUN_EXIT_CODES)]
    Run(RunArgs),
    /// Acquire a lease for a script and print the server's JSON (with the token) to stdout.
    #[command(after_help = SCRIPT_EXIT_CODES)]
    Acquire(AcquireArgs),
    /// Renew a lease (its TTL starts again) and print the server's JSON.
    #[command(after_help = SCRIPT_EXIT_CODES)]
    Heartbeat(LeaseArgs),
    /// Release a lease completely (every reentry level), freeing the lock.
    #[command(after_help = SCRIPT_EXIT_CODES)]
    Release(LeaseArgs),
    /// Show who holds a lock or a semaphore, or the state of one lease, as a table
    /// (--json: the server's JSON).
    #[command(after_help = SCRIPT_EXIT_CODES)]
    Status(StatusArgs),
    /// Manage API keys (needs the admin token or an admin key in --api-key).
    #[command(subcommand)]
    Keys(KeysCommand),
    /// List the live locks and semaphores (held, waited for, or with permits out).
    Ls(LsArgs),
    /// Hold a lock until Ctrl-C (or SIGTERM, SIGHUP), or for as long as an interactive
    /// shell runs (--shell); heartbeats, and says when the lease is lost.
    #[command(after_help = HOLD_EXIT_CODES)]
    Hold(HoldArgs),
    /// Print a shell completion script, e.g. `leasehold completions bash > \
    /// /etc/bash_completion.d/leasehold`.
    Completions(CompletionsArgs),
}

const RUN_EXIT_CODES: &str = "\
Exit codes:
  the command's own   when it ran and exited (128+N when a signal N killed it)
  1                   the lease could not be taken or kept (server unreachable or refusing,
                      or the lease was lost while the command ran and it still exited 0)
  2                   invalid command line
  75                  the lock was held by someone else for all of --wait
                      (--conflict-exit-code)
  126, 127            the command could not be executed, or was not found
  128+N               signal N (INT, TERM, HUP) arrived while waiting for the lock

While the command runs, SIGINT, SIGTERM and SIGHUP are forwarded to its process group.";

const HOLD_EXIT_CODES: &str = "\
Exit codes:
  0        released after Ctrl-C, SIGTERM or SIGHUP (or, with --shell, the shell's own code)
  1        the lease could not be taken or kept (lost while held)
  2        invalid command line
  75       the lock was held by someone else for all of --wait (--conflict-exit-code)";

const SCRIPT_EXIT_CODES: &str = "\
Exit codes:
  0    done; the server's JSON is on stdout
  1    the server refused (its problem detail and code on stderr) or did not answer
  2    invalid command line
  75   acquire only: the lock was held by someone else for all of --wait (--conflict-exit-code)";

/// Where the Leasehold server answers, and how to prove who we are.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// Base URL of the Leasehold server (http:// or https://; a path prefix is kept).
    #[arg(
        long,
        env = "LEASEHOLD_SERVER",
        default_value = "http://127.0.0.1:8080"
    )]
    pub server: ServerUrl,

    /// API key (lhk_...) or admin token, sent in the Leasehold-Key header. Prefer the
    /// environment variable: command lines are visible to every user in `ps`.
    #[arg(long, env = "LEASEHOLD_API_KEY", hide_env_values = true)]
    pub api_key: Option<ApiKey>,

    /// PEM file of the CA that signed an https:// server's certificate (added to the
    /// system's trusted roots).
    #[arg(long, env = "LEASEHOLD_CA_FILE")]
    pub ca_file: Option<PathBuf>,
}

/// `leasehold keys ...`: API keys through the admin API.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key and print it once (with its secret).
    #[command(after_help = SCRIPT_EXIT_CODES)]
    Create(KeyCreateArgs),
    /// List the keys (never their secrets).
    #[command(after_help = SCRIPT_EXIT_CODES)]
    List(KeyListArgs),
    /// Give a key a new secret; the old one keeps working for --grace.
    #[command(after_help = SCRIPT_EXIT_CODES)]
    Rotate(KeyRotateArgs),
    /// Revoke a key: every instance refuses it within a second or two.
    #[command(after_help = SCRIPT_EXIT_CODES)]
    Revoke(KeyRevokeArgs),
}

#[derive(Debug, Clone, Args)]
pub struct KeyCreateArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    /// The key's name (unique in its tenant): audit entries and histories name it.
    pub name: String,

    /// The tenant (a key space of its own); the default tenant when absent.
    #[arg(long, default_value = "")]
    pub tenant: String,

    /// A role: client (take, renew, release), reader (inspect, events, dashboard) or admin
    /// (force release, keys, audit). Repeat for several; client when none is given.
    #[arg(long = "role", value_name = "ROLE")]
    pub roles: Vec<String>,

    /// A name pattern the key may use (`*` for any run of characters, like `jobs:*`).
    /// Repeat for several; every name when none is given.
    #[arg(long = "pattern", value_name = "PATTERN")]
    pub patterns: Vec<String>,

    /// Live leases this key may hold at once (the server's default when absent).
    #[arg(long)]
    pub max_leases: Option<u64>,

    /// Requests of this key waiting server-side at once.
    #[arg(long)]
    pub max_waiters: Option<u64>,

    /// Distinct lock and semaphore names this key may give Redis state to (within about an
    /// hour of their last use).
    #[arg(long)]
    pub max_names: Option<u64>,

    /// Longest TTL this key's leases may ask for, like 10m.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub max_ttl: Option<Duration>,

    /// Most permits one semaphore lease of this key may hold.
    #[arg(long)]
    pub max_permits: Option<u32>,

    /// Print only the secret instead of the JSON.
    #[arg(long)]
    pub secret_only: bool,
}

#[derive(Debug, Clone, Args)]
pub struct KeyListArgs {
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(Debug, Clone, Args)]
pub struct KeyRotateArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    /// The key's id (`id` in `keys list`).
    pub id: String,

    /// How long the current secret keeps working beside the new one, like 1h (0s: not at
    /// all).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1h")]
    pub grace: Duration,

    /// Print only the new secret instead of the JSON.
    #[arg(long)]
    pub secret_only: bool,
}

#[derive(Debug, Clone, Args)]
pub struct KeyRevokeArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    /// The key's id (`id` in `keys list`).
    pub id: String,
}

/// What a new lease asks for (`run` and `acquire`).
#[derive(Debug, Clone, Args)]
pub struct LeaseRequestArgs {
    /// Lease TTL, like 30s, 500ms or 2m; the server's default (30 s unless configured) when
    /// absent. If this client dies, the lock stays held for at most this long.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub ttl: Option<Duration>,

    /// How long to wait while someone else holds the lock, like 30s or 5m; 0 gives up at once.
    /// The waiting happens server-side (?wait_ms=), asked again when the server's own limit
    /// is shorter.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
    pub wait: Duration,

    /// Kind of lock (the server takes every one): reentrant (the default), exclusive, fair,
    /// read or write.
    #[arg(long, value_enum, conflicts_with = "semaphore")]
    pub kind: Option<KindArg>,

    /// Take permits of the semaphore NAME instead of a lock; it has N permits in all (every
    /// party must name the same N).
    #[arg(long, value_name = "N")]
    pub semaphore: Option<u32>,

    /// With --semaphore: how many of its permits to take (default 1).
    #[arg(long, value_name = "K", requires = "semaphore")]
    pub permits: Option<u32>,

    /// Label for people: shown to operators and to whoever is refused the lock. Default:
    /// user@host. The lease's metadata records host, pid and command either way.
    #[arg(long, env = "LEASEHOLD_HOLDER")]
    pub holder: Option<String>,

    /// Exit code when the lock is still held by someone else after --wait (75 is EX_TEMPFAIL;
    /// like flock -E, pick another when the command itself may exit 75).
    #[arg(long, default_value_t = 75)]
    pub conflict_exit_code: u8,

    /// Say nothing when the lock is held by someone else (the exit code tells): for cron,
    /// which mails whatever a job prints. Failures are still reported.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    #[command(flatten)]
    pub lease: LeaseRequestArgs,

    /// Time between SIGTERM and SIGKILL when the lease is lost. When the lease only cannot be
    /// renewed, the grace is cut short so the command is dead before the lease can expire.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub kill_grace: Duration,

    /// Name of the lock.
    pub name: String,

    /// The command to run and its arguments, after `--`. It gets LEASEHOLD_LOCK,
    /// LEASEHOLD_LEASE_ID and LEASEHOLD_FENCING_TOKEN in its environment.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Clone, Args)]
pub struct AcquireArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    #[command(flatten)]
    pub lease: LeaseRequestArgs,

    /// Print only the lease's token instead of the JSON.
    #[arg(long)]
    pub token_only: bool,

    /// Name of the lock.
    pub name: String,
}

/// One lease and the token that proves it (`heartbeat`, `release`).
#[derive(Debug, Clone, Args)]
pub struct LeaseArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    /// The lease's token, as `acquire` printed it. Prefer the environment variable: command
    /// lines are visible to every user in `ps`.
    #[arg(long, env = "LEASEHOLD_TOKEN", hide_env_values = true)]
    pub token: LeaseToken,

    /// Name of the lock.
    pub name: String,

    /// The lease's id (`lease_id` in the acquire JSON).
    pub lease_id: LeaseId,
}

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    /// Print the server's JSON (one line) instead of a table: for scripts.
    #[arg(long)]
    pub json: bool,

    /// Name of the lock or semaphore.
    pub name: String,

    /// A lease on it: show that lease's state (held, released, expired, force_released)
    /// instead of the holders.
    pub lease_id: Option<LeaseId>,
}

#[derive(Debug, Clone, Args)]
pub struct LsArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    /// Print the server's JSON (one line per page) instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Only names that start with this.
    #[arg(default_value = "")]
    pub prefix: String,
}

#[derive(Debug, Clone, Args)]
pub struct HoldArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    #[command(flatten)]
    pub lease: LeaseRequestArgs,

    /// Run an interactive shell ($SHELL, else /bin/sh) while holding the lock, with
    /// LEASEHOLD_LOCK, LEASEHOLD_LEASE_ID and LEASEHOLD_FENCING_TOKEN set; the lock is
    /// released when it exits. If the lease is lost, the shell gets SIGHUP.
    #[arg(long)]
    pub shell: bool,

    /// With --shell: time between SIGHUP and SIGKILL when the lease is lost.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub kill_grace: Duration,

    /// Name of the lock.
    pub name: String,
}

#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address the HTTP API listens on.
    #[arg(long, env = "LEASEHOLD_LISTEN", default_value = "127.0.0.1:8080")]
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
    /// way (see the README's "Sizing").
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
    /// unless its key says otherwise; more answer 429. What bounds one caller's Redis memory.
    #[arg(long, env = "LEASEHOLD_MAX_NAMES_PER_CLIENT", default_value_t = 10_000)]
    pub max_names_per_client: u64,

    /// The same for every caller of one tenant together (the default tenant too).
    #[arg(long, env = "LEASEHOLD_MAX_NAMES_PER_TENANT", default_value_t = 50_000)]
    pub max_names_per_tenant: u64,

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

    /// Label the acquisition metrics of GET /metrics with lock names. Off by default: every
    /// distinct name becomes a time series, so turn it on only for a few well-known locks.
    #[arg(long, env = "LEASEHOLD_METRICS_LOCK_NAMES")]
    pub metrics_lock_names: bool,
}

#[derive(Debug, Clone, Args)]
pub struct HealthcheckArgs {
    /// Address of the server to check.
    #[arg(long, env = "LEASEHOLD_LISTEN", default_value = "127.0.0.1:8080")]
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

/// A combination of `serve` flags that cannot work together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("--min-ttl-ms must be at least 1 and at most --max-ttl-ms")]
    TtlBounds,
    #[error("--default-ttl-ms must lie between --min-ttl-ms and --max-ttl-ms")]
    DefaultTtl,
    #[error("--admin-token must be at least 16 characters")]
    ShortAdminToken,
    #[error("--redis-timeout-ms must be at least 1")]
    RedisTimeout,
    #[error("--max-permits must be between 1 and 100000")]
    MaxPermits,
    #[error("--max-connections, --max-h2-streams and the timeouts must be at least 1")]
    HttpLimits,
}

impl ServeArgs {
    /// How many threads serve requests on a machine with `cores` cores (see --worker-threads).
    pub fn worker_threads(&self, cores: usize) -> usize {
        match self.worker_threads {
            Some(n) => n.get(),
            None if self.redis_url.is_none() => cores.saturating_sub(1).max(1),
            None => cores.max(1),
        }
    }

    /// Checks what clap cannot check field by field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.min_ttl_ms == 0 || self.min_ttl_ms > self.max_ttl_ms {
            return Err(ConfigError::TtlBounds);
        }
        if !(self.min_ttl_ms..=self.max_ttl_ms).contains(&self.default_ttl_ms) {
            return Err(ConfigError::DefaultTtl);
        }
        if self.admin_token.as_ref().is_some_and(|t| t.len() < 16) {
            return Err(ConfigError::ShortAdminToken);
        }
        if self.redis_timeout_ms == 0 {
            return Err(ConfigError::RedisTimeout);
        }
        if !(1..=100_000).contains(&self.max_permits) {
            return Err(ConfigError::MaxPermits);
        }
        if self.max_connections == 0
            || self.max_h2_streams == 0
            || [
                self.header_timeout_ms,
                self.idle_timeout_ms,
                self.request_timeout_ms,
                self.body_timeout_ms,
            ]
            .contains(&0)
        {
            return Err(ConfigError::HttpLimits);
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    fn serve(args: &[&str]) -> ServeArgs {
        let argv = ["leasehold", "serve"].iter().chain(args);
        match Cli::try_parse_from(argv).expect("parses").command {
            Command::Serve(args) => args,
            _ => unreachable!("a serve command"),
        }
    }

    #[test]
    fn the_embedded_redis_gets_a_core_of_its_own() {
        let embedded = serve(&[]);
        assert_eq!(embedded.worker_threads(8), 7);
        assert_eq!(embedded.worker_threads(2), 1);
        assert_eq!(embedded.worker_threads(1), 1);
        let remote = serve(&["--redis-url", "redis://10.0.0.5:6379"]);
        assert_eq!(remote.worker_threads(8), 8);
        assert_eq!(remote.worker_threads(2), 2);
        let chosen = serve(&[
            "--redis-url",
            "redis://127.0.0.1:6379",
            "--worker-threads",
            "1",
        ]);
        assert_eq!(chosen.worker_threads(8), 1);
    }

    #[test]
    fn zero_threads_is_refused() {
        let argv = ["leasehold", "serve", "--worker-threads", "0"];
        assert!(Cli::try_parse_from(argv).is_err());
    }
}
