//! The parts of `leasehold serve` that need nothing of the server: the admin token chosen
//! ([`admin_token`]), the async runtime sized for it,
//! and what is logged once the listener is bound.
//!
//! The assembly itself (signals, logging, the embedded Redis, the listener, `server::run`) is
//! in `main.rs`: `cli` may import only the client's side (the layer map in `src/lib.rs`, held
//! by `tests/api/layers.rs`), and the binary is the one place that sees every layer.

pub mod admin_token;

use std::io;
use std::net::SocketAddr;

use tokio::runtime::{Builder, Runtime};

use crate::config::{Command, ServeArgs};

/// The async runtime `command` runs on: `serve` sizes it (--worker-threads); the client
/// commands take tokio's default, one thread per core.
pub fn runtime(command: &Command) -> io::Result<Runtime> {
    let mut builder = Builder::new_multi_thread();
    if let Command::Serve(args) = command {
        builder.worker_threads(worker_threads(args));
    }
    builder.enable_all().build()
}

/// How many threads serve requests on this machine (see --worker-threads): the runtime is
/// built with this many, and [`announce`] says so.
fn worker_threads(args: &ServeArgs) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    args.worker_threads(cores)
}

/// Where a browser on this machine finds the dashboard: an operator's first question after
/// the start. A wildcard address (`0.0.0.0`, `::`) is reached through loopback here.
fn dashboard_url(scheme: &str, addr: SocketAddr) -> String {
    let mut shown = addr;
    if addr.ip().is_unspecified() {
        shown.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("{scheme}://{shown}/")
}

/// Logs that the server listens on `addr` (and the dashboard's URL), and warns when anonymous callers are let in where
/// a browser could be turned against it.
pub fn announce(args: &ServeArgs, addr: SocketAddr) {
    let scheme = if args.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    tracing::info!(addr = %addr, %scheme, threads = worker_threads(args),
        dashboard = %dashboard_url(scheme, addr), "leasehold is listening");
    if args.allow_anonymous && !addr.ip().is_loopback() && args.allowed_hosts.is_empty() {
        tracing::warn!(
            "anonymous callers are let in on a non-loopback address with no \
            --allowed-hosts: a web page on a name that resolves here (DNS rebinding) \
            could reach the API through a browser"
        );
    }
}
