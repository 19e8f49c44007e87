//! Leases: acquiring one (a lock, or a semaphore's permits), a fair lock's ticket polled and
//! left, heartbeats, releases, and one lease's state.

use std::time::{Duration, Instant};

use reqwest::{RequestBuilder, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use crate::connection::millis;
use crate::error::excerpt;
use crate::{
    AcquireBody, Client, ClientError, GrantBody, LeaseBody, LeaseId, LeaseToken, LockKind,
    MultiAcquireBody, MultiGrantBody, MultiLockBody, MultiMemberBody, MultiReleaseBody,
    MultiRenewalBody, PermitBody, ReleaseBody, RenewalBody, Reply, Resource, TicketBody,
};

/// What an acquire asks for; `None` leaves the choice to the server.
#[derive(Debug, Clone, Default)]
pub struct AcquireOptions {
    pub ttl: Option<Duration>,
    pub holder: Option<String>,
    /// A small JSON object kept with the lease.
    pub metadata: Option<Value>,
    pub kind: Option<LockKind>,
    /// How long the server should wait while someone else holds the lock.
    pub wait: Duration,
    /// The lease's lock-delay: should it end other than by a release, the name refuses new
    /// leases for that long (see [`AcquireBody::lock_delay_ms`]).
    pub lock_delay: Option<Duration>,
}

/// What a semaphore acquire asks for.
#[derive(Debug, Clone, Default)]
pub struct PermitOptions {
    /// The semaphore's size; every party must name the same.
    pub limit: u32,
    /// Permits to take (the server's default is 1).
    pub permits: Option<u32>,
    pub ttl: Option<Duration>,
    pub holder: Option<String>,
    /// A small JSON object kept with the lease.
    pub metadata: Option<Value>,
    pub wait: Duration,
}

/// A new lease (201): the grant, and the token only this answer carries.
#[derive(Debug, Clone)]
pub struct Lease {
    pub grant: GrantBody,
    pub token: LeaseToken,
    /// A multilease's members (each lock with its own fencing token); empty for a lease of
    /// one lock or semaphore.
    pub members: Vec<MultiMemberBody>,
    /// Where it lives (its routes), as the call that granted it says.
    pub resource: Resource,
    /// When the request that granted it was sent: its TTL counts from no earlier, so it
    /// surely holds until this plus the TTL ([`Client::keep`] renews from here).
    pub sent_at: Instant,
}

/// A fair lock's place in line (202): poll it with [`Client::poll`] until it is granted.
#[derive(Debug, Clone)]
pub struct Ticket {
    pub ticket: TicketBody,
    /// Proves the ticket and, once granted, its lease.
    pub token: LeaseToken,
}

/// An acquire's success: a lease, or (fair locks) a place in line.
#[derive(Debug, Clone)]
pub enum Acquired {
    Lease(Lease),
    Queued(Ticket),
}

impl Client {
    /// `POST /v1/locks/{lock}/leases?wait_ms=N`: a new lease, or a ticket (fair locks still
    /// queued when the wait ended). The server cuts the wait to its `--max-wait-ms`. Dropping
    /// the returned future closes the connection, which makes the server drop the waiter (and
    /// roll back a grant it could not deliver).
    pub async fn acquire(
        &self,
        lock: &str,
        options: &AcquireOptions,
    ) -> Result<Reply<Acquired>, ClientError> {
        let mut url = self.endpoint(&["v1", "locks", lock, "leases"])?;
        url.query_pairs_mut()
            .append_pair("wait_ms", &millis(options.wait).to_string());
        let body = AcquireBody {
            ttl_ms: options.ttl.map(millis),
            holder: options.holder.clone(),
            metadata: options.metadata.clone(),
            kind: options.kind,
            lock_delay_ms: options.lock_delay.map(millis),
            ..AcquireBody::default()
        };
        let request = self
            .request(reqwest::Method::POST, url)
            .json(&body)
            .timeout(self.timeout.saturating_add(options.wait));
        Self::acquired(request, Resource::Lock, None).await
    }

    /// `POST /v1/multileases?wait_ms=N`: every lock of `locks` (each with its kind, or the
    /// server's default) as one lease, all or nothing; `options.kind` is ignored. The lease's
    /// `grant` names the locks joined by commas, with the highest of their fencing tokens;
    /// `members` has each lock's own.
    pub async fn acquire_multi(
        &self,
        locks: &[(String, Option<LockKind>)],
        options: &AcquireOptions,
    ) -> Result<Reply<Lease>, ClientError> {
        let mut url = self.endpoint(&["v1", "multileases"])?;
        url.query_pairs_mut()
            .append_pair("wait_ms", &millis(options.wait).to_string());
        let body = MultiAcquireBody {
            locks: locks
                .iter()
                .map(|(name, kind)| MultiLockBody {
                    name: name.clone(),
                    kind: *kind,
                })
                .collect(),
            ttl_ms: options.ttl.map(millis),
            holder: options.holder.clone(),
            metadata: options.metadata.clone(),
            lock_delay_ms: options.lock_delay.map(millis),
        };
        let request = self
            .request(reqwest::Method::POST, url)
            .json(&body)
            .timeout(self.timeout.saturating_add(options.wait));
        let sent_at = Instant::now();
        let reply: Reply<MultiGrantBody> = Self::send(request).await?;
        let multi = reply.body;
        let token = multi.token.parse().map_err(|_| ClientError::Unexpected {
            status: StatusCode::CREATED,
            excerpt: "an answer without the multilease's token".to_owned(),
        })?;
        let names: Vec<&str> = multi.members.iter().map(|m| m.lock.as_str()).collect();
        let grant = GrantBody {
            lease_id: multi.lease_id,
            token: None,
            lock: names.join(","),
            kind: "multilease".to_owned(),
            holder: multi.holder,
            fencing_token: multi
                .members
                .iter()
                .map(|m| m.fencing_token)
                .max()
                .unwrap_or(0),
            reentry_count: 1,
            permits: None,
            ttl_ms: multi.ttl_ms,
            expires_at: multi.expires_at,
            wait_ms: multi.wait_ms,
            // The weakest member's: what the whole multilease can count on.
            replicas_acked: multi.members.iter().filter_map(|m| m.replicas_acked).min(),
            degraded: multi.members.iter().find_map(|m| m.degraded),
            nodes_acked: None,
            validity_ms: None,
        };
        Ok(Reply {
            body: Lease {
                grant,
                token,
                members: multi.members,
                resource: Resource::Multilease,
                sent_at,
            },
            json: reply.json,
        })
    }

    /// `POST /v1/locks/{lock}/tickets/{id}?wait_ms=N`: the fair lock's lease once it is the
    /// ticket's turn (or again, if it was granted before), else the ticket still in line.
    pub async fn poll(
        &self,
        lock: &str,
        ticket: LeaseId,
        token: &LeaseToken,
        wait: Duration,
    ) -> Result<Reply<Acquired>, ClientError> {
        let id = ticket.to_string();
        let mut url = self.endpoint(&["v1", "locks", lock, "tickets", &id])?;
        url.query_pairs_mut()
            .append_pair("wait_ms", &millis(wait).to_string());
        let request = self
            .request(reqwest::Method::POST, url)
            .bearer_auth(token.expose())
            .timeout(self.timeout.saturating_add(wait));
        Self::acquired(request, Resource::Lock, Some(token)).await
    }

    /// `DELETE /v1/locks/{lock}/tickets/{id}`: gives up the ticket's place.
    pub async fn leave(
        &self,
        lock: &str,
        ticket: LeaseId,
        token: &LeaseToken,
    ) -> Result<(), ClientError> {
        let id = ticket.to_string();
        let url = self.endpoint(&["v1", "locks", lock, "tickets", &id])?;
        let request = self
            .request(reqwest::Method::DELETE, url)
            .bearer_auth(token.expose())
            .timeout(self.timeout);
        Self::send::<Value>(request).await.map(|_| ())
    }

    /// `POST /v1/semaphores/{name}/leases?wait_ms=N`: permits for a new lease.
    pub async fn acquire_permits(
        &self,
        name: &str,
        options: &PermitOptions,
    ) -> Result<Reply<Lease>, ClientError> {
        let mut url = self.endpoint(&["v1", "semaphores", name, "leases"])?;
        url.query_pairs_mut()
            .append_pair("wait_ms", &millis(options.wait).to_string());
        let body = PermitBody {
            limit: Some(options.limit),
            permits: options.permits,
            ttl_ms: options.ttl.map(millis),
            holder: options.holder.clone(),
            metadata: options.metadata.clone(),
        };
        let request = self
            .request(reqwest::Method::POST, url)
            .json(&body)
            .timeout(self.timeout.saturating_add(options.wait));
        match Self::acquired(request, Resource::Semaphore, None).await? {
            Reply {
                body: Acquired::Lease(lease),
                json,
            } => Ok(Reply { body: lease, json }),
            Reply { json, .. } => Err(ClientError::Unexpected {
                status: StatusCode::ACCEPTED,
                excerpt: excerpt(json.to_string().as_bytes()),
            }),
        }
    }

    /// Sends an acquire (or a ticket poll) and reads a grant (201/200) of a lease on
    /// `resource`, or a ticket (202); `known` is the token the caller already has (a
    /// ticket's, when polling), for answers that do not repeat it.
    async fn acquired(
        request: RequestBuilder,
        resource: Resource,
        known: Option<&LeaseToken>,
    ) -> Result<Reply<Acquired>, ClientError> {
        let sent_at = Instant::now();
        let reply: Reply<Value> = Self::send(request).await?;
        let unexpected = |what: &str| ClientError::Unexpected {
            status: StatusCode::OK,
            excerpt: what.to_owned(),
        };
        let token = reply.json["token"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .or_else(|| known.cloned())
            .ok_or_else(|| unexpected("an answer without the lease's token"))?;
        let body = if reply.json.get("ticket_id").is_some() {
            let ticket = TicketBody::deserialize(&reply.json)
                .map_err(|_| unexpected("a ticket the client cannot read"))?;
            Acquired::Queued(Ticket { ticket, token })
        } else {
            let grant = GrantBody::deserialize(&reply.json)
                .map_err(|_| unexpected("a grant the client cannot read"))?;
            Acquired::Lease(Lease {
                grant,
                token,
                members: Vec::new(),
                resource,
                sent_at,
            })
        };
        Ok(Reply {
            body,
            json: reply.json,
        })
    }

    /// `POST /v1/{locks|semaphores}/{name}/leases/{id}/heartbeat`: the lease's TTL starts
    /// again. A multilease's answer is told as a lease's: its `revocation` is its first
    /// revoked member's (whose lock it does not name: see the answer's `json`).
    pub async fn heartbeat(
        &self,
        resource: Resource,
        lock: &str,
        id: LeaseId,
        token: &LeaseToken,
    ) -> Result<Reply<RenewalBody>, ClientError> {
        self.heartbeat_term(resource, lock, id, token, None).await
    }

    /// [`Self::heartbeat`] of a lease held as `term` (an election's leader: its term is its
    /// fencing token): the server answers 410 when the candidate no longer leads in that
    /// term (Redis lost its grant and put it back in line), rather than leading it into a
    /// new term this caller would take for its own.
    pub async fn heartbeat_term(
        &self,
        resource: Resource,
        lock: &str,
        id: LeaseId,
        token: &LeaseToken,
        term: Option<u64>,
    ) -> Result<Reply<RenewalBody>, ClientError> {
        let (reply, _) = self
            .heartbeat_naming(resource, lock, id, token, term)
            .await?;
        Ok(reply)
    }

    /// [`Self::heartbeat_term`], and a multilease's members as the answer gave them (each
    /// revoked one's revocation on it): a keeper's signal names that lock.
    pub(crate) async fn heartbeat_naming(
        &self,
        resource: Resource,
        lock: &str,
        id: LeaseId,
        token: &LeaseToken,
        term: Option<u64>,
    ) -> Result<(Reply<RenewalBody>, Vec<MultiMemberBody>), ClientError> {
        let id = id.to_string();
        let mut path = resource.lease_path(lock, &id);
        path.push("heartbeat");
        let mut url = self.endpoint(&path)?;
        if let (Resource::Election, Some(term)) = (resource, term) {
            url.query_pairs_mut().append_pair("term", &term.to_string());
        }
        let request = self
            .request(reqwest::Method::POST, url)
            .bearer_auth(token.expose())
            .timeout(self.timeout);
        match resource {
            Resource::Election => {
                let reply = crate::elections::renewal(lock, Self::send(request).await?)?;
                Ok((reply, Vec::new()))
            }
            Resource::Multilease => Ok(multi_renewal(lock, Self::send(request).await?)),
            _ => Ok((Self::send(request).await?, Vec::new())),
        }
    }

    /// `DELETE /v1/{locks|semaphores}/{name}/leases/{id}[?all=true]`: one reentry level, or
    /// all of them (a semaphore lease always gives back all its permits).
    pub async fn release(
        &self,
        resource: Resource,
        lock: &str,
        id: LeaseId,
        token: &LeaseToken,
        all: bool,
    ) -> Result<Reply<ReleaseBody>, ClientError> {
        self.release_keyed(resource, lock, id, token, all, None)
            .await
    }

    /// [`release`](Self::release) with an `Idempotency-Key` (a retry of it gets the first
    /// answer).
    pub(crate) async fn release_keyed(
        &self,
        resource: Resource,
        lock: &str,
        id: LeaseId,
        token: &LeaseToken,
        all: bool,
        key: Option<&str>,
    ) -> Result<Reply<ReleaseBody>, ClientError> {
        let id = id.to_string();
        let mut url = self.endpoint(&resource.lease_path(lock, &id))?;
        // A multilease and a candidate have no levels: all of it goes.
        if all && matches!(resource, Resource::Lock | Resource::Semaphore) {
            url.query_pairs_mut().append_pair("all", "true");
        }
        let mut request = self
            .request(reqwest::Method::DELETE, url)
            .bearer_auth(token.expose())
            .timeout(self.timeout);
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        if resource == Resource::Election {
            return Ok(crate::elections::resigned(Self::send(request).await?));
        }
        if resource == Resource::Multilease {
            let reply: Reply<MultiReleaseBody> = Self::send(request).await?;
            return Ok(Reply {
                body: ReleaseBody {
                    lease_id: reply.body.lease_id,
                    lock: reply.body.locks.join(","),
                    released: reply.body.released,
                    reentry_count: 0,
                },
                json: reply.json,
            });
        }
        Self::send(request).await
    }

    /// `GET /v1/{locks|semaphores}/{name}/leases/{id}`: one lease's state, also for a while
    /// after it ended (then 404).
    pub async fn lease_status(
        &self,
        resource: Resource,
        lock: &str,
        id: LeaseId,
    ) -> Result<Reply<LeaseBody>, ClientError> {
        let id = id.to_string();
        let url = self.endpoint(&resource.lease_path(lock, &id))?;
        Self::send(
            self.request(reqwest::Method::GET, url)
                .timeout(self.timeout),
        )
        .await
    }
}

/// A multilease's heartbeat answer as a lease's renewal (its highest fencing token, its
/// weakest member's copies, the revocation with the earliest deadline of its members'), and
/// its members: the answer carries a revocation on each member whose lock was revoked, never
/// at top level.
fn multi_renewal(
    lock: &str,
    reply: Reply<MultiRenewalBody>,
) -> (Reply<RenewalBody>, Vec<MultiMemberBody>) {
    let body = reply.body;
    let revocation = body
        .members
        .iter()
        .filter_map(|m| m.revocation.as_ref())
        .reduce(|kept, r| {
            if crate::kept::ends_before(r, kept) {
                r
            } else {
                kept
            }
        })
        .cloned();
    let renewal = RenewalBody {
        lease_id: body.lease_id,
        lock: lock.to_owned(),
        fencing_token: body
            .members
            .iter()
            .map(|m| m.fencing_token)
            .max()
            .unwrap_or(0),
        reentry_count: 1,
        ttl_ms: body.ttl_ms,
        expires_at: body.expires_at,
        replicas_acked: body.members.iter().filter_map(|m| m.replicas_acked).min(),
        degraded: body.members.iter().find_map(|m| m.degraded),
        nodes_acked: None,
        validity_ms: None,
        revocation,
    };
    let reply = Reply {
        body: renewal,
        json: reply.json,
    };
    (reply, body.members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_acquire_body_names_only_what_was_asked() {
        let body = AcquireBody::default();
        assert_eq!(serde_json::to_string(&body).expect("json"), "{}");
        let body = AcquireBody {
            ttl_ms: Some(1500),
            holder: Some("me".into()),
            kind: Some(LockKind::Reentrant),
            ..AcquireBody::default()
        };
        assert_eq!(
            serde_json::to_value(&body).expect("json"),
            serde_json::json!({"ttl_ms": 1500, "holder": "me", "kind": "reentrant"})
        );
    }
}
