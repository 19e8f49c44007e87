//! The clients: each does, at random (from its own seeded generator), what users do. Lock
//! sessions acquire (waiting or not), re-enter, heartbeat on time, late or never, touch the
//! fenced resource while they believe they hold, and release one level, all levels, by mode,
//! or not at all. Fair tickets are polled, polled again after their grant, polled by two
//! connections at once, left, or abandoned. Semaphores take several permits. One client is
//! an admin that force-releases now and then, and some sessions are a Redisson client
//! running Redisson's own RLock scripts on the reentrant names. Some sessions hold several
//! names of the lock families as one multilease; each member is recorded as a lease of its
//! name, so every checker sees it as it sees any lease.
//!
//! A client writes to the resource only while it believes it holds: before the send time of
//! its last successful grant or renewal plus the TTL, less a margin; the pauser (see
//! `--fault holder-pause`) breaks that rule on purpose. Most lock and semaphore holders also
//! watch their lease (`watch.rs`) and act on it: no write once told `expiring` (until a
//! heartbeat sent after it succeeds) or `revocation_requested` (then a release at once), and
//! the hold ends with `lost`; the pauser heeds that too, once its pause is over.

mod admin;
mod election;
mod lock;
mod multi;
mod observer;
mod redisson;
mod semaphore;
mod ticket;
mod watch;

pub use observer::spawn_observers;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::Value;

use crate::cluster::Targets;
use crate::history::{Echo, Family, Op, Outcome, Recorder, Request};
use crate::resource::Resources;

/// A belief margin: a client stops using a lease this long before its TTL could run out.
const MARGIN_US: u64 = 60_000;
/// Answers later than their wait plus this are given up on (and counted late by the checker).
pub const CLIENT_SLACK: Duration = Duration::from_secs(6);

/// What the clients of a run do.
#[derive(Debug, Clone)]
pub struct Plan {
    pub clients: usize,
    pub families: Vec<Family>,
    pub names_per_family: usize,
    pub semaphore_limit: u32,
    /// Some sessions on reentrant names are a Redisson client.
    pub redisson: bool,
    /// Client 0 force-releases now and then.
    pub admin: bool,
    /// Sessions send an Idempotency-Key with reentries and releases and retry some of them.
    pub idempotency: bool,
    /// Some sessions hold several lock names as one multilease.
    pub multileases: bool,
}

impl Plan {
    pub fn names(&self, family: Family) -> Vec<String> {
        (0..self.names_per_family)
            .map(|i| format!("{}-{i}", family.prefix()))
            .collect()
    }
}

/// Everything a client shares with the others.
pub struct Shared {
    pub plan: Plan,
    pub targets: Arc<Targets>,
    pub recorder: Arc<Recorder>,
    pub resources: Arc<Resources>,
    pub redis_url: String,
    /// Cluster mode: every node's `host:port` (the Redisson-layout sessions use a cluster
    /// client on them instead of `redis_url`).
    pub redis_cluster: Option<Vec<String>>,
    /// Cleared when the run's time is up: clients finish their session and stop.
    pub running: AtomicBool,
    /// Set while the holder-pause fault is on: sessions of the pauser overstay on purpose.
    pub pausing: AtomicBool,
    /// The run goes on at least until then (µs since it started): a fault asked for time to
    /// see every name served again.
    pub hold_until: std::sync::atomic::AtomicU64,
    /// Set once the run's time is up but a fault holds it open: no new fault starts.
    pub winding_down: AtomicBool,
}

impl Shared {
    /// Asks the run to go on until `at` (µs since it started; `u64::MAX`: until told
    /// otherwise), whatever its duration.
    pub fn hold_until(&self, at: u64) {
        self.hold_until.store(at, Ordering::Relaxed);
    }
}

/// A lease as its client knows it.
#[derive(Debug, Clone)]
struct Held {
    name: String,
    family: Family,
    lease: String,
    token: String,
    kind: String,
    fence: u64,
    ttl_ms: u64,
    /// Send time (µs) of the last successful grant, reentry or heartbeat.
    renewed_at: u64,
    /// rw leases: holds per mode; other kinds: levels in `writes`.
    reads: u64,
    writes: u64,
    semaphore: bool,
    /// What the lease's watch told (nothing, for a lease nobody watches).
    signals: Arc<watch::Signals>,
}

impl Held {
    fn levels(&self) -> u64 {
        self.reads + self.writes
    }

    fn valid_until(&self) -> u64 {
        (self.renewed_at + self.ttl_ms * 1000).saturating_sub(MARGIN_US)
    }
}

/// One answer, read whole: status and JSON body (or the transport error).
struct Answer {
    status: u16,
    body: Value,
}

pub struct Client {
    id: usize,
    rng: StdRng,
    http: reqwest::Client,
    shared: Arc<Shared>,
    redis: Option<redisson::RedisConn>,
    redisson_id: String,
    sessions: u64,
    idem_counter: u64,
    /// The token of the last answer that carried one (kept out of the history).
    last_token: Option<String>,
}

fn outcome_of(answer: &Result<Answer, String>) -> Outcome {
    let a = match answer {
        Ok(a) => a,
        Err(e) => {
            return Outcome::Failed {
                status: None,
                what: e.clone(),
            };
        }
    };
    let b = &a.body;
    let code = b["code"].as_str().unwrap_or("").to_owned();
    match a.status {
        200 | 201 if b.get("fencing_token").is_some() && b.get("released").is_none() => {
            if b.get("lease_id").is_some()
                && b.get("expires_at").is_some()
                && b.get("kind").is_some()
            {
                Outcome::Granted {
                    status: a.status,
                    lease: b["lease_id"].as_str().unwrap_or("").to_owned(),
                    fence: b["fencing_token"].as_u64().unwrap_or(0),
                    ttl_ms: b["ttl_ms"].as_u64().unwrap_or(0),
                    count: b["reentry_count"].as_u64().unwrap_or(0),
                    kind: b["kind"].as_str().unwrap_or("").to_owned(),
                }
            } else if b["degraded"] == "not_replicated" {
                // Extended on the primary alone: a failover keeps the deadline of the last
                // renewal answered without the mark, so the client counts from that one (an
                // extension that may have happened, as for a lost answer).
                Outcome::Failed {
                    status: None,
                    what: "renewed on the primary alone".to_owned(),
                }
            } else {
                Outcome::Renewed {
                    ttl_ms: b["ttl_ms"].as_u64().unwrap_or(0),
                    fence: b["fencing_token"].as_u64().unwrap_or(0),
                }
            }
        }
        200 if b.get("removed").is_some() => Outcome::Forced {
            removed: b["removed"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .filter_map(|h| h["lease_id"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        },
        200 if b.get("released").is_some() => Outcome::Released {
            released: b["released"].as_bool().unwrap_or(false),
            count: b["reentry_count"].as_u64().unwrap_or(0),
        },
        200 if b.get("left").is_some() => Outcome::Left,
        202 => Outcome::Queued {
            ticket: b["ticket_id"].as_str().unwrap_or("").to_owned(),
        },
        404 | 410 => Outcome::Lost {
            status: a.status,
            code,
        },
        s if s >= 500 => Outcome::Failed {
            status: Some(s),
            what: code,
        },
        s => Outcome::Refused { status: s, code },
    }
}

impl Client {
    pub fn new(id: usize, seed: u64, shared: Arc<Shared>) -> Self {
        let http = leasehold::client::http_builder()
            .pool_max_idle_per_host(2)
            .connect_timeout(Duration::from_secs(2))
            .build()
            .expect("HTTP client");
        Self {
            id,
            rng: StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(id as u64)),
            http,
            shared,
            redis: None,
            redisson_id: format!("{:08x}-5afe-4c3b-9a8f-0c2b1d4e5f60", id),
            sessions: 0,
            idem_counter: 0,
            last_token: None,
        }
    }

    fn running(&self) -> bool {
        self.shared.running.load(Ordering::Relaxed)
    }

    fn now(&self) -> u64 {
        self.shared.recorder.now()
    }

    async fn pause(&mut self, max_ms: u64) {
        let ms = self.rng.random_range(0..=max_ms);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    /// Runs sessions until the run's time is up.
    pub async fn run(mut self) {
        while self.running() {
            self.sessions += 1;
            if self.id == 0 && self.shared.plan.admin {
                self.admin_round().await;
                continue;
            }
            if self.shared.plan.multileases && self.rng.random_bool(0.2) {
                self.multi_session().await;
                self.pause(50).await;
                continue;
            }
            let family = self.shared.plan.families
                [self.rng.random_range(0..self.shared.plan.families.len())];
            let names = self.shared.plan.names(family);
            let mut name = names[self.rng.random_range(0..names.len())].clone();
            // Now and then a plain lock on another family's name: kind conflicts, and names
            // that must become usable again once their fair queue or permits are gone.
            let stray = self.rng.random_bool(0.05);
            // (Not on a RedLock name: a plain lock of that name lives on the main Redis, another
            // lock altogether.)
            // (Nor on an election's: its lock is `election/<name>`, another name.)
            if stray
                && !matches!(
                    family,
                    Family::Reentrant | Family::Redlock | Family::Election
                )
            {
                let kind = "reentrant";
                self.lock_session(name, family, kind).await;
                continue;
            }
            match family {
                Family::Semaphore => self.semaphore_session(name).await,
                Family::Reentrant if self.shared.plan.redisson && self.rng.random_bool(0.2) => {
                    self.redisson_session(std::mem::take(&mut name)).await;
                }
                Family::Reentrant => self.lock_session(name, family, "reentrant").await,
                Family::Exclusive => self.lock_session(name, family, "exclusive").await,
                Family::Fair => self.lock_session(name, family, "fair").await,
                Family::Redlock => self.lock_session(name, family, "redlock").await,
                Family::Election => self.election_session(name).await,
                Family::Rw => {
                    let kind = if self.rng.random_bool(0.6) {
                        "read"
                    } else {
                        "write"
                    };
                    self.lock_session(name, family, kind).await;
                }
            }
            self.pause(50).await;
        }
    }

    /// Sends one HTTP request to a random live instance and records it.
    #[allow(clippy::too_many_arguments)]
    async fn call(
        &mut self,
        name: &str,
        family: Family,
        method: reqwest::Method,
        path: String,
        body: Option<Value>,
        token: Option<&str>,
        idempotency: Option<&str>,
        timeout: Duration,
        request: Request,
    ) -> Op {
        self.call_read(
            name,
            family,
            method,
            path,
            body,
            token,
            idempotency,
            timeout,
            request,
            outcome_of,
        )
        .await
    }

    /// [`Self::call`], with the answer read by `read` (an election's answers say other things
    /// than a lock's: see `election.rs`).
    #[allow(clippy::too_many_arguments)]
    async fn call_read(
        &mut self,
        name: &str,
        family: Family,
        method: reqwest::Method,
        path: String,
        body: Option<Value>,
        token: Option<&str>,
        idempotency: Option<&str>,
        timeout: Duration,
        request: Request,
        read: fn(&Result<Answer, String>) -> Outcome,
    ) -> Op {
        let (instance, send, answer) = self
            .send(method, path, body, token, idempotency, timeout)
            .await;
        let outcome = read(&answer);
        self.last_token = answer
            .as_ref()
            .ok()
            .and_then(|a| a.body["token"].as_str().map(str::to_owned));
        let echo = answer
            .as_ref()
            .ok()
            .filter(|a| (200..300).contains(&a.status))
            .map(|a| {
                let text = |keys: &[&str]| {
                    keys.iter()
                        .find_map(|k| a.body[*k].as_str())
                        .map(str::to_owned)
                };
                // (An election's admin answer names its lock, `election/<name>`.)
                let lock = text(&["election", "lock", "semaphore"]).map(|l| {
                    l.strip_prefix("election/")
                        .filter(|_| family == Family::Election)
                        .map_or(l.clone(), str::to_owned)
                });
                Echo {
                    lock,
                    lease: text(&["lease_id", "ticket_id", "candidate_id"]),
                    holder: text(&["holder"]),
                }
            });
        self.shared.recorder.record_answer(
            self.id, instance, name, family, send, request, outcome, echo,
        )
    }

    /// Sends one HTTP request to a random live instance: which, when (µs), and the answer.
    async fn send(
        &mut self,
        method: reqwest::Method,
        path: String,
        body: Option<Value>,
        token: Option<&str>,
        idempotency: Option<&str>,
        timeout: Duration,
    ) -> (usize, u64, Result<Answer, String>) {
        let n = self.shared.targets.len().max(1);
        let mut instance = self.rng.random_range(0..n);
        let mut url = self.shared.targets.url(instance);
        for i in 0..n {
            if url.is_some() {
                break;
            }
            instance = i;
            url = self.shared.targets.url(i);
        }
        let send = self.now();
        let answer = match url {
            None => Err("no instance up".to_owned()),
            Some(url) => {
                let mut req = self
                    .http
                    .request(method, format!("{url}{path}"))
                    .timeout(timeout);
                if let Some(body) = body {
                    req = req.json(&body);
                }
                if let Some(token) = token {
                    req = req.bearer_auth(token);
                }
                if let Some(key) = idempotency {
                    req = req.header("idempotency-key", key);
                }
                match req.send().await {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        match resp.bytes().await {
                            Ok(bytes) => Ok(Answer {
                                status,
                                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                            }),
                            Err(e) => Err(format!("body: {e}")),
                        }
                    }
                    Err(e) if e.is_timeout() => Err("timeout".to_owned()),
                    Err(e) => Err(format!("transport: {e}")),
                }
            }
        };
        (instance, send, answer)
    }

    fn idem_key(&mut self) -> String {
        self.idem_counter += 1;
        format!(
            "c{}-s{}-k{}-{:08x}",
            self.id,
            self.sessions,
            self.idem_counter,
            self.rng.random::<u32>()
        )
    }

    /// The token of the last 201 or 202 (kept apart from the history, which never holds
    /// secrets).
    fn token_of_last(&self) -> String {
        self.last_token.clone().unwrap_or_default()
    }

    #[allow(clippy::too_many_arguments)]
    fn new_held(
        &self,
        name: &str,
        family: Family,
        kind: &str,
        lease: String,
        token: String,
        fence: u64,
        ttl_ms: u64,
        renewed_at: u64,
    ) -> Held {
        Held {
            name: name.to_owned(),
            family,
            lease,
            token,
            kind: kind.to_owned(),
            fence,
            ttl_ms,
            renewed_at,
            reads: u64::from(kind == "read"),
            writes: u64::from(kind != "read"),
            semaphore: family == Family::Semaphore && kind == "semaphore",
            signals: Arc::default(),
        }
    }
}
