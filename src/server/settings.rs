//! What [`super::run`] needs besides the listener: built once from `leasehold serve`'s flags,
//! or with defaults for tests and benchmarks.

use super::listener::HttpLimits;
use super::tls::TlsFiles;
use crate::config::ServeArgs;
use crate::leases::redlock::RedlockSettings;
use crate::limits::{ClientLimits, LockLimits};
use crate::locks::{LockSettings, TtlPolicy};
use crate::redis::{AckSettings, ClusterSettings, RedisSettings, SentinelSettings};
use crate::state::{ApiLimits, DashboardSettings};
use std::time::Duration;

/// Everything [`run`] needs besides the listener. Built once: from the command line
/// ([`Self::from_args`]) or with defaults for tests and benchmarks ([`Self::new`]).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Which Redis, and how to reach it: a new Redis mode is a new field there
    /// ([`crate::redis`]) and its flags (`config::server`), mapped in [`Self::from_args`].
    pub redis: RedisSettings,
    pub locks: LockSettings,
    pub limits: ApiLimits,
    pub admin_token: Option<String>,
    /// Label acquisition metrics with lock names (unbounded cardinality; off by default).
    pub metrics_lock_names: bool,
    /// Start even when Redis may evict keys (held locks among them).
    pub allow_eviction: bool,
    pub dashboard: DashboardSettings,
    /// Let callers without a credential in on any address, even once API keys exist.
    pub allow_anonymous: bool,
    /// The `Host` names served; `None`: loopback names on a loopback listener, else any.
    pub allowed_hosts: Option<Vec<String>>,
    /// What one caller may do (rate, leases, waiters, event streams).
    pub clients: ClientLimits,
    pub tenant_caps: crate::limits::TenantCaps,
    pub http: HttpLimits,
    /// How long a request may take beyond the wait it asked for.
    pub request_timeout: Duration,
    /// How long a request body may take to arrive.
    pub body_timeout: Duration,
    /// Serve HTTPS with this certificate and key.
    pub tls: Option<TlsFiles>,
    /// RedLock's nodes (`--redlock-nodes`); `None`: `"kind": "redlock"` is refused.
    pub redlock: Option<RedlockSettings>,
}

impl ServerConfig {
    /// The defaults of `leasehold serve`, on `redis_url`, with no admin token: the flags'
    /// own defaults ([`ServeArgs::defaults`]), stated once, there.
    pub fn new(redis_url: impl Into<String>) -> Self {
        Self::from_args(&ServeArgs::defaults(), redis_url.into(), None)
    }

    /// What `leasehold serve` was asked for, on `redis_url` (the embedded Redis's when none
    /// was given), with `admin_token` (generated in embedded mode when none was given).
    pub fn from_args(args: &ServeArgs, redis_url: String, admin_token: Option<String>) -> Self {
        Self {
            redis: redis_settings(args, redis_url),
            locks: LockSettings {
                key_prefix: args.key_prefix.clone(),
                tombstone_ms: args.tombstone_ms,
                ticket_timeout_ms: args.ticket_timeout_ms,
                redis_timeout: Duration::from_millis(args.redis_timeout_ms),
                calls_in_flight: args.max_redis_calls.get(),
            },
            limits: ApiLimits {
                ttl: TtlPolicy {
                    default_ms: args.default_ttl_ms,
                    min_ms: args.min_ttl_ms,
                    max_ms: args.max_ttl_ms,
                },
                max_wait: Duration::from_millis(args.max_wait_ms),
                max_lock_delay_ms: args.max_lock_delay_ms,
                ticket_timeout_ms: args.ticket_timeout_ms,
                max_permits: args.max_permits,
                per_lock: LockLimits {
                    waiters_per_lock: args.max_waiters_per_lock,
                    fair_queue: args.max_fair_queue,
                    reentry_depth: args.max_reentry_depth,
                    reason_chars: args.max_reason_chars,
                },
                max_watches: args.max_watches,
            },
            admin_token,
            metrics_lock_names: args.metrics_lock_names,
            allow_eviction: args.allow_eviction,
            dashboard: DashboardSettings {
                private: args.dashboard_private,
            },
            allow_anonymous: args.allow_anonymous,
            allowed_hosts: (!args.allowed_hosts.is_empty()).then(|| {
                args.allowed_hosts
                    .iter()
                    .map(|h| h.to_ascii_lowercase())
                    .collect()
            }),
            clients: client_limits(args),
            tenant_caps: crate::limits::TenantCaps {
                keys: args.max_keys_per_tenant,
                rate_per_second: args.rate_limit_per_tenant,
                rate_burst: args.rate_burst_per_tenant,
            },
            http: HttpLimits {
                header_timeout: Duration::from_millis(args.header_timeout_ms),
                idle_timeout: Duration::from_millis(args.idle_timeout_ms),
                max_connections: args.max_connections,
                max_connections_per_address: args.max_connections_per_address,
                limit_loopback: args.limit_loopback_clients,
                max_h2_streams: args.max_h2_streams,
            },
            request_timeout: Duration::from_millis(args.request_timeout_ms),
            body_timeout: Duration::from_millis(args.body_timeout_ms),
            tls: match (&args.tls_cert, &args.tls_key) {
                (Some(cert), Some(key)) => Some(TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                }),
                _ => None,
            },
            redlock: (!args.redlock_nodes.is_empty()).then(|| RedlockSettings {
                nodes: args.redlock_nodes.clone(),
                ca_file: args.redis_ca_file.clone(),
            }),
        }
    }
}

/// How to reach Redis: the URL, or the Sentinels, or the Cluster's seed nodes; replica acks.
fn redis_settings(args: &ServeArgs, url: String) -> RedisSettings {
    RedisSettings {
        url,
        ca_file: args.redis_ca_file.clone(),
        timeout: Duration::from_millis(args.redis_timeout_ms),
        sentinel: args
            .redis_master_name
            .as_ref()
            .map(|name| SentinelSettings {
                sentinels: args.redis_sentinel.clone(),
                master_name: name.clone(),
                sentinel_password: args.redis_sentinel_password.clone(),
                username: args.redis_username.clone(),
                password: args.redis_password.clone(),
                tls: args.redis_tls,
                db: args.redis_db,
            }),
        cluster: (!args.redis_cluster.is_empty()).then(|| ClusterSettings {
            nodes: args.redis_cluster.clone(),
            username: args.redis_username.clone(),
            password: args.redis_password.clone(),
            tls: args.redis_tls,
        }),
        acks: AckSettings {
            rule: args.min_replica_acks,
            timeout: Duration::from_millis(args.replica_ack_timeout_ms),
            connections: args.replica_ack_connections.get(),
        },
    }
}

/// What each client (an API key or an address) and each tenant may hold and ask.
fn client_limits(args: &ServeArgs) -> ClientLimits {
    ClientLimits {
        rate_per_second: args.rate_limit,
        rate_burst: args.rate_burst,
        leases: args.max_leases_per_client,
        waiters: args.max_waiters_per_client,
        names: args.max_names_per_client,
        tenant_names: args.max_names_per_tenant,
        state_bytes: args.max_state_bytes_per_client,
        tenant_state_bytes: args.max_state_bytes_per_tenant,
        streams: args.max_streams_per_client,
        limit_loopback: args.limit_loopback_clients,
    }
}
