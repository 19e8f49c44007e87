//! `leasehold run NAME -- COMMAND [ARGS..]`: hold a lock (or semaphore permits) for exactly as
//! long as a command runs; `leasehold hold NAME [--shell]`: until Ctrl-C, or around an
//! interactive shell.
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
use super::{EXIT_FAILURE, Holder, acquire_options, clip, describe, permit_options};
use crate::client::{
    AcquireOptions, Acquired, Client, ClientError, Lease, LeaseId, LeaseToken, PermitOptions,
    Problem, Reply, Resource, Ticket,
};
use crate::config::{HoldArgs, LeaseRequestArgs, RunArgs, ServerArgs};
use crate::parent_death;

/// Exit code when the command was found but could not be executed (as shells use it).
const EXIT_CANNOT_EXECUTE: u8 = 126;
/// Exit code when the command was not found (as shells use it).
const EXIT_NOT_FOUND: u8 = 127;

/// Pause before asking again when the server answered 409 before our `--wait` was over (its
/// `--max-wait-ms` is shorter): enough to never hammer a server that does not wait at all.
const REASK_PAUSE: Duration = Duration::from_millis(100);

/// Longest pause between heartbeat retries after a failure (shorter for short TTLs).
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Pause before opening the lease watch again after it broke (the server restarted, a proxy
/// cut it); heartbeats go on meanwhile.
const WATCH_RETRY: Duration = Duration::from_secs(1);

/// Anything further away than this is "never" (and keeps `Instant` arithmetic from overflowing
/// on `--wait 1000years`).
const NEVER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// What runs while the lease is held.
enum Mode {
    /// A command in its own process group (`run`).
    Command(Vec<OsString>),
    /// An interactive shell in our process group (`hold --shell`).
    Shell,
    /// Nothing: the lease is held until a signal (`hold`).
    UntilSignal,
}

/// One guarded hold: the lease asked for and what runs under it.
struct Job {
    client: Client,
    name: String,
    lease: LeaseRequestArgs,
    kill_grace: Duration,
    mode: Mode,
}

pub async fn run(args: RunArgs) -> ExitCode {
    let mode = Mode::Command(args.command);
    Job::launch(&args.server, args.name, args.lease, args.kill_grace, mode).await
}

pub async fn hold(args: HoldArgs) -> ExitCode {
    let _ = SPEAKER.set("hold");
    let mode = if args.shell {
        Mode::Shell
    } else {
        Mode::UntilSignal
    };
    Job::launch(&args.server, args.name, args.lease, args.kill_grace, mode).await
}

/// `$SHELL`, else `/bin/sh`.
fn shell() -> OsString {
    std::env::var_os("SHELL")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "/bin/sh".into())
}

impl Job {
    /// Connects to the server and runs the job: its exit code.
    async fn launch(
        server: &ServerArgs,
        name: String,
        lease: LeaseRequestArgs,
        kill_grace: Duration,
        mode: Mode,
    ) -> ExitCode {
        let client = match super::client(server) {
            Ok(client) => client,
            Err(e) => {
                say(describe(&e));
                return ExitCode::from(EXIT_FAILURE);
            }
        };
        let job = Self {
            client,
            name,
            lease,
            kill_grace,
            mode,
        };
        ExitCode::from(job.run().await)
    }

    fn resource(&self) -> Resource {
        if self.lease.semaphore.is_some() {
            Resource::Semaphore
        } else {
            Resource::Lock
        }
    }

    /// The holder's label and metadata: this process, and what it runs.
    fn holder(&self) -> Holder {
        let command = match &self.mode {
            Mode::Command(words) => words
                .iter()
                .map(|w| w.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            Mode::Shell => shell().to_string_lossy().into_owned(),
            Mode::UntilSignal => "leasehold hold".to_owned(),
        };
        Holder::of(
            i32::try_from(std::process::id()).unwrap_or(0),
            Some(clip(&command)),
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
        let resource = self.resource();
        let holder = self.holder();
        let ask = match self.lease.semaphore {
            Some(limit) => Ask::Permits(permit_options(&self.lease, limit, &holder)),
            None => Ask::Lock(acquire_options(&self.lease, &holder)),
        };
        let held = match acquire(client, &self.name, &ask, &mut signals).await {
            Acquisition::Held(held) => held,
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
            resource,
            lock: &self.name,
            id: held.lease.grant.lease_id,
            token: held.lease.token.clone(),
        };
        self.guard(&lease, held, &mut signals).await
    }

    /// Runs what the job runs under the lease `held`, then releases it.
    async fn guard(&self, lease: &Leased<'_>, held: Held, signals: &mut Signals) -> u8 {
        let held = if held.renewed_at.elapsed() > held.ttl / 10 {
            // The answer took a while (the server waited for the lock), and all we know is
            // that the TTL started after we asked. Renew once to know the expiry tightly again.
            match confirm(lease, held).await {
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

        let (mut child, target) = match self.start(&held.lease) {
            Ok(started) => started,
            Err(e) => {
                let program = match &self.mode {
                    Mode::Command(words) => words.first().map(|p| p.to_string_lossy().into_owned()),
                    Mode::Shell => Some(shell().to_string_lossy().into_owned()),
                    Mode::UntilSignal => None,
                };
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
        let (status, stop) = supervisor.watch(child.as_mut(), keeper, signals).await;

        match stop {
            // The server already said the lease is gone; releasing it would only get a 410.
            Some(Stop {
                reason: StopReason::Lost,
                ..
            }) => {}
            _ => lease.release().await,
        }
        match status {
            Ok(Ended::Exited(status)) => {
                let code = exit_code(status);
                // A command cut short because its lease was lost must not look like a success.
                if stop.is_some() && code == 0 {
                    EXIT_FAILURE
                } else {
                    code
                }
            }
            Ok(Ended::Signalled) => 0,
            Ok(Ended::LeaseGone) => EXIT_FAILURE,
            Err(e) => {
                say(format_args!("cannot wait for the command: {e}"));
                EXIT_FAILURE
            }
        }
    }

    /// Starts what runs under `lease`, and says where signals for it go.
    fn start(&self, lease: &Lease) -> io::Result<(Option<Child>, Option<Target>)> {
        let (program, args, own_group): (OsString, &[OsString], bool) = match &self.mode {
            Mode::UntilSignal => return Ok((None, None)),
            Mode::Command(words) => {
                let Some((program, args)) = words.split_first() else {
                    return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
                };
                (program.clone(), args, true)
            }
            Mode::Shell => (shell(), &[], false),
        };
        let configure = |command: &mut Command| {
            command
                .args(args)
                .env("LEASEHOLD_LOCK", &lease.grant.lock)
                .env("LEASEHOLD_LEASE_ID", lease.grant.lease_id.to_string())
                .env(
                    "LEASEHOLD_FENCING_TOKEN",
                    lease.grant.fencing_token.to_string(),
                );
            if own_group {
                // Its own group: SIGTERM and SIGKILL reach everything it started (a shell's
                // background jobs too), and a Ctrl-C in the terminal reaches us, which forward
                // it.
                command.process_group(0);
            }
        };
        // Were we killed (SIGKILL, a crash), nobody would heartbeat, and the command would run
        // on unguarded once the lease ran out: the kernel then sends it what a lost lease
        // sends (an interactive shell ignores SIGTERM). Only the command itself gets it.
        let signal = if own_group { "TERM" } else { "HUP" };
        let (child, _guarded) = parent_death::spawn(&program, signal, configure)?;
        let pid = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(Pid::from_raw)
            .ok_or_else(|| io::Error::other("lost track of the command's process"))?;
        let target = if own_group {
            Target::Group(pid)
        } else {
            Target::Shell(pid)
        };
        Ok((Some(child), Some(target)))
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

/// What to acquire: a lock, or permits of a semaphore.
enum Ask {
    Lock(AcquireOptions),
    Permits(PermitOptions),
}

impl Ask {
    fn wait(&self) -> Duration {
        match self {
            Self::Lock(options) => options.wait,
            Self::Permits(options) => options.wait,
        }
    }

    /// One request, waiting server-side up to `wait`.
    async fn send(
        &self,
        client: &Client,
        name: &str,
        wait: Duration,
    ) -> Result<Reply<Acquired>, ClientError> {
        match self {
            Self::Lock(options) => {
                let options = AcquireOptions {
                    wait,
                    ..options.clone()
                };
                client.acquire(name, &options).await
            }
            Self::Permits(options) => {
                let options = PermitOptions {
                    wait,
                    ..options.clone()
                };
                let reply = client.acquire_permits(name, &options).await?;
                Ok(Reply {
                    body: Acquired::Lease(reply.body),
                    json: reply.json,
                })
            }
        }
    }
}

/// Asks for the lease, waiting server-side up to the asked wait in total. A signal drops the
/// in-flight request, which closes its connection: the server then drops our waiter at once
/// (and rolls back a grant it could not deliver).
async fn acquire(client: &Client, lock: &str, ask: &Ask, signals: &mut Signals) -> Acquisition {
    let deadline = later(Instant::now(), ask.wait());
    loop {
        let sent = Instant::now();
        let wait = deadline.saturating_duration_since(sent);
        let result = tokio::select! {
            result = ask.send(client, lock, wait) => result,
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
        .heartbeat(lease.resource, lease.lock, lease.id, &lease.token)
        .await?;
    Ok(Held {
        ttl: Duration::from_millis(renewal.body.ttl_ms),
        renewed_at: sent,
        ..held
    })
}

/// The lease we hold: what the keeper and the release need to know.
struct Leased<'a> {
    client: &'a Client,
    resource: Resource,
    lock: &'a str,
    id: LeaseId,
    token: LeaseToken,
}

impl Leased<'_> {
    /// Releases every level; a failure is only reported, the lease then ends with its TTL.
    async fn release(&self) {
        if let Err(e) = self
            .client
            .release(self.resource, self.lock, self.id, &self.token, true)
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
            .release(self.resource, self.lock, self.id, &self.token, true)
            .await;
    }
}

/// Where signals for what runs go.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// A command's own process group (its id is the command's pid).
    Group(Pid),
    /// An interactive shell in our group: only the shell itself.
    Shell(Pid),
}

impl Target {
    fn signal(self, signal: Signal) {
        let sent = match self {
            Self::Group(group) => killpg(group, signal),
            Self::Shell(pid) => nix::sys::signal::kill(pid, signal),
        };
        match sent {
            // Nobody left: nothing to stop.
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(e) => say(format_args!("cannot send {signal} to the command: {e}")),
        }
    }

    /// The signal that asks it to stop: an interactive shell ignores SIGTERM.
    fn stop_signal(self) -> Signal {
        match self {
            Self::Group(_) => Signal::SIGTERM,
            Self::Shell(_) => Signal::SIGHUP,
        }
    }

    /// Passes on a signal we got: to a command's group; to a shell only when it is not the
    /// terminal's Ctrl-C, which the shell (in our group) got already.
    fn forward(self, signal: Signal) {
        match self {
            Self::Group(_) => self.signal(signal),
            Self::Shell(_) if signal == Signal::SIGINT => {}
            Self::Shell(_) => self.signal(Signal::SIGHUP),
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

/// The heartbeat task renews every TTL/3 and retries failures sooner; the watch task keeps a
/// lease watch open, which says the moment the lease is lost. Both stop when it is lost or
/// when the keeper is dropped (which aborts a request in flight, so no heartbeat races with
/// the release).
struct Keeper {
    tasks: [JoinHandle<()>; 2],
    news: mpsc::Receiver<News>,
}

impl Keeper {
    fn start(lease: &Leased<'_>, held: &Held) -> Self {
        // A request must not hang past the next heartbeat; it is retried instead.
        let timeout = (held.ttl / 3).clamp(Duration::from_millis(500), Duration::from_secs(10));
        let client = lease.client.clone().with_timeout(timeout);
        let (resource, lock, id) = (lease.resource, lease.lock.to_owned(), lease.id);
        let token = lease.token.clone();
        let mut ttl = held.ttl;
        let mut next_heartbeat = held.renewed_at + ttl / 3;
        let (tx, news) = mpsc::channel(4);
        let watch = tokio::spawn(watch(
            lease.client.clone(),
            resource,
            lock.clone(),
            id,
            token.clone(),
            tx.clone(),
        ));
        let heartbeat = tokio::spawn(async move {
            loop {
                sleep_until(next_heartbeat).await;
                let sent = Instant::now();
                let news = match client.heartbeat(resource, &lock, id, &token).await {
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
                if tx.send(news).await.is_err() {
                    return;
                }
            }
        });
        Self {
            tasks: [heartbeat, watch],
            news,
        }
    }
}

/// Keeps a lease watch open until the server says the lease is lost; a watch that breaks is
/// opened again. A server without watches (404 `not_found`) leaves it to the heartbeats.
async fn watch(
    client: Client,
    resource: Resource,
    lock: String,
    id: LeaseId,
    token: LeaseToken,
    tx: mpsc::Sender<News>,
) {
    loop {
        let lost = match client.watch(resource, &lock, id, &token).await {
            Ok(mut watch) => match watch.lost().await {
                Ok(lost) => Some(format!(
                    "the server reports it {}",
                    lost.reason.replace('_', " ")
                )),
                Err(_) => None,
            },
            Err(ClientError::Problem(p)) if p.is_lease_gone() => Some(p.detail),
            Err(ClientError::Problem(p)) if p.code == "not_found" => return,
            Err(_) => None,
        };
        if let Some(why) = lost {
            let _ = tx.send(News::Lost(why)).await;
            return;
        }
        sleep(WATCH_RETRY).await;
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
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

/// How what ran under the lease ended.
enum Ended {
    Exited(ExitStatus),
    /// `hold` without a command: a signal asked us to let go.
    Signalled,
    /// `hold` without a command: the lease was lost (or could not be renewed).
    LeaseGone,
}

/// Watches what runs (if anything), its lease and our signals.
struct Supervisor {
    target: Option<Target>,
    kill_grace: Duration,
    /// SIGTERM goes out when less than this is left of the lease.
    margin: Duration,
    /// The lease is ours until at least then.
    until: Instant,
}

impl Supervisor {
    /// Runs until what runs exits (or, with nothing running, until a signal or the lease's
    /// end); returns how it ended and whether (and why) we stopped it.
    async fn watch(
        mut self,
        mut child: Option<&mut Child>,
        mut keeper: Keeper,
        signals: &mut Signals,
    ) -> (io::Result<Ended>, Option<Stop>) {
        let mut stop: Option<Stop> = None;
        let mut failing = false;
        let status = loop {
            if child.is_none() && stop.is_some() {
                // Nothing runs: a lost lease ends the hold at once.
                break Ok(Ended::LeaseGone);
            }
            let term_at = self.until.checked_sub(self.margin).unwrap_or(self.until);
            let kill_at = stop.map_or(term_at, |s| self.kill_at(s));
            let exited = async {
                match child.as_deref_mut() {
                    Some(child) => child.wait().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                status = exited => break status.map(Ended::Exited),
                signal = signals.recv() => match self.target {
                    Some(target) => target.forward(signal),
                    None => break Ok(Ended::Signalled),
                },
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
                    say("the command is still running: sending SIGKILL");
                    if let Some(target) = self.target {
                        target.signal(Signal::SIGKILL);
                    }
                    stop = stop.map(|s| Stop { killed: true, ..s });
                }
            }
        };
        drop(keeper);
        if let (Some(Target::Group(group)), Some(_)) = (self.target, stop) {
            // The command has exited; whatever it left behind in its group goes now.
            Target::Group(group).signal(Signal::SIGKILL);
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
        if let Some(target) = self.target {
            let signal = target.stop_signal();
            let whom = match target {
                Target::Group(_) => "the command's process group",
                Target::Shell(_) => "the shell",
            };
            say(format_args!(
                "sending {signal} to {whom} (SIGKILL in {})",
                human(self.kill_at(stop).saturating_duration_since(now)),
            ));
            target.signal(signal);
        }
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

/// Which subcommand speaks (`run` or `hold`), for the start of each line on stderr.
static SPEAKER: std::sync::OnceLock<&str> = std::sync::OnceLock::new();

fn say(message: impl Display) {
    eprintln!("leasehold {}: {message}", SPEAKER.get().unwrap_or(&"run"));
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
