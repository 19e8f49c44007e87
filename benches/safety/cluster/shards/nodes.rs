//! One node of the cluster, asked directly: its role, its slot map, a slot's owner, and the
//! waits and port picks the cluster's start and faults share.

use std::time::Duration;

use anyhow::{Context as _, bail};
use redis::{FromRedisValue, Value};

use super::ANNOUNCED;
use crate::cluster::ha::info;

/// The node's own port for a port the cluster named.
pub(super) fn own_port(port: u16) -> u16 {
    ANNOUNCED
        .read()
        .ok()
        .and_then(|map| map.get(&port).copied())
        .unwrap_or(port)
}

/// A node's replication role, by its own account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Primary,
    Replica { of: u16, linked: bool },
}

/// A loopback port free now whose bus port (port + 10000) is free too; both stay bound in
/// `held` (the port, then its bus port) until the caller drops them, so that no later pick
/// takes an earlier one's bus port.
pub(super) fn free_port_pair(held: &mut Vec<std::net::TcpListener>) -> anyhow::Result<u16> {
    for _ in 0..1_000 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let Some(bus) = port.checked_add(10_000) else {
            continue;
        };
        if let Ok(bus_listener) = std::net::TcpListener::bind(("127.0.0.1", bus)) {
            held.push(listener);
            held.push(bus_listener);
            return Ok(port);
        }
    }
    bail!("no free port pair (port, port + 10000) in 1000 tries")
}

/// `cmd` sent to the node on `port` alone (no redirect followed), on a connection of its own
/// that gives up on a dead node within a second and on any answer within 12 s (a MIGRATE may
/// take a while).
pub(super) async fn query<T: FromRedisValue>(port: u16, cmd: &redis::Cmd) -> anyhow::Result<T> {
    let ask = async {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(10)));
        let mut conn = redis::Client::open(format!("redis://127.0.0.1:{port}"))?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        cmd.query_async::<T>(&mut conn).await
    };
    match tokio::time::timeout(Duration::from_secs(12), ask).await {
        Ok(result) => result.with_context(|| format!("127.0.0.1:{port}")),
        Err(_) => bail!("127.0.0.1:{port} did not answer within 12 s"),
    }
}

pub(super) fn field<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .filter_map(|line| line.trim().split_once(':'))
        .find(|(k, _)| *k == name)
        .map_or("", |(_, v)| v)
}

pub(super) async fn role(port: u16) -> Option<Role> {
    let text = info(port, "replication").await;
    match field(&text, "role") {
        "master" => Some(Role::Primary),
        "slave" => Some(Role::Replica {
            of: own_port(field(&text, "master_port").parse().unwrap_or(0)),
            linked: field(&text, "master_link_status") == "up",
        }),
        _ => None,
    }
}

/// The slot map as the node on `port` sees it (`CLUSTER SLOTS`): (first, last, owner's port),
/// by first slot.
pub(super) async fn slot_map(port: u16) -> anyhow::Result<Vec<(u16, u16, u16)>> {
    let entries: Vec<Vec<Value>> = query(port, redis::cmd("CLUSTER").arg("SLOTS")).await?;
    let mut map = Vec::new();
    for entry in entries {
        let (Some(start), Some(end), Some(Value::Array(primary))) =
            (entry.first(), entry.get(1), entry.get(2))
        else {
            bail!("a short CLUSTER SLOTS entry");
        };
        let start: u16 = redis::from_redis_value(start.clone())?;
        let end: u16 = redis::from_redis_value(end.clone())?;
        let owner: u16 = redis::from_redis_value(primary.get(1).context("no port")?.clone())?;
        map.push((start, end, own_port(owner)));
    }
    map.sort_unstable();
    Ok(map)
}

pub(super) fn owner_in(map: &[(u16, u16, u16)], slot: u16) -> Option<u16> {
    map.iter()
        .find(|&&(start, end, _)| (start..=end).contains(&slot))
        .map(|&(_, _, owner)| owner)
}

pub(super) async fn keyslot(port: u16, key: &str) -> anyhow::Result<u16> {
    query(port, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)).await
}

pub(super) async fn node_id(port: u16) -> anyhow::Result<String> {
    query(port, redis::cmd("CLUSTER").arg("MYID")).await
}

pub(super) async fn setslot(port: u16, slot: u16, state: &str, id: &str) -> anyhow::Result<()> {
    query::<()>(
        port,
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(state)
            .arg(id),
    )
    .await
    .with_context(|| format!("CLUSTER SETSLOT {slot} {state}"))
}
