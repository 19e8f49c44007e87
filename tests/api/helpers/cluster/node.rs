//! One cluster node's process, and what any node can be asked by address (its view of the
//! slots, its role), for the fixture and for tests that drive a cluster they did not start
//! (`deploy/local/cluster.sh`).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue, RedisResult, Value};

use super::super::children;

/// Every slot of a cluster: 0..=16383.
pub const SLOTS: u32 = 16_384;

/// One redis-server in cluster mode.
pub struct Node {
    pub port: u16,
    conf: std::path::PathBuf,
    child: Option<Child>,
}

impl Node {
    /// Writes the node's config into its own directory under `dir` and starts it (without
    /// waiting for it to answer: the fixture starts every node, then waits for all).
    pub(super) fn spawn(dir: &Path, port: u16) -> Self {
        let node_dir = dir.join(port.to_string());
        std::fs::create_dir_all(&node_dir).expect("node dir");
        // A node that misses pings for 1 s is suspected, so a killed primary's replica takes
        // over within a few seconds (the default, 15 s, would dominate a test's time). A node
        // learns its own IP only from a peer's MEET: alone (a one-node cluster) it would name
        // itself ":port" in CLUSTER SLOTS without `cluster-announce-ip`.
        let conf = format!(
            "port {port}\nbind 127.0.0.1\ndir {}\ncluster-enabled yes\n\
             cluster-config-file nodes.conf\ncluster-node-timeout 1000\n\
             cluster-announce-ip 127.0.0.1\n\
             repl-diskless-sync-delay 0\nappendonly no\nsave \"\"\nenable-debug-command yes\n",
            node_dir.display()
        );
        let path = node_dir.join("redis.conf");
        std::fs::write(&path, conf).expect("write redis.conf");
        let mut node = Self {
            port,
            conf: path,
            child: None,
        };
        node.restart();
        node
    }

    /// Starts it again after [`Self::kill`], with its config and its `nodes.conf` (so it
    /// rejoins as the node it was: a replaced primary comes back as its replica's replica).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "{} is running", self.addr());
        let mut command = children::guarded("redis-server");
        command
            .arg(&self.conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.child = Some(children::spawn(command).expect("start redis-server"));
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(format!("redis://{}", self.addr())).expect("redis url")
    }

    /// A connection to this node alone (no redirects followed).
    pub async fn conn(&self) -> MultiplexedConnection {
        connect(&self.addr())
            .await
            .expect("a connection to the node")
    }

    pub fn pid(&self) -> nix::unistd::Pid {
        let child = self.child.as_ref().expect("a running node");
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"))
    }

    /// SIGSTOP / SIGCONT / SIGKILL.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(self.pid(), signal).expect("signal redis-server");
    }

    /// Kills it as a crash would. The fixture then leaves it out of every question it asks.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Not killed (a node frozen with SIGSTOP still counts as running).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port free now whose cluster bus port (port + 10000) is free too. Both stay
/// bound in `held` (the port, then its bus port) until the caller drops them, so that no
/// later pick lands on an earlier pick's bus port; the caller lets a node's pair go just
/// before it spawns that node, so only the moment that node takes to bind them is left open.
pub(super) fn free_port_pair(held: &mut Vec<TcpListener>) -> u16 {
    for _ in 0..1_000 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = listener.local_addr().expect("local addr").port();
        // Ports above 55535 have no bus port.
        let Some(bus) = port.checked_add(10_000) else {
            continue;
        };
        if let Ok(bus_listener) = TcpListener::bind(("127.0.0.1", bus)) {
            held.push(listener);
            held.push(bus_listener);
            return port;
        }
    }
    panic!("no free port pair (port, port + 10000) in 1000 tries");
}

/// A connection to `addr` that gives up on a dead node within a second and on a frozen one
/// within ten (a MIGRATE of a batch may take a while).
pub async fn connect(addr: &str) -> RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(10)));
    redis::Client::open(format!("redis://{addr}"))?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// `cmd` sent to the node at `addr` on a connection of its own.
pub async fn query<T: FromRedisValue>(addr: &str, cmd: &redis::Cmd) -> RedisResult<T> {
    cmd.query_async(&mut connect(addr).await?).await
}

/// The slot `key` hashes to, as the node at `addr` computes it (`CLUSTER KEYSLOT`).
pub async fn keyslot_at(addr: &str, key: &str) -> u16 {
    query(addr, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
        .await
        .expect("CLUSTER KEYSLOT")
}

/// `INFO section` of the node at `addr` as `field:value` pairs.
pub async fn info_at(addr: &str, section: &str) -> RedisResult<Vec<(String, String)>> {
    let text: String = query(addr, redis::cmd("INFO").arg(section)).await?;
    Ok(fields(&text))
}

/// `CLUSTER INFO` of the node at `addr` as `field:value` pairs.
pub async fn cluster_info_at(addr: &str) -> RedisResult<Vec<(String, String)>> {
    let text: String = query(addr, redis::cmd("CLUSTER").arg("INFO")).await?;
    Ok(fields(&text))
}

/// The value of `name` in `field:value` pairs ("" when absent).
pub fn field<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map_or("", |(_, v)| v.as_str())
}

fn fields(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| line.trim().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// What a node replicates, by its own account (`INFO replication`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Primary,
    Replica {
        /// The primary's address.
        of: String,
        /// `master_link_status:up`.
        linked: bool,
    },
}

/// The role of the node at `addr` now.
pub async fn role_at(addr: &str) -> RedisResult<Role> {
    let info = info_at(addr, "replication").await?;
    Ok(match field(&info, "role") {
        "slave" => Role::Replica {
            of: format!(
                "{}:{}",
                field(&info, "master_host"),
                field(&info, "master_port")
            ),
            linked: field(&info, "master_link_status") == "up",
        },
        _ => Role::Primary,
    })
}

/// Slots `start..=end` and the address of the primary that serves them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRange {
    pub start: u16,
    pub end: u16,
    pub owner: String,
}

/// The slot map as the node at `addr` sees it now (`CLUSTER SLOTS`), by first slot.
pub async fn slot_map_at(addr: &str) -> RedisResult<Vec<SlotRange>> {
    let entries: Vec<Vec<Value>> = query(addr, redis::cmd("CLUSTER").arg("SLOTS")).await?;
    let mut map = entries
        .into_iter()
        .map(|entry| slot_range(entry).map_err(redis::RedisError::from))
        .collect::<RedisResult<Vec<_>>>()?;
    map.sort_by_key(|range| range.start);
    Ok(map)
}

/// One `CLUSTER SLOTS` entry: `[start, end, [ip, port, id, ...], replicas...]`.
fn slot_range(entry: Vec<Value>) -> Result<SlotRange, redis::ParsingError> {
    let mut entry = entry.into_iter();
    let mut next = || {
        entry
            .next()
            .ok_or_else(|| redis::ParsingError::from("a short CLUSTER SLOTS entry"))
    };
    let start: u16 = redis::from_redis_value(next()?)?;
    let end: u16 = redis::from_redis_value(next()?)?;
    let primary: Vec<Value> = redis::from_redis_value(next()?)?;
    let mut primary = primary.into_iter();
    let (Some(ip), Some(port)) = (primary.next(), primary.next()) else {
        return Err("a CLUSTER SLOTS entry without a primary".into());
    };
    let ip: String = redis::from_redis_value(ip)?;
    let port: u16 = redis::from_redis_value(port)?;
    Ok(SlotRange {
        start,
        end,
        owner: format!("{ip}:{port}"),
    })
}

/// The primary serving `slot` in `map`, if any.
pub fn owner_in(map: &[SlotRange], slot: u16) -> Option<&str> {
    map.iter()
        .find(|range| (range.start..=range.end).contains(&slot))
        .map(|range| range.owner.as_str())
}
