//! A kept lease's two loops, as `clients/PROTOCOL.md` writes them: the renewals (every third
//! of the TTL, failures retried sooner, given up as unrenewable before the server may grant
//! the lock to someone else) and the watch (opened again when it breaks or stays silent;
//! its refusals sorted into loss, stop, and later), and the release that ends them.

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, sleep, sleep_until, timeout_at};

use crate::kept::{LeaseLost, REVOKED, Shared, UNRENEWABLE};
use crate::{
    Client, ClientError, LeaseId, LeaseToken, LostEvent, Problem, Resource, RevocationBody,
};

/// Longest pause between two attempts of a call that failed.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// The shortest time a heartbeat is given before it counts as failed (and is retried).
const MIN_ATTEMPT: Duration = Duration::from_millis(500);

/// What the loops need to speak for the lease.
#[derive(Clone)]
pub(crate) struct Upkeep {
    pub(crate) client: Client,
    pub(crate) resource: Resource,
    pub(crate) name: String,
    pub(crate) id: LeaseId,
    pub(crate) token: LeaseToken,
    /// The fencing token the lease was granted with: an election's term, sent with each
    /// heartbeat of one.
    pub(crate) fence: u64,
    /// The watch's `expiring_slack_ms` (`None`: the server's default).
    pub(crate) expiring_slack: Option<Duration>,
    pub(crate) shared: Arc<Shared>,
}

impl Upkeep {
    /// Renews the lease every third of its TTL until it is lost (or the task is aborted by a
    /// release).
    pub(crate) async fn renew(self) {
        loop {
            let (ttl, last) = self.shared.schedule();
            sleep_until(last + ttl / 3).await;
            if let Err(lost) = self.renew_once(ttl, last).await {
                self.shared.lose(lost);
                return;
            }
        }
    }

    /// One renewal, retried until it succeeds or only the loss margin of the TTL is left.
    async fn renew_once(&self, ttl: Duration, last: Instant) -> Result<(), LeaseLost> {
        let loss_at = last + ttl.saturating_sub(loss_margin(ttl));
        let mut failure: Option<ClientError> = None;
        let mut attempt = 0;
        loop {
            let sent = Instant::now();
            let until = loss_at.min(sent + (ttl / 3).max(MIN_ATTEMPT));
            let beat = self.client.heartbeat_naming(
                self.resource,
                &self.name,
                self.id,
                &self.token,
                Some(self.fence),
            );
            match timeout_at(until, beat).await {
                Ok(Ok((reply, members))) => {
                    self.shared.renewed(sent, &reply.body, &members);
                    return Ok(());
                }
                Ok(Err(ClientError::Problem(p))) if is_gone(&p) => return Err(self.lost_by(p)),
                // Any other refusal (a revoked key's 401, a quota) is tried again too: the
                // operator may fix it before the lease would expire.
                Ok(Err(e)) => failure = Some(e),
                Err(_) => {}
            }
            let left = loss_at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.unrenewable(ttl, last, failure));
            }
            sleep(pause(attempt, failure.as_ref()).min(left)).await;
            attempt += 1;
        }
    }

    /// Keeps the lease's watch open until the server says the lease is lost, passing on what
    /// it tells before; a watch that breaks, ends without news or stays silent is opened
    /// again after the last event it told (`Last-Event-ID`), with backoff.
    pub(crate) async fn watch(self) {
        let mut attempt = 0;
        let mut last_id: Option<String> = None;
        loop {
            let opened = Instant::now();
            let after = match self
                .client
                .watch_from(
                    self.resource,
                    (&self.name, self.id, &self.token),
                    last_id.as_deref(),
                    self.expiring_slack,
                )
                .await
            {
                Ok(mut watch) => {
                    let lost = self.follow(&mut watch).await;
                    last_id = watch.last_event_id().map(str::to_owned);
                    if let Some(event) = lost {
                        self.shared.lose(self.lost_by_event(event));
                        return;
                    }
                    Duration::ZERO
                }
                Err(ClientError::Problem(p)) if is_gone(&p) => {
                    self.shared.lose(self.lost_by(p));
                    return;
                }
                // Not for this caller or this server (401, 403, 404, 405): the heartbeats
                // will find a loss.
                Err(ClientError::Problem(p)) if matches!(p.status, 401 | 403 | 404 | 405) => {
                    return;
                }
                // 409, 429 (the caller's stream quota), 503 (too many watches): later.
                Err(ClientError::Problem(p)) => p.retry_after_ms.map_or(Duration::ZERO, ms),
                Err(_) => Duration::ZERO,
            };
            if opened.elapsed() > crate::watch::WATCH_SILENCE {
                attempt = 0; // it held a while: this is no tight loop
            }
            sleep(backoff(attempt).max(after)).await;
            attempt += 1;
        }
    }

    /// Passes on what an open watch tells until it says the lease is lost (or breaks: None).
    async fn follow(&self, watch: &mut crate::Watch) -> Option<LostEvent> {
        loop {
            match watch.next().await {
                Ok(crate::WatchEvent::Lost(event)) => return Some(event),
                Ok(crate::WatchEvent::Signal { kind, signal }) => self.shared.told(kind, signal),
                Err(_) => return None,
            }
        }
    }

    /// Gives the lease up as [`REVOKED`] the loss margin before an operator's revocation's
    /// deadline, once one is told: the work stops before the server may grant the lock to
    /// someone else. A revocation with an earlier deadline told meanwhile (a multilease's
    /// other member's) moves the end earlier. Ends with the lease (the task is aborted by a
    /// release).
    pub(crate) async fn until_revoked(self) {
        let mut told = self.shared.revocation.subscribe();
        loop {
            let kept = match told.wait_for(Option::is_some).await {
                Ok(kept) => kept.clone(),
                Err(_) => return,
            };
            let Some((lock, revocation)) = kept else {
                return;
            };
            let (ttl, _) = self.shared.schedule();
            let left = humantime::parse_rfc3339(&revocation.deadline)
                .ok()
                .and_then(|deadline| deadline.duration_since(std::time::SystemTime::now()).ok())
                .unwrap_or_default();
            match tokio::time::timeout(left.saturating_sub(loss_margin(ttl)), told.changed()).await
            {
                Ok(Ok(())) => continue, // an earlier deadline: wait for that one instead
                Ok(Err(_)) => return,
                Err(_) => {}
            }
            self.shared.lose(self.revoked(lock, &revocation));
            return;
        }
    }

    /// The loss of a lease given up before `revocation`'s deadline: a multilease's names the
    /// member (`lock`) whose revocation ended it.
    fn revoked(&self, lock: String, revocation: &RevocationBody) -> LeaseLost {
        let member = (self.resource == Resource::Multilease).then_some(lock);
        let whose = member
            .as_ref()
            .map_or_else(String::new, |lock| format!(" (member {lock:?})"));
        let why = if revocation.reason.is_empty() {
            String::new()
        } else {
            format!(": {}", revocation.reason)
        };
        LeaseLost {
            lease_id: self.id,
            lock: self.name.clone(),
            reason: REVOKED.to_owned(),
            member,
            detail: format!(
                "an operator revoked it{whose}{why}; given up before its deadline {}",
                revocation.deadline
            ),
        }
    }

    fn lost_by(&self, problem: Problem) -> LeaseLost {
        lost_by(&self.name, self.id, problem)
    }

    fn lost_by_event(&self, event: LostEvent) -> LeaseLost {
        LeaseLost {
            lease_id: self.id,
            lock: self.name.clone(),
            detail: format!("the server reports it {}", event.reason.replace('_', " ")),
            reason: event.reason,
            member: (self.resource == Resource::Multilease).then_some(event.lock),
        }
    }

    fn unrenewable(&self, ttl: Duration, last: Instant, failure: Option<ClientError>) -> LeaseLost {
        let cause = failure.map_or_else(
            || "no answer in time".to_owned(),
            |e| format!("the last attempt: {e}"),
        );
        LeaseLost {
            lease_id: self.id,
            lock: self.name.clone(),
            reason: UNRENEWABLE.to_owned(),
            member: None,
            detail: format!(
                "no heartbeat succeeded for {:?} of its {ttl:?} TTL ({cause})",
                last.elapsed()
            ),
        }
    }
}

/// What a release needs; sent by [`crate::KeptLease::release`], or in the background when a
/// kept lease is dropped.
pub(crate) struct Giveback {
    pub(crate) client: Client,
    pub(crate) resource: Resource,
    pub(crate) name: String,
    pub(crate) id: LeaseId,
    pub(crate) token: LeaseToken,
    pub(crate) shared: Arc<Shared>,
}

impl Giveback {
    /// Gives the lease back (see [`crate::KeptLease::release`]).
    pub(crate) async fn send(self) -> Result<(), ClientError> {
        let lost = self.shared.lost();
        let multilease = self.resource == Resource::Multilease;
        if lost
            .as_ref()
            .is_none_or(|lost| lost.reason == UNRENEWABLE || lost.reason == REVOKED || multilease)
        {
            self.release().await?;
        }
        match self.shared.lost() {
            Some(lost) => Err(ClientError::Lost(lost)),
            None => Ok(()),
        }
    }

    /// The release itself, retried with one key within the client's timeout.
    async fn release(&self) -> Result<(), ClientError> {
        let key = (self.resource != Resource::Multilease).then(|| idempotency_key(self.id));
        let deadline = Instant::now() + self.client.timeout;
        let mut attempt = 0;
        loop {
            let answer = self
                .client
                .release_keyed(
                    self.resource,
                    &self.name,
                    self.id,
                    &self.token,
                    true,
                    key.as_deref(),
                )
                .await;
            let error = match answer {
                Ok(_) => return Ok(()),
                // A retry whose first attempt went through.
                Err(ClientError::Problem(p)) if p.reason.as_deref() == Some("released") => {
                    return Ok(());
                }
                // Lost before our release arrived (expired, force-released).
                Err(ClientError::Problem(p)) if is_gone(&p) => {
                    self.shared.lose(lost_by(&self.name, self.id, p));
                    return Ok(());
                }
                Err(e) => e,
            };
            let wait = pause(attempt, Some(&error));
            if !is_retryable(&error) || Instant::now() + wait >= deadline {
                return Err(error);
            }
            sleep(wait).await;
            attempt += 1;
        }
    }
}

/// The server no longer knows the lease as a holder: 410, 404 `lease_not_found`, 403
/// `token_mismatch`.
fn is_gone(problem: &Problem) -> bool {
    problem.status == 410
        || (problem.status == 404 && problem.code == "lease_not_found")
        || (problem.status == 403 && problem.code == "token_mismatch")
}

fn lost_by(name: &str, id: LeaseId, problem: Problem) -> LeaseLost {
    let reason = if problem.status == 410 {
        problem
            .reason
            .clone()
            .unwrap_or_else(|| problem.code.clone())
    } else {
        "not_found".to_owned()
    };
    LeaseLost {
        lease_id: id,
        lock: name.to_owned(),
        reason,
        member: problem
            .member("member")
            .and_then(|m| m.as_str())
            .map(str::to_owned),
        detail: problem.detail,
    }
}

/// A call that may succeed if sent again unchanged, and that cannot act twice when it is
/// (`clients/PROTOCOL.md`, "Retries"): no answer, a 502, 503 or 504, a 429 `rate_limited`.
pub(crate) fn is_retryable(error: &ClientError) -> bool {
    match error {
        ClientError::Transport(_) => true,
        ClientError::Problem(p) => {
            matches!(p.status, 502..=504) || (p.status == 429 && p.code == "rate_limited")
        }
        ClientError::Unexpected { status, .. } => matches!(status.as_u16(), 502..=504),
        _ => false,
    }
}

/// The pause before attempt `attempt + 1`: a backoff, or the server's `Retry-After` when it
/// said one.
pub(crate) fn pause(attempt: u32, error: Option<&ClientError>) -> Duration {
    let asked = error
        .and_then(ClientError::problem)
        .and_then(|p| p.retry_after_ms)
        .map_or(Duration::ZERO, ms);
    backoff(attempt).max(asked)
}

/// 100 ms, doubling, at most [`MAX_PAUSE`].
pub(crate) fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(100)
        .saturating_mul(1 << attempt.min(5))
        .min(MAX_PAUSE)
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// What is left of a lease's TTL when renewals that keep failing give it up as lost: a sixth
/// of the TTL, at least a second, at most a third of it.
pub(crate) fn loss_margin(ttl: Duration) -> Duration {
    (ttl / 6).max(Duration::from_secs(1)).min(ttl / 3)
}

/// A fresh `Idempotency-Key`: the lease's id and 64 random bits (one release call, all its
/// retries).
fn idempotency_key(id: LeaseId) -> String {
    let random = RandomState::new().hash_one(Instant::now());
    format!("{id}.{random:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loss_margin_is_a_sixth_of_the_ttl_between_a_second_and_a_third() {
        assert_eq!(loss_margin(Duration::from_secs(30)), Duration::from_secs(5));
        assert_eq!(loss_margin(Duration::from_secs(4)), Duration::from_secs(1));
        assert_eq!(
            loss_margin(Duration::from_millis(1500)),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        assert_eq!(backoff(0), Duration::from_millis(100));
        assert_eq!(backoff(1), Duration::from_millis(200));
        assert_eq!(backoff(30), MAX_PAUSE);
    }
}
