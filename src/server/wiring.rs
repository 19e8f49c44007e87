//! What `run` assembles, in groups: the subscriber and what it routes to, the lock domain's
//! background tasks, RedLock's nodes, the callers' access, the handlers' shared state, and
//! the background tasks as one group that stops on shutdown.

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::sync::mpsc::Receiver;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::router::{Guards, Timeouts};
use super::{ServerConfig, ServerError};
use crate::audit::AuditLog;
use crate::auth::browser::BrowserPolicy;
use crate::auth::{Access, AdminAuth, AnonymousPolicy, KeyStore, Sessions};
use crate::event_feed::{EventFeed, FeedRoute};
use crate::leases::Redlock;
use crate::limits::budget::Budget;
use crate::limits::ledger::Ledger;
use crate::limits::rate::RateLimits;
use crate::locks::feed::sweeper::{self, Expiries};
use crate::locks::wakeups::{WaitRegistry, Wakeups};
use crate::locks::{KeySpace, Locks, Observer};
use crate::metrics::Metrics;
use crate::redis::{Redis, Route, ShardedGates, SubscriberStatus, Topics};
use crate::state::{AppState, Shared};

/// The server's background tasks: each stops on shutdown, and `run` waits for them all.
#[derive(Default)]
pub(super) struct Tasks(Vec<JoinHandle<()>>);

impl Tasks {
    pub(super) fn push(&mut self, task: JoinHandle<()>) {
        self.0.push(task);
    }

    pub(super) fn extend(&mut self, tasks: impl IntoIterator<Item = JoinHandle<()>>) {
        self.0.extend(tasks);
    }

    /// Waits for every task (after shutdown was signalled); one that failed is logged.
    pub(super) async fn join_all(self) {
        for task in self.0 {
            if let Err(e) = task.await {
                tracing::warn!(error = %e, "a background task failed");
            }
        }
    }
}

/// What the subscriber feeds: the waiters it wakes, the live events it hears, the expiries
/// it hands the sweeper, and its own status.
pub(super) struct Heard {
    pub waiters: Arc<WaitRegistry>,
    pub feed: EventFeed,
    pub expired: Receiver<String>,
    pub status: Arc<SubscriberStatus>,
}

/// Starts the process's one subscriber with its routes: unlock messages to the waiters (in
/// Cluster mode each waited-for lock is subscribed on its own, sharded pub/sub having no
/// patterns), expiry notifications to the sweeper, events to the live feed.
pub(super) fn subscribe(
    conn: &Redis,
    prefix: &str,
    shutdown: &CancellationToken,
    tasks: &mut Tasks,
) -> Heard {
    let sharded = conn
        .capabilities()
        .sharded_pubsub
        .then(|| ShardedGates::new(crate::locks::wake_channels));
    let waiters = Arc::new(match &sharded {
        Some(gates) => WaitRegistry::sharded(gates.clone()),
        None => WaitRegistry::default(),
    });
    let feed = EventFeed::default();
    let (to_sweeper, expired) = tokio::sync::mpsc::channel(sweeper::EXPIRED_QUEUE);
    let expiries = Expiries {
        channel: sweeper::expired_channel(conn.db()),
        to_sweeper,
    };
    let wakeups = Wakeups {
        waiters: waiters.clone(),
        keys: KeySpace::new(prefix),
    };
    let feed_route = FeedRoute {
        feed: feed.clone(),
        base: prefix.to_owned(),
    };
    let mut gated = Vec::new();
    if sharded.is_none() {
        gated.push(wakeups.subscription());
    }
    gated.extend(feed_route.subscriptions());
    let topics = Topics {
        always: vec![expiries.channel.clone()],
        always_what: "expiries",
        gated,
    };
    let routes: Vec<Arc<dyn Route>> =
        vec![Arc::new(wakeups), Arc::new(expiries), Arc::new(feed_route)];
    let (status, task) = conn.spawn_subscriber(topics, routes, sharded, shutdown.clone());
    tasks.push(task);
    Heard {
        waiters,
        feed,
        expired,
        status,
    }
}

/// The lock domain's own tasks: the clock estimate, the live publisher, the waiting lists'
/// writer, the expiry sweeper.
pub(super) fn spawn_lock_tasks(locks: &Locks, expired: Receiver<String>, tasks: &mut Tasks) {
    tasks.push(locks.spawn_clock_sync());
    tasks.push(locks.spawn_publisher());
    tasks.push(locks.spawn_waitlist_writer());
    tasks.push(locks.spawn_sweeper(expired));
}

/// RedLock's nodes, each a lock domain of its own (see `crate::leases::redlock`), with the
/// sweeper that records their leases' expiries from the main Redis's due list.
pub(super) async fn redlock(
    config: &ServerConfig,
    conn: &Redis,
    locks: &Locks,
    metrics: &Arc<Metrics>,
    shutdown: &CancellationToken,
    tasks: &mut Tasks,
) -> Result<Option<Redlock>, ServerError> {
    let Some(settings) = &config.redlock else {
        return Ok(None);
    };
    crate::config::check_redlock_nodes(&settings.nodes)?;
    let observer: Arc<dyn Observer> = metrics.clone();
    let main = conn.capabilities().one_server.then_some(conn);
    let (redlock, started) =
        Redlock::start(settings, &config.locks, &observer, main, shutdown).await?;
    tasks.extend(started);
    tasks.push(redlock.spawn_sweeper(locks.clone()));
    Ok(Some(redlock))
}

/// Who may call: the admin token, API keys, dashboard sessions, anonymous callers where
/// allowed, rate limits, with their background checks.
pub(super) fn access(
    config: &ServerConfig,
    keys: KeyStore,
    conn: &Redis,
    (tls, loopback): (bool, bool),
    shutdown: &CancellationToken,
    tasks: &mut Tasks,
) -> Arc<Access> {
    let rates = Arc::new(RateLimits::with_tenants(
        config.clients.rate_per_second,
        config.clients.rate_burst,
        config.tenant_caps.rate_per_second,
        config.tenant_caps.rate_burst,
    ));
    tasks.push(rates.clone().spawn_cleanup(shutdown.clone()));
    let access = Arc::new(Access {
        admin: AdminAuth::from_token(config.admin_token.as_deref()),
        keys,
        sessions: Sessions::new(conn.clone(), &config.locks.key_prefix, tls),
        anonymous: AnonymousPolicy {
            allow: config.allow_anonymous,
            loopback,
        },
        rates,
        limits: config.clients,
        tenant_caps: config.tenant_caps,
        private_dashboard: config.dashboard.private,
        revocations: Arc::default(),
    });
    tasks.push(access.clone().spawn_revocation_checks(shutdown.clone()));
    access
}

/// What `state` is made of beside the configuration.
pub(super) struct Parts {
    pub locks: Locks,
    pub access: Arc<Access>,
    pub metrics: Arc<Metrics>,
    pub redlock: Option<Redlock>,
    pub subscriber: Arc<SubscriberStatus>,
    pub feed: EventFeed,
}

/// What the handlers share, with the quota budget's flusher.
pub(super) fn state(
    config: &ServerConfig,
    conn: &Redis,
    parts: Parts,
    shutdown: &CancellationToken,
    tasks: &mut Tasks,
) -> AppState {
    let prefix = &config.locks.key_prefix;
    let budget = Budget::new(conn.clone(), prefix);
    tasks.push(budget.spawn_flusher(shutdown.clone()));
    AppState::new(Shared {
        locks: parts.locks,
        key_prefix: Arc::from(prefix.as_str()),
        limits: config.limits,
        access: parts.access,
        ledger: Ledger::new(conn.clone(), prefix),
        budget,
        audit: AuditLog::new(conn.clone(), prefix),
        streams: Arc::default(),
        wait_slots: Arc::default(),
        metrics: parts.metrics,
        subscriber: parts.subscriber,
        feed: parts.feed,
        dashboard: config.dashboard,
        shutdown: shutdown.clone(),
        watches: Arc::new(Semaphore::new(config.limits.max_watches)),
        redlock: parts.redlock,
        revocations: crate::leases::revocation::Deadlines::new(shutdown.clone()),
    })
}

/// The guards around every route: which browsers may call, and the request timeouts.
pub(super) fn guards(config: &ServerConfig, loopback: bool) -> Guards {
    let browser = match &config.allowed_hosts {
        Some(hosts) => BrowserPolicy {
            allowed_hosts: Some(hosts.clone()),
        },
        None if loopback => BrowserPolicy::loopback(),
        None => BrowserPolicy::default(),
    };
    Guards {
        browser: Arc::new(browser),
        timeouts: Timeouts {
            request: config.request_timeout,
            body: config.body_timeout,
            max_wait: config.limits.max_wait,
        },
    }
}
