//! Command line and environment: the server's flags all read a `LEASEHOLD_*` variable too; the
//! client subcommands read one where a script or a shell profile would set it once.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::client::{LeaseId, LeaseToken, LockKind, ServerUrl};

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

/// Where the Leasehold server answers.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// Base URL of the Leasehold server (plain http://; a path prefix is kept).
    #[arg(
        long,
        env = "LEASEHOLD_SERVER",
        default_value = "http://127.0.0.1:8080"
    )]
    pub server: ServerUrl,
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
    pub kind: Option<LockKind>,

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

    /// Bearer token for /v1/admin routes (at least 16 characters). With the embedded Redis and
    /// no token given, one is generated, printed once and written to <data-dir>/admin-token.
    /// With --redis-url and no token, admin routes are disabled.
    #[arg(long, env = "LEASEHOLD_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Require an admin sign-in for the dashboard's read-only pages and GET /v1/events too
    /// (by default anyone who can reach the server may look; only actions need the sign-in).
    #[arg(long, env = "LEASEHOLD_DASHBOARD_PRIVATE")]
    pub dashboard_private: bool,

    /// Directory of the embedded Redis (AOF persistence, socket, log) and the admin token.
    #[arg(long, env = "LEASEHOLD_DATA_DIR", default_value = "./leasehold-data")]
    pub data_dir: PathBuf,

    /// How long one Redis command may take before the request fails with 503, in ms.
    #[arg(long, env = "LEASEHOLD_REDIS_TIMEOUT_MS", default_value_t = 1_000)]
    pub redis_timeout_ms: u64,

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
}

impl ServeArgs {
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
