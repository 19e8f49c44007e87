//! Leasehold: a distributed lock service over HTTP, with lock state in Redis kept in
//! Redisson's data layout.
//!
//! Where things live (layers point one way: `api` and `dashboard` → `auth`, `limits`,
//! `problem` → `tenant` → `leases` → `locks` → `redis`; `server` assembles them; `client`
//! and `cli` speak only `wire`):
//! - [`leases`]: where a lease lives, decided once at its grant and written into its id: the
//!   main Redis ([`locks`]), the RedLock nodes ([`leases::redlock`]: `kind: "redlock"`, one
//!   lock over several independent Redis masters, granted by a majority), or a multilease
//!   record ([`leases::multi`]). One handle routes acquire, renew, release, inspect, watch,
//!   listing, force release and events; the transports never ask which store.
//! - [`locks`]: the lock domain on one Redis: lease kinds, the Redis key layout, the Lua
//!   scripts in `lua/` (one typed Rust twin each), waiting, and an observer trait for whoever
//!   listens. Knows nothing of HTTP.
//! - [`redis`]: the one place that knows Redis connections: the [`redis::Redis`] handle
//!   (one server, Sentinel or Cluster behind the same calls; callers ask its
//!   [`redis::Capabilities`], never its mode), connect/TLS, function loading, replica acks,
//!   the process's one subscriber (routing messages to whoever registered), keyspace walks,
//!   durability and memory, the embedded `redis-server` in its private data dir.
//! - [`event_feed`]: the in-process fan-out of lock events to event streams (what the subscriber
//!   hears on the events channels).
//! - [`api`]: the `/v1` HTTP API (axum handlers, the OpenAPI document).
//! - [`dashboard`]: the operators' HTML pages (askama templates in `templates/`, assets in
//!   `static/` compiled in), force release from the browser.
//! - [`tenant`]: tenants as separate key spaces (a prefix no other tenant's can collide with).
//! - [`auth`]: who may do what: API keys (roles, name patterns, quotas), the admin token,
//!   dashboard sessions, anonymous callers; the guard against requests from other sites.
//! - [`limits`]: abuse limits per caller and per lock: request rates, quotas kept in Redis,
//!   slots held in-process.
//! - [`operator`]: what an admin may do to locks (force release, evict, set a semaphore's
//!   limit), owned once: one policy, one audit write; the API and the dashboard adapt it.
//! - [`audit`]: the audit log of admin actions, in Redis.
//! - [`own_keys`]: where Leasehold keeps its own data in Redis, out of every lock name's
//!   reach, and the move of an earlier version's data there on start.
//! - [`problem`]: every error the service answers, rendered as problem+json (API) or HTML
//!   (dashboard).
//! - [`wire`]: the `/v1` request and response bodies, shared by the server and the client.
//! - [`server`]: the configuration, the router with its middleware ([`server::app`]), and
//!   [`server::run`] on a bound listener (hyper with timeouts and caps, TLS).
//! - [`state`]: what handlers share.
//! - [`metrics`]: the Prometheus registry behind `GET /metrics` (the domain's observer).
//! - [`parent_death`]: children that stop when we die (the embedded Redis, `run`'s command).
//! - [`crypto`]: the one TLS crypto provider, for the listener and both kinds of client.
//! - [`config`]: the command line, flags with env vars: `serve`'s and `healthcheck`'s
//!   (`config::server`) apart from the client subcommands' (`config::client`).
//! - [`shutdown`], [`telemetry`]: signals and logs.
//! - [`client`]: a typed HTTP client for the `/v1` lease API.
//! - [`cli`]: the client subcommands on top of it: `run` (hold a lock while a command runs:
//!   `cli::run`'s acquire, child, keeper and supervisor), `acquire`/`heartbeat`/`release`/
//!   `status`/`ls`/`keys` for shell scripts, `healthcheck`, and the parts of `serve` that
//!   need nothing of the server (`cli::serve`: the runtime, the admin token). `main.rs`
//!   assembles `serve`: the one place that sees every layer.

pub mod api;
/// The Rust client (crate `leasehold-client`), under its old path.
pub use leasehold_client as client;
/// The wire format (crate `leasehold-wire`), under its old path.
pub use leasehold_wire as wire;
pub mod audit;
pub mod auth;
pub mod cli;
pub mod config;
pub mod crypto;
pub mod dashboard;
pub mod event_feed;
pub mod leases;
pub mod limits;
pub mod locks;
pub mod metrics;
pub mod operator;
pub mod own_keys;
pub mod parent_death;
pub mod problem;
pub mod redis;
pub mod server;
pub mod shutdown;
pub mod state;
pub mod telemetry;
pub mod tenant;
