//! Keeping a lease as every official client does (`clients/PROTOCOL.md`, "Keeping a lease"
//! and "Releasing"): a [`KeptLease`] renews itself at a third of its TTL, keeps its watch
//! open, turns its loss into a signal ([`LossSignal`]), and is given back by
//! [`KeptLease::release`] or, dropped without one, in the background. Its two loops (the
//! renewals and the watch) are in `upkeep`.

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::kept::{LeaseLost, LossSignal, Renewal, Shared, Signal, State};
use crate::upkeep::{Giveback, Upkeep};
use crate::{Client, ClientError, Lease, LeaseId, MultiMemberBody, RevocationBody};

/// How a lease is kept.
#[derive(Debug, Clone)]
pub struct KeepOptions {
    /// Keep the lease's watch open (the default), so a loss is known the moment the server
    /// knows it. Off (for a proxy that cuts server-sent events), the next heartbeat finds it:
    /// within a third of the TTL.
    pub watch: bool,
    /// When the watch tells `expiring`: once less than this is left of the lease with no
    /// heartbeat answered since (`None`: the server's default, a third of the TTL; it takes
    /// at most half). Zero is refused by the server (400 `invalid_query`).
    pub expiring_slack: Option<std::time::Duration>,
}

impl Default for KeepOptions {
    fn default() -> Self {
        Self {
            watch: true,
            expiring_slack: None,
        }
    }
}

/// A lease this client keeps (`clients/PROTOCOL.md`): renewed every third of its TTL
/// (counted from when the last renewal that succeeded was sent; failures retried sooner,
/// and the lease given up as [`UNRENEWABLE`](crate::UNRENEWABLE) once only the loss margin
/// is left), watched (the server's `lost` the moment it happens; the heartbeat's 410 without
/// a watch), its loss a [`LossSignal`]. Give it back with [`release`](Self::release); one
/// dropped without it is released in the background, on the tokio runtime it was dropped on
/// (a panic, a cancelled task).
pub struct KeptLease {
    client: Client,
    lease: Lease,
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
    /// Released, or its release handed to the background.
    done: bool,
}

impl std::fmt::Debug for KeptLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptLease")
            .field("lease_id", &self.lease.grant.lease_id)
            .field("lock", &self.lease.grant.lock)
            .field("lost", &self.shared.lost())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Keeps `lease` (what [`acquire`](Self::acquire), [`poll`](Self::poll),
    /// [`acquire_permits`](Self::acquire_permits) or [`acquire_multi`](Self::acquire_multi)
    /// granted) until it is released, renewing it from [`Lease::sent_at`]. Call it inside a
    /// tokio runtime (it spawns the renewals and the watch).
    pub fn keep(&self, lease: Lease) -> KeptLease {
        self.keep_with(lease, &KeepOptions::default())
    }

    /// [`keep`](Self::keep) with options (a lease without its watch).
    pub fn keep_with(&self, lease: Lease, options: &KeepOptions) -> KeptLease {
        let resource = lease.resource;
        let shared = Arc::new(
            Shared::new(State {
                renewal: Renewal::of_grant(&lease.grant),
                renewed_at: Instant::from_std(lease.sent_at),
                releasing: false,
            })
            .with_members(lease.members.clone()),
        );
        let upkeep = Upkeep {
            client: self.clone(),
            resource,
            name: lease.grant.lock.clone(),
            id: lease.grant.lease_id,
            token: lease.token.clone(),
            fence: lease.grant.fencing_token,
            expiring_slack: options.expiring_slack,
            shared: shared.clone(),
        };
        let mut tasks = vec![
            tokio::spawn(upkeep.clone().renew()),
            tokio::spawn(upkeep.clone().until_revoked()),
        ];
        if options.watch {
            tasks.push(tokio::spawn(upkeep.watch()));
        }
        KeptLease {
            client: self.clone(),
            lease,
            shared,
            tasks,
            done: false,
        }
    }
}

impl KeptLease {
    /// The grant, its token, and a multilease's members.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    pub fn id(&self) -> LeaseId {
        self.lease.grant.lease_id
    }

    /// Pass it to what the lock protects. A multilease has one per lock: [`members`](Self::members).
    pub fn fencing_token(&self) -> u64 {
        self.lease.grant.fencing_token
    }

    /// A multilease's locks, each with its own lease and fencing token, and its
    /// `revocation` once one was told (by the watch or a heartbeat's answer); empty otherwise.
    pub fn members(&self) -> Vec<MultiMemberBody> {
        self.shared
            .members
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// What the last grant or renewal said (TTL, replicas, RedLock nodes, degraded).
    pub fn renewal(&self) -> Renewal {
        self.shared.state().renewal.clone()
    }

    /// What the watch tells while the lease holds (`expiring`, `degraded`, `contended`,
    /// `revocation_requested`, ...), from now on; a revocation once, also when a heartbeat's
    /// answer told it first (the only signal of a lease kept without its watch).
    pub fn signals(&self) -> tokio::sync::broadcast::Receiver<Signal> {
        self.shared.signals.subscribe()
    }

    /// An operator's request that the lease be let go, once told: the lease is given up as
    /// [`REVOKED`](crate::REVOKED) the loss margin before its deadline, unless released first.
    /// A multilease whose members are revoked keeps the one with the earliest deadline (of
    /// equal ones, the first told): the one that ends it; each member shows its own
    /// ([`members`](Self::members)).
    pub fn revocation(&self) -> Option<RevocationBody> {
        self.shared
            .revocation
            .borrow()
            .as_ref()
            .map(|(_, revocation)| revocation.clone())
    }

    /// The loss signal, for the work under the lease.
    pub fn signal(&self) -> LossSignal {
        LossSignal(self.shared.lost.subscribe())
    }

    /// Resolves when the lease is lost (see [`LossSignal::lost`]).
    pub async fn lost(&self) -> LeaseLost {
        self.signal().lost().await
    }

    /// Why the lease was lost, once it was.
    pub fn lost_error(&self) -> Option<LeaseLost> {
        self.shared.lost()
    }

    /// Stops the renewals and the watch and gives the lease back (every level): retried
    /// after a dropped connection or a 502, 503, 504 or 429 with the same `Idempotency-Key`
    /// (none for a multilease, whose retry answers 410 `released`) within the client's
    /// timeout. A lease that was lost is not sent back (nothing is left to give), unless it
    /// was given up as [`UNRENEWABLE`](crate::UNRENEWABLE) or [`REVOKED`](crate::REVOKED)
    /// (the server holds it until then) or is a multilease (the server then frees its other
    /// locks at once).
    /// [`ClientError::Lost`] when the lease had been lost: the work ran, at least in part,
    /// without the lock.
    pub async fn release(mut self) -> Result<(), ClientError> {
        self.done = true;
        let giveback = self.stop();
        giveback.send().await
    }

    /// Stops the loops (no heartbeat may race the release) and says what a release needs.
    fn stop(&mut self) -> Giveback {
        self.shared.state().releasing = true;
        for task in &self.tasks {
            task.abort();
        }
        Giveback {
            client: self.client.clone(),
            resource: self.lease.resource,
            name: self.lease.grant.lock.clone(),
            id: self.lease.grant.lease_id,
            token: self.lease.token.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl Drop for KeptLease {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let giveback = self.stop();
        // Outside a runtime nothing can be sent: the lease then ends with its TTL.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = giveback.send().await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Degraded, GrantBody, RenewalBody, WatchSignal};

    #[test]
    fn a_renewal_keeps_what_the_server_said_of_the_copies_behind_the_lease() {
        let grant: GrantBody = serde_json::from_value(serde_json::json!({
            "lease_id": "01a2243f-0422-718f-8e97-9531327afc6b", "lock": "l", "kind": "reentrant",
            "holder": null, "fencing_token": 7, "reentry_count": 1, "ttl_ms": 3000,
            "expires_at": "2026-01-01T00:00:03Z", "replicas_acked": 1,
        }))
        .expect("a grant");
        let shared = Shared::new(State {
            renewal: Renewal::of_grant(&grant),
            renewed_at: Instant::now(),
            releasing: false,
        });
        assert_eq!(shared.state().renewal.degraded, None);
        let renewal: RenewalBody = serde_json::from_value(serde_json::json!({
            "lease_id": "01a2243f-0422-718f-8e97-9531327afc6b", "lock": "l", "fencing_token": 7,
            "reentry_count": 1, "ttl_ms": 6000, "expires_at": "2026-01-01T00:00:07Z",
            "replicas_acked": 0, "degraded": "not_replicated",
        }))
        .expect("a renewal");
        shared.renewed(Instant::now(), &renewal, &[]);
        let kept = shared.state().renewal.clone();
        assert_eq!(kept.degraded, Some(Degraded::NotReplicated));
        assert_eq!((kept.replicas_acked, kept.renewals), (Some(0), 1));
        assert_eq!(kept.ttl, Duration::from_secs(6));
        // A loss counts once, and our own release's `released` is none.
        shared.state().releasing = true;
        let loss = |reason: &str| LeaseLost {
            lease_id: grant.lease_id,
            lock: "l".into(),
            reason: reason.into(),
            member: None,
            detail: String::new(),
        };
        shared.lose(loss("released"));
        assert_eq!(shared.lost(), None);
        shared.lose(loss("expired"));
        shared.lose(loss("force_released"));
        assert_eq!(shared.lost().map(|l| l.reason), Some("expired".to_owned()));
    }

    #[test]
    fn a_members_revocation_is_told_once_naming_it_whichever_tells_it() {
        let grant: GrantBody = serde_json::from_value(serde_json::json!({
            "lease_id": "01a2243f-0422-718f-8e97-9531327afc6b", "lock": "a,b", "kind": "multilease",
            "holder": null, "fencing_token": 7, "reentry_count": 1, "ttl_ms": 3000,
            "expires_at": "2026-01-01T00:00:03Z",
        }))
        .expect("a grant");
        let shared = Shared::new(State {
            renewal: Renewal::of_grant(&grant),
            renewed_at: Instant::now(),
            releasing: false,
        });
        let mut signals = shared.signals.subscribe();
        let revocation = serde_json::json!({"reason": "drain", "requested_by": "admin token",
            "requested_at": "2026-01-01T00:00:01Z", "deadline": "2026-01-01T00:00:02Z"});
        let renewal: RenewalBody = serde_json::from_value(serde_json::json!({
            "lease_id": "01a2243f-0422-718f-8e97-9531327afc6b", "lock": "a,b", "fencing_token": 7,
            "reentry_count": 1, "ttl_ms": 1000, "expires_at": "2026-01-01T00:00:02Z",
            "revocation": revocation,
        }))
        .expect("a renewal");
        let members: Vec<MultiMemberBody> = serde_json::from_value(serde_json::json!([
            {"lock": "a", "kind": "exclusive", "lease_id": "01a2243f-0422-718f-8e97-9531327afc6c",
             "fencing_token": 7},
            {"lock": "b", "kind": "exclusive", "lease_id": "01a2243f-0422-718f-8e97-9531327afc6d",
             "fencing_token": 7, "revocation": revocation},
        ]))
        .expect("members");
        // Every heartbeat's answer until the deadline carries it, and the watch tells it too.
        shared.renewed(Instant::now(), &renewal, &members);
        shared.renewed(Instant::now(), &renewal, &members);
        let watched: WatchSignal = serde_json::from_value(serde_json::json!({
            "lease_id": "01a2243f-0422-718f-8e97-9531327afc6b", "lock": "b",
            "revocation": revocation,
        }))
        .expect("a signal");
        shared.told("revocation_requested".to_owned(), watched);
        let told = signals.try_recv().expect("told");
        assert_eq!(
            (told.kind.as_str(), told.body.lock.as_str()),
            ("revocation_requested", "b")
        );
        assert!(signals.try_recv().is_err(), "told once");
        assert_eq!(
            shared
                .revocation
                .borrow()
                .as_ref()
                .map(|(lock, r)| (lock.as_str(), r.reason.as_str())),
            Some(("b", "drain"))
        );
        // The lease's own TTL still paces the heartbeats (the answer's counts to the deadline).
        assert_eq!(shared.state().renewal.ttl, Duration::from_secs(3));
    }

    #[test]
    fn of_its_members_revocations_a_multilease_keeps_the_earliest_deadline() {
        let grant: GrantBody = serde_json::from_value(serde_json::json!({
            "lease_id": "01a2243f-0422-718f-8e97-9531327afc6b", "lock": "a,b,c", "kind": "multilease",
            "holder": null, "fencing_token": 7, "reentry_count": 1, "ttl_ms": 3000,
            "expires_at": "2026-01-01T00:00:03Z",
        }))
        .expect("a grant");
        let members: Vec<MultiMemberBody> = ["a", "b", "c"]
            .iter()
            .map(|lock| {
                serde_json::from_value(serde_json::json!({"lock": lock, "kind": "exclusive",
                    "lease_id": "01a2243f-0422-718f-8e97-9531327afc6c", "fencing_token": 7}))
                .expect("a member")
            })
            .collect();
        let shared = Shared::new(State {
            renewal: Renewal::of_grant(&grant),
            renewed_at: Instant::now(),
            releasing: false,
        })
        .with_members(members);
        let tell = |lock: &str, deadline: &str| {
            let signal: WatchSignal = serde_json::from_value(serde_json::json!({
                "lease_id": "01a2243f-0422-718f-8e97-9531327afc6b", "lock": lock,
                "revocation": {"reason": lock, "requested_by": "admin token",
                    "requested_at": "2026-01-01T00:00:00Z", "deadline": deadline},
            }))
            .expect("a signal");
            shared.told("revocation_requested".to_owned(), signal);
        };
        let kept = || {
            shared
                .revocation
                .borrow()
                .clone()
                .map(|(lock, r)| (lock, r.deadline))
        };
        tell("a", "2026-01-01T00:00:08Z");
        tell("b", "2026-01-01T00:00:03.5Z"); // told later, earlier: it ends the lease
        assert_eq!(kept(), Some(("b".into(), "2026-01-01T00:00:03.5Z".into())));
        tell("c", "2026-01-01T00:00:06Z"); // later: nothing changes
        tell("a", "2026-01-01T00:00:03.5Z"); // an equal deadline: the first told stays
        assert_eq!(kept(), Some(("b".into(), "2026-01-01T00:00:03.5Z".into())));
        let shown: Vec<Option<String>> = shared
            .members
            .lock()
            .expect("members")
            .iter()
            .map(|m| m.revocation.as_ref().map(|r| r.reason.clone()))
            .collect();
        assert_eq!(
            shown,
            [Some("a".into()), Some("b".into()), Some("c".into())]
        );
    }
}
