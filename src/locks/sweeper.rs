//! Expiries recorded when they happen. A lease that runs out changes nothing by itself (Redis
//! lets its key go), so until some call on its name noticed it, nothing said it had expired.
//! The sweeper runs `lua/sweep.lua` on a name as soon as one of its leases may have run out;
//! the function records each such lease `expired` at the time it ran out, once, whichever
//! instance sweeps first (the others find nothing to record), and its events go out live.
//!
//! It learns of expiries two ways:
//! - **Keyspace notifications** (`notify-keyspace-events` with `E` and `x`, switched on at
//!   start with `CONFIG SET` where Redis allows it, keeping any flags already set): Redis
//!   announces each expired key on `__keyevent@<db>__:expired`: a lock hash (an exclusive or
//!   write hold ran out) or a read hold's `rwlock_timeout` key. One connection per instance.
//! - **A periodic pass** (every [`PASS_EVERY`]) over the names that have Leasehold state, at
//!   most [`PASS_BUDGET`] buckets of the keyspace per pass, going on where the last stopped:
//!   semaphore permits (members of a zset, not keys) expire only this way, and so does
//!   everything where Redis refuses `CONFIG` or notifications are lost (pub/sub is
//!   at-most-once; Redis deletes an expired key at its next access or expire cycle).
//!
//! The sweeper stops on shutdown.

use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::future::join_all;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::task::JoinHandle;

use super::scripts::sweep::{Sweep, SweepReply};
use super::{LockError, LockName, Locks};

/// How often the periodic pass runs.
pub const PASS_EVERY: Duration = Duration::from_secs(2);
/// Keyspace buckets one pass walks (SCAN COUNT): with a few keys per name, a few hundred
/// names; a full cycle over N names takes about N / 300 passes.
const PASS_BUDGET: usize = 1000;
/// How long connecting and subscribing may take.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

impl Locks {
    /// Records the expiries of `name`'s leases that ran out unobserved; returns how many this
    /// call recorded (0 when none ran out, or another instance recorded them first).
    pub async fn sweep(&self, name: &LockName) -> Result<u64, LockError> {
        self.sweep_on(self.inner.conn.clone(), name).await
    }

    async fn sweep_on(&self, conn: ConnectionManager, name: &LockName) -> Result<u64, LockError> {
        match self.call_on(conn, name, &Sweep).await? {
            SweepReply::Swept { expired } => Ok(expired),
            SweepReply::TooLate => Err(LockError::TooLate),
        }
    }

    /// Starts the sweeper (see the module docs) on `client`'s Redis; it runs until shutdown.
    pub fn spawn_sweeper(&self, client: redis::Client) -> JoinHandle<()> {
        let locks = self.clone();
        tokio::spawn(async move { locks.run_sweeper(client).await })
    }

    async fn run_sweeper(self, client: redis::Client) {
        let shutdown = self.inner.shutdown.clone();
        // Its own connection: a sweep stuck behind a frozen Redis must not make the requests'
        // shared connection reconnect under them (a request would then fail early, before its
        // script's deadline has passed).
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.inner.settings.redis_timeout))
            .set_number_of_retries(0);
        let conn = match ConnectionManager::new_lazy_with_config(client.clone(), config) {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "the sweeper cannot connect; expiries are recorded when next seen");
                return;
            }
        };
        let channel = format!(
            "__keyevent@{}__:expired",
            client.get_connection_info().redis_settings().db()
        );
        let notified = self.enable_notifications(&conn).await;
        let mut expired = None;
        let mut pass = tokio::time::interval(PASS_EVERY);
        pass.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut cursor = 0;
        loop {
            if notified && expired.is_none() {
                expired = subscribe(&client, &channel).await;
            }
            tokio::select! {
                message = next_message(&mut expired) => match message {
                    Some(key) => {
                        let prefix = self.inner.settings.key_prefix.as_str();
                        if let Some(name) = name_of_expired_key(prefix, &key) {
                            self.sweep_logged(&conn, &name).await;
                        }
                    }
                    // Lost the subscription: the next round subscribes again.
                    None => expired = None,
                },
                _ = pass.tick() => cursor = self.pass(&conn, cursor).await,
                () = shutdown.cancelled() => return,
            }
        }
    }

    /// Switches on expired-key notifications, keeping the flags already set; false where
    /// Redis refuses (`CONFIG` renamed or denied on a managed Redis).
    async fn enable_notifications(&self, conn: &ConnectionManager) -> bool {
        let mut conn = conn.clone();
        let current: redis::RedisResult<(String, String)> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("notify-keyspace-events")
            .query_async(&mut conn)
            .await;
        let flags = match current {
            Ok((_, flags)) => flags,
            Err(e) => {
                tracing::info!(error = %e, "cannot read notify-keyspace-events; expiries are found by the periodic sweep only");
                return false;
            }
        };
        let Some(wanted) = with_expired_events(&flags) else {
            return true;
        };
        let set: redis::RedisResult<()> = redis::cmd("CONFIG")
            .arg("SET")
            .arg("notify-keyspace-events")
            .arg(&wanted)
            .query_async(&mut conn)
            .await;
        match set {
            Ok(()) => {
                tracing::info!(flags = %wanted, "switched on Redis's expired-key notifications");
                true
            }
            Err(e) => {
                tracing::info!(error = %e, "cannot switch on expired-key notifications; expiries are found by the periodic sweep only");
                false
            }
        }
    }

    async fn sweep_logged(&self, conn: &ConnectionManager, name: &LockName) {
        match self.sweep_on(conn.clone(), name).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(lock = %name, expired = n, "recorded expiries"),
            Err(e) => tracing::debug!(lock = %name, error = %e, "could not sweep"),
        }
    }

    /// One periodic pass from `cursor`: sweeps the names it finds; returns where the next
    /// pass goes on.
    async fn pass(&self, conn: &ConnectionManager, cursor: u64) -> u64 {
        let pattern = self.inner.keys.state_pattern("");
        let scanned: redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(PASS_BUDGET)
            .query_async(&mut conn.clone())
            .await;
        let Ok((next, keys)) = scanned else {
            return cursor;
        };
        let names: Vec<LockName> = keys
            .iter()
            .filter_map(|key| self.inner.keys.name_of_state_key(key))
            .filter_map(|name| LockName::parse(name).ok())
            .collect();
        join_all(names.iter().map(|name| self.sweep_logged(conn, name))).await;
        next
    }
}

/// The name an expired key belongs to, when its expiry may end a hold: a lock hash (`L`),
/// or a read hold's timeout key (`{L}:<holder>:rwlock_timeout:<n>`).
fn name_of_expired_key(prefix: &str, key: &str) -> Option<LockName> {
    let lock = match key.strip_prefix('{') {
        Some(rest) if key.contains(":rwlock_timeout:") => rest.split('}').next()?,
        Some(_) => return None,
        None => key,
    };
    LockName::parse(lock.strip_prefix(prefix)?).ok()
}

/// The notification flags with expired-key events added (`E`: keyevent channels, `x`:
/// expiries; `A` includes `x`), or `None` when they are on already.
fn with_expired_events(flags: &str) -> Option<String> {
    let has_x = flags.contains('x') || flags.contains('A');
    let has_e = flags.contains('E');
    if has_x && has_e {
        return None;
    }
    let mut wanted = flags.to_owned();
    if !has_e {
        wanted.push('E');
    }
    if !has_x {
        wanted.push('x');
    }
    Some(wanted)
}

/// A subscription to `channel`, or `None` (tried again on the next round).
async fn subscribe(client: &redis::Client, channel: &str) -> Option<redis::aio::PubSub> {
    let attempt = async {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok::<_, redis::RedisError>(pubsub)
    };
    match tokio::time::timeout(IO_TIMEOUT, attempt).await {
        Ok(Ok(pubsub)) => Some(pubsub),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "cannot subscribe to expired-key notifications");
            None
        }
        Err(_) => None,
    }
}

/// The next expired key; `None` when the subscription ended. Without a subscription it never
/// completes (the pass and shutdown still do).
async fn next_message(pubsub: &mut Option<redis::aio::PubSub>) -> Option<String> {
    let Some(pubsub) = pubsub.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        let message = pubsub.on_message().next().await?;
        if let Ok(key) = message.get_payload::<String>() {
            return Some(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_events_are_added_to_the_flags_already_set() {
        assert_eq!(with_expired_events(""), Some("Ex".into()));
        assert_eq!(with_expired_events("Kl"), Some("KlEx".into()));
        assert_eq!(with_expired_events("Ex"), None);
        assert_eq!(with_expired_events("AE"), None);
        assert_eq!(with_expired_events("KA"), Some("KAE".into()));
    }

    #[test]
    fn expired_keys_map_to_the_lock_whose_hold_they_end() {
        let name =
            |prefix: &str, key: &str| name_of_expired_key(prefix, key).map(|n| n.to_string());
        assert_eq!(name("", "jobs"), Some("jobs".into()));
        assert_eq!(name("app:", "app:jobs"), Some("jobs".into()));
        assert_eq!(name("app:", "other"), None);
        assert_eq!(
            name(
                "",
                "{doc}:0190c5f0-0000-7000-8000-000000000000:1:rwlock_timeout:1"
            ),
            Some("doc".into())
        );
        assert_eq!(name("", "{doc}:leasehold"), None);
        assert_eq!(name("", "has space"), None);
    }
}
