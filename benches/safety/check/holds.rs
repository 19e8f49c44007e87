//! Each lease's hold, derived from its ops: the lower and upper bounds of when it held the
//! lock, for the other checkers.

use std::collections::{BTreeMap, HashMap};

use super::Hold;
use crate::history::{Op, Outcome, Request};

/// Tolerance for Redis's millisecond expiry arithmetic against the harness's µs clock.
const CLOCK_SLACK_US: u64 = 3_000;

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
type Ends<'a> = HashMap<(&'a str, bool), Vec<usize>>;

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

fn lease_hold(ops: &[Op], lease: &str, idx: &[usize], forced: &Ends) -> Option<Hold> {
    // The first answer that granted it: a new lease (201) or a ticket's poll.
    let first = idx.iter().copied().find(|&i| {
        matches!(ops[i].outcome, Outcome::Granted { .. })
            && matches!(
                ops[i].request,
                Request::Acquire {
                    reentry_of: None,
                    ..
                } | Request::AcquirePermits { .. }
                    | Request::Poll { .. }
            )
    })?;
    let grant = &ops[first];
    let Outcome::Granted {
        fence,
        ttl_ms,
        kind,
        ..
    } = &grant.outcome
    else {
        return None;
    };
    // The grant followed every request of the ticket that was answered "queued".
    let grant_lb = idx
        .iter()
        .map(|&i| &ops[i])
        .filter(|o| matches!(o.outcome, Outcome::Queued { .. }))
        .map(|o| o.send)
        .fold(grant.send, u64::max);
    let start = idx
        .iter()
        .map(|&i| &ops[i])
        .filter(|o| {
            matches!(o.outcome, Outcome::Granted { .. })
                && matches!(
                    o.request,
                    Request::Poll { .. } | Request::AcquirePermits { .. }
                )
                || o.seq == grant.seq
        })
        .map(|o| o.recv)
        .min()
        .unwrap_or(grant.recv);
    let (permits, limit) = match grant.request {
        Request::AcquirePermits { permits, limit, .. } => (permits, limit),
        _ => (0, 0),
    };
    let semaphore = permits > 0;
    let rw = kind == "read" || kind == "write";
    let (mut reads, mut writes) = (u64::from(kind == "read"), u64::from(kind != "read"));
    let mut excl_end: Option<u64> = None;
    let (mut exp_at, mut exp_ttl) = (grant_lb, *ttl_ms);
    let mut ub_exp = grant.recv + ttl_ms * 1000;
    let mut end = u64::MAX;
    let mut ub_end = u64::MAX;
    // A retry with an Idempotency-Key gets the first answer again: it renews nothing, so the
    // TTL counts from the first request that carried the key.
    let mut first_send: HashMap<&str, u64> = HashMap::new();
    for &i in idx {
        if let Request::Acquire {
            idempotency: Some(key),
            ..
        }
        | Request::Release {
            idempotency: Some(key),
            ..
        } = &ops[i].request
        {
            let send = first_send.entry(key.as_str()).or_insert(ops[i].send);
            *send = (*send).min(ops[i].send);
        }
    }
    for &i in idx {
        let op = &ops[i];
        if op.seq == grant.seq || (op.send < grant.send && op.recv < grant_lb) {
            continue;
        }
        match (&op.request, &op.outcome) {
            (
                Request::Acquire {
                    idempotency: Some(key),
                    ..
                },
                Outcome::Granted { .. },
            ) if first_send
                .get(key.as_str())
                .is_some_and(|&first| first < op.send) =>
            {
                // A replay: the level and the TTL came with the first answer.
            }
            (Request::Acquire { kind: k, .. }, Outcome::Granted { ttl_ms, count, .. }) => {
                // A reentry: one more level, the TTL starts again.
                if rw {
                    if *k == "read" {
                        reads += 1;
                    } else {
                        writes += 1;
                    }
                    let total = reads + writes;
                    if *count < total && *k == "read" {
                        reads -= total - count;
                    } else if *count < total {
                        writes -= total - count;
                    }
                } else {
                    writes = *count;
                }
                exp_at = op.send;
                exp_ttl = *ttl_ms;
                ub_exp = op.recv + ttl_ms * 1000;
            }
            (Request::Heartbeat { .. }, Outcome::Renewed { ttl_ms, .. }) => {
                exp_at = op.send;
                exp_ttl = *ttl_ms;
                ub_exp = op.recv + ttl_ms * 1000;
            }
            // A multilease's heartbeat that finds another member gone gives this one back
            // before it answers 410: from the holder's point of view the hold ended when it
            // was sent. One whose answer is unknown may have done the same, or renewed.
            (Request::Heartbeat { multi: true, .. }, Outcome::Lost { .. }) => {
                end = end.min(op.send);
                ub_end = ub_end.min(op.recv);
            }
            (Request::Heartbeat { multi: true, .. }, Outcome::Failed { .. }) => {
                end = end.min(op.send);
                ub_exp = ub_exp.max(op.recv + exp_ttl * 1000);
            }
            // An unknown reentry or heartbeat may have extended the lease.
            (
                Request::Acquire { ttl_ms, .. } | Request::Heartbeat { ttl_ms, .. },
                Outcome::Failed { .. },
            ) => {
                ub_exp = ub_exp.max(op.recv + ttl_ms.unwrap_or(exp_ttl).max(exp_ttl) * 1000);
            }
            (
                Request::Release {
                    all,
                    mode,
                    idempotency,
                    ..
                },
                outcome,
            ) => {
                let certain = !outcome.uncertain();
                // A retry with an Idempotency-Key gets the first answer again and renews
                // nothing itself: the renewal a level left makes happened once, when one of the
                // key's requests ran, no earlier than the first was sent.
                let renewed_from = match idempotency.as_deref().and_then(|k| first_send.get(k)) {
                    Some(&first) if first < op.send => exp_at.max(first),
                    _ => op.send,
                };
                match outcome {
                    Outcome::Released { released, count } => {
                        if *released || *count == 0 {
                            end = end.min(op.send);
                            ub_end = ub_end.min(op.recv);
                        } else if rw {
                            // Levels remain: like Redisson's unlock, the release renews the
                            // lease for its TTL (the lock key follows its read holds' own
                            // timeouts, so only the upper bound moves).
                            ub_exp = ub_exp.max(op.recv + exp_ttl * 1000);
                            let which = if *all {
                                "both"
                            } else {
                                mode.unwrap_or(if writes > 0 { "write" } else { "read" })
                            };
                            match which {
                                "write" => writes = writes.saturating_sub(1),
                                "read" => reads = reads.saturating_sub(1),
                                _ => {}
                            }
                            if writes == 0 && excl_end.is_none() {
                                excl_end = Some(op.send);
                            }
                        } else if *all {
                            // The client asked for all: from its point of view the hold is over.
                            end = end.min(op.send);
                        } else {
                            // Levels remain: like Redisson's unlock, the release renews the
                            // lease (and the lock key) for the lease's TTL. `count` levels
                            // are left: a later release that fails may have ended the lease.
                            writes = *count;
                            exp_at = renewed_from;
                            ub_exp = ub_exp.max(op.recv + exp_ttl * 1000);
                        }
                    }
                    // Gone: from the client's point of view it stopped holding when it sent a
                    // release that would end the lease (the lease may have ended by this very
                    // release, answered 410 by a second run of it: a call re-sent after its
                    // reply was lost); with levels left, when the 410 came.
                    Outcome::Lost { .. } => {
                        end = end.min(if *all || reads + writes <= 1 || semaphore {
                            op.send
                        } else {
                            op.recv
                        });
                        ub_end = ub_end.min(op.recv);
                    }
                    // It may have released: a lower bound must assume so.
                    _ if !certain && (*all || reads + writes <= 1 || semaphore) => {
                        end = end.min(op.send);
                    }
                    // It may have released one level, which renews: an upper bound must
                    // assume so.
                    _ if !certain => ub_exp = ub_exp.max(op.recv + exp_ttl * 1000),
                    _ => {}
                }
                if *all && !rw {
                    end = end.min(op.send);
                }
            }
            // A poll of a ticket already granted must answer with the grant or a clear 409/410
            // and never release the lease: its 410 does not end the hold.
            (Request::Poll { .. }, Outcome::Lost { .. }) => {}
            (_, Outcome::Lost { .. }) => {
                end = end.min(op.recv);
                ub_end = ub_end.min(op.recv);
            }
            _ => {}
        }
    }
    // An admin force release of the name ends the hold when it is sent.
    if let Some(frs) = forced.get(&(grant.name.as_str(), semaphore)) {
        for &f in frs {
            let fr = &ops[f];
            // It may have removed this lease if it could run after the grant...
            if fr.recv >= grant_lb {
                end = end.min(fr.send.max(start));
            }
            // ...and certainly did if it was sent after the grant's answer came.
            if fr.send >= start && matches!(fr.outcome, Outcome::Forced { .. }) {
                ub_end = ub_end.min(fr.recv);
            }
        }
    }
    let expiry = (exp_at + exp_ttl * 1000).saturating_sub(CLOCK_SLACK_US);
    let end = end.min(expiry);
    let ub_end = ub_end.min(ub_exp + CLOCK_SLACK_US);
    let excl = if kind == "read" {
        None
    } else if rw {
        Some((start, excl_end.unwrap_or(end).min(end)))
    } else if semaphore {
        None
    } else {
        Some((start, end))
    };
    Some(Hold {
        lease: lease.to_owned(),
        name: grant.name.clone(),
        kind: kind.clone(),
        fence: Some(*fence),
        permits,
        limit,
        grant_lb,
        start,
        end,
        excl,
        ub_end,
        ops: idx.to_vec(),
    })
}
