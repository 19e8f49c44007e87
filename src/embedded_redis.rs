//! The private `redis-server` child that `leasehold serve` starts when no Redis URL is given:
//! a Unix socket in the data directory (nothing listens on the network), AOF persistence with
//! an fsync before every answer so locks and fencing counters survive a crash, a `maxmemory`
//! with `noeviction` (evicting keys would drop held locks: a full Redis refuses new writes
//! instead, and Leasehold answers 503), stopped with SIGTERM on shutdown.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// How long redis-server may take to answer after it starts.
const START_LIMIT: Duration = Duration::from_secs(10);
/// How long it may take to write its AOF and exit after SIGTERM.
const STOP_LIMIT: Duration = Duration::from_secs(10);
/// Unix socket paths are limited to 108 bytes; stay clear of it.
const MAX_SOCKET_PATH: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedRedisError {
    #[error(
        "redis-server is not installed: install it (Debian/Ubuntu: sudo apt-get install redis-server) or pass --redis-url"
    )]
    NotInstalled,
    #[error("cannot use data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("data directory {0} is in use by another leasehold process")]
    InUse(PathBuf),
    #[error("socket path {0} is too long for a Unix socket; use a shorter --data-dir")]
    SocketPathTooLong(PathBuf),
    #[error("cannot start redis-server: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("redis-server did not answer within {limit:?}; see {log}")]
    NotReady { limit: Duration, log: PathBuf },
}

/// A running private Redis; stop it with [`EmbeddedRedis::stop`].
#[derive(Debug)]
pub struct EmbeddedRedis {
    child: Child,
    socket: PathBuf,
    /// Held open for the child's lifetime: the exclusive lock that keeps a second process off
    /// the same AOF.
    _dir_lock: File,
}

impl EmbeddedRedis {
    /// Starts redis-server in `data_dir`, holding at most `maxmemory` (Redis's units: `512mb`,
    /// `2gb`), and waits until it answers PING.
    pub async fn start(data_dir: &Path, maxmemory: &str) -> Result<Self, EmbeddedRedisError> {
        let dir_error = |source| EmbeddedRedisError::DataDir {
            path: data_dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(data_dir).map_err(dir_error)?;
        let dir = std::fs::canonicalize(data_dir).map_err(dir_error)?;
        let dir_lock = File::create(dir.join("leasehold.lock")).map_err(dir_error)?;
        if dir_lock.try_lock().is_err() {
            return Err(EmbeddedRedisError::InUse(dir));
        }
        let socket = dir.join("redis.sock");
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(EmbeddedRedisError::SocketPathTooLong(socket));
        }
        let log = dir.join("redis.log");
        let child = Command::new("redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args(["--unixsocketperm", "700", "--dir"])
            .arg(&dir)
            // Every change reaches the AOF before Redis answers: a crash loses no lock.
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .args(["--maxmemory", maxmemory, "--maxmemory-policy", "noeviction"])
            .args(["--daemonize", "no"])
            .args(["--logfile"])
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => EmbeddedRedisError::NotInstalled,
                _ => EmbeddedRedisError::Spawn(e),
            })?;
        let mut redis = Self {
            child,
            socket,
            _dir_lock: dir_lock,
        };
        if !redis.wait_until_ready().await {
            redis.stop().await;
            return Err(EmbeddedRedisError::NotReady {
                limit: START_LIMIT,
                log,
            });
        }
        Ok(redis)
    }

    /// The URL to connect to it.
    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket.display())
    }

    async fn wait_until_ready(&mut self) -> bool {
        let Ok(client) = redis::Client::open(self.url().as_str()) else {
            return false;
        };
        let deadline = tokio::time::Instant::now() + START_LIMIT;
        while tokio::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false; // it exited: port, permissions or a bad AOF; see its log
            }
            if let Ok(mut conn) = client.get_multiplexed_async_connection().await
                && redis::cmd("PING")
                    .query_async::<()>(&mut conn)
                    .await
                    .is_ok()
            {
                return true;
            }
            // Startup is the one place that polls: redis-server has no readiness signal.
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        false
    }

    /// Asks redis-server to finish its AOF and exit; kills it if it does not in time.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id().and_then(|id| i32::try_from(id).ok()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        }
        if tokio::time::timeout(STOP_LIMIT, self.child.wait())
            .await
            .is_err()
        {
            tracing::warn!("redis-server did not stop after SIGTERM; killing it");
            let _ = self.child.kill().await;
        }
    }
}
