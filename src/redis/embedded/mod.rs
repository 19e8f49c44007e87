//! The private `redis-server` child that `leasehold serve` starts when no Redis URL is given:
//! a Unix socket in the data directory (nothing listens on the network), AOF persistence with
//! an fsync before every answer so locks and fencing counters survive a crash, a `maxmemory`
//! with `noeviction` (evicting keys would drop held locks: a full Redis refuses new writes
//! instead, and Leasehold answers 503), stopped with SIGTERM on shutdown.
//!
//! Two Redis processes on one AOF would each append their own writes to it, so the child must
//! not outlive leasehold, and a new leasehold must not start a second child while an old one
//! still runs (leasehold killed with SIGKILL, or crashed, never runs its shutdown):
//! - the child gets SIGTERM when leasehold dies, however it dies (see `parent_death`): it then
//!   writes its AOF and exits;
//! - the child inherits the data dir's lock file, so the lock is held as long as either
//!   process lives: a leasehold started meanwhile waits for it (bounded), then refuses.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::parent_death;

pub mod data_dir;

pub use data_dir::DataDirError;

/// How long redis-server may take to answer after it starts.
const START_LIMIT: Duration = Duration::from_secs(10);
/// How long it may take to write its AOF and exit after SIGTERM; also how long a new start
/// waits for the data dir's lock, which a stopping child (of a leasehold that died) still holds.
const STOP_LIMIT: Duration = Duration::from_secs(10);
/// Unix socket paths are limited to 108 bytes; stay clear of it.
const MAX_SOCKET_PATH: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedRedisError {
    #[error(
        "redis-server is not installed: install it (Debian/Ubuntu: sudo apt-get install redis-server) or pass --redis-url"
    )]
    NotInstalled,
    /// The data dir is not this user's alone (or cannot be made).
    #[error(transparent)]
    Private(#[from] DataDirError),
    #[error("cannot use data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "data directory {0} is in use by another leasehold process or the redis-server it started (still running after {STOP_LIMIT:?})"
    )]
    InUse(PathBuf),
    #[error("socket path {0} is too long for a Unix socket; use a shorter --data-dir")]
    SocketPathTooLong(PathBuf),
    #[error("cannot start redis-server: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("redis-server did not answer within {limit:?}; see {log}")]
    NotReady { limit: Duration, log: PathBuf },
    #[error("stopped (SIGINT or SIGTERM) before the embedded redis-server was up")]
    Stopped,
}

/// A running private Redis; stop it with [`EmbeddedRedis::stop`].
#[derive(Debug)]
pub struct EmbeddedRedis {
    child: Child,
    socket: PathBuf,
    /// Held open for the child's lifetime: the exclusive lock that keeps a second process off
    /// the same AOF (the child holds it too: see the module's comment).
    _dir_lock: File,
}

impl EmbeddedRedis {
    /// Starts redis-server in `data_dir` (made this user's alone first: [`data_dir`]), holding at most `maxmemory` (Redis's units: `512mb`,
    /// `2gb`), and waits until it answers PING; gives up with `Stopped` (a child started by
    /// then is stopped) once `stop` is cancelled.
    pub async fn start(
        data_dir: &Path,
        maxmemory: &str,
        stop: &CancellationToken,
    ) -> Result<Self, EmbeddedRedisError> {
        let dir_error = |source| EmbeddedRedisError::DataDir {
            path: data_dir.to_owned(),
            source,
        };
        data_dir::make_private(data_dir)?;
        let dir = std::fs::canonicalize(data_dir).map_err(dir_error)?;
        let dir_lock = File::create(dir.join("leasehold.lock")).map_err(dir_error)?;
        lock_dir(&dir_lock, &dir, stop).await?;
        let socket = dir.join("redis.sock");
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(EmbeddedRedisError::SocketPathTooLong(socket));
        }
        let log = dir.join("redis.log");
        let version = redis_version().await?;
        let configure = |command: &mut Command| {
            command
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
                .kill_on_drop(true);
        };
        // The child inherits the lock file (open files are closed on exec unless told
        // otherwise). Nothing else is started meanwhile: this runs before the server does.
        let inherit = |on: bool| {
            let flags = if on {
                FdFlag::empty()
            } else {
                FdFlag::FD_CLOEXEC
            };
            fcntl(&dir_lock, FcntlArg::F_SETFD(flags))
                .map_err(|e| EmbeddedRedisError::Spawn(e.into()))
        };
        inherit(true)?;
        let spawned = parent_death::spawn("redis-server".as_ref(), "TERM", configure);
        inherit(false)?;
        let (child, guarded) = spawned.map_err(EmbeddedRedisError::Spawn)?;
        if !guarded {
            tracing::warn!(
                "setpriv (util-linux) is not installed: if leasehold is killed with SIGKILL, \
                the embedded redis-server keeps running, and the data dir stays locked until \
                it is stopped"
            );
        }
        tracing::debug!(%version, pid = ?child.id(), "started redis-server");
        let mut redis = Self {
            child,
            socket,
            _dir_lock: dir_lock,
        };
        let ready = tokio::select! {
            ready = redis.wait_until_ready() => ready,
            () = stop.cancelled() => {
                redis.stop().await;
                return Err(EmbeddedRedisError::Stopped);
            }
        };
        if !ready {
            redis.stop().await;
            return Err(EmbeddedRedisError::NotReady {
                limit: START_LIMIT,
                log,
            });
        }
        tracing::info!(url = %redis.url(), data_dir = %data_dir.display(), maxmemory,
            "started the embedded redis-server (AOF persistence in the data dir)");
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

/// Takes the data dir's lock, waiting up to [`STOP_LIMIT`] for it: the holder may be the
/// redis-server of a leasehold that just died, still writing its AOF after the SIGTERM its
/// parent's death sent it.
async fn lock_dir(
    lock: &File,
    dir: &Path,
    stop: &CancellationToken,
) -> Result<(), EmbeddedRedisError> {
    let deadline = tokio::time::Instant::now() + STOP_LIMIT;
    let mut said = false;
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(EmbeddedRedisError::DataDir {
                    path: dir.to_owned(),
                    source,
                });
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(EmbeddedRedisError::InUse(dir.to_owned()));
        }
        if !said {
            tracing::warn!(data_dir = %dir.display(),
                "the data dir is locked (another leasehold, or the redis-server of one that \
                stopped, is still running): waiting for it");
            said = true;
        }
        // (A lock has no async wait; a short sleep between tries bounds the wait's cost.)
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
            () = stop.cancelled() => return Err(EmbeddedRedisError::Stopped),
        }
    }
}

/// `redis-server --version`'s answer: also how a missing redis-server is told apart from one
/// that fails to start.
async fn redis_version() -> Result<String, EmbeddedRedisError> {
    let output = Command::new("redis-server")
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => EmbeddedRedisError::NotInstalled,
            _ => EmbeddedRedisError::Spawn(e),
        })?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
