//! The suite's own children die with it. A test process killed with SIGKILL (a timeout, a
//! developer's `kill -9`) runs no `Drop`, so the redis-server it started would run on; the
//! helpers start their children with a parent-death signal instead (`helpers::children`).

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Command;

use crate::helpers::cli::has_ended;
use crate::helpers::{RedisServer, children};

/// Set for the throwaway process only: without it, its test returns at once.
const THROWAWAY: &str = "LEASEHOLD_TEST_THROWAWAY";
/// What the throwaway process prints before the pid of its redis-server.
const PID_LINE: &str = "throwaway redis-server pid ";

#[tokio::test]
async fn a_killed_test_process_takes_its_redis_server_with_it() {
    // The throwaway process is this test binary, running the test below.
    let mut throwaway = Command::from(children::guarded(
        std::env::current_exe().expect("the test binary"),
    ));
    throwaway
        .args(["fixtures::holds_a_redis_server_until_killed", "--exact"])
        .args(["--ignored", "--nocapture", "--test-threads", "1"])
        .env(THROWAWAY, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let mut throwaway = throwaway.spawn().expect("start the throwaway process");
    let mut lines = BufReader::new(throwaway.stdout.take().expect("stdout")).lines();
    let redis = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let line = lines
                .next_line()
                .await
                .expect("stdout")
                .expect("a pid line");
            // (After libtest's "test <name> ... ", on the same line.)
            if let Some(pid) = line.split(PID_LINE).nth(1) {
                break Pid::from_raw(pid.parse().expect("a pid"));
            }
        }
    })
    .await
    .expect("the throwaway process started its redis-server within 20 s");
    let comm = std::fs::read_to_string(format!("/proc/{redis}/comm")).expect("it runs");
    assert_eq!(comm.trim(), "redis-server");

    throwaway
        .kill()
        .await
        .expect("SIGKILL the throwaway process");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !has_ended(redis.as_raw()) {
        if Instant::now() > deadline {
            let _ = kill(redis, Signal::SIGKILL);
            panic!("redis-server {redis} outlived the test process that started it by 5 s");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
#[ignore = "the throwaway process of a_killed_test_process_takes_its_redis_server_with_it"]
fn holds_a_redis_server_until_killed() {
    if std::env::var_os(THROWAWAY).is_none() {
        return;
    }
    let redis = RedisServer::start();
    println!("{PID_LINE}{}", redis.pid());
    loop {
        std::thread::park();
    }
}
