//! The command line: `leasehold serve` and `healthcheck` (the server's flags, `server.rs`),
//! the lease subcommands (`run`, `hold`, `acquire`, `heartbeat`, `release`, `status`, `ls`:
//! `client.rs`), the election subcommands (`elect`, `leader`, `observe`: `election.rs`) and
//! `keys` (`keys.rs`). Every server flag reads a `LEASEHOLD_*` variable too;
//! the client subcommands read one where a script or a shell profile would set it once.
//!
//! The types are re-exported here: the rest of the crate names them `config::ServeArgs`,
//! `config::RunArgs`, and so on.

mod checks;
mod client;
mod election;
mod keys;
mod server;
#[cfg(test)]
mod tests;

use clap::{Args, Parser, Subcommand};

pub use self::checks::{ConfigError, check_redlock_nodes};
pub use self::client::{
    AcquireArgs, HoldArgs, KindArg, LeaseArgs, LeaseRequestArgs, LsArgs, RunArgs, ServerArgs,
    StatusArgs,
};
pub use self::election::{ElectArgs, LeaderArgs, ObserveArgs};
pub use self::keys::{KeyCreateArgs, KeyListArgs, KeyRevokeArgs, KeyRotateArgs, KeysCommand};
pub use self::server::{
    DEFAULT_LISTEN, HealthcheckArgs, LogFormat, MIN_ADMIN_TOKEN_CHARS, ServeArgs,
};

/// Leasehold: a distributed lock service over HTTP, backed by Redis with Redisson's data layout.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
// Parsed once at start-up and taken apart at once: its size never matters.
#[allow(clippy::large_enum_variant)]
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
    /// Run a command while leading an election: wait in line, run it with LEASEHOLD_TERM
    /// while this candidate leads, stop it if the lead is lost, resign when it exits.
    #[command(after_help = ELECT_EXIT_CODES)]
    Elect(ElectArgs),
    /// Show who leads an election, as a table (--json: the server's JSON).
    #[command(after_help = LEADER_EXIT_CODES)]
    Leader(LeaderArgs),
    /// Print each change of an election's leader as a line (--json: JSON lines) until Ctrl-C,
    /// resuming across dropped connections without missing a term.
    Observe(ObserveArgs),
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

While the command runs, SIGINT, SIGTERM and SIGHUP are forwarded to its process group; when
it exits, whatever is left running in its group gets SIGKILL.";

const ELECT_EXIT_CODES: &str = "\
Exit codes:
  the command's own   when it ran and exited (128+N when a signal N killed it)
  1                   the candidate could not stand or keep its term (server unreachable or
                      refusing, or the lead was lost while the command ran and it still exited 0)
  2                   invalid command line
  75                  someone else still led when --wait ran out (--conflict-exit-code)
  126, 127            the command could not be executed, or was not found
  128+N               signal N (INT, TERM, HUP) arrived while waiting in line

While the command runs, SIGINT, SIGTERM and SIGHUP are forwarded to its process group; when
it exits, whatever is left running in its group gets SIGKILL.";

const LEADER_EXIT_CODES: &str = "\
Exit codes:
  0    someone leads
  1    the server refused (its problem detail and code on stderr) or did not answer
  2    invalid command line
  3    nobody leads now";

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

#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    pub shell: clap_complete::Shell,
}
