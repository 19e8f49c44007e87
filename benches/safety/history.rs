//! What the harness saw: every request with the time it was sent and the time its answer
//! came back (µs since the run started, on one monotonic clock), and what the answer said.
//! The checkers read nothing else.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// What a lock name is used for in a run; checkers read a name's conflicts from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    Reentrant,
    Exclusive,
    Fair,
    Rw,
    Semaphore,
    /// RedLock leases (`"kind": "redlock"`), on the run's RedLock nodes (the
    /// redlock-node-kill fault's runs only).
    Redlock,
    /// Elections (`/v1/elections/{name}`): each candidate that leads is recorded as a lease
    /// of the election's name, its term as the fence (see `workload/election.rs`).
    Election,
}

impl Family {
    pub fn parse(raw: &str) -> Option<Self> {
        Some(match raw {
            "reentrant" => Self::Reentrant,
            "exclusive" => Self::Exclusive,
            "fair" => Self::Fair,
            "rw" => Self::Rw,
            "semaphore" => Self::Semaphore,
            "redlock" => Self::Redlock,
            "election" => Self::Election,
            _ => return None,
        })
    }

    pub fn prefix(self) -> &'static str {
        match self {
            Self::Reentrant => "re",
            Self::Exclusive => "ex",
            Self::Fair => "fair",
            Self::Rw => "rw",
            Self::Semaphore => "sem",
            Self::Redlock => "rl",
            Self::Election => "el",
        }
    }
}

/// A request, as sent. (Some fields are only read when a history slice is printed.)
#[derive(Debug, Clone)]
#[allow(dead_code)]
pub enum Request {
    /// `POST /v1/locks/{name}/leases`: a new lease, or a reentry of `reentry_of`.
    Acquire {
        kind: &'static str,
        ttl_ms: Option<u64>,
        wait_ms: u64,
        reentry_of: Option<String>,
        /// The Idempotency-Key, when the request carried one.
        idempotency: Option<String>,
        /// The client gave up waiting for the answer after this long (a disconnect mid-wait).
        gave_up_ms: Option<u64>,
    },
    /// `POST /v1/semaphores/{name}/leases`.
    AcquirePermits {
        permits: u32,
        limit: u32,
        ttl_ms: u64,
        wait_ms: u64,
    },
    Heartbeat {
        lease: String,
        ttl_ms: Option<u64>,
        semaphore: bool,
        /// A multilease's heartbeat, recorded as this member's: one that finds another member
        /// gone gives this one back before it answers 410.
        multi: bool,
    },
    Release {
        lease: String,
        all: bool,
        mode: Option<&'static str>,
        semaphore: bool,
        idempotency: Option<String>,
    },
    Poll {
        ticket: String,
        wait_ms: u64,
    },
    Leave {
        ticket: String,
    },
    /// Admin force release of a lock or a semaphore name.
    ForceRelease {
        semaphore: bool,
    },
    /// Redisson's own RLock scripts, run with EVAL.
    RedissonLock {
        holder: String,
        ttl_ms: u64,
    },
    RedissonRenew {
        holder: String,
        ttl_ms: u64,
    },
    RedissonUnlock {
        holder: String,
    },
    /// `PUT /v1/elections/{name}/candidates/{id}/value`: the leader's new value.
    Proclaim {
        lease: String,
        value: String,
    },
    /// An event an election's observer was told (`GET /v1/elections/{name}/observe`), on the
    /// stream `observer` kept (resumed with `Last-Event-ID` after each drop; a new stream
    /// when it connected afresh).
    Observe {
        observer: usize,
        stream: u64,
        resumed_from: Option<String>,
    },
    /// Admin cooperative revocation of a lock or a semaphore name (`POST
    /// /v1/admin/{locks|semaphores}/{name}/revoke`): every holder asked to release within
    /// `grace_ms`, then evicted.
    Revoke {
        semaphore: bool,
        grace_ms: u64,
    },
    /// An event the lease's own watch (`GET .../leases/{id}/watch`) told its holder, recorded
    /// when it arrived (send and recv are that moment).
    Watch {
        lease: String,
    },
    /// A fenced read-modify-write (exclusive holds) or fenced read (read holds) on the
    /// harness's resource for the name.
    Resource {
        lease: String,
        fence: u64,
        write: bool,
    },
}

/// What came back.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// 201 (a new lease) or 200 (a reentry or a replayed answer).
    Granted {
        status: u16,
        lease: String,
        fence: u64,
        ttl_ms: u64,
        count: u64,
        kind: String,
    },
    /// 202: a fair ticket.
    Queued {
        ticket: String,
    },
    Renewed {
        ttl_ms: u64,
        fence: u64,
    },
    Released {
        released: bool,
        count: u64,
    },
    Left,
    /// What an admin force release removed.
    Forced {
        removed: Vec<String>,
    },
    /// A refusal that says the caller does not hold (or get) the lock: 409, 403, 422, ...
    Refused {
        status: u16,
        code: String,
    },
    /// 410 or 404 on a lease or ticket: it is gone.
    Lost {
        status: u16,
        code: String,
    },
    /// No answer, or a 5xx: the request may or may not have happened.
    Failed {
        status: Option<u16>,
        what: String,
    },
    RedissonLocked,
    RedissonBusy {
        pttl: i64,
    },
    RedissonDone {
        ok: bool,
    },
    /// A proclamation taken: the value is the term's now.
    Proclaimed {
        term: u64,
    },
    /// What an observer was told: `event` (`leader`, `vacant`, `resync`), its SSE `id`, the
    /// term and the value.
    Seen {
        event: String,
        id: Option<String>,
        term: u64,
        value: Option<String>,
    },
    /// The leases a revocation asked to let go (those asked before keep their deadline).
    Revoked {
        leases: Vec<String>,
    },
    /// What a lease's watch told: `expiring`, `renewed`, `revocation_requested`, `lost` (with
    /// its `reason`), ...
    Told {
        event: String,
        reason: Option<String>,
    },
    /// The resource accepted the fenced operation; for writes, the value written.
    ResourceOk {
        wrote: Option<u64>,
    },
    /// The resource refused the fence: a larger one had been seen.
    ResourceRejected {
        seen: u64,
    },
}

impl Outcome {
    pub fn uncertain(&self) -> bool {
        matches!(self, Self::Failed { .. })
    }
}

/// What an answer's body says it is about (its `lock` or `semaphore`, `lease_id` or
/// `ticket_id`, and `holder`), for the check that every reply answers the request it came to:
/// a reply meant for another request (a Redis reply handed to the wrong caller) shows here.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Echo {
    pub lock: Option<String>,
    pub lease: Option<String>,
    pub holder: Option<String>,
}

/// One request and its answer.
#[derive(Debug, Clone)]
pub struct Op {
    pub seq: usize,
    pub client: usize,
    /// The Leasehold instance asked; `usize::MAX` for Redis itself or the resource.
    pub instance: usize,
    pub name: String,
    pub family: Family,
    pub send: u64,
    pub recv: u64,
    pub request: Request,
    pub outcome: Outcome,
    /// A 2xx answer's own account of what it answers (not printed with the op).
    pub echo: Option<Echo>,
}

impl Op {
    /// The lease or ticket this op is about, if any.
    pub fn lease(&self) -> Option<&str> {
        match (&self.request, &self.outcome) {
            (_, Outcome::Granted { lease, .. }) => Some(lease),
            (_, Outcome::Queued { ticket }) => Some(ticket),
            (Request::Acquire { reentry_of, .. }, _) => reentry_of.as_deref(),
            (
                Request::Heartbeat { lease, .. }
                | Request::Release { lease, .. }
                | Request::Resource { lease, .. }
                | Request::Watch { lease }
                | Request::Proclaim { lease, .. },
                _,
            ) => Some(lease),
            (Request::Poll { ticket, .. } | Request::Leave { ticket }, _) => Some(ticket),
            (
                Request::RedissonLock { holder, .. }
                | Request::RedissonRenew { holder, .. }
                | Request::RedissonUnlock { holder },
                _,
            ) => Some(holder),
            _ => None,
        }
    }
}

fn secs(us: u64) -> String {
    format!("{}.{:06}", us / 1_000_000, us % 1_000_000)
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let instance = if self.instance == usize::MAX {
            "-".to_owned()
        } else {
            self.instance.to_string()
        };
        write!(
            f,
            "#{:<6} +{}s..+{}s c{:<2} i{} {:<8} {:<9} {:?} -> {:?}",
            self.seq,
            secs(self.send),
            secs(self.recv),
            self.client,
            instance,
            self.name,
            format!("{:?}", self.family),
            self.request,
            self.outcome
        )
    }
}

/// Collects ops from every client, with the run's clock.
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    ops: Mutex<Vec<Op>>,
    acquisitions: AtomicUsize,
    /// Multileases granted (their members are recorded as leases of their names).
    multileases: AtomicUsize,
}

impl Recorder {
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            ops: Mutex::new(Vec::new()),
            acquisitions: AtomicUsize::new(0),
            multileases: AtomicUsize::new(0),
        }
    }

    /// Counts a granted multilease.
    pub fn note_multilease(&self) {
        self.multileases.fetch_add(1, Ordering::Relaxed);
    }

    pub fn multileases(&self) -> usize {
        self.multileases.load(Ordering::Relaxed)
    }

    /// µs since the run started.
    pub fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// `t` as µs since the run started.
    pub fn at(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.start).as_micros()).unwrap_or(u64::MAX)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        client: usize,
        instance: usize,
        name: &str,
        family: Family,
        send: u64,
        request: Request,
        outcome: Outcome,
    ) -> Op {
        self.record_answer(client, instance, name, family, send, request, outcome, None)
    }

    /// [`Self::record`], with what the answer's body said it was about.
    #[allow(clippy::too_many_arguments)]
    pub fn record_answer(
        &self,
        client: usize,
        instance: usize,
        name: &str,
        family: Family,
        send: u64,
        request: Request,
        outcome: Outcome,
        echo: Option<Echo>,
    ) -> Op {
        let recv = self.now();
        if matches!(
            request,
            Request::Acquire {
                reentry_of: None,
                ..
            } | Request::AcquirePermits { .. }
                | Request::RedissonLock { .. }
        ) {
            self.acquisitions.fetch_add(1, Ordering::Relaxed);
        }
        let mut ops = self.ops.lock().unwrap_or_else(|e| e.into_inner());
        let op = Op {
            seq: ops.len(),
            client,
            instance,
            name: name.to_owned(),
            family,
            send,
            recv,
            request,
            outcome,
            echo,
        };
        ops.push(op.clone());
        op
    }

    /// Requests for a new lease so far.
    pub fn acquisitions(&self) -> usize {
        self.acquisitions.load(Ordering::Relaxed)
    }

    pub fn take(&self) -> Vec<Op> {
        std::mem::take(&mut *self.ops.lock().unwrap_or_else(|e| e.into_inner()))
    }
}
