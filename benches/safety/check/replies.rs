//! Every reply answers the request it came to: its body names the lock (or semaphore) asked
//! about, the lease or ticket asked about, and the client's own holder label; a new lease or
//! ticket id is never answered to two requests. A reply handed to the wrong caller (a Redis
//! client that pairs replies with the wrong commands, as redis-rs did with a sharded
//! subscription on the connection; redis-scale-out.md §0.1) breaks one of these.

use std::collections::HashMap;

use super::{Report, Violation};
use crate::history::{Op, Request};

pub(super) fn replies(ops: &[Op], report: &mut Report) {
    // New lease and ticket ids -> the op that was answered with it (and its Idempotency-Key:
    // a retry with the same key is answered the same id, as it must be).
    let mut issued: HashMap<&str, (usize, Option<&str>)> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        let Some(echo) = &op.echo else { continue };
        let mut wrong = Vec::new();
        let mut other = None;
        if let Some(lock) = &echo.lock
            && *lock != op.name
        {
            wrong.push(format!("lock {lock}"));
        }
        let asked = match &op.request {
            Request::Acquire {
                reentry_of: Some(lease),
                ..
            }
            | Request::Heartbeat { lease, .. }
            | Request::Release { lease, .. } => Some(lease),
            Request::Poll { ticket, .. } | Request::Leave { ticket } => Some(ticket),
            _ => None,
        };
        if let (Some(asked), Some(got)) = (asked, &echo.lease)
            && asked != got
        {
            wrong.push(format!("lease {got} (asked about {asked})"));
        }
        let own = format!("c{}", op.client);
        if let Some(holder) = &echo.holder
            && *holder != own
        {
            wrong.push(format!("holder {holder} (this is {own})"));
        }
        if matches!(
            op.request,
            Request::Acquire {
                reentry_of: None,
                ..
            } | Request::AcquirePermits { .. }
        ) && let Some(id) = &echo.lease
        {
            let key = match &op.request {
                Request::Acquire { idempotency, .. } => idempotency.as_deref(),
                _ => None,
            };
            match issued.get(id.as_str()) {
                Some(&(_, Some(first))) if key == Some(first) => {}
                Some(&(j, _)) => {
                    wrong.push(format!("lease {id}, already answered to #{}", ops[j].seq));
                    other = Some(j);
                }
                None => {
                    issued.insert(id, (i, key));
                }
            }
        }
        if !wrong.is_empty() {
            report.mismatched_replies += 1;
            let mut slice: Vec<Op> = other.map(|j| ops[j].clone()).into_iter().collect();
            slice.push(op.clone());
            report.violations.push(Violation {
                what: "a reply for another request",
                detail: format!("{}: the answer names {}", op.name, wrong.join(", ")),
                slice,
            });
        }
    }
}
