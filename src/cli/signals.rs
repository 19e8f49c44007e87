//! The signals `leasehold run` handles itself instead of dying: SIGINT, SIGTERM and SIGHUP.

use nix::sys::signal::Signal;
use tokio::signal::unix::{self, SignalKind};

/// Once installed, these signals no longer end the process: each arrives from [`recv`].
///
/// [`recv`]: Signals::recv
pub struct Signals {
    interrupt: unix::Signal,
    terminate: unix::Signal,
    hangup: unix::Signal,
}

impl Signals {
    /// Installs the handlers. Do it before anything that may wait (the acquire), so a Ctrl-C
    /// during the wait is handled, not fatal halfway through a request.
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            interrupt: unix::signal(SignalKind::interrupt())?,
            terminate: unix::signal(SignalKind::terminate())?,
            hangup: unix::signal(SignalKind::hangup())?,
        })
    }

    /// The next signal. Signals that arrive while nobody awaits this are kept (one per kind).
    pub async fn recv(&mut self) -> Signal {
        tokio::select! {
            Some(()) = self.interrupt.recv() => Signal::SIGINT,
            Some(()) = self.terminate.recv() => Signal::SIGTERM,
            Some(()) = self.hangup.recv() => Signal::SIGHUP,
            // Only when the runtime is shutting down: no signal will ever come.
            else => std::future::pending().await,
        }
    }
}

/// The exit status of a process ended by `signal`, as shells report it.
pub fn exit_code(signal: Signal) -> u8 {
    u8::try_from(128 + signal as i32).unwrap_or(u8::MAX)
}
