//! The RedLock nodes: one standalone [`Redis`] handle each (the same connection code, TLS
//! and timeouts as `--redis-url`), each with a lock domain of its own ([`Locks`]: the same Lua
//! functions, loaded on the node when it lacks them) and a subscriber of its own for unlock
//! messages; and the start-up check that they are independent masters.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::locks::wakeups::{WaitRegistry, Wakeups};
use crate::locks::{KeySpace, LockSettings, Locks, Observer};
use crate::redis::{
    AckRule, AckSettings, ConnectError, Redis, RedisSettings, Route, SubscriberStatus, Topics,
};

/// What `--redlock-nodes` asks for.
#[derive(Debug, Clone)]
pub struct RedlockSettings {
    /// The nodes' URLs (`redis://`, `rediss://`, `redis+unix://`), as given.
    pub nodes: Vec<String>,
    /// The CA a `rediss://` node's certificate is checked against (`--redis-ca-file`).
    pub ca_file: Option<PathBuf>,
}

/// Why the RedLock nodes cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RedlockSetupError {
    #[error("--redlock-nodes {node}: {source}")]
    Connect {
        node: String,
        #[source]
        source: ConnectError,
    },
    #[error(
        "--redlock-nodes {node} is a replica ({role}), not a master: RedLock needs independent \
         masters (a replica holds its master's locks, so the two are one vote)"
    )]
    Replica { node: String, role: String },
    #[error(
        "--redlock-nodes {first} and {second} are the same Redis server (run_id {run_id}): \
         RedLock needs independent masters"
    )]
    SameServer {
        first: String,
        second: String,
        run_id: String,
    },
    #[error(
        "--redlock-nodes {node} is the Redis Leasehold keeps its own state in (run_id \
         {run_id}); give RedLock masters of its own"
    )]
    MainRedis { node: String, run_id: String },
}

/// What a node's lock domain reports: its script calls, as that node's
/// ([`Observer::node_call`]); nothing else (the leases layer reports each RedLock acquire,
/// heartbeat and release once, not once per node).
struct NodeObserver {
    node: Arc<str>,
    to: Arc<dyn Observer>,
}

impl Observer for NodeObserver {
    fn script_call(&self, script: &'static str, took: Duration, ok: bool) {
        self.to.node_call(&self.node, script, took, ok);
    }
}

/// One RedLock node.
#[derive(Clone)]
pub struct Node {
    /// As given in `--redlock-nodes`, its credentials taken out (`connect::redacted`): what
    /// logs, errors and the dashboard show.
    pub url: Arc<str>,
    /// The lock domain on this node (in the caller's key space, once in one).
    pub locks: Locks,
    /// Whether this node's subscriber is connected.
    pub subscriber: Arc<SubscriberStatus>,
    /// The node's connection, for the start-up check.
    pub(super) redis: Redis,
}

impl Node {
    /// Whether this node answers from now on: it is pinged while the receiver lives (a
    /// RedLock watch's `degraded`).
    pub fn reach(&self) -> tokio::sync::watch::Receiver<crate::redis::health::Reach> {
        self.redis.health().subscribe()
    }
}

/// Connects every node (lazily: a node that does not answer yet is no error), starts its
/// subscriber, clock and event publisher until `shutdown`.
pub(super) fn connect(
    settings: &RedlockSettings,
    lock_settings: &LockSettings,
    observer: &Arc<dyn Observer>,
    shutdown: &CancellationToken,
) -> Result<(Vec<Node>, Vec<JoinHandle<()>>), RedlockSetupError> {
    let mut nodes = Vec::new();
    let mut tasks = Vec::new();
    for url in &settings.nodes {
        let redis = Redis::connect(&RedisSettings {
            url: url.clone(),
            ca_file: settings.ca_file.clone(),
            timeout: lock_settings.redis_timeout,
            sentinel: None,
            cluster: None,
            // A RedLock node stands alone: its vote is its own answer, not its replicas'.
            acks: AckSettings {
                rule: AckRule::Exactly(0),
                timeout: lock_settings.redis_timeout,
                connections: 1,
            },
        })
        .map_err(|source| RedlockSetupError::Connect {
            node: crate::redis::connect::redacted(url),
            source,
        })?;
        let waiters = Arc::new(WaitRegistry::default());
        let wakeups = Wakeups {
            waiters: waiters.clone(),
            keys: KeySpace::new(lock_settings.key_prefix.as_str()),
        };
        let topics = Topics {
            always: Vec::new(),
            always_what: "nothing",
            gated: vec![wakeups.subscription()],
        };
        let routes: Vec<Arc<dyn Route>> = vec![Arc::new(wakeups)];
        let (subscriber, subscriber_task) =
            redis.spawn_subscriber(topics, routes, None, shutdown.clone());
        let url: Arc<str> = Arc::from(crate::redis::connect::redacted(url).as_str());
        let locks = Locks::new(
            redis.clone(),
            lock_settings,
            waiters,
            shutdown.clone(),
            Arc::new(NodeObserver {
                node: url.clone(),
                to: observer.clone(),
            }),
        );
        // The main Redis indexes RedLock names (`lua/redlock.lua`); an index here would only
        // grow.
        locks.stop_noting_names();
        tasks.push(subscriber_task);
        tasks.push(redis.spawn_health(shutdown));
        tasks.push(locks.spawn_clock_sync());
        tasks.push(locks.spawn_publisher());
        nodes.push(Node {
            url,
            locks,
            subscriber,
            redis,
        });
    }
    Ok((nodes, tasks))
}

/// What a node says of itself: its role and its server's run id.
struct Identity {
    role: String,
    run_id: String,
}

async fn identity(redis: &mut Redis) -> ::redis::RedisResult<Identity> {
    let role: Vec<::redis::Value> = ::redis::cmd("ROLE").query_async(redis).await?;
    let role = match role.first() {
        Some(::redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        Some(::redis::Value::SimpleString(s)) => s.clone(),
        _ => String::new(),
    };
    let info: String = ::redis::cmd("INFO")
        .arg("server")
        .query_async(redis)
        .await?;
    let run_id = info
        .lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .unwrap_or_default()
        .trim()
        .to_owned();
    Ok(Identity { role, run_id })
}

/// Refuses nodes that are not independent masters: a replica (its master's locks are its
/// own, one vote counted twice), two URLs of one server, or the main Redis itself. A node
/// that does not answer yet is not judged (it votes no until it does); the start goes on.
pub(super) async fn check_independent(
    nodes: &[Node],
    main: Option<&Redis>,
    timeout: Duration,
) -> Result<(), RedlockSetupError> {
    let mut seen: HashMap<String, Arc<str>> = HashMap::new();
    let main_run_id = match main {
        Some(main) => tokio::time::timeout(timeout, identity(&mut main.clone()))
            .await
            .ok()
            .and_then(Result::ok)
            .map(|i| i.run_id),
        None => None,
    };
    for node in nodes {
        let mut redis = node.redis.clone();
        let found = tokio::time::timeout(timeout, identity(&mut redis)).await;
        let identity = match found {
            Ok(Ok(identity)) => identity,
            Ok(Err(e)) => {
                tracing::warn!(node = %node.url, error = %e, "a RedLock node does not answer yet; it counts as refusing until it does");
                continue;
            }
            Err(_) => {
                tracing::warn!(node = %node.url, "a RedLock node does not answer yet; it counts as refusing until it does");
                continue;
            }
        };
        if identity.role != "master" {
            return Err(RedlockSetupError::Replica {
                node: node.url.to_string(),
                role: identity.role,
            });
        }
        if identity.run_id.is_empty() {
            continue;
        }
        if main_run_id.as_deref() == Some(identity.run_id.as_str()) {
            return Err(RedlockSetupError::MainRedis {
                node: node.url.to_string(),
                run_id: identity.run_id,
            });
        }
        if let Some(first) = seen.insert(identity.run_id.clone(), node.url.clone()) {
            return Err(RedlockSetupError::SameServer {
                first: first.to_string(),
                second: node.url.to_string(),
                run_id: identity.run_id,
            });
        }
    }
    Ok(())
}
