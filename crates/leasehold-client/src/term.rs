//! A kept campaign ([`Term`]): [`Client::campaign`] waits in line (each poll keeps the place)
//! until the candidate leads, then keeps the term as [`crate::KeptLease`] keeps any lease
//! (renewed at a third of its TTL, watched, its loss a [`LossSignal`], resigned on every way
//! out): a term is a lease on [`Resource::Election`], not a machinery of its own.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::{Instant, sleep};

use crate::elections::campaign_key;
use crate::upkeep::{is_retryable, pause};
use crate::{
    CampaignOptions, CandidateBody, Client, ClientError, KeptLease, LeaseId, LeaseLost, LeaseToken,
    LossSignal, ProblemCode, Renewal, Reply, Resource, Standing,
};

/// The shortest pause before a campaign refused by a lock-delay asks again.
const DELAY_PAUSE: Duration = Duration::from_millis(100);

/// A term this client leads and keeps: its number is a fencing token (it only grows per
/// election). Resign with [`resign`](Self::resign); one dropped without it is resigned in the
/// background, on the tokio runtime it was dropped on (a panic, a cancelled task).
#[derive(Debug)]
pub struct Term {
    client: Client,
    kept: KeptLease,
    value: Mutex<String>,
}

impl Client {
    /// Stands a candidate in election `name` and waits in line until it leads (or until
    /// `options.wait`, if given, runs out: then it leaves the line and answers
    /// [`ClientError::NotElected`]); then keeps its term. The campaign request carries an
    /// `Idempotency-Key`, and it and the polls are sent again after a dropped connection, a
    /// 502, 503, 504 or a 429 `rate_limited` (for up to the client's timeout); a campaign
    /// refused by a lock-delay asks again when it is over. Each answer in line (202) is told
    /// to `options.on_in_line`. Dropping the future while in line leaves the line in the
    /// background. Call it inside a tokio runtime.
    pub async fn campaign(
        &self,
        name: &str,
        options: &CampaignOptions,
    ) -> Result<Term, ClientError> {
        let deadline = options.wait.map(|wait| Instant::now() + wait);
        let chunk = options.poll_wait();
        let left = move || deadline.map_or(chunk, |d| d.saturating_duration_since(Instant::now()));
        let mut standing = loop {
            let ask = CampaignOptions {
                wait: Some(left().min(chunk)),
                ..options.clone()
            };
            let key = campaign_key();
            match retried(self, || self.stand_keyed(name, &ask, &key)).await {
                Ok(reply) => break reply.body,
                Err(ClientError::Problem(p)) if p.kind() == Some(ProblemCode::LockDelay) => {
                    let pause = p.retry_after_ms.map_or(DELAY_PAUSE, Duration::from_millis);
                    if deadline.is_some_and(|d| Instant::now() + pause >= d) {
                        return Err(p.into());
                    }
                    sleep(pause.max(DELAY_PAUSE)).await;
                }
                Err(e) => return Err(e),
            }
        };
        let mut place: Option<Place> = None;
        let lease = loop {
            let waiting = match standing {
                Standing::Leads(lease) => break lease,
                Standing::InLine(waiting) => waiting,
            };
            let place = place.get_or_insert_with(|| Place {
                client: self.clone(),
                name: name.to_owned(),
                id: waiting.id(),
                token: waiting.token.clone(),
                left: false,
            });
            // After the place is known: a hook that panics unwinds past `place`, which then
            // leaves the line (its `Drop`), as a campaign dropped in line does.
            if let Some(hook) = &options.on_in_line {
                hook.tell(&waiting.candidate);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                place.leave().await;
                return Err(ClientError::NotElected {
                    election: name.to_owned(),
                    leader: waiting.candidate.leader.map(Box::new),
                });
            }
            let wait = left().min(chunk);
            let poll = || self.poll_candidate(name, place.id, &place.token, wait);
            standing = retried(self, poll).await?.body;
        };
        if let Some(place) = &mut place {
            place.left = true; // it leads: the term is kept from here
        }
        Ok(Term {
            client: self.clone(),
            kept: self.keep_with(lease, &options.keep),
            value: Mutex::new(options.value.clone()),
        })
    }
}

/// `call`, sent again after a failure that cannot have acted twice (`clients/PROTOCOL.md`,
/// "Retries"), for up to the client's timeout after the first attempt.
async fn retried<T, F, Fut>(client: &Client, mut call: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let give_up = Instant::now() + client.timeout;
    let mut attempt = 0;
    loop {
        let error = match call().await {
            Ok(answer) => return Ok(answer),
            Err(e) => e,
        };
        let wait = pause(attempt, Some(&error));
        if !is_retryable(&error) || Instant::now() + wait >= give_up {
            return Err(error);
        }
        sleep(wait).await;
        attempt += 1;
    }
}

impl Term {
    /// The term's number: pass it to what the leader writes, as a lock's fencing token.
    pub fn number(&self) -> u64 {
        self.kept.fencing_token()
    }

    /// The candidate's id.
    pub fn id(&self) -> LeaseId {
        self.kept.id()
    }

    /// The election's name.
    pub fn election(&self) -> &str {
        &self.kept.lease().grant.lock
    }

    /// The value this leader published last.
    pub fn value(&self) -> String {
        self.value
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What the last heartbeat said (its TTL, when it runs out).
    pub fn renewal(&self) -> Renewal {
        self.kept.renewal()
    }

    /// The loss signal, for the work done while leading.
    pub fn signal(&self) -> LossSignal {
        self.kept.signal()
    }

    /// Resolves when the term is lost (ended by an admin, expired, unrenewable).
    pub async fn lost(&self) -> LeaseLost {
        self.kept.lost().await
    }

    /// Why the term was lost, once it was.
    pub fn lost_error(&self) -> Option<LeaseLost> {
        self.kept.lost_error()
    }

    /// Publishes a new value in this term (observers get it). 410 once the term ended.
    pub async fn proclaim(&self, value: &str) -> Result<Reply<CandidateBody>, ClientError> {
        let lease = self.kept.lease();
        let reply = self
            .client
            .proclaim(&lease.grant.lock, lease.grant.lease_id, &lease.token, value)
            .await?;
        *self.value.lock().unwrap_or_else(PoisonError::into_inner) = value.to_owned();
        Ok(reply)
    }

    /// Stops the heartbeats and the watch and resigns: the next candidate leads at once.
    /// [`ClientError::Lost`] when the term had been lost before.
    pub async fn resign(self) -> Result<(), ClientError> {
        self.kept.release().await
    }
}

/// A place in line this campaign holds; left in the background when the campaign is dropped
/// while waiting (a timeout, a cancelled task), so the line does not wait on a ghost until its
/// TTL runs out.
struct Place {
    client: Client,
    name: String,
    id: LeaseId,
    token: LeaseToken,
    left: bool,
}

impl Place {
    async fn leave(&mut self) {
        self.left = true;
        let _ = self.client.resign(&self.name, self.id, &self.token).await;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.left {
            return;
        }
        let (client, name, id, token) = (
            self.client.clone(),
            self.name.clone(),
            self.id,
            self.token.clone(),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = client
                    .release(Resource::Election, &name, id, &token, true)
                    .await;
            });
        }
    }
}
