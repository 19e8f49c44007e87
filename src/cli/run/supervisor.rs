//! The loop that ties what runs, the lease and our signals together while the lease is held:
//! it forwards signals, follows the keeper's news, stops what runs (SIGTERM, then SIGKILL)
//! when the lease is lost or can no longer be renewed in time, and from how it all ended
//! decides the exit code.

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::process::Child;
use tokio::time::{Instant, sleep_until};

use super::child::{self, Target};
use super::keeper::{Keeper, News};
use super::{human, later, say};
use crate::cli::EXIT_FAILURE;
use crate::cli::describe;
use crate::cli::signals::Signals;

/// Why the command is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    /// The server said the lease is gone (410): someone else may hold the lock already.
    Lost,
    /// Heartbeats failed until only the safety margin was left (or while the server warned
    /// that the lease is about to end).
    Unrenewable,
    /// An operator asked us to let go by a deadline (a revocation).
    Revoked,
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

/// How a supervision ended: what ran, and whether (and why) we stopped it.
pub(super) struct Outcome {
    status: io::Result<Ended>,
    stop: Option<Stop>,
}

impl Outcome {
    /// The server already said the lease is gone: releasing it would only get a 410.
    pub(super) fn lease_lost(&self) -> bool {
        matches!(
            self.stop,
            Some(Stop {
                reason: StopReason::Lost,
                ..
            })
        )
    }

    /// The exit code of `run` or `hold`: the command's own, but never a success for a
    /// command cut short because its lease was lost.
    pub(super) fn exit_code(self) -> u8 {
        match self.status {
            Ok(Ended::Exited(status)) => {
                let code = child::exit_code(status);
                // A command cut short because its lease was lost must not look like a success.
                if self.stop.is_some() && code == 0 {
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
}

/// Watches what runs (if anything), its lease and our signals.
pub(super) struct Supervisor {
    pub(super) target: Option<Target>,
    pub(super) kill_grace: Duration,
    /// SIGTERM goes out when less than this is left of the lease.
    pub(super) margin: Duration,
    /// The lease is ours until at least then.
    pub(super) until: Instant,
}

impl Supervisor {
    /// Runs until what runs exits (or, with nothing running, until a signal or the lease's
    /// end); returns how it ended and whether (and why) we stopped it.
    pub(super) async fn watch(
        mut self,
        mut child: Option<&mut Child>,
        mut keeper: Keeper,
        signals: &mut Signals,
    ) -> Outcome {
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
                Some(news) = keeper.next() => match news {
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
                    News::Revoked { reason, deadline } => {
                        // The lease ends at the deadline whatever its heartbeats do.
                        self.until = self.until.min(deadline);
                        say(format_args!(
                            "an operator asks us to let go within {}{}",
                            human(deadline.saturating_duration_since(Instant::now())),
                            if reason.is_empty() { String::new() } else { format!(": {reason}") },
                        ));
                        if stop.is_none() {
                            stop = Some(self.terminate(StopReason::Revoked, stop));
                        }
                    }
                    News::Warned(what) if failing && stop.is_none() => {
                        say(format_args!(
                            "the server says the lease is {what} and heartbeats fail: \
                             giving up on it"
                        ));
                        stop = Some(self.terminate(StopReason::Unrenewable, stop));
                    }
                    News::Warned(_) => {}
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
        if let Some(Target::Group(group)) = self.target {
            // The command has exited, however it ended (on its own, on a signal we forwarded,
            // stopped by us): whatever it left running in its group goes now, before the lease
            // is released, or it would work on without the lock. (A background job forked just
            // as a forwarded SIGTERM arrived can miss it and survive the command.)
            Target::Group(group).signal(Signal::SIGKILL);
        }
        Outcome { status, stop }
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
            StopReason::Unrenewable | StopReason::Revoked => after_grace.min(
                self.until
                    .checked_sub(self.margin / 2)
                    .unwrap_or(self.until),
            ),
        }
    }
}

/// How much of the lease must be left when we give up renewing and stop the command:
/// max(TTL/6, 1 s), but at most half the TTL so a short TTL still gets its heartbeats.
pub(super) fn safety_margin(ttl: Duration) -> Duration {
    (ttl / 6).max(Duration::from_secs(1)).min(ttl / 2)
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
}
