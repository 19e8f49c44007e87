//! The flags of `leasehold keys create|list|rotate|revoke`: API keys through the admin API.

use std::time::Duration;

use clap::{Args, Subcommand};

use super::SCRIPT_EXIT_CODES;
use super::client::ServerArgs;

/// `leasehold keys ...`: API keys through the admin API.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key and print it once (with its secret).
    #[command(after_help = SCRIPT_EXIT_CODES)]
    Create(KeyCreateArgs),
    /// List the keys (never their secrets).
    #[command(after_help = SCRIPT_EXIT_CODES)]
    List(KeyListArgs),
    /// Give a key a new secret; the old one keeps working for --grace.
    #[command(after_help = SCRIPT_EXIT_CODES)]
    Rotate(KeyRotateArgs),
    /// Revoke a key: every instance refuses it within a second or two.
    #[command(after_help = SCRIPT_EXIT_CODES)]
    Revoke(KeyRevokeArgs),
}

#[derive(Debug, Clone, Args)]
pub struct KeyCreateArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    /// The key's name (unique in its tenant): audit entries and histories name it.
    pub name: String,

    /// The tenant (a key space of its own); the default tenant when absent.
    #[arg(long, default_value = "")]
    pub tenant: String,

    /// A role: client (take, renew, release), reader (inspect, events, dashboard) or admin
    /// (force release, keys, audit). Repeat for several; client when none is given.
    #[arg(long = "role", value_name = "ROLE")]
    pub roles: Vec<String>,

    /// A name pattern the key may use (`*` for any run of characters, like `jobs:*`).
    /// Repeat for several; every name when none is given.
    #[arg(long = "pattern", value_name = "PATTERN")]
    pub patterns: Vec<String>,

    /// Live leases this key may hold at once (the server's default when absent).
    #[arg(long)]
    pub max_leases: Option<u64>,

    /// Requests of this key waiting server-side at once.
    #[arg(long)]
    pub max_waiters: Option<u64>,

    /// Distinct lock and semaphore names this key may give Redis state to (within about an
    /// hour of their last use).
    #[arg(long)]
    pub max_names: Option<u64>,

    /// Bytes of Redis state this key's leases, names and histories may keep (estimated).
    #[arg(long)]
    pub max_state_bytes: Option<u64>,

    /// Longest TTL this key's leases may ask for, like 10m.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub max_ttl: Option<Duration>,

    /// Most permits one semaphore lease of this key may hold.
    #[arg(long)]
    pub max_permits: Option<u32>,

    /// Print only the secret instead of the JSON.
    #[arg(long)]
    pub secret_only: bool,
}

#[derive(Debug, Clone, Args)]
pub struct KeyListArgs {
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(Debug, Clone, Args)]
pub struct KeyRotateArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    /// The key's id (`id` in `keys list`).
    pub id: String,

    /// How long the current secret keeps working beside the new one, like 1h (0s: not at
    /// all).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1h")]
    pub grace: Duration,

    /// Print only the new secret instead of the JSON.
    #[arg(long)]
    pub secret_only: bool,
}

#[derive(Debug, Clone, Args)]
pub struct KeyRevokeArgs {
    #[command(flatten)]
    pub server: ServerArgs,

    /// The key's id (`id` in `keys list`).
    pub id: String,
}
