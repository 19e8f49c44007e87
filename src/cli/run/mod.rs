//! `leasehold run NAME -- COMMAND [ARGS..]`: hold a lock (or semaphore permits, or with
//! `--lock A --lock B` several locks as one multilease) for exactly as long as a command runs; `leasehold hold NAME [--shell]`: until Ctrl-C, or around an
//! interactive shell; `leasehold elect NAME --value V -- COMMAND`: wait in line in an
//! election, and run the command for exactly as long as this candidate leads (a term is a
//! lease on the election's routes: everything below applies to it unchanged).
//!
//! The command starts only once the lease is ours, in its own process group. While it runs we
//! heartbeat every TTL/3, keep a lease watch open (`GET .../watch`: the server says `lost` the
//! moment the lease ends, no polling), and forward SIGINT, SIGTERM and SIGHUP to the group.
//! When the lease is lost (the watch's `lost`, or a 410 to a heartbeat), or heartbeats keep
//! failing until only a safety margin of the lease is left, the group gets SIGTERM and, after
//! a grace period, SIGKILL: the point is that the command stops before someone else can hold
//! the lock. When the command exits we release the lease and exit with its code. We say
//! nothing on success, so cron mails only real trouble. Should we die first (SIGKILL, a
//! crash), the kernel sends the command SIGTERM (see `parent_death`).
//!
//! An interactive shell (`hold --shell`) runs in our own process group instead, so it owns
//! the terminal: a Ctrl-C there reaches it directly (we ignore ours), and a lost lease sends
//! it SIGHUP (interactive shells ignore SIGTERM).
//!
//! Expiry is tracked on our own monotonic clock, never from the server's `expires_at`: a
//! renewal *sent* at instant `t` keeps the lease until at least `t + ttl`, because the server
//! renews it after `t`. That bound holds whatever the two wall clocks say.
//!
//! In parts: `acquire` takes the lease, `child` starts what runs under it and signals it,
//! `keeper` keeps the lease (heartbeats, the watch) and releases it, `supervisor` ties them
//! together until what runs ends and decides the exit code; `Job`, here, runs them in order.

mod acquire;
mod child;
mod keeper;
mod supervisor;

use std::fmt::Display;
use std::process::ExitCode;
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::time::Instant;

use self::acquire::{Acquisition, Ask, Held};
use self::child::Mode;
use self::keeper::{Keeper, Leased};
use self::supervisor::{Supervisor, safety_margin};
use super::signals::{self, Signals};
use super::{EXIT_FAILURE, Holder, acquire_options, clip, describe, permit_options};
use crate::client::CampaignOptions;
use crate::client::Client;
use crate::config::{ElectArgs, HoldArgs, LeaseRequestArgs, RunArgs, ServerArgs};

/// Anything further away than this is "never" (and keeps `Instant` arithmetic from overflowing
/// on `--wait 1000years`).
const NEVER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// One guarded hold: the lease asked for and what runs under it.
struct Job {
    client: Client,
    /// The lock's name (a multilease's locks, joined by commas).
    name: String,
    /// A multilease's locks (empty for one lock or semaphore).
    locks: Vec<String>,
    lease: LeaseRequestArgs,
    kill_grace: Duration,
    mode: Mode,
    /// `elect`: the value this candidate publishes; the job then holds a term of the election
    /// `name`, not a lease.
    campaign: Option<String>,
}

pub async fn run(args: RunArgs) -> ExitCode {
    let mode = Mode::Command(args.command);
    let name = args.name.unwrap_or_else(|| args.locks.join(","));
    Job::launch(
        &args.server,
        name,
        args.locks,
        args.lease,
        args.kill_grace,
        mode,
    )
    .await
}

pub async fn hold(args: HoldArgs) -> ExitCode {
    let _ = SPEAKER.set("hold");
    let mode = if args.shell {
        Mode::Shell
    } else {
        Mode::UntilSignal
    };
    Job::launch(
        &args.server,
        args.name,
        Vec::new(),
        args.lease,
        args.kill_grace,
        mode,
    )
    .await
}

pub async fn elect(args: ElectArgs) -> ExitCode {
    let _ = SPEAKER.set("elect");
    // The lease flags an election shares with a lock; the rest do not apply to it.
    let lease = LeaseRequestArgs {
        ttl: args.ttl,
        wait: args.wait.unwrap_or(NEVER),
        kind: None,
        lock_delay: args.lock_delay,
        semaphore: None,
        permits: None,
        holder: args.holder,
        conflict_exit_code: args.conflict_exit_code,
        quiet: args.quiet,
    };
    let job = Job::connect(&args.server).map(|client| Job {
        client,
        name: args.name,
        locks: Vec::new(),
        lease,
        kill_grace: args.kill_grace,
        mode: Mode::Command(args.command),
        campaign: Some(args.value),
    });
    match job {
        Ok(job) => ExitCode::from(job.run().await),
        Err(code) => code,
    }
}

impl Job {
    /// The client of `server`, or the exit code of a failure to make one (said on stderr).
    fn connect(server: &ServerArgs) -> Result<Client, ExitCode> {
        super::client(server).map_err(|e| {
            say(describe(&e));
            ExitCode::from(EXIT_FAILURE)
        })
    }

    /// Connects to the server and runs the job: its exit code.
    async fn launch(
        server: &ServerArgs,
        name: String,
        locks: Vec<String>,
        lease: LeaseRequestArgs,
        kill_grace: Duration,
        mode: Mode,
    ) -> ExitCode {
        let client = match Self::connect(server) {
            Ok(client) => client,
            Err(code) => return code,
        };
        let job = Self {
            client,
            name,
            locks,
            lease,
            kill_grace,
            mode,
            campaign: None,
        };
        ExitCode::from(job.run().await)
    }

    /// The holder's label and metadata: this process, and what it runs.
    fn holder(&self) -> Holder {
        Holder::of(
            i32::try_from(std::process::id()).unwrap_or(0),
            Some(clip(&self.mode.command_line())),
        )
    }

    async fn run(self) -> u8 {
        let mut signals = match Signals::install() {
            Ok(signals) => signals,
            Err(e) => {
                say(format_args!("cannot install signal handlers: {e}"));
                return EXIT_FAILURE;
            }
        };
        let client = &self.client;
        let holder = self.holder();
        let ask = match self.lease.semaphore {
            _ if self.campaign.is_some() => Ask::Campaign(
                CampaignOptions {
                    value: self.campaign.clone().unwrap_or_default(),
                    ttl: self.lease.ttl,
                    holder: Some(self.lease.holder.clone().unwrap_or(holder.label.clone())),
                    lock_delay: self.lease.lock_delay,
                    ..CampaignOptions::default()
                },
                self.lease.wait,
            ),
            Some(limit) => Ask::Permits(permit_options(&self.lease, limit, &holder)),
            None if !self.locks.is_empty() => {
                let options = acquire_options(&self.lease, &holder);
                let locks = self
                    .locks
                    .iter()
                    .map(|name| (name.clone(), options.kind))
                    .collect();
                Ask::Multi(locks, options)
            }
            None => Ask::Lock(acquire_options(&self.lease, &holder)),
        };
        let held = match acquire::acquire(client, &self.name, &ask, &mut signals).await {
            Acquisition::Held(held) => *held,
            Acquisition::Busy(problem) => {
                if !self.lease.quiet {
                    say(format_args!(
                        "not acquired: {} (waited {})",
                        problem.detail,
                        human(ask.wait())
                    ));
                }
                return self.lease.conflict_exit_code;
            }
            Acquisition::Interrupted(signal) => {
                say(format_args!("{signal} while waiting for the lock: gave up"));
                return signals::exit_code(signal);
            }
            Acquisition::Failed(e) => {
                say(format_args!("cannot acquire the lock: {}", describe(&e)));
                return EXIT_FAILURE;
            }
        };
        let lease = Leased {
            client,
            resource: ask.resource(),
            lock: &self.name,
            id: held.lease.grant.lease_id,
            token: held.lease.token.clone(),
            fence: held.lease.grant.fencing_token,
        };
        self.guard(&lease, held, &mut signals).await
    }

    /// Runs what the job runs under the lease `held`, then releases it.
    async fn guard(&self, lease: &Leased<'_>, held: Held, signals: &mut Signals) -> u8 {
        let held = if held.renewed_at.elapsed() > held.ttl / 10 {
            // The answer took a while (the server waited for the lock), and all we know is
            // that the TTL started after we asked. Renew once to know the expiry tightly again.
            match keeper::confirm(lease, held).await {
                Ok(held) => held,
                Err(e) => {
                    say(format_args!(
                        "cannot renew the lease just acquired, not running the command: {}",
                        describe(&e)
                    ));
                    lease.release_quietly().await;
                    return EXIT_FAILURE;
                }
            }
        } else {
            held
        };
        // A Ctrl-C during the acquire's last moments: do not start what the user just cancelled.
        if let Some(signal) = signals.recv().now_or_never() {
            say(format_args!("{signal} while acquiring the lock: gave up"));
            lease.release_quietly().await;
            return signals::exit_code(signal);
        }

        let (mut child, target) = match self.mode.start(&held.lease) {
            Ok(started) => started,
            Err(e) => {
                say(format_args!(
                    "cannot run {}: {e}",
                    self.mode.program().as_deref().unwrap_or("the command")
                ));
                lease.release_quietly().await;
                return child::start_failure_code(&e);
            }
        };
        if !self.lease.quiet {
            let release = match self.mode {
                Mode::Command(_) => None,
                Mode::Shell => Some("exit the shell to release it"),
                Mode::UntilSignal => Some("Ctrl-C releases it"),
            };
            if let Some(release) = release {
                say(format_args!(
                    "holding {} (lease {}, fencing token {}); {release}",
                    self.name, lease.id, held.lease.grant.fencing_token
                ));
            }
        }

        let keeper = Keeper::start(lease, &held);
        let supervisor = Supervisor {
            target,
            kill_grace: self.kill_grace,
            margin: safety_margin(held.ttl),
            until: later(held.renewed_at, held.ttl),
        };
        let outcome = supervisor.watch(child.as_mut(), keeper, signals).await;
        // The server already said the lease is gone; releasing it would only get a 410.
        if !outcome.lease_lost() {
            lease.release().await;
        }
        outcome.exit_code()
    }
}

/// `at + after`, or "never" when that is absurdly far.
fn later(at: Instant, after: Duration) -> Instant {
    at + after.min(NEVER)
}

/// A duration as people write it, to the millisecond.
fn human(duration: Duration) -> humantime::FormattedDuration {
    let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    humantime::format_duration(Duration::from_millis(millis))
}

/// Which subcommand speaks (`run` or `hold`), for the start of each line on stderr.
static SPEAKER: std::sync::OnceLock<&str> = std::sync::OnceLock::new();

fn say(message: impl Display) {
    eprintln!("leasehold {}: {message}", SPEAKER.get().unwrap_or(&"run"));
}
