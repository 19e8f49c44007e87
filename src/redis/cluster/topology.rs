//! The cluster's shape as this process last read it (`CLUSTER SLOTS`, every second): which
//! primary serves which slots, and its replicas. redis-rs keeps a slot map of its own for
//! routing commands, but reads it only when a node answers `MOVED` or a connection drops;
//! what has to follow every primary (the expired-key listeners, the SCAN walks, the clocks,
//! the operators' page) reads this one, which the poll keeps fresh even when nothing failed.

use redis::Value;

/// One primary and what it serves.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Shard {
    /// `host:port`, as the cluster announces it.
    pub primary: String,
    /// Its replicas' `host:port`, as the cluster lists them.
    pub replicas: Vec<String>,
    /// Inclusive slot ranges, ascending.
    pub slots: Vec<(u16, u16)>,
}

impl Shard {
    /// How many of the 16384 slots it serves.
    pub fn slot_count(&self) -> u32 {
        self.slots
            .iter()
            .map(|(a, b)| u32::from(*b) - u32::from(*a) + 1)
            .sum()
    }
}

/// The shards, ordered by primary address (so a walk over them has one order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    pub shards: Vec<Shard>,
}

impl Topology {
    /// Reads a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, ..], [replica..]..]..]`.
    pub fn parse(reply: &Value) -> Option<Self> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut shards: Vec<Shard> = Vec::new();
        for range in ranges {
            let Value::Array(parts) = range else {
                return None;
            };
            let (start, end) = (int(parts.first()?)?, int(parts.get(1)?)?);
            let mut nodes = parts.iter().skip(2).filter_map(node_addr);
            let primary = nodes.next()?;
            let replicas: Vec<String> = nodes.collect();
            let (start, end) = (u16::try_from(start).ok()?, u16::try_from(end).ok()?);
            match shards.iter_mut().find(|s| s.primary == primary) {
                Some(shard) => {
                    shard.slots.push((start, end));
                    for r in replicas {
                        if !shard.replicas.contains(&r) {
                            shard.replicas.push(r);
                        }
                    }
                }
                None => shards.push(Shard {
                    primary,
                    replicas,
                    slots: vec![(start, end)],
                }),
            }
        }
        for shard in &mut shards {
            shard.slots.sort_unstable();
            shard.replicas.sort();
        }
        shards.sort_by(|a, b| a.primary.cmp(&b.primary));
        Some(Self { shards })
    }

    /// The primaries' addresses, in the topology's order.
    pub fn primaries(&self) -> Vec<String> {
        self.shards.iter().map(|s| s.primary.clone()).collect()
    }

    /// The primary serving `slot`, as last read.
    pub fn owner(&self, slot: u16) -> Option<&Shard> {
        self.shards
            .iter()
            .find(|s| s.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
    }

    /// Whether every slot is served (a cluster that lost a primary without a replica to
    /// promote is not).
    pub fn covers_every_slot(&self) -> bool {
        self.shards.iter().map(Shard::slot_count).sum::<u32>() == 16384
    }
}

fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

/// `[host, port, id, ...]` as `host:port` (a node announced with an empty host is reached
/// at the address that answered; not a case of loopback or of the managed offerings).
fn node_addr(value: &Value) -> Option<String> {
    let Value::Array(parts) = value else {
        return None;
    };
    let host = match parts.first()? {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        _ => return None,
    };
    let port = int(parts.get(1)?)?;
    Some(format!("{host}:{port}"))
}

/// The slot of `key`: CRC16 (XMODEM) of its hash tag (the part between the first `{` and the
/// next `}`, when not empty) or of the whole key, modulo 16384, as Redis and redis-rs
/// compute it.
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|b| *b == b'{').and_then(|open| {
        let rest = &bytes[open + 1..];
        let close = rest.iter().position(|b| *b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(bytes)) % 16384
}

/// `host:port` split (the port after the last colon, so an IPv6 host keeps its colons).
pub fn split_addr(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_owned(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn cluster_slots_read_into_shards_with_their_ranges_and_replicas() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                node("127.0.0.1", 7001),
                node("127.0.0.1", 7004),
            ]),
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("127.0.0.1", 7000),
                node("127.0.0.1", 7003),
            ]),
            Value::Array(vec![
                Value::Int(10923),
                Value::Int(16383),
                node("127.0.0.1", 7002),
            ]),
            Value::Array(vec![
                Value::Int(100),
                Value::Int(100),
                node("127.0.0.1", 7002),
            ]),
        ]);
        let topology = Topology::parse(&reply).expect("parsed");
        assert_eq!(
            topology.primaries(),
            ["127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"]
        );
        assert_eq!(topology.shards[0].replicas, ["127.0.0.1:7003"]);
        assert_eq!(topology.shards[2].slots, [(100, 100), (10923, 16383)]);
        assert_eq!(
            topology.owner(10923).map(|s| s.primary.as_str()),
            Some("127.0.0.1:7002")
        );
        assert!(
            !topology.covers_every_slot(),
            "slot 100 is counted twice here"
        );
        // Redis's own answers (CLUSTER KEYSLOT).
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("{}x"), key_slot("{}x"));
        assert_ne!(key_slot("{}x"), key_slot("x"));
        assert_eq!(key_slot("{jobs}:leasehold:state"), key_slot("jobs"));
        assert_eq!(split_addr("[::1]:7000"), Some(("::1".to_owned(), 7000)));
        assert_eq!(split_addr("host:x"), None);
    }
}
