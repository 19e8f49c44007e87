//! How full Redis's memory is (`INFO memory`): a full Redis (`maxmemory` reached, with
//! `noeviction`) refuses every new lease while releases and heartbeats still run, so operators
//! are told before it gets there (`/readyz`, the metrics, the alert rules).

use super::Redis;

/// From this share of `maxmemory` on, memory is reported short.
pub const SHORT_AT: f64 = 0.8;

/// Redis's memory as `INFO memory` tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisMemory {
    pub used_bytes: u64,
    /// `maxmemory`; 0 when Redis has no limit.
    pub max_bytes: u64,
}

/// How close Redis is to refusing new leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum MemoryState {
    Ok,
    /// At or above [`SHORT_AT`] of `maxmemory`.
    Short,
    /// At `maxmemory`: new leases are refused (503 `redis_full`).
    Full,
}

impl MemoryState {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl RedisMemory {
    /// Used over max (0 without a limit).
    pub fn used_ratio(&self) -> f64 {
        if self.max_bytes == 0 {
            return 0.0;
        }
        self.used_bytes as f64 / self.max_bytes as f64
    }

    pub fn state(&self) -> MemoryState {
        match self.used_ratio() {
            r if self.max_bytes > 0 && r >= 1.0 => MemoryState::Full,
            r if r >= SHORT_AT => MemoryState::Short,
            _ => MemoryState::Ok,
        }
    }

    fn parse(info: &str) -> Option<Self> {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        Some(Self {
            used_bytes: field("used_memory")?,
            max_bytes: field("maxmemory").unwrap_or(0),
        })
    }
}

impl Redis {
    /// Redis's memory now (in a cluster, the fullest primary's: a lock that hashes to it is
    /// refused when it is full, whatever the others have left).
    pub async fn memory(&self) -> ::redis::RedisResult<RedisMemory> {
        let mut fullest: Option<RedisMemory> = None;
        for node in self.nodes() {
            let mut cmd = ::redis::cmd("INFO");
            cmd.arg("memory");
            let info: String = self.on_node(node.as_deref(), cmd).await?;
            let read = RedisMemory::parse(&info).ok_or_else(|| {
                ::redis::RedisError::from((
                    ::redis::ErrorKind::Parse,
                    "INFO memory without used_memory",
                ))
            })?;
            if fullest.is_none_or(|f| read.fuller_than(f)) {
                fullest = Some(read);
            }
        }
        fullest.ok_or_else(|| {
            ::redis::RedisError::from((::redis::ErrorKind::Io, "no Redis primary known yet"))
        })
    }
}

impl RedisMemory {
    /// Whether this reading is nearer its limit than `other` (by share of the limit; with
    /// no limit, by bytes used).
    fn fuller_than(self, other: Self) -> bool {
        let share = |m: Self| {
            if m.max_bytes == 0 {
                0.0
            } else {
                m.used_bytes as f64 / m.max_bytes as f64
            }
        };
        (share(self), self.used_bytes) > (share(other), other.used_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_short_from_eighty_percent_and_full_at_the_limit() {
        let at = |used, max| RedisMemory {
            used_bytes: used,
            max_bytes: max,
        };
        assert_eq!(at(10, 0).state(), MemoryState::Ok, "no limit");
        assert_eq!(at(79, 100).state(), MemoryState::Ok);
        assert_eq!(at(80, 100).state(), MemoryState::Short);
        assert_eq!(at(100, 100).state(), MemoryState::Full);
        let info = "# Memory\r\nused_memory:1234\r\nused_memory_human:1.2K\r\nmaxmemory:0\r\n";
        assert_eq!(RedisMemory::parse(info), Some(at(1234, 0)));
    }
}
