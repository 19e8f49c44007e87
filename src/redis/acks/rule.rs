//! How many replicas must acknowledge a grant, per shard, and what a grant says when a
//! shard has none to ask.
//!
//! The rule (`--min-replica-acks auto`, the default): a shard's grants wait for one replica
//! while the shard has one that a failover could promote, and for none while it has none.
//! With no replica that could be promoted, no failover can happen, so none can lose a grant:
//! refusing grants then only makes the names of that shard unavailable (a Cluster with one
//! replica per primary lost a third of its names after one failover, for good, until the
//! dead node came back). Such grants are answered, marked `degraded: no_replica`, and the
//! operators are told (the Redis page, a metric, an alert, `/readyz`).
//!
//! "Could be promoted" is the failover authority's own view, so that a replica cut off from
//! its primary, which the authority may still promote, keeps counting:
//! - Cluster: the replicas `CLUSTER SLOTS` lists for the primary (it leaves out those the
//!   cluster flagged `FAIL`, which takes a majority of primaries, and those never synced),
//!   and for a few seconds after a promotion the other replicas of the primary it replaced
//!   (`Cluster::promotable`);
//! - Sentinel: the replicas a majority of the Sentinels answered for and that some
//!   answering Sentinel does not flag down (`s_down`, `o_down`, `disconnected`); with no
//!   majority answering, the last census stands;
//! - every mode: a replica linked to the primary now (its `INFO replication`), which keeps
//!   a replica cut off without a reset listed until `repl-timeout` (60 s by default).
//!
//! An explicit `--min-replica-acks N` asks for N whatever the shard has: a shard with fewer
//! refuses grants (503 `not_replicated`) until replicas are back, as the operator chose.

use std::time::Duration;

/// How many replicas must acknowledge a grant before it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckRule {
    /// One while the shard has a replica that could be promoted, none while it has none.
    Auto,
    Exactly(u32),
}

impl std::str::FromStr for AckRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "auto" {
            return Ok(Self::Auto);
        }
        s.parse()
            .map(Self::Exactly)
            .map_err(|_| format!("{s:?} is neither \"auto\" nor a number of replicas"))
    }
}

impl std::fmt::Display for AckRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Exactly(n) => write!(f, "{n}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckSettings {
    pub rule: AckRule,
    /// How long `WAIT` may wait for them.
    pub timeout: Duration,
    /// Connections kept for calls that wait (each blocks its connection while it waits).
    pub connections: usize,
}

/// Why a grant or heartbeat stands on its primary alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Degraded {
    /// The shard has no replica a failover could promote (`auto`): nothing can fail it over,
    /// and a crash of its primary without persistence loses it.
    NoReplica,
    /// A heartbeat the replicas did not acknowledge in time: extended on the primary, where
    /// the lease stands; a failover now keeps it only until the deadline of its last answer
    /// without this mark.
    NotReplicated,
}

impl Degraded {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoReplica => "no_replica",
            Self::NotReplicated => "not_replicated",
        }
    }
}

/// What one shard has that could acknowledge a grant (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShardReplicas {
    /// Replicas linked to the primary now (its `INFO replication`).
    pub linked: u32,
    /// Replicas the failover authority could promote; `None` in standalone mode (no
    /// authority) or before its first census.
    pub promotable: Option<u32>,
}

impl ShardReplicas {
    /// Replicas a grant there can ask for.
    pub fn available(self) -> u32 {
        self.linked.max(self.promotable.unwrap_or(0))
    }
}

/// What a call must wait for on one shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requirement {
    /// Replicas that must acknowledge (0: no `WAIT`).
    pub required: u32,
    /// Set when `auto` found no replica to ask on a shard of a mode that fails over.
    pub no_replica: bool,
}

/// The requirement on a shard with `shard`'s replicas. `fails_over`: the mode has a
/// failover authority (Sentinel, Cluster); a standalone Redis without replicas is not
/// degraded, just not replicated, as it always was.
pub fn requirement(rule: AckRule, shard: ShardReplicas, fails_over: bool) -> Requirement {
    match rule {
        AckRule::Exactly(required) => Requirement {
            required,
            no_replica: false,
        },
        AckRule::Auto => {
            let required = shard.available().min(1);
            Requirement {
                required,
                no_replica: required == 0 && fails_over,
            }
        }
    }
}

/// What a call's `WAIT` answered (or that it had none to ask).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acked {
    pub acked: u32,
    pub required: u32,
    /// `auto` asked for none: the shard has no replica (see [`Degraded::NoReplica`]).
    pub no_replica: bool,
}

impl Acked {
    /// Fewer replicas have it than required: a grant must not stand.
    pub fn short(self) -> bool {
        self.acked < self.required
    }

    /// What a grant or heartbeat answered with these acknowledgements stands on alone, if
    /// anything (a short grant is refused, never answered).
    pub fn degraded(self) -> Option<Degraded> {
        if self.no_replica {
            Some(Degraded::NoReplica)
        } else if self.short() {
            Some(Degraded::NotReplicated)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(linked: u32, promotable: Option<u32>) -> ShardReplicas {
        ShardReplicas { linked, promotable }
    }

    #[test]
    fn rules_parse_from_auto_or_a_count() {
        assert_eq!("auto".parse(), Ok(AckRule::Auto));
        assert_eq!("0".parse(), Ok(AckRule::Exactly(0)));
        assert_eq!("2".parse(), Ok(AckRule::Exactly(2)));
        assert!("-1".parse::<AckRule>().is_err());
        assert!("one".parse::<AckRule>().is_err());
        assert_eq!(AckRule::Auto.to_string(), "auto");
        assert_eq!(AckRule::Exactly(2).to_string(), "2");
    }

    #[test]
    fn auto_asks_one_replica_while_the_shard_has_one_that_could_be_promoted() {
        let asks = |s, fails_over| requirement(AckRule::Auto, s, fails_over);
        // Linked now, or listed by the authority though cut off: one.
        for s in [
            shard(1, None),
            shard(0, Some(1)),
            shard(2, Some(2)),
            shard(1, Some(0)),
        ] {
            assert_eq!(
                asks(s, true),
                Requirement {
                    required: 1,
                    no_replica: false
                },
                "{s:?}"
            );
        }
        // None at all: none, and said loudly where a failover was the point.
        assert_eq!(
            asks(shard(0, Some(0)), true),
            Requirement {
                required: 0,
                no_replica: true
            }
        );
        assert_eq!(
            asks(shard(0, None), false),
            Requirement {
                required: 0,
                no_replica: false
            }
        );
    }

    #[test]
    fn an_explicit_count_is_asked_whatever_the_shard_has() {
        for s in [shard(0, Some(0)), shard(3, Some(3))] {
            assert_eq!(
                requirement(AckRule::Exactly(2), s, true),
                Requirement {
                    required: 2,
                    no_replica: false
                }
            );
        }
    }

    #[test]
    fn a_short_heartbeat_or_a_replica_less_grant_is_degraded_and_says_why() {
        let acked = |acked, required, no_replica| Acked {
            acked,
            required,
            no_replica,
        };
        assert!(acked(0, 1, false).short());
        assert!(!acked(1, 1, false).short());
        assert!(!acked(2, 1, false).short());
        assert!(!acked(0, 0, true).short());
        assert_eq!(acked(0, 1, false).degraded(), Some(Degraded::NotReplicated));
        assert_eq!(acked(0, 0, true).degraded(), Some(Degraded::NoReplica));
        assert_eq!(acked(1, 1, false).degraded(), None);
    }
}
