//! Domain views in the wire format (`crate::wire`): what every `/v1` answer carries.

use std::time::Duration;

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::leases::{QuorumAck, Renewed};
use crate::locks::{
    self, ForcedRelease, Grant, HeldAs, HolderView, LeaseKind, LeaseView, LiveEntry, LockError,
    LockName, LockView, Metadata, PermitHolderView, QueuedView, Release, SemaphoreView, Ticket,
    Timestamp, WaiterView, wall_ms,
};
use crate::problem::Problem;
use crate::wire::{
    self, ForceReleaseBody, GrantBody, HolderBody, LeaseBody, LiveBody, LockBody, PermitHolderBody,
    QueuedBody, ReleaseBody, RenewalBody, SemaphoreBody, TicketBody, WaiterBody,
};

pub(super) fn lease_id(id: locks::LeaseId) -> wire::LeaseId {
    wire::LeaseId(id.into())
}

fn metadata(m: Option<Metadata>) -> Option<serde_json::Value> {
    m.map(Metadata::into_value)
}

/// A member lease's metadata apart: the multilease it belongs to, and the client's own.
fn membership(m: Option<Metadata>) -> (Option<wire::MembershipBody>, Option<serde_json::Value>) {
    let Some(m) = m else {
        return (None, None);
    };
    let (membership, own) = m.split_membership();
    (
        membership.map(|m| wire::MembershipBody {
            lease_id: lease_id(m.lease_id),
            locks: m.locks,
            hidden_locks: m.hidden_locks,
        }),
        metadata(own),
    )
}

/// The header that reports the server-side wait an acquire was allowed, in ms.
pub(super) const WAIT_HEADER: &str = "leasehold-wait-ms";

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A refused acquire, with the wait it was allowed (body member and header): a client that
/// asked for more than `--max-wait-ms` learns that it waited less.
pub(super) fn refused_after(e: LockError, wait: Duration) -> Problem {
    Problem::from(e).waited(wait)
}

impl Problem {
    /// This problem, answering an acquire that was allowed to wait `wait`.
    pub(super) fn waited(self, wait: Duration) -> Self {
        let ms = millis(wait);
        self.with("wait_ms", ms).header(WAIT_HEADER, ms)
    }
}

/// 201 with `Location` for a new lease, 200 for one more level of an existing one; an answer
/// given before says so (`Idempotent-Replayed`). `wait`: the wait an acquire was allowed.
pub(super) fn grant_response(
    location: &str,
    name: &LockName,
    grant: Grant,
    wait: Option<Duration>,
    quorum: Option<QuorumAck>,
) -> Response {
    let status = if grant.new_lease {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let replayed = grant.replayed;
    let body = GrantBody {
        lease_id: lease_id(grant.lease_id),
        token: grant.token.map(|t| t.expose().to_owned()),
        lock: name.to_string(),
        permits: (grant.kind == LeaseKind::Semaphore).then_some(grant.reentry_count),
        kind: grant.kind.as_str().to_owned(),
        holder: grant.holder,
        fencing_token: grant.fencing_token.0,
        reentry_count: grant.reentry_count,
        ttl_ms: grant.ttl_ms,
        expires_at: grant.expires_at.rfc3339(),
        wait_ms: wait.map(millis),
        replicas_acked: grant.replicas_acked,
        degraded: grant.degraded.map(degraded),
        nodes_acked: quorum.map(|q| q.nodes_acked),
        validity_ms: quorum.map(|q| millis(q.validity)),
    };
    let mut response = (status, Json(body)).into_response();
    let headers = response.headers_mut();
    insert_wait(headers, wait);
    if let Ok(location) = HeaderValue::from_str(location) {
        headers.insert(header::LOCATION, location);
    }
    if replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    response
}

fn insert_wait(headers: &mut HeaderMap, wait: Option<Duration>) {
    if let Some(wait) = wait {
        headers.insert(WAIT_HEADER, HeaderValue::from(millis(wait)));
    }
}

/// 202 with the ticket's `Location` and `Retry-After: 0` (poll it now, with a wait).
pub(super) fn ticket_response(
    name: &LockName,
    ticket: Ticket,
    ticket_ms: u64,
    (wait, estimate): (Duration, Option<Duration>),
) -> Response {
    let location = format!("/v1/locks/{name}/tickets/{}", ticket.lease_id);
    let behind = ticket.behind.as_ref();
    let body = TicketBody {
        ticket_id: lease_id(ticket.lease_id),
        token: ticket.token.map(|t| t.expose().to_owned()),
        lock: name.to_string(),
        position: ticket.position,
        poll_by: ticket.poll_by.rfc3339(),
        poll_timeout_ms: ticket_ms,
        wait_ms: Some(millis(wait)),
        held_by: behind.and_then(|b| b.holder.clone()),
        held_for_ms: behind.map(|b| millis(b.held_for)),
        estimated_wait_ms: estimate.map(millis),
    };
    let replayed = ticket.replayed;
    let mut response = (StatusCode::ACCEPTED, Json(body)).into_response();
    let headers = response.headers_mut();
    insert_wait(headers, Some(wait));
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("0"));
    if replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    if let Ok(location) = HeaderValue::from_str(&location) {
        headers.insert(header::LOCATION, location);
    }
    response
}

/// The domain's mark as the wire says it.
pub(super) fn degraded(d: crate::locks::Degraded) -> leasehold_wire::Degraded {
    match d {
        crate::locks::Degraded::NoReplica => leasehold_wire::Degraded::NoReplica,
        crate::locks::Degraded::NotReplicated => leasehold_wire::Degraded::NotReplicated,
    }
}

pub(super) fn renewal(name: &LockName, renewed: Renewed) -> RenewalBody {
    let Renewed { renewal: r, quorum } = renewed;
    RenewalBody {
        lease_id: lease_id(r.lease_id),
        lock: name.to_string(),
        fencing_token: r.fencing_token.0,
        reentry_count: r.reentry_count,
        ttl_ms: r.ttl_ms,
        expires_at: r.expires_at.rfc3339(),
        replicas_acked: r.replicas_acked,
        degraded: r.degraded.map(degraded),
        nodes_acked: quorum.map(|q| q.nodes_acked),
        validity_ms: quorum.map(|q| millis(q.validity)),
        revocation: r.revocation.as_ref().map(revocation_body),
    }
}

pub(super) fn release(name: &LockName, r: Release) -> ReleaseBody {
    ReleaseBody {
        lease_id: lease_id(r.lease_id),
        lock: name.to_string(),
        released: r.released,
        reentry_count: r.reentry_count,
    }
}

pub(super) fn lease(view: LeaseView) -> LeaseBody {
    let (multilease, own) = membership(view.metadata);
    LeaseBody {
        multilease,
        lease_id: lease_id(view.lease_id),
        lock: view.lock.to_string(),
        state: view.state,
        kind: view.kind.as_str().to_owned(),
        read_count: view.read_count,
        write_count: view.write_count,
        position: view.position,
        permits: view.permits,
        holder: view.holder,
        metadata: own,
        fencing_token: view.fencing_token.0,
        reentry_count: view.reentry_count,
        ttl_ms: view.ttl_ms,
        remaining_ms: view.remaining_ms,
        acquired_at: view.acquired_at.rfc3339(),
        expires_at: view.expires_at.rfc3339(),
        ended_at: view.ended_at.map(|t| t.rfc3339()),
    }
}

pub(super) fn holder(h: HolderView) -> HolderBody {
    let (multilease, own) = membership(h.metadata);
    HolderBody {
        multilease,
        lease_id: h.lease_id.map(lease_id),
        holder_id: h.holder_id,
        holder: h.holder,
        metadata: own,
        reentry_count: h.reentry_count,
        read_count: h.read_count,
        write_count: h.write_count,
        kind: h.kind.map(|k| k.as_str().to_owned()),
        fencing_token: h.fencing_token.map(|f| f.0),
        acquired_at: h.acquired_at.map(|t| t.rfc3339()),
    }
}

fn queued(q: QueuedView) -> QueuedBody {
    QueuedBody {
        position: q.position,
        ticket_id: q.lease_id.map(lease_id),
        holder_id: q.holder_id,
        holder: q.holder,
        waiting_since: q.queued_at.map(|t| t.rfc3339()),
        deadline: q.deadline.map(|t| t.rfc3339()),
    }
}

pub(super) fn lock(view: LockView) -> LockBody {
    let since = view.held_since();
    LockBody {
        lock: view.lock.to_string(),
        held: !view.holders.is_empty(),
        kind: view.kind.map(|k| k.as_str().to_owned()),
        mode: view.mode,
        holders: view.holders.into_iter().map(holder).collect(),
        queue: view.queue.into_iter().map(queued).collect(),
        queue_length: view.queue_length,
        fencing_counter: view.fencing_counter.0,
        remaining_ms: view.remaining_ms,
        expires_at: view.expires_at.map(|t| t.rfc3339()),
        held_since: since.map(Timestamp::rfc3339),
        held_for_ms: locks::held_for(since, wall_ms()),
        waiting: Vec::new(),
        waiting_count: 0,
        lock_delay_ms: view.lock_delay_ms,
        delayed_until: view.delayed_until.map(Timestamp::rfc3339),
    }
}

/// A request waiting for a lock or permits.
pub(super) fn waiter(w: WaiterView) -> WaiterBody {
    WaiterBody {
        waiting_since: w.since().rfc3339(),
        lease_id: w.lease_id,
        holder: w.holder,
        kind: w.kind,
        permits: w.permits,
        instance: w.instance,
    }
}

fn permit_holder(h: PermitHolderView) -> PermitHolderBody {
    PermitHolderBody {
        lease_id: h.lease_id.map(lease_id),
        holder: h.holder,
        metadata: metadata(h.metadata),
        permits: h.permits,
        fencing_token: h.fencing_token.map(|f| f.0),
        acquired_at: h.acquired_at.map(|t| t.rfc3339()),
        expires_at: h.expires_at.map(|t| t.rfc3339()),
    }
}

pub(super) fn semaphore(view: SemaphoreView) -> SemaphoreBody {
    SemaphoreBody {
        semaphore: view.name.to_string(),
        limit: view.limit,
        used: view.used,
        available: u64::from(view.limit).saturating_sub(view.used),
        fencing_counter: view.fencing_counter.0,
        holders: view.holders.into_iter().map(permit_holder).collect(),
        waiting: Vec::new(),
        waiting_count: 0,
    }
}

pub(super) fn forced(forced: ForcedRelease) -> ForceReleaseBody {
    ForceReleaseBody {
        lock: forced.lock.to_string(),
        released: !forced.removed.is_empty() || forced.delay_lifted,
        removed: forced.removed.into_iter().map(holder).collect(),
        delay_lifted: forced.delay_lifted,
    }
}

/// A live lock or semaphore in brief, for listings.
pub(super) fn live(entry: LiveEntry) -> LiveBody {
    let name = entry.name().to_string();
    let held_for_ms = locks::held_for(entry.held_since(), wall_ms());
    match entry {
        LiveEntry::Lock(lock) => LiveBody {
            name,
            kind: lock.kind.map(|k| k.as_str().to_owned()),
            holders: u64::try_from(lock.holders.len()).unwrap_or(u64::MAX),
            holder: lock.holders.first().map(|h| {
                h.holder.clone().unwrap_or_else(|| match h.lease_id {
                    Some(id) => id.to_string(),
                    None => h.holder_id.clone(),
                })
            }),
            queue_length: lock.queue_length,
            used: None,
            limit: None,
            remaining_ms: lock.remaining_ms,
            held_for_ms,
            waiting: 0,
        },
        LiveEntry::Semaphore(sem) => {
            // This instance's clock: the inspection carries no Redis time for semaphores.
            let now = wall_ms();
            LiveBody {
                name,
                kind: Some(HeldAs::Semaphore.as_str().to_owned()),
                holders: u64::try_from(sem.holders.len()).unwrap_or(u64::MAX),
                holder: sem.holders.first().map(|h| {
                    h.holder.clone().unwrap_or_else(|| match h.lease_id {
                        Some(id) => id.to_string(),
                        None => "a Redisson client".to_owned(),
                    })
                }),
                queue_length: 0,
                used: Some(sem.used),
                limit: Some(sem.limit),
                remaining_ms: sem
                    .holders
                    .iter()
                    .filter_map(|h| h.expires_at)
                    .max()
                    .map(|t| t.0.saturating_sub(now)),
                held_for_ms,
                waiting: 0,
            }
        }
    }
}

/// A revocation as the API shows it.
pub(super) fn revocation_body(revocation: &crate::locks::Revocation) -> wire::RevocationBody {
    wire::RevocationBody {
        reason: revocation.reason.clone(),
        requested_by: revocation.by.clone(),
        requested_at: revocation.requested_at.rfc3339(),
        deadline: revocation.deadline.rfc3339(),
    }
}
