//! Taking the lease: one ask (a lock, or a semaphore's permits) waiting server-side, asked
//! again while the server's own wait limit is shorter than `--wait`, a fair lock's ticket
//! polled until its turn, an election's candidate polled in line until it leads, and a
//! signal giving up on all of it.

use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::{Instant, sleep};

use super::later;
use crate::cli::signals::Signals;
use crate::client::{
    AcquireOptions, Acquired, CampaignOptions, Client, ClientError, Lease, LockKind, PermitOptions,
    Problem, Reply, Resource, Standing, Ticket, Waiting,
};

/// Pause before asking again when the server answered 409 before our `--wait` was over (its
/// `--max-wait-ms` is shorter): enough to never hammer a server that does not wait at all.
const REASK_PAUSE: Duration = Duration::from_millis(100);

/// A lease we hold and the instant from which its TTL is known to count.
pub(super) struct Held {
    pub(super) lease: Lease,
    pub(super) ttl: Duration,
    /// When the request that (re)started the TTL was sent.
    pub(super) renewed_at: Instant,
}

pub(super) enum Acquisition {
    /// Boxed: a lease (a multilease's with its members) is much larger than the rest.
    Held(Box<Held>),
    /// Still held by someone else when the wait was over.
    Busy(Problem),
    Interrupted(Signal),
    Failed(ClientError),
}

/// What to acquire: a lock, or permits of a semaphore.
pub(super) enum Ask {
    Lock(AcquireOptions),
    Permits(PermitOptions),
    /// Several locks (each with its kind) as one multilease.
    Multi(Vec<(String, Option<LockKind>)>, AcquireOptions),
    /// A term of an election (`elect`): its wait is the job's `--wait`, not the options'.
    Campaign(CampaignOptions, Duration),
}

/// What one ask got: a lease, or a place in line (a fair lock's ticket, an election's
/// candidate) to poll until its turn.
enum Got {
    Lease(Lease),
    Ticket(Ticket),
    Candidate(Waiting),
}

impl From<Acquired> for Got {
    fn from(acquired: Acquired) -> Self {
        match acquired {
            Acquired::Lease(lease) => Self::Lease(lease),
            Acquired::Queued(ticket) => Self::Ticket(ticket),
        }
    }
}

impl Ask {
    /// Which routes the lease will live under.
    pub(super) fn resource(&self) -> Resource {
        match self {
            Self::Lock(_) => Resource::Lock,
            Self::Permits(_) => Resource::Semaphore,
            Self::Multi(..) => Resource::Multilease,
            Self::Campaign(..) => Resource::Election,
        }
    }

    pub(super) fn wait(&self) -> Duration {
        match self {
            Self::Lock(options) | Self::Multi(_, options) => options.wait,
            Self::Permits(options) => options.wait,
            Self::Campaign(_, wait) => *wait,
        }
    }

    /// One request, waiting server-side up to `wait`.
    async fn send(&self, client: &Client, name: &str, wait: Duration) -> Result<Got, ClientError> {
        match self {
            Self::Lock(options) => {
                // A fair lock is asked without a wait (`clients/PROTOCOL.md`): its ticket
                // comes back at once with its place and estimate, then is polled.
                let wait = if options.kind == Some(LockKind::Fair) {
                    Duration::ZERO
                } else {
                    wait
                };
                let options = AcquireOptions {
                    wait,
                    ..options.clone()
                };
                Ok(client.acquire(name, &options).await?.body.into())
            }
            Self::Campaign(options, _) => {
                let options = CampaignOptions {
                    wait: Some(wait.min(options.poll_wait())),
                    ..options.clone()
                };
                Ok(match client.stand(name, &options).await?.body {
                    Standing::Leads(lease) => Got::Lease(lease),
                    Standing::InLine(waiting) => Got::Candidate(waiting),
                })
            }
            Self::Multi(locks, options) => {
                let options = AcquireOptions {
                    wait,
                    ..options.clone()
                };
                Ok(Got::Lease(
                    client.acquire_multi(locks, &options).await?.body,
                ))
            }
            Self::Permits(options) => {
                let options = PermitOptions {
                    wait,
                    ..options.clone()
                };
                Ok(Got::Lease(
                    client.acquire_permits(name, &options).await?.body,
                ))
            }
        }
    }
}

/// Asks for the lease, waiting server-side up to the asked wait in total. A signal drops the
/// in-flight request, which closes its connection: the server then drops our waiter at once
/// (and rolls back a grant it could not deliver).
pub(super) async fn acquire(
    client: &Client,
    lock: &str,
    ask: &Ask,
    signals: &mut Signals,
) -> Acquisition {
    let deadline = later(Instant::now(), ask.wait());
    loop {
        let sent = Instant::now();
        let wait = deadline.saturating_duration_since(sent);
        let result = tokio::select! {
            result = ask.send(client, lock, wait) => result,
            signal = signals.recv() => return Acquisition::Interrupted(signal),
        };
        match result {
            Ok(got) => {
                let waited = match got {
                    Got::Lease(lease) => Ok(lease),
                    // A fair lock's place in line: poll it until its turn or the deadline.
                    Got::Ticket(ticket) => {
                        wait_in_line(client, lock, ticket, deadline, signals).await
                    }
                    Got::Candidate(waiting) => {
                        wait_for_lead(client, lock, waiting, ask, deadline, signals).await
                    }
                };
                let lease = match waited {
                    Ok(lease) => lease,
                    Err(outcome) => return outcome,
                };
                return Acquisition::Held(Box::new(Held {
                    ttl: Duration::from_millis(lease.grant.ttl_ms),
                    lease,
                    renewed_at: sent,
                }));
            }
            Err(ClientError::Problem(p)) if p.is_lock_held() => {
                if Instant::now() + REASK_PAUSE >= deadline {
                    return Acquisition::Busy(p);
                }
                tokio::select! {
                    () = sleep(REASK_PAUSE) => {}
                    signal = signals.recv() => return Acquisition::Interrupted(signal),
                }
            }
            Err(e) => return Acquisition::Failed(e),
        }
    }
}

/// Polls a fair lock's ticket until its turn, leaving the line at the deadline (then the
/// lock counts as busy) or on a signal.
async fn wait_in_line(
    client: &Client,
    lock: &str,
    ticket: Ticket,
    deadline: Instant,
    signals: &mut Signals,
) -> Result<Lease, Acquisition> {
    if Instant::now() < deadline {
        super::say(in_line(lock, &ticket.ticket));
    }
    let (id, token) = (ticket.ticket.ticket_id, ticket.token);
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        let polled = tokio::select! {
            polled = client.poll(lock, id, &token, wait) => polled,
            signal = signals.recv() => {
                let _ = client.leave(lock, id, &token).await;
                return Err(Acquisition::Interrupted(signal));
            }
        };
        match polled {
            Ok(Reply {
                body: Acquired::Lease(lease),
                ..
            }) => return Ok(lease),
            Ok(_) if Instant::now() >= deadline => {
                let _ = client.leave(lock, id, &token).await;
                return Err(Acquisition::Busy(Problem {
                    status: 409,
                    code: "lock_held".into(),
                    detail: "still queued for the fair lock when the wait ran out".into(),
                    retry_after_ms: None,
                    reason: None,
                    extra: serde_json::Map::new(),
                }));
            }
            Ok(_) => {}
            Err(e) => return Err(Acquisition::Failed(e)),
        }
    }
}

/// What a command waiting in a fair lock's line is told once: its place, whom it waits
/// behind, and the server's estimate ("why am I waiting?").
fn in_line(lock: &str, ticket: &crate::wire::TicketBody) -> String {
    let behind = match (&ticket.held_by, ticket.held_for_ms) {
        (Some(holder), Some(ms)) => format!(", behind {holder} (holding for {} s)", ms / 1000),
        (None, Some(ms)) => format!(", behind a lease holding for {} s", ms / 1000),
        _ => String::new(),
    };
    let estimate = ticket.estimated_wait_ms.map_or_else(String::new, |ms| {
        format!("; about {} s to wait", ms.div_ceil(1000))
    });
    format!(
        "waiting in line for {lock} (position {}{behind}){estimate}",
        ticket.position
    )
}

/// Polls an election's candidate until it leads, leaving the line at the deadline (then
/// someone else counts as leading, as a busy lock) or on a signal.
async fn wait_for_lead(
    client: &Client,
    name: &str,
    waiting: Waiting,
    ask: &Ask,
    deadline: Instant,
    signals: &mut Signals,
) -> Result<Lease, Acquisition> {
    let chunk = match ask {
        Ask::Campaign(options, _) => options.poll_wait(),
        _ => Duration::from_secs(10),
    };
    let (id, token) = (waiting.id(), waiting.token);
    loop {
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .min(chunk);
        let polled = tokio::select! {
            polled = client.poll_candidate(name, id, &token, wait) => polled,
            signal = signals.recv() => {
                let _ = client.resign(name, id, &token).await;
                return Err(Acquisition::Interrupted(signal));
            }
        };
        match polled.map(|reply| reply.body) {
            Ok(Standing::Leads(lease)) => return Ok(lease),
            Ok(Standing::InLine(_)) if Instant::now() >= deadline => {
                let _ = client.resign(name, id, &token).await;
                return Err(Acquisition::Busy(Problem {
                    status: 409,
                    code: "lock_held".into(),
                    detail: "still in line for the election when the wait ran out".into(),
                    retry_after_ms: None,
                    reason: None,
                    extra: serde_json::Map::new(),
                }));
            }
            Ok(Standing::InLine(_)) => {}
            Err(e) => return Err(Acquisition::Failed(e)),
        }
    }
}
