//! Children that die with the test process. A test killed with SIGKILL (a timeout, a
//! developer's `kill -9`) runs no `Drop`, so the redis-server, chromedriver or `leasehold` it
//! started would run on; these start with a parent-death signal (`leasehold::parent_death`).
//!
//! The kernel sends that signal when the *thread* that started the child ends, not its
//! process. A test's own thread lives as long as the test, so a child it starts is safe; a
//! fixture that may be started from another thread (one that ends before the test does) goes
//! through [`spawn`], which starts every child from one thread that lives as long as the
//! process.

use std::ffi::OsStr;
use std::io;
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::sync::mpsc::{Sender, SyncSender, channel, sync_channel};

/// A command to start, and where to send what starting it gave.
type Start = (Command, SyncSender<io::Result<Child>>);

/// `program`, to be killed (SIGKILL) when the test process dies: not SIGTERM, which a child
/// frozen by a test (SIGSTOP) would hold until thawed.
pub fn guarded(program: impl AsRef<OsStr>) -> Command {
    leasehold::parent_death::command(program.as_ref(), "KILL")
}

/// Starts `command` (made by [`guarded`]) from the thread that lives as long as the process.
pub fn spawn(command: Command) -> io::Result<Child> {
    static STARTER: OnceLock<Sender<Start>> = OnceLock::new();
    let starter = STARTER.get_or_init(|| {
        let (tx, rx) = channel::<Start>();
        std::thread::Builder::new()
            .name("child-starter".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("start the child-starter thread");
        tx
    });
    let (reply, started) = sync_channel(1);
    starter
        .send((command, reply))
        .expect("the child-starter thread runs");
    started.recv().expect("the child-starter thread answers")
}
