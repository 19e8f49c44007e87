//! What runs under the lease: a command in a process group of its own (`run`), an interactive
//! shell in ours (`hold --shell`), or nothing (`hold`). Starts it with the lease (or the
//! term, under `elect`) in its environment, sends it signals ([`Target`]), and turns how it ended into a shell's exit code.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use super::say;
use crate::cli::EXIT_FAILURE;
use crate::client::{Lease, Resource};
use crate::parent_death;

/// Exit code when the command was found but could not be executed (as shells use it).
const EXIT_CANNOT_EXECUTE: u8 = 126;
/// Exit code when the command was not found (as shells use it).
const EXIT_NOT_FOUND: u8 = 127;

/// What runs while the lease is held.
pub(super) enum Mode {
    /// A command in its own process group (`run`).
    Command(Vec<OsString>),
    /// An interactive shell in our process group (`hold --shell`).
    Shell,
    /// Nothing: the lease is held until a signal (`hold`).
    UntilSignal,
}

impl Mode {
    /// What the lease's metadata names as the holder's command.
    pub(super) fn command_line(&self) -> String {
        match self {
            Self::Command(words) => words
                .iter()
                .map(|w| w.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            Self::Shell => shell().to_string_lossy().into_owned(),
            Self::UntilSignal => "leasehold hold".to_owned(),
        }
    }

    /// The program that runs, for an error message (`None` when nothing runs).
    pub(super) fn program(&self) -> Option<String> {
        match self {
            Self::Command(words) => words.first().map(|p| p.to_string_lossy().into_owned()),
            Self::Shell => Some(shell().to_string_lossy().into_owned()),
            Self::UntilSignal => None,
        }
    }

    /// Starts what runs under `lease`, and says where signals for it go.
    pub(super) fn start(&self, lease: &Lease) -> io::Result<(Option<Child>, Option<Target>)> {
        let (program, args, own_group): (OsString, &[OsString], bool) = match self {
            Self::UntilSignal => return Ok((None, None)),
            Self::Command(words) => {
                let Some((program, args)) = words.split_first() else {
                    return Err(io::Error::new(io::ErrorKind::InvalidInput, "no command"));
                };
                (program.clone(), args, true)
            }
            Self::Shell => (shell(), &[], false),
        };
        let configure = |command: &mut Command| {
            command.args(args);
            if lease.resource == Resource::Election {
                // A term: the election, the candidate, and the term (its fencing token).
                command
                    .env("LEASEHOLD_ELECTION", &lease.grant.lock)
                    .env("LEASEHOLD_CANDIDATE_ID", lease.grant.lease_id.to_string())
                    .env("LEASEHOLD_TERM", lease.grant.fencing_token.to_string());
            } else {
                command
                    .env("LEASEHOLD_LOCK", &lease.grant.lock)
                    .env("LEASEHOLD_LEASE_ID", lease.grant.lease_id.to_string())
                    .env(
                        "LEASEHOLD_FENCING_TOKEN",
                        lease.grant.fencing_token.to_string(),
                    );
            }
            if !lease.members.is_empty() {
                // A multilease: each lock's own token (LEASEHOLD_FENCING_TOKEN is the highest).
                let tokens: Vec<String> = lease
                    .members
                    .iter()
                    .map(|m| format!("{}={}", m.lock, m.fencing_token))
                    .collect();
                command.env("LEASEHOLD_FENCING_TOKENS", tokens.join(","));
            }
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

/// `$SHELL`, else `/bin/sh`.
fn shell() -> OsString {
    std::env::var_os("SHELL")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "/bin/sh".into())
}

/// The exit code when what should run could not be started, as shells give it.
pub(super) fn start_failure_code(e: &io::Error) -> u8 {
    if e.kind() == io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_EXECUTE
    }
}

/// Where signals for what runs go.
#[derive(Debug, Clone, Copy)]
pub(super) enum Target {
    /// A command's own process group (its id is the command's pid).
    Group(Pid),
    /// An interactive shell in our group: only the shell itself.
    Shell(Pid),
}

impl Target {
    pub(super) fn signal(self, signal: Signal) {
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
    pub(super) fn stop_signal(self) -> Signal {
        match self {
            Self::Group(_) => Signal::SIGTERM,
            Self::Shell(_) => Signal::SIGHUP,
        }
    }

    /// Passes on a signal we got: to a command's group; to a shell only when it is not the
    /// terminal's Ctrl-C, which the shell (in our group) got already.
    pub(super) fn forward(self, signal: Signal) {
        match self {
            Self::Group(_) => self.signal(signal),
            Self::Shell(_) if signal == Signal::SIGINT => {}
            Self::Shell(_) => self.signal(Signal::SIGHUP),
        }
    }
}

/// The exit code shells give a process: its own, or 128+N when signal N killed it.
pub(super) fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(EXIT_FAILURE),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(u8::MAX),
        (None, None) => EXIT_FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_code(ExitStatus::from_raw(15)), 143);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
    }
}
