//! Sentinel mode: the master that Redis Sentinel names, followed through every failover.
//!
//! redis-rs resolves a Sentinel master only when it connects (its open issue #1438), and a
//! `ConnectionManager` then reconnects to that *address* for good, so after a failover it
//! keeps writing to the old master, which, killed and restarted, comes back writable for
//! seconds before Sentinel demotes it. So this mode keeps no self-reconnecting connection:
//! [`Follower`] holds the current master (its address, a plain multiplexed connection, an
//! epoch), and every way a master can stop being one drops it and asks the Sentinels again:
//!
//! - a call that fails on the connection, or is refused `READONLY` (a demoted master);
//! - Sentinel's `+switch-master` message ([`announcements`]);
//! - a poll of `SENTINEL GET-MASTER-ADDR-BY-NAME` every second, as Redisson does, for a
//!   message that was missed.
//!
//! A node the Sentinels name is trusted only after it says `ROLE` master itself. While no
//! master is known, calls wait for one up to the Redis timeout and then fail (503), and
//! `/readyz` says not ready.

mod announcements;
mod resolve;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ::redis::aio::MultiplexedConnection;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use resolve::SentinelError;

/// How often the Sentinels are asked even when nothing went wrong.
const POLL_EVERY: Duration = Duration::from_secs(1);
/// The pause between rounds while no Sentinel names a master that says it is one.
const RETRY_EVERY: Duration = Duration::from_millis(100);

/// Where the Sentinels are and what they watch. (Its `Debug` leaves the passwords out.)
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelSettings {
    /// `host:port` of each Sentinel (at least one; three or more in production).
    pub sentinels: Vec<String>,
    /// The name the Sentinels monitor the master under.
    pub master_name: String,
    /// The Sentinels' own password (`requirepass` in sentinel.conf), if they have one.
    pub sentinel_password: Option<String>,
    /// The data nodes' username and password, if Redis asks for them.
    pub username: Option<String>,
    pub password: Option<String>,
    /// Use TLS to the data nodes and Sentinels (`rediss`).
    pub tls: bool,
    /// The database the keys live in.
    pub db: i64,
}

impl std::fmt::Debug for SentinelSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelSettings")
            .field("sentinels", &self.sentinels)
            .field("master_name", &self.master_name)
            .field("username", &self.username)
            .field("tls", &self.tls)
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

/// The master as known now.
#[derive(Clone)]
pub struct Master {
    /// `host:port`, as the Sentinels named it.
    pub addr: String,
    pub client: Arc<::redis::Client>,
    pub conn: MultiplexedConnection,
    /// Grows with every master taken on (a new address, or the same one reconnected).
    pub epoch: u64,
}

/// A failover seen: for the operators' Redis page.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Switch {
    pub from: Option<String>,
    pub to: String,
    /// Wall-clock milliseconds.
    pub at_ms: u64,
}

/// What the operators' page and the metrics read.
#[derive(Debug, Default)]
pub struct FollowerStats {
    /// Masters taken on after the first at another address.
    pub failovers: AtomicU64,
    /// Milliseconds spent with no master known, in total.
    pub masterless_ms: AtomicU64,
}

/// The master the Sentinels name, followed.
pub struct Follower {
    settings: SentinelSettings,
    timeout: Duration,
    current: watch::Sender<Option<Master>>,
    /// Ask the Sentinels now.
    kick: Notify,
    pub stats: FollowerStats,
    switches: std::sync::Mutex<Vec<Switch>>,
    epochs: AtomicU64,
    /// Replicas of the master the Sentinels could promote, as last counted by a majority
    /// of them (`u32::MAX`: not counted yet).
    promotable: std::sync::atomic::AtomicU32,
}

/// The failovers the page shows.
const SWITCHES_KEPT: usize = 20;

impl Follower {
    pub fn new(settings: SentinelSettings, timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            settings,
            timeout,
            current: watch::Sender::new(None),
            kick: Notify::new(),
            stats: FollowerStats::default(),
            switches: std::sync::Mutex::default(),
            epochs: AtomicU64::new(0),
            promotable: std::sync::atomic::AtomicU32::new(u32::MAX),
        })
    }

    pub fn settings(&self) -> &SentinelSettings {
        &self.settings
    }

    /// The master now, if one is known.
    pub fn master(&self) -> Option<Master> {
        self.current.borrow().clone()
    }

    /// Replicas of the master the Sentinels could promote, as a majority of them last
    /// counted (see `resolve::Named`); `None` before any majority answered.
    pub fn promotable(&self) -> Option<u32> {
        match self.promotable.load(Ordering::Relaxed) {
            u32::MAX => None,
            n => Some(n),
        }
    }

    /// Every change of master (and its loss), for whoever must move with it.
    pub fn watch(&self) -> watch::Receiver<Option<Master>> {
        self.current.subscribe()
    }

    /// The master, waiting for one up to the Redis timeout.
    pub async fn master_within_timeout(&self) -> ::redis::RedisResult<Master> {
        if let Some(master) = self.master() {
            return Ok(master);
        }
        self.kick.notify_one();
        let mut rx = self.watch();
        let found = tokio::time::timeout(self.timeout, rx.wait_for(Option::is_some)).await;
        match found
            .ok()
            .and_then(|found| found.ok().and_then(|m| m.clone()))
        {
            Some(master) => Ok(master),
            None => Err(::redis::RedisError::from((
                ::redis::ErrorKind::Io,
                "no Redis master known",
                format!(
                    "the Sentinels name no master for {:?} that answers as one",
                    self.settings.master_name
                ),
            ))),
        }
    }

    /// A call on the master of `epoch` failed in a way that says it may no longer be the
    /// master (the connection broke, or it refused a write as a replica): drop it, and ask
    /// the Sentinels again.
    pub fn distrust(&self, epoch: u64, why: &::redis::RedisError) {
        let dropped = self.current.send_if_modified(|current| match current {
            Some(m) if m.epoch == epoch => {
                tracing::warn!(master = %m.addr, error = %why, "Redis master lost; asking the Sentinels");
                *current = None;
                true
            }
            _ => false,
        });
        if dropped {
            self.kick.notify_one();
        }
    }

    /// The failovers seen, oldest first.
    pub fn switches(&self) -> Vec<Switch> {
        self.switches.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Follows the master until `shutdown`: asks the Sentinels every second, at once when
    /// kicked or told of a switch.
    pub fn spawn(self: &Arc<Self>, shutdown: CancellationToken) -> JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let listeners = announcements::spawn(me.clone(), shutdown.clone());
            let mut masterless_since = Some(Instant::now());
            loop {
                let found = me.round().await;
                let known = me.current.borrow().is_some();
                match (known, masterless_since) {
                    (false, None) => masterless_since = Some(Instant::now()),
                    (true, Some(since)) => {
                        let ms = u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX);
                        me.stats.masterless_ms.fetch_add(ms, Ordering::Relaxed);
                        masterless_since = None;
                    }
                    _ => {}
                }
                let pause = if found { POLL_EVERY } else { RETRY_EVERY };
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = me.kick.notified() => {}
                    () = shutdown.cancelled() => break,
                }
            }
            for listener in listeners {
                listener.abort();
            }
        })
    }

    /// Time with no master known, in the stretches that have ended.
    pub fn masterless(&self) -> Duration {
        Duration::from_millis(self.stats.masterless_ms.load(Ordering::Relaxed))
    }

    /// One round: asks the Sentinels, and takes on the master they name when it is not the
    /// one held (or none is). True when a master is known afterwards.
    async fn round(&self) -> bool {
        let named = match resolve::ask_sentinels(&self.settings, self.timeout).await {
            Ok(named) => {
                if let Some(n) = named.promotable {
                    self.promotable
                        .store(n.min(u32::MAX - 1), Ordering::Relaxed);
                }
                named.master
            }
            Err(e) => {
                // (Every 100 ms while no master is known: said once at warn level.)
                if self.current.borrow().is_some() {
                    tracing::warn!(error = %e, "no Sentinel names the Redis master");
                } else {
                    tracing::debug!(error = %e, "no Sentinel names the Redis master");
                }
                return self.current.borrow().is_some();
            }
        };
        let held = self.current.borrow().as_ref().map(|m| m.addr.clone());
        if held.as_deref() == Some(named.as_str()) {
            return true;
        }
        match resolve::take_on(&self.settings, &named, self.timeout).await {
            Ok((client, conn)) => {
                let epoch = self.epochs.fetch_add(1, Ordering::Relaxed) + 1;
                let previous = self.current.send_replace(Some(Master {
                    addr: named.clone(),
                    client: Arc::new(client),
                    conn,
                    epoch,
                }));
                let from = previous.map(|m| m.addr);
                self.note_switch(from, &named);
                true
            }
            Err(e) => {
                // (Every 100 ms during a failover: said once at warn level.)
                if held.is_some() {
                    tracing::warn!(node = %named, error = %e, "the node the Sentinels name is not a master yet");
                } else {
                    tracing::debug!(node = %named, error = %e, "the node the Sentinels name is not a master yet");
                }
                if held.is_some() {
                    // The Sentinels moved on from the master held: stop writing to it.
                    self.current.send_replace(None);
                }
                false
            }
        }
    }

    /// Records a master taken on: a failover when an earlier master was at another address
    /// (the same address reconnected is none).
    fn note_switch(&self, from: Option<String>, to: &str) {
        let Ok(mut switches) = self.switches.lock() else {
            return;
        };
        let last = switches.last().map(|s| s.to.clone());
        if last.as_deref() == Some(to) {
            tracing::info!(master = %to, "reconnected to the Redis master");
            return;
        }
        if last.is_some() {
            self.stats.failovers.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(from = ?last, to = %to, "Redis failed over: following the new master");
        } else {
            tracing::info!(master = %to, "Redis master found through the Sentinels");
        }
        if switches.len() == SWITCHES_KEPT {
            switches.remove(0);
        }
        switches.push(Switch {
            from: from.or(last),
            to: to.to_owned(),
            at_ms: crate::redis::wall_ms(),
        });
    }
}
