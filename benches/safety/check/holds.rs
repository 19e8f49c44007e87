//! Each lease's hold, derived from its ops: the lower and upper bounds of when it held the
//! lock, for the other checkers.

use std::collections::{BTreeMap, HashMap};

use super::Hold;
use super::lease_hold::lease_hold;
use crate::history::{Op, Outcome, Request};

/// Tolerance for Redis's millisecond expiry arithmetic against the harness's µs clock.
pub(super) const CLOCK_SLACK_US: u64 = 3_000;

/// Builds every lease's hold from its ops.
pub(super) fn derive_holds(ops: &[Op]) -> Vec<Hold> {
    let mut by_lease: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        if matches!(op.request, Request::ForceRelease { .. }) {
            continue;
        }
        if let Some(lease) = op.lease()
            && !lease.is_empty()
        {
            by_lease.entry(lease.to_owned()).or_default().push(i);
        }
    }
    let mut forced: Ends = HashMap::new();
    let mut revoked: Ends = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        let (ends, semaphore) = match op.request {
            Request::ForceRelease { semaphore } => (&mut forced, semaphore),
            Request::Revoke { semaphore, .. } => (&mut revoked, semaphore),
            _ => continue,
        };
        ends.entry((op.name.as_str(), semaphore))
            .or_default()
            .push(i);
    }
    let mut holds = Vec::new();
    for (lease, mut idx) in by_lease {
        idx.sort_by_key(|&i| (ops[i].send, ops[i].seq));
        let is_redisson = idx
            .iter()
            .any(|&i| matches!(ops[i].request, Request::RedissonLock { .. }));
        let hold = if is_redisson {
            redisson_hold(ops, &lease, &idx, &forced)
        } else {
            lease_hold(ops, &lease, &idx, &forced)
        };
        if let Some(mut h) = hold {
            revocation_cut(ops, &mut h, &revoked, is_redisson);
            holds.push(h);
        }
    }
    holds
}

/// Admin requests that end holds, by (name, semaphore): force releases, revocations.
pub(super) type Ends<'a> = HashMap<(&'a str, bool), Vec<usize>>;

/// An admin revocation evicts the leases it asked at its deadline, which the server set at
/// its own time of the request plus the grace: a hold it may have asked ends, by the lower
/// bound, no earlier than its grace after it was sent. (The upper bound stays: an eviction
/// waits for Redis, and a release within the grace is seen by itself.)
fn revocation_cut(ops: &[Op], h: &mut Hold, revoked: &Ends, redisson: bool) {
    let semaphore = h.permits > 0;
    for &r in revoked
        .get(&(h.name.as_str(), semaphore))
        .into_iter()
        .flatten()
    {
        let op = &ops[r];
        let Request::Revoke { grace_ms, .. } = op.request else {
            continue;
        };
        let asked = match &op.outcome {
            // (A Redisson-layout holder's lease id is not its holder name: any lease asked.)
            Outcome::Revoked { leases } => {
                leases.contains(&h.lease) || (redisson && !leases.is_empty())
            }
            other => other.uncertain(),
        };
        if asked && op.recv >= h.grant_lb {
            let deadline = (op.send + grace_ms * 1000).saturating_sub(CLOCK_SLACK_US);
            h.end = h.end.min(deadline.max(h.start));
            if let Some((_, e)) = &mut h.excl {
                *e = (*e).min(h.end);
            }
        }
    }
}

fn redisson_hold(ops: &[Op], holder: &str, idx: &[usize], forced: &Ends) -> Option<Hold> {
    let lock = idx
        .iter()
        .copied()
        .find(|&i| ops[i].outcome == Outcome::RedissonLocked)?;
    let (mut exp_at, mut ttl) = match ops[lock].request {
        Request::RedissonLock { ttl_ms, .. } => (ops[lock].send, ttl_ms),
        _ => return None,
    };
    let mut end = u64::MAX;
    let mut ub_end = ops[lock].recv + ttl * 1000;
    for &i in idx {
        let op = &ops[i];
        match (&op.request, &op.outcome) {
            (Request::RedissonRenew { ttl_ms, .. }, Outcome::RedissonDone { ok: true }) => {
                exp_at = op.send;
                ttl = *ttl_ms;
                ub_end = op.recv + ttl_ms * 1000;
            }
            // The client learns it lost the lock.
            (Request::RedissonRenew { .. }, Outcome::RedissonDone { ok: false }) => {
                end = end.min(op.recv);
                ub_end = ub_end.min(op.recv);
            }
            (Request::RedissonUnlock { .. }, _) => {
                end = end.min(op.send);
                ub_end = ub_end.min(op.recv);
            }
            _ => {}
        }
    }
    let start = ops[lock].recv;
    for &f in forced
        .get(&(ops[lock].name.as_str(), false))
        .into_iter()
        .flatten()
    {
        let fr = &ops[f];
        if fr.recv >= ops[lock].send {
            end = end.min(fr.send.max(start));
        }
    }
    let end = end.min((exp_at + ttl * 1000).saturating_sub(CLOCK_SLACK_US));
    Some(Hold {
        lease: holder.to_owned(),
        name: ops[lock].name.clone(),
        kind: "redisson".into(),
        fence: None,
        permits: 0,
        limit: 0,
        grant_lb: ops[lock].send,
        start,
        end,
        excl: Some((start, end)),
        ub_end,
        ops: idx.to_vec(),
    })
}
