//! Leasehold: a distributed lock service over HTTP, with lock state in Redis kept in
//! Redisson's data layout.
//!
//! Where things live:
//! - [`config`]: the command line (`leasehold serve`, `run`, ...), flags with env vars.
//! - [`server`]: wires everything together and serves on a bound listener ([`server::run`]).
//! - [`locks`]: the lock domain: lease types, the Redis key layout, the Lua scripts in `lua/`,
//!   waiting. Knows nothing of HTTP.
//! - [`events`]: the single Redis subscriber that wakes waiting requests and fans lock events
//!   out in-process.
//! - [`api`]: the `/v1` HTTP API (axum handlers, problem+json errors).
//! - [`dashboard`]: the operators' HTML pages (askama templates in `templates/`, assets in
//!   `static/` compiled in), admin sign-in and force release from the browser.
//! - [`state`]: what handlers share.
//! - [`metrics`]: the Prometheus registry behind `GET /metrics` (process-local counts).
//! - [`embedded_redis`]: the private `redis-server` child `serve` starts by default.
//! - [`durability`]: what the Redis behind us can lose (persistence, eviction), read at start.
//! - [`shutdown`], [`telemetry`]: signals and logs.
//! - [`client`]: a typed HTTP client for the `/v1` lease API.
//! - [`cli`]: the client subcommands on top of it: `run` (hold a lock while a command runs)
//!   and `acquire`/`heartbeat`/`release`/`status` for shell scripts.

pub mod api;
pub mod cli;
pub mod client;
pub mod config;
pub mod dashboard;
pub mod durability;
pub mod embedded_redis;
pub mod events;
pub mod locks;
pub mod metrics;
pub mod server;
pub mod shutdown;
pub mod state;
pub mod telemetry;
