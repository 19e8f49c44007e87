//! `leasehold run NAME -- COMMAND [ARGS..]`: hold a lock for exactly as long as a command runs.
//!
//! The command starts only once the lease is ours, in its own process group. While it runs we
//! heartbeat every TTL/3, check in between (`--check-interval`, a cheap read) that the lease
//! still holds the lock, and forward SIGINT, SIGTERM and SIGHUP to the group. When the lease is
//! lost (410, or a force-release seen by a check), or heartbeats keep failing until only a
//! safety margin of the lease is left, the group gets SIGTERM and, after a grace period,
//! SIGKILL: the point is that the command stops before someone else can hold the lock. When
//! the command exits we release the lease and exit with its code. We say nothing on success,
//! so cron mails only real trouble.
//!
//! Expiry is tracked on our own monotonic clock, never from the server's `expires_at`: a
//! renewal *sent* at instant `t` keeps the lease until at least `t + ttl`, because the server
//! renews it after `t`. That bound holds whatever the two wall clocks say.

use std::ffi::OsString;
use std::fmt::Display;
use std::io;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use futures_util::FutureExt as _;
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until};

use super::signals::{self, Signals};
use super::{EXIT_FAILURE, acquire_options, describe};
use crate::client::{
    AcquireOptions, Acquired, Client, ClientError, Lease, LeaseId, LeaseToken, Problem, Reply,
    Resource, Ticket,
};
use crate::config::RunArgs;

/// Exit code when the command was found but could not be executed (as shells use it).
const EXIT_CANNOT_EXECUTE: u8 = 126;
/// Exit code when the command was not found (as shells use it).
const EXIT_NOT_FOUND: u8 = 127;

/// Pause before asking again when the server answered 409 before our `--wait` was over (its
/// `--max-wait-ms` is shorter): enough to never hammer a server that does not wait at all.
const REASK_PAUSE: Duration = Duration::from_millis(100);

/// Longest pause between heartbeat retries after a failure (shorter for short TTLs).
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Anything further away than this is "never" (and keeps `Instant` arithmetic from overflowing
/// on `--wait 1000years`).
const NEVER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

pub async fn run(args: RunArgs) -> ExitCode {
    ExitCode::from(run_to_exit_code(args).await)
}

async fn run_to_exit_code(args: RunArgs) -> u8 {
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(e) => {
            say(format_args!("cannot install signal handlers: {e}"));
            return EXIT_FAILURE;
        }
    };
    let client = match super::client(&args.server) {
        Ok(client) => client,
        Err(e) => {
            say(describe(&e));
            return EXIT_FAILURE;
        }
    };

    let options = acquire_options(&args.lease);
    let held = match acquire(&client, &args.name, &options, &mut signals).await {
        Acquisition::Held(held) => held,
        Acquisition::Busy(problem) => {
            say(format_args!(
                "not acquired: {} (waited {})",
                problem.detail,
                human(options.wait)
            ));
            return args.lease.conflict_exit_code;
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
        client: &client,
        lock: &args.name,
        id: held.lease.grant.lease_id,
        token: held.lease.token.clone(),
    };

    let held = if held.renewed_at.elapsed() > held.ttl / 10 {
        // The answer took a while (the server waited for the lock), and all we know is that
        // the TTL started after we asked. Renew once to know the expiry tightly again.
        match confirm(&lease, held).await {
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

    let mut child = match spawn(&args.command, &held.lease) {
        Ok(child) => child,
        Err(e) => {
            let program = args.command.first().map(|p| p.to_string_lossy());
            say(format_args!(
                "cannot run {}: {e}",
                program.as_deref().unwrap_or("the command")
            ));
            lease.release_quietly().await;
            return if e.kind() == io::ErrorKind::NotFound {
                EXIT_NOT_FOUND
            } else {
                EXIT_CANNOT_EXECUTE
            };
        }
    };
    let Some(group) = ProcessGroup::of(&child) else {
        // Unreachable: a child has a pid until it is waited for.
        say("lost track of the command's process");
        lease.release_quietly().await;
        return EXIT_FAILURE;
    };

    let keeper = Keeper::start(&client, &args.name, &held, args.check_interval);
    let supervisor = Supervisor {
        group,
        kill_grace: args.kill_grace,
        margin: safety_margin(held.ttl),
        until: later(held.renewed_at, held.ttl),
    };
    let (status, stop) = supervisor.watch(&mut child, keeper, &mut signals).await;

    match stop {
        // The server already said the lease is gone; releasing it would only get a 410.
        Some(Stop {
            reason: StopReason::Lost,
            ..
        }) => {}
        _ => lease.release().await,
    }
    match status {
        Ok(status) => {
            let code = exit_code(status);
            // A command cut short because its lease was lost must not look like a success.
            if stop.is_some() && code == 0 {
                EXIT_FAILURE
            } else {
                code
            }
        }
        Err(e) => {
            say(format_args!("cannot wait for the command: {e}"));
            EXIT_FAILURE
        }
    }
}

/// A lease we hold and the instant from which its TTL is known to count.
struct Held {
    lease: Lease,
    ttl: Duration,
    /// When the request that (re)started the TTL was sent.
    renewed_at: Instant,
}

enum Acquisition {
    Held(Held),
    /// Still held by someone else when the wait was over.
    Busy(Problem),
    Interrupted(Signal),
    Failed(ClientError),
}

/// Asks for the lease, waiting server-side up to `options.wait` in total. A signal drops the
/// in-flight request, which closes its connection: the server then drops our waiter at once
/// (and rolls back a grant it could not deliver).
async fn acquire(
    client: &Client,
    lock: &str,
    options: &AcquireOptions,
    signals: &mut Signals,
) -> Acquisition {
    let deadline = later(Instant::now(), options.wait);
    loop {
        let sent = Instant::now();
        let attempt = AcquireOptions {
            wait: deadline.saturating_duration_since(sent),
            ..options.clone()
        };
        let result = tokio::select! {
            result = client.acquire(lock, &attempt) => result,
            signal = signals.recv() => return Acquisition::Interrupted(signal),
        };
        match result {
            Ok(reply) => {
                let lease = match reply.body {
                    Acquired::Lease(lease) => lease,
                    // A fair lock's place in line: poll it until its turn or the deadline.
                    Acquired::Queued(ticket) => {
                        match wait_in_line(client, lock, ticket, deadline, signals).await {
                            Ok(lease) => lease,
                            Err(outcome) => return outcome,
                        }
                    }
                };
                return Acquisition::Held(Held {
                    ttl: Duration::from_millis(lease.grant.ttl_ms),
                    lease,
                    renewed_at: sent,
                });
            }
            Err(ClientError::Problem(p)) if p.is_lock_held() => {
                if Instant::now() + REASK_PAUSE >= deadline {
                    return Acquisition::Busy(p);
                }
                tokio::select! {
                    () = sleep(REASK_PAUSE) => {}
                    signal = signals.recv() => return Acquisition::Interrupted(signal),
                }
            }
            Err(e) => return Acquisition::Failed(e),
        }
    }
}

/// Polls a fair lock's ticket until its turn, leaving the line at the deadline (then the
/// lock counts as busy) or on a signal.
async fn wait_in_line(
    client: &Client,
    lock: &str,
    ticket: Ticket,
    deadline: Instant,
    signals: &mut Signals,
) -> Result<Lease, Acquisition> {
    let (id, token) = (ticket.ticket.ticket_id, ticket.token);
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        let polled = tokio::select! {
            polled = client.poll(lock, id, &token, wait) => polled,
            signal = signals.recv() => {
                let _ = client.leave(lock, id, &token).await;
                return Err(Acquisition::Interrupted(signal));
            }
        };
        match polled {
            Ok(Reply {
                body: Acquired::Lease(lease),
                ..
            }) => return Ok(lease),
            Ok(_) if Instant::now() >= deadline => {
                let _ = client.leave(lock, id, &token).await;
                return Err(Acquisition::Busy(Problem {
                    status: 409,
                    code: "lock_held".into(),
                    detail: "still queued for the fair lock when the wait ran out".into(),
                    retry_after_ms: None,
                    reason: None,
                }));
            }
            Ok(_) => {}
            Err(e) => return Err(Acquisition::Failed(e)),
        }
    }
}

/// One heartbeat, right after a long acquire.
async fn confirm(lease: &Leased<'_>, held: Held) -> Result<Held, ClientError> {
    let sent = Instant::now();
    let renewal = lease
        .client
        .heartbeat(Resource::Lock, lease.lock, lease.id, &lease.token)
        .await?;
    Ok(Held {
        ttl: Duration::from_millis(renewal.body.ttl_ms),
        renewed_at: sent,
        ..held
    })
}

/// What release needs to know about the lease.
struct Leased<'a> {
    client: &'a Client,
    lock: &'a str,
    id: LeaseId,
    token: LeaseToken,
}

impl Leased<'_> {
    /// Releases every level; a failure is only reported, the lease then ends with its TTL.
    async fn release(&self) {
        if let Err(e) = self
            .client
            .release(Resource::Lock, self.lock, self.id, &self.token, true)
            .await
        {
            say(format_args!(
                "cannot release the lease ({}); the lock stays held until its TTL runs out",
                describe(&e)
            ));
        }
    }

    /// Releases on an error path that has already said what went wrong.
    async fn release_quietly(&self) {
        let _ = self
            .client
            .release(Resource::Lock, self.lock, self.id, &self.token, true)
            .await;
    }
}

fn spawn(command: &[OsString], lease: &Lease) -> io::Result<Child> {
    let Some((program, args)) = command.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
    };
    Command::new(program)
        .args(args)
        .env("LEASEHOLD_LOCK", &lease.grant.lock)
        .env("LEASEHOLD_LEASE_ID", lease.grant.lease_id.to_string())
        .env(
            "LEASEHOLD_FENCING_TOKEN",
            lease.grant.fencing_token.to_string(),
        )
        // Its own group: SIGTERM and SIGKILL reach everything it started (a shell's
        // background jobs too), and a Ctrl-C in the terminal reaches us, which forward it.
        .process_group(0)
        .spawn()
}

/// The command's process group (its id is the command's pid).
#[derive(Debug, Clone, Copy)]
struct ProcessGroup(Pid);

impl ProcessGroup {
    fn of(child: &Child) -> Option<Self> {
        let pid = i32::try_from(child.id()?).ok()?;
        Some(Self(Pid::from_raw(pid)))
    }

    fn signal(self, signal: Signal) {
        match killpg(self.0, signal) {
            // Nobody left in the group: nothing to stop.
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => say(format_args!("cannot send {signal} to the command: {e}")),
        }
    }
}

/// What the heartbeat task reports.
enum News {
    /// The lease is ours until at least this instant.
    Renewed(Instant),
    /// A heartbeat got no answer or a retryable one; it is retried.
    Failed(ClientError),
    /// The server says the lease is gone (why, in its words); the task has stopped.
    Lost(String),
}

/// The heartbeat task: renews every TTL/3, retries failures sooner, checks in between that the
/// lease still holds the lock, and stops when it is lost or when the keeper is dropped (which
/// aborts a request in flight, so no heartbeat races with the release).
struct Keeper {
    task: JoinHandle<()>,
    news: mpsc::Receiver<News>,
}

impl Keeper {
    fn start(client: &Client, lock: &str, held: &Held, check_interval: Duration) -> Self {
        // A request must not hang past the next heartbeat; it is retried instead.
        let timeout = (held.ttl / 3).clamp(Duration::from_millis(500), Duration::from_secs(10));
        let client = client.clone().with_timeout(timeout);
        let lock = lock.to_owned();
        let id = held.lease.grant.lease_id;
        let token = held.lease.token.clone();
        let mut ttl = held.ttl;
        let mut next_heartbeat = held.renewed_at + ttl / 3;
        let check_interval = if check_interval.is_zero() {
            NEVER
        } else {
            check_interval
        };
        let check = move |from: Instant| later(from, check_interval);
        let mut next_check = check(Instant::now());
        let (tx, news) = mpsc::channel(4);
        let task = tokio::spawn(async move {
            loop {
                if next_check < next_heartbeat {
                    sleep_until(next_check).await;
                    next_check = check(Instant::now());
                    // Only a definite answer counts; failures are the heartbeats' business.
                    let lost = match client.lease_status(Resource::Lock, &lock, id).await {
                        Ok(status) if status.body.state.has_ended() => {
                            format!("the server reports it {}", status.body.state.as_str())
                        }
                        Err(ClientError::Problem(p)) if p.is_lease_gone() => p.detail,
                        Ok(_) | Err(_) => continue,
                    };
                    let _ = tx.send(News::Lost(lost)).await;
                    return;
                }
                sleep_until(next_heartbeat).await;
                let sent = Instant::now();
                let news = match client.heartbeat(Resource::Lock, &lock, id, &token).await {
                    Ok(renewal) => {
                        ttl = Duration::from_millis(renewal.body.ttl_ms);
                        next_heartbeat = sent + ttl / 3;
                        News::Renewed(later(sent, ttl))
                    }
                    Err(ClientError::Problem(p)) if p.is_lease_gone() => {
                        let _ = tx.send(News::Lost(p.detail)).await;
                        return;
                    }
                    Err(e) => {
                        next_heartbeat = Instant::now() + (ttl / 3).min(RETRY_PAUSE);
                        News::Failed(e)
                    }
                };
                next_check = check(Instant::now());
                if tx.send(news).await.is_err() {
                    return;
                }
            }
        });
        Self { task, news }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why the command is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    /// The server said the lease is gone (410): someone else may hold the lock already.
    Lost,
    /// Heartbeats failed until only the safety margin was left.
    Unrenewable,
}

#[derive(Debug, Clone, Copy)]
struct Stop {
    reason: StopReason,
    /// When SIGTERM went to the group.
    term_sent: Instant,
    killed: bool,
}

/// Watches the running command, its lease and our signals.
struct Supervisor {
    group: ProcessGroup,
    kill_grace: Duration,
    /// SIGTERM goes out when less than this is left of the lease.
    margin: Duration,
    /// The lease is ours until at least then.
    until: Instant,
}

impl Supervisor {
    /// Runs until the command exits; returns its status and whether (and why) we stopped it.
    async fn watch(
        mut self,
        child: &mut Child,
        mut keeper: Keeper,
        signals: &mut Signals,
    ) -> (io::Result<ExitStatus>, Option<Stop>) {
        let mut stop: Option<Stop> = None;
        let mut failing = false;
        let status = loop {
            let term_at = self.until.checked_sub(self.margin).unwrap_or(self.until);
            let kill_at = stop.map_or(term_at, |s| self.kill_at(s));
            tokio::select! {
                biased;
                status = child.wait() => break status,
                signal = signals.recv() => self.group.signal(signal),
                Some(news) = keeper.news.recv() => match news {
                    News::Renewed(until) => {
                        self.until = until;
                        if failing {
                            failing = false;
                            say("heartbeats succeed again");
                        }
                    }
                    News::Failed(e) => {
                        if !failing {
                            failing = true;
                            say(format_args!(
                                "heartbeat failed ({}); retrying, and stopping the command \
                                 if the lease gets within {} of expiring",
                                describe(&e),
                                human(self.margin),
                            ));
                        }
                    }
                    News::Lost(why) => {
                        say(format_args!("lease lost: {why}"));
                        stop = Some(self.terminate(StopReason::Lost, stop));
                    }
                },
                () = sleep_until(term_at), if stop.is_none() => {
                    say(format_args!(
                        "could not renew the lease, which expires in {}: giving up on it",
                        human(self.until.saturating_duration_since(Instant::now())),
                    ));
                    stop = Some(self.terminate(StopReason::Unrenewable, stop));
                }
                () = sleep_until(kill_at), if stop.is_some_and(|s| !s.killed) => {
                    say("the command is still running: sending SIGKILL to its process group");
                    self.group.signal(Signal::SIGKILL);
                    stop = stop.map(|s| Stop { killed: true, ..s });
                }
            }
        };
        drop(keeper);
        if stop.is_some() {
            // The command has exited; whatever it left behind in its group goes now.
            self.group.signal(Signal::SIGKILL);
        }
        (status, stop)
    }

    /// SIGTERM to the group, unless it was sent already (a lease that could not be renewed
    /// and is then reported lost).
    fn terminate(&self, reason: StopReason, stop: Option<Stop>) -> Stop {
        if let Some(stop) = stop {
            return Stop { reason, ..stop };
        }
        let now = Instant::now();
        let stop = Stop {
            reason,
            term_sent: now,
            killed: false,
        };
        say(format_args!(
            "sending SIGTERM to the command's process group (SIGKILL in {})",
            human(self.kill_at(stop).saturating_duration_since(now)),
        ));
        self.group.signal(Signal::SIGTERM);
        stop
    }

    /// When SIGKILL follows SIGTERM: after the grace period, but while the lease merely could
    /// not be renewed, no later than half the safety margin before it expires, so the command
    /// is dead before anyone else can get the lock. Each successful renewal pushes that back.
    fn kill_at(&self, stop: Stop) -> Instant {
        let after_grace = later(stop.term_sent, self.kill_grace);
        match stop.reason {
            StopReason::Lost => after_grace,
            StopReason::Unrenewable => after_grace.min(
                self.until
                    .checked_sub(self.margin / 2)
                    .unwrap_or(self.until),
            ),
        }
    }
}

/// How much of the lease must be left when we give up renewing and stop the command:
/// max(TTL/6, 1 s), but at most half the TTL so a short TTL still gets its heartbeats.
fn safety_margin(ttl: Duration) -> Duration {
    (ttl / 6).max(Duration::from_secs(1)).min(ttl / 2)
}

/// `at + after`, or "never" when that is absurdly far.
fn later(at: Instant, after: Duration) -> Instant {
    at + after.min(NEVER)
}

/// The exit code shells give a process: its own, or 128+N when signal N killed it.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(EXIT_FAILURE),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(u8::MAX),
        (None, None) => EXIT_FAILURE,
    }
}

/// A duration as people write it, to the millisecond.
fn human(duration: Duration) -> humantime::FormattedDuration {
    let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    humantime::format_duration(Duration::from_millis(millis))
}

fn say(message: impl Display) {
    eprintln!("leasehold run: {message}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_safety_margin_is_a_sixth_of_the_ttl_at_least_a_second_at_most_half() {
        assert_eq!(
            safety_margin(Duration::from_secs(60)),
            Duration::from_secs(10)
        );
        assert_eq!(
            safety_margin(Duration::from_secs(3)),
            Duration::from_secs(1)
        );
        assert_eq!(
            safety_margin(Duration::from_secs(1)),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
    }
}
