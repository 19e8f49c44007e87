//! The private redis-server each test gets: on a Unix socket in its own temp dir, stopped,
//! frozen or restarted on demand, killed on drop.

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::children;

/// A redis-server on a Unix socket in its own temp dir, killed on drop or when the test process
/// dies. It can be stopped and started again on the same socket, to test outages.
pub struct RedisServer {
    child: Option<Child>,
    dir: std::sync::Arc<TempDir>,
    /// A handle to a server another fixture owns: dropping it stops nothing.
    shared: bool,
}

impl RedisServer {
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("lh-redis")
            .tempdir()
            .expect("temp dir");
        let mut server = Self {
            child: None,
            dir: std::sync::Arc::new(dir),
            shared: false,
        };
        server.restart();
        server
    }

    /// Another handle on this running server, for a second Leasehold instance.
    pub fn shared(&self) -> Self {
        Self {
            child: None,
            dir: self.dir.clone(),
            shared: true,
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("r.sock")
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url().as_str()).expect("redis url")
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        self.client()
            .get_multiplexed_async_connection()
            .await
            .expect("redis connection")
    }

    /// How many pattern subscriptions the server has (`PUBSUB NUMPAT`): what every PUBLISH
    /// on it is matched against.
    pub async fn pattern_subscriptions(&self) -> u64 {
        redis::cmd("PUBSUB")
            .arg("NUMPAT")
            .query_async(&mut self.conn().await)
            .await
            .expect("PUBSUB NUMPAT")
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) the server: a Redis that accepts bytes and never
    /// answers, as under a long fork or a swap storm.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(self.pid(), signal).expect("signal redis-server");
    }

    /// The running server's process id.
    pub fn pid(&self) -> nix::unistd::Pid {
        let child = self.child.as_ref().expect("a running server");
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"))
    }

    /// Kills the server (as a crash would: no shutdown, no persistence).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    /// (Re)starts the server on the same socket and waits until it answers.
    pub fn restart(&mut self) {
        self.stop();
        let mut command = children::guarded("redis-server");
        command
            .args(["--port", "0", "--unixsocket"])
            .arg(self.socket())
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--enable-debug-command",
                "yes",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let child = children::spawn(command)
            .expect("redis-server and setpriv are installed (the test command installs them)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        let client = self.client();
        while Instant::now() < deadline {
            if let Ok(mut conn) = client.get_connection()
                && redis::cmd("PING").query::<String>(&mut conn).is_ok()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server did not start");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if !self.shared {
            self.stop();
        }
    }
}
