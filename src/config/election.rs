//! The flags of the election subcommands (`elect`, `leader`, `observe`): a candidate that runs
//! a command while it leads, and two ways to look at who leads.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;

use super::ServerArgs;

#[derive(Debug, Clone, Args)]
pub struct ElectArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    /// What this candidate publishes while it leads (its address, ...), shown by `leasehold
    /// leader` and `leasehold observe`: text, at most 4096 bytes.
    #[arg(long)]
    pub value: String,

    /// The term's TTL, like 10s or 1m (the server's default when absent): heartbeats come
    /// every third of it, and should this process die, the next candidate leads at most this
    /// long after. While in line, each poll keeps the candidate's place.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub ttl: Option<Duration>,

    /// How long to wait in line, like 5m; the default waits until the candidate leads.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub wait: Option<Duration>,

    /// Label for people, shown with the leader. Default: user@host.
    #[arg(long, env = "LEASEHOLD_HOLDER")]
    pub holder: Option<String>,

    /// Lock-delay, like 10s: should the term end other than by a resignation (this process
    /// died or hung, an admin ended it), nobody leads for that long.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub lock_delay: Option<Duration>,

    /// Time between SIGTERM and SIGKILL when the lead is lost. When the term only cannot be
    /// renewed, the grace is cut short so the command is dead before the term can expire.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub kill_grace: Duration,

    /// Exit code when --wait ran out with someone else still leading.
    #[arg(long, default_value_t = 75)]
    pub conflict_exit_code: u8,

    /// Say nothing when --wait runs out (the exit code tells). Failures are still reported.
    #[arg(long, short)]
    pub quiet: bool,

    /// Name of the election.
    pub name: String,

    /// The command to run while this candidate leads, and its arguments, after `--`. It gets
    /// LEASEHOLD_ELECTION, LEASEHOLD_CANDIDATE_ID and LEASEHOLD_TERM (a fencing token: it
    /// only grows per election) in its environment.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Clone, Args)]
pub struct LeaderArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    /// Print the server's JSON (one line: the leader, the last term, the line) instead of a
    /// table.
    #[arg(long)]
    pub json: bool,

    /// Name of the election.
    pub name: String,
}

#[derive(Debug, Clone, Args)]
pub struct ObserveArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    /// Print each change as one line of JSON (`event`, `id`, `term`, `value`, `holder`,
    /// `since`, `candidate_id`) instead of a line for people.
    #[arg(long)]
    pub json: bool,

    /// Name of the election.
    pub name: String,
}
