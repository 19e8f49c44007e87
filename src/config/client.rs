//! The flags of the lease subcommands (`run`, `hold`, `acquire`, `heartbeat`, `release`,
//! `status`, `ls`): where the server is, what a lease asks for, which lease a script means.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::client::{ApiKey, LeaseId, LeaseToken, LockKind, ServerUrl};

/// `--kind`: the lock kinds of the wire format ([`LockKind`]), as command-line values: the
/// wire crate knows nothing of clap. Each value's doc is its line in `--help`, word for word
/// the wire type's doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KindArg {
    /// Redisson RLock: the same lease may enter again and again (the default).
    Reentrant,
    /// Not reentrant: the holder's own second acquire gets 409 not_reentrant (Curator's
    /// InterProcessSemaphoreMutex).
    Exclusive,
    /// Strict FIFO among live waiters (Redisson RFairLock, Curator InterProcessMutex).
    Fair,
    /// The shared side of a read/write lock (Redisson RReadWriteLock).
    Read,
    /// The exclusive side of a read/write lock.
    Write,
    /// RedLock: a reentrant lock taken on a majority of the independent Redis masters the
    /// server was started with (`--redlock-nodes`); 422 redlock_disabled without them.
    Redlock,
}

impl From<KindArg> for LockKind {
    fn from(kind: KindArg) -> Self {
        match kind {
            KindArg::Reentrant => Self::Reentrant,
            KindArg::Exclusive => Self::Exclusive,
            KindArg::Fair => Self::Fair,
            KindArg::Read => Self::Read,
            KindArg::Write => Self::Write,
            KindArg::Redlock => Self::Redlock,
        }
    }
}

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

    /// Lock-delay, like 10s: should the lease end other than by a release (it expires because
    /// this client died or hung, or an admin removes it), the name refuses new leases that
    /// long, so the lost holder's last writes land before anyone else's (at most the server's
    /// --max-lock-delay-ms, 60 s by default). Locks only.
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with = "semaphore")]
    pub lock_delay: Option<Duration>,

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
    #[arg(required_unless_present = "locks", conflicts_with = "locks")]
    pub name: Option<String>,

    /// Hold several locks as one lease instead (a multilease: all of them or none, without
    /// deadlock however other callers name them), e.g. `--lock orders --lock stock`. `--kind`
    /// applies to each; semaphores cannot be part of one. The command also gets
    /// LEASEHOLD_FENCING_TOKENS (`lock=token` pairs, comma-separated).
    #[arg(long = "lock", value_name = "NAME", conflicts_with = "semaphore")]
    pub locks: Vec<String>,

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

#[cfg(test)]
mod tests {
    use clap::{Args as _, ValueEnum as _};

    use super::*;
    use crate::config::DEFAULT_LISTEN;

    #[test]
    fn the_default_server_is_where_serve_listens_by_default() {
        let command = ServerArgs::augment_args(clap::Command::new("status"));
        let server = command
            .get_arguments()
            .find(|arg| arg.get_id() == "server")
            .expect("a --server flag");
        assert_eq!(
            server.get_default_values(),
            [format!("http://{DEFAULT_LISTEN}").as_str()]
        );
    }

    #[test]
    fn kind_values_are_the_wire_names() {
        for kind in KindArg::value_variants() {
            let value = kind.to_possible_value().expect("no kind is hidden");
            assert_eq!(
                serde_json::to_value(LockKind::from(*kind)).expect("json"),
                value.get_name()
            );
        }
    }
}
