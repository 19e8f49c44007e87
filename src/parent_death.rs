//! Children that must not outlive this process. A leasehold killed with SIGKILL, or crashed,
//! runs no shutdown, and its children would run on: an embedded redis-server on the data
//! dir's AOF, a command `leasehold run` no longer guards. Linux sends a child a chosen signal
//! when its parent dies (`PR_SET_PDEATHSIG`); util-linux's `setpriv --pdeathsig` sets it and
//! then runs the program in its place (setting it here would take `unsafe` code between fork
//! and exec, which this crate forbids).
//!
//! The kernel sends the signal when the *thread* that started the child ends: start children
//! from the main thread (the future `block_on` runs), which ends with the process.

use std::ffi::OsStr;
use std::io;

use tokio::process::{Child, Command};

/// Runs a program with a parent-death signal (util-linux: Essential on Debian and Ubuntu).
const SETPRIV: &str = "setpriv";

/// Starts `program`, set up by `configure`, so that it gets `signal` ("TERM", "HUP", ...)
/// when this process dies. Returns the child and whether that holds: without `setpriv` the
/// program is started as it is. A program that `setpriv` cannot run makes it exit as a shell
/// would: 127 when not found, 126 otherwise, after saying why on stderr.
pub fn spawn(
    program: &OsStr,
    signal: &str,
    configure: impl Fn(&mut Command),
) -> io::Result<(Child, bool)> {
    let mut guarded = Command::from(command(program, signal));
    configure(&mut guarded);
    match guarded.spawn() {
        Ok(child) => Ok((child, true)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let mut plain = Command::new(program);
            configure(&mut plain);
            Ok((plain.spawn()?, false))
        }
        Err(e) => Err(e),
    }
}

/// `program` as a command that gets `signal` when this process dies, for a caller to add
/// arguments to and start (tokio's `Command` converts from it): for children that must not
/// start at all unguarded, as a test's redis-server. Without `setpriv`, starting it fails
/// (`NotFound`); [`spawn`] falls back to the bare program instead.
pub fn command(program: &OsStr, signal: &str) -> std::process::Command {
    let mut guarded = std::process::Command::new(SETPRIV);
    guarded.args(["--pdeathsig", signal, "--"]).arg(program);
    guarded
}
