//! The clients: each does, at random (from its own seeded generator), what users do. Lock
//! sessions acquire (waiting or not), re-enter, heartbeat on time, late or never, touch the
//! fenced resource while they believe they hold, and release one level, all levels, by mode,
//! or not at all. Fair tickets are polled, polled again after their grant, polled by two
//! connections at once, left, or abandoned. Semaphores take several permits. One client is
//! an admin that force-releases now and then, and some sessions are a Redisson client
//! running Redisson's own RLock scripts on the reentrant names.
//!
//! A client writes to the resource only while it believes it holds: before the send time of
//! its last successful grant or renewal plus the TTL, less a margin; the pauser (see
//! `--fault holder-pause`) breaks that rule on purpose.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::{Value, json};

use crate::cluster::{ADMIN_TOKEN, Targets};
use crate::history::{Family, Op, Outcome, Recorder, Request};
use crate::resource::Resources;

/// A belief margin: a client stops using a lease this long before its TTL could run out.
const MARGIN_US: u64 = 60_000;
/// Answers later than their wait plus this are given up on (and counted late by the checker).
pub const CLIENT_SLACK: Duration = Duration::from_secs(6);

/// Redisson's RLock scripts, verbatim (RedissonLock.tryLockInnerAsync, renewExpirationAsync,
/// unlockInnerAsync), with Redisson's KEYS and ARGV.
const REDISSON_LOCK: &str = "if (redis.call('exists', KEYS[1]) == 0) then redis.call('hset', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);";
const REDISSON_RENEW: &str = "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('pexpire', KEYS[1], ARGV[1]); return 1; end; return 0;";
const REDISSON_UNLOCK: &str = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1; end; return nil;";

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
    /// Cleared when the run's time is up: clients finish their session and stop.
    pub running: AtomicBool,
    /// Set while the holder-pause fault is on: sessions of the pauser overstay on purpose.
    pub pausing: AtomicBool,
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
    redis: Option<redis::aio::MultiplexedConnection>,
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
            let family = self.shared.plan.families
                [self.rng.random_range(0..self.shared.plan.families.len())];
            let names = self.shared.plan.names(family);
            let mut name = names[self.rng.random_range(0..names.len())].clone();
            // Now and then a plain lock on another family's name: kind conflicts, and names
            // that must become usable again once their fair queue or permits are gone.
            let stray = self.rng.random_bool(0.05);
            if stray && family != Family::Reentrant {
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
        let outcome = outcome_of(&answer);
        self.last_token = answer
            .as_ref()
            .ok()
            .and_then(|a| a.body["token"].as_str().map(str::to_owned));
        self.shared
            .recorder
            .record(self.id, instance, name, family, send, request, outcome)
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

    async fn lock_session(&mut self, name: String, family: Family, kind: &'static str) {
        let ttl_ms = self.rng.random_range(300..=1500);
        let wait_ms = if self.rng.random_bool(0.4) {
            0
        } else {
            self.rng.random_range(50..=1500)
        };
        // A client that disconnects mid-wait.
        let gave_up_ms = (wait_ms > 200 && self.rng.random_bool(0.05))
            .then(|| self.rng.random_range(50..wait_ms));
        let timeout = match gave_up_ms {
            Some(ms) => Duration::from_millis(ms),
            None => Duration::from_millis(wait_ms) + CLIENT_SLACK,
        };
        let op = self
            .call(
                &name,
                family,
                reqwest::Method::POST,
                format!("/v1/locks/{name}/leases?wait_ms={wait_ms}"),
                Some(json!({"kind": kind, "ttl_ms": ttl_ms, "holder": format!("c{}", self.id)})),
                None,
                None,
                timeout,
                Request::Acquire {
                    kind,
                    ttl_ms: Some(ttl_ms),
                    wait_ms,
                    reentry_of: None,
                    idempotency: None,
                    gave_up_ms,
                },
            )
            .await;
        match op.outcome {
            Outcome::Granted {
                lease,
                fence,
                ttl_ms,
                ..
            } => {
                let token = self.token_of_last();
                let held = self.new_held(&name, family, kind, lease, token, fence, ttl_ms, op.send);
                self.hold(held).await;
            }
            Outcome::Queued { ticket } => {
                let token = self.token_of_last();
                self.ticket_session(name, family, ticket, token, ttl_ms)
                    .await;
            }
            _ => {}
        }
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
        }
    }

    async fn ticket_session(
        &mut self,
        name: String,
        family: Family,
        ticket: String,
        token: String,
        ttl_ms: u64,
    ) {
        let plan = self.rng.random_range(0..20);
        if plan == 0 {
            return; // abandoned: never polled; it must stop blocking others by itself
        }
        if plan == 1 {
            let path = format!("/v1/locks/{name}/tickets/{ticket}");
            self.call(
                &name,
                family,
                reqwest::Method::DELETE,
                path,
                None,
                Some(&token),
                None,
                CLIENT_SLACK,
                Request::Leave {
                    ticket: ticket.clone(),
                },
            )
            .await;
            return;
        }
        for _ in 0..20 {
            if !self.running() {
                // Give the place up rather than leave it to expire.
                let path = format!("/v1/locks/{name}/tickets/{ticket}");
                self.call(
                    &name,
                    family,
                    reqwest::Method::DELETE,
                    path,
                    None,
                    Some(&token),
                    None,
                    CLIENT_SLACK,
                    Request::Leave {
                        ticket: ticket.clone(),
                    },
                )
                .await;
                return;
            }
            let wait_ms = self.rng.random_range(0..=800);
            let twice_at_once = self.rng.random_bool(0.1);
            let (a, b) = if twice_at_once {
                let mut other = Client::new(self.id, self.rng.random(), self.shared.clone());
                let (a, b) = tokio::join!(
                    self.poll(&name, family, &ticket, &token, wait_ms),
                    other.poll(&name, family, &ticket, &token, wait_ms)
                );
                (a, Some(b))
            } else {
                (
                    self.poll(&name, family, &ticket, &token, wait_ms).await,
                    None,
                )
            };
            let granted =
                [Some(&a), b.as_ref()]
                    .into_iter()
                    .flatten()
                    .find_map(|op| match &op.outcome {
                        Outcome::Granted { fence, ttl_ms, .. } => Some((op.send, *fence, *ttl_ms)),
                        _ => None,
                    });
            let gone = [Some(&a), b.as_ref()]
                .into_iter()
                .flatten()
                .any(|op| matches!(op.outcome, Outcome::Lost { .. } | Outcome::Refused { .. }));
            if let Some((send, fence, granted_ttl)) = granted {
                // A 410 from the other poll at once does not take the grant back: a poll
                // must never release the lease its ticket was granted.
                let mut held = self.new_held(
                    &name,
                    family,
                    "fair",
                    ticket.clone(),
                    token.clone(),
                    fence,
                    if granted_ttl > 0 { granted_ttl } else { ttl_ms },
                    send,
                );
                // Polled again in a row after the grant: must answer with the same grant (or
                // a clear 409/410) and never give the lease back.
                if self.rng.random_bool(0.3) {
                    self.poll(&name, family, &ticket, &token, 0).await;
                }
                held.renewed_at = held.renewed_at.min(send);
                self.hold(held).await;
                return;
            }
            if gone {
                return;
            }
        }
    }

    async fn poll(
        &mut self,
        name: &str,
        family: Family,
        ticket: &str,
        token: &str,
        wait_ms: u64,
    ) -> Op {
        self.call(
            name,
            family,
            reqwest::Method::POST,
            format!("/v1/locks/{name}/tickets/{ticket}?wait_ms={wait_ms}"),
            None,
            Some(token),
            None,
            Duration::from_millis(wait_ms) + CLIENT_SLACK,
            Request::Poll {
                ticket: ticket.to_owned(),
                wait_ms,
            },
        )
        .await
    }

    /// Uses the lease: resource, reentries, heartbeats, partial releases; then lets go.
    async fn hold(&mut self, mut h: Held) {
        #[derive(Clone, Copy, PartialEq)]
        enum Beat {
            OnTime,
            Late,
            Never,
        }
        let beat = match self.rng.random_range(0..10) {
            0..=5 => Beat::OnTime,
            6..=7 => Beat::Late,
            _ => Beat::Never,
        };
        let pauser = self.id == 1 && self.shared.pausing.load(Ordering::Relaxed);
        let steps = self.rng.random_range(1..=6);
        self.touch(&h).await;
        for _ in 0..steps {
            if !self.running() {
                break;
            }
            let alive = match self.rng.random_range(0..10) {
                0..=2 => {
                    self.touch(&h).await;
                    true
                }
                3..=4 if !h.semaphore => self.reenter(&mut h).await,
                5 if h.levels() > 1 => self.release(&mut h, false).await,
                _ => {
                    let nap = match beat {
                        Beat::Late => h.ttl_ms + 100,
                        _ => self.rng.random_range(0..=h.ttl_ms / 2),
                    };
                    tokio::time::sleep(Duration::from_millis(nap)).await;
                    if beat != Beat::Never {
                        self.heartbeat(&mut h).await
                    } else {
                        true
                    }
                }
            };
            if !alive {
                return;
            }
            if beat == Beat::OnTime
                && self.now() > h.renewed_at + h.ttl_ms * 1000 / 3
                && !self.heartbeat(&mut h).await
            {
                return;
            }
        }
        if pauser {
            // Stop heartbeating past the TTL, then write anyway: fencing must stop it once
            // a newer holder has written.
            tokio::time::sleep(Duration::from_millis(h.ttl_ms + 300)).await;
            self.resource_op(&h, true).await;
            return;
        }
        match self.rng.random_range(0..20) {
            0..=11 => {
                self.release(&mut h, true).await;
            }
            12..=16 => {
                // Level by level (bounded: a client whose count is off gets refusals).
                for _ in 0..8 {
                    if h.levels() == 0 || !self.release(&mut h, false).await {
                        break;
                    }
                }
            }
            _ => {} // abandoned: it must expire by itself
        }
    }

    /// A fenced operation on the name's resource, if the client still believes it holds.
    async fn touch(&mut self, h: &Held) {
        if self.now() >= h.valid_until() {
            return;
        }
        let exclusive = h.writes > 0 && h.kind != "semaphore";
        if h.semaphore {
            return;
        }
        self.resource_op(h, exclusive).await;
    }

    async fn resource_op(&mut self, h: &Held, exclusive: bool) {
        let send = self.now();
        let resources = self.shared.resources.clone();
        let outcome = if exclusive {
            match resources.read(&h.name, h.fence) {
                Err(seen) => Outcome::ResourceRejected { seen },
                Ok(v) => {
                    // The gap where another holder could sneak in.
                    self.pause(5).await;
                    match resources.write(&h.name, h.fence, v + 1) {
                        Ok(()) => Outcome::ResourceOk { wrote: Some(v + 1) },
                        Err(seen) => Outcome::ResourceRejected { seen },
                    }
                }
            }
        } else {
            match resources.check(&h.name, h.fence) {
                Ok(()) => Outcome::ResourceOk { wrote: None },
                Err(seen) => Outcome::ResourceRejected { seen },
            }
        };
        self.shared.recorder.record(
            self.id,
            usize::MAX,
            &h.name,
            h.family,
            send,
            Request::Resource {
                lease: h.lease.clone(),
                fence: h.fence,
                write: exclusive,
            },
            outcome,
        );
    }

    /// One more level; false when the lease turned out to be gone.
    async fn reenter(&mut self, h: &mut Held) -> bool {
        if h.kind == "exclusive" && !self.rng.random_bool(0.2) {
            return true;
        }
        let kind: &'static str = match h.kind.as_str() {
            "read" | "write" => {
                let downgrade = h.writes > 0 && self.rng.random_bool(0.4);
                let upgrade = h.writes == 0 && self.rng.random_bool(0.05);
                // The same mode again; a downgrade (write, then read); rarely an upgrade,
                // which must be refused.
                if downgrade || (h.writes == 0 && !upgrade) {
                    "read"
                } else {
                    "write"
                }
            }
            "fair" => "fair",
            "exclusive" => "exclusive",
            _ => "reentrant",
        };
        // Sometimes a longer TTL (it must then hold for every level), sometimes the lease's.
        let ttl_ms = match self.rng.random_range(0..4) {
            0 => Some(h.ttl_ms * self.rng.random_range(2..=3)),
            1 => Some(h.ttl_ms),
            _ => None,
        };
        let idem =
            (self.shared.plan.idempotency && self.rng.random_bool(0.3)).then(|| self.idem_key());
        let mut body = json!({"kind": kind});
        if let Some(ttl) = ttl_ms {
            body["ttl_ms"] = json!(ttl);
        }
        let name = h.name.clone();
        let token = h.token.clone();
        let request = Request::Acquire {
            kind,
            ttl_ms,
            wait_ms: 0,
            reentry_of: Some(h.lease.clone()),
            idempotency: idem.clone(),
            gave_up_ms: None,
        };
        let path = format!("/v1/locks/{name}/leases?wait_ms=0");
        let op = self
            .call(
                &name,
                h.family,
                reqwest::Method::POST,
                path.clone(),
                Some(body.clone()),
                Some(&token),
                idem.as_deref(),
                CLIENT_SLACK,
                request.clone(),
            )
            .await;
        // A retry of the same request, as after a lost answer: it must not add a level.
        let op = if idem.is_some() && self.rng.random_bool(0.5) {
            self.call(
                &name,
                h.family,
                reqwest::Method::POST,
                path,
                Some(body),
                Some(&token),
                idem.as_deref(),
                CLIENT_SLACK,
                request,
            )
            .await
        } else {
            op
        };
        match op.outcome {
            Outcome::Granted { count, ttl_ms, .. } => {
                if kind == "read" && h.kind != "read" && h.kind != "write" {
                    return true;
                }
                if kind == "read" {
                    h.reads += 1;
                } else {
                    h.writes += 1;
                }
                // The server's count is the truth (a replay answers the first count).
                if h.kind == "read" || h.kind == "write" {
                    let total = h.reads + h.writes;
                    if count < total {
                        if kind == "read" {
                            h.reads -= total - count;
                        } else {
                            h.writes -= total - count;
                        }
                    }
                } else {
                    h.writes = count;
                }
                h.ttl_ms = ttl_ms;
                h.renewed_at = op.send;
                true
            }
            Outcome::Lost { .. } => false,
            // A failed reentry might have happened: stop using the lease.
            Outcome::Failed { .. } => false,
            _ => true,
        }
    }

    async fn heartbeat(&mut self, h: &mut Held) -> bool {
        let path = if h.semaphore {
            format!("/v1/semaphores/{}/leases/{}/heartbeat", h.name, h.lease)
        } else {
            format!("/v1/locks/{}/leases/{}/heartbeat", h.name, h.lease)
        };
        let name = h.name.clone();
        let token = h.token.clone();
        let op = self
            .call(
                &name,
                h.family,
                reqwest::Method::POST,
                path,
                None,
                Some(&token),
                None,
                CLIENT_SLACK,
                Request::Heartbeat {
                    lease: h.lease.clone(),
                    ttl_ms: None,
                    semaphore: h.semaphore,
                },
            )
            .await;
        match op.outcome {
            Outcome::Renewed { ttl_ms, .. } => {
                h.ttl_ms = ttl_ms;
                h.renewed_at = op.send;
                true
            }
            Outcome::Lost { .. } => false,
            // Unknown: keep going on the old belief (it runs out by itself).
            _ => true,
        }
    }

    /// Releases one level (by mode, sometimes) or all; false when the lease is over.
    async fn release(&mut self, h: &mut Held, all: bool) -> bool {
        let mode: Option<&'static str> = if (h.kind == "read" || h.kind == "write") && !all {
            match self.rng.random_range(0..3) {
                0 if h.reads > 0 => Some("read"),
                1 if h.writes > 0 => Some("write"),
                _ => None,
            }
        } else {
            None
        };
        let path = if h.semaphore {
            format!("/v1/semaphores/{}/leases/{}", h.name, h.lease)
        } else {
            let mut p = format!("/v1/locks/{}/leases/{}?all={all}", h.name, h.lease);
            if let Some(m) = mode {
                p.push_str(&format!("&mode={m}"));
            }
            p
        };
        let idem = (self.shared.plan.idempotency && !h.semaphore && self.rng.random_bool(0.3))
            .then(|| self.idem_key());
        let request = Request::Release {
            lease: h.lease.clone(),
            all,
            mode,
            semaphore: h.semaphore,
            idempotency: idem.clone(),
        };
        let name = h.name.clone();
        let token = h.token.clone();
        let op = self
            .call(
                &name,
                h.family,
                reqwest::Method::DELETE,
                path.clone(),
                None,
                Some(&token),
                idem.as_deref(),
                CLIENT_SLACK,
                request.clone(),
            )
            .await;
        let op = if idem.is_some() && self.rng.random_bool(0.5) {
            self.call(
                &name,
                h.family,
                reqwest::Method::DELETE,
                path,
                None,
                Some(&token),
                idem.as_deref(),
                CLIENT_SLACK,
                request,
            )
            .await
        } else {
            op
        };
        match op.outcome {
            Outcome::Released { released, count } => {
                if released || all || h.semaphore {
                    h.reads = 0;
                    h.writes = 0;
                    return false;
                }
                let which = mode.unwrap_or(if h.writes > 0 { "write" } else { "read" });
                if which == "write" && h.writes > 0 {
                    h.writes -= 1;
                } else if h.reads > 0 {
                    h.reads -= 1;
                }
                if h.kind != "read" && h.kind != "write" {
                    h.writes = count;
                }
                count > 0
            }
            // Refused (mode_not_held, ...): still held, but this client's count is off.
            Outcome::Refused { .. } => !h.semaphore && self.rng.random_bool(0.5),
            _ => false,
        }
    }

    async fn semaphore_session(&mut self, name: String) {
        let limit = self.shared.plan.semaphore_limit;
        let permits = self.rng.random_range(1..=limit);
        let ttl_ms = self.rng.random_range(300..=1500);
        let wait_ms = if self.rng.random_bool(0.4) {
            0
        } else {
            self.rng.random_range(50..=1500)
        };
        let op = self
            .call(
                &name,
                Family::Semaphore,
                reqwest::Method::POST,
                format!("/v1/semaphores/{name}/leases?wait_ms={wait_ms}"),
                Some(json!({"limit": limit, "permits": permits, "ttl_ms": ttl_ms,
                    "holder": format!("c{}", self.id)})),
                None,
                None,
                Duration::from_millis(wait_ms) + CLIENT_SLACK,
                Request::AcquirePermits {
                    permits,
                    limit,
                    ttl_ms,
                    wait_ms,
                },
            )
            .await;
        if let Outcome::Granted {
            lease,
            fence,
            ttl_ms,
            ..
        } = op.outcome
        {
            let token = self.token_of_last();
            let mut held = self.new_held(
                &name,
                Family::Semaphore,
                "semaphore",
                lease,
                token,
                fence,
                ttl_ms,
                op.send,
            );
            held.semaphore = true;
            self.hold(held).await;
        }
    }

    async fn redisson_session(&mut self, name: String) {
        if self.redis.is_none() {
            match redis::Client::open(self.shared.redis_url.as_str()) {
                Ok(c) => self.redis = c.get_multiplexed_async_connection().await.ok(),
                Err(_) => return,
            }
        }
        let holder = format!("{}:{}", self.redisson_id, self.sessions);
        let ttl_ms: u64 = self.rng.random_range(300..=1500);
        for _ in 0..10 {
            if !self.running() {
                return;
            }
            let send = self.now();
            let result = self
                .eval(
                    REDISSON_LOCK,
                    std::slice::from_ref(&name),
                    &[ttl_ms.to_string(), holder.clone()],
                )
                .await;
            let outcome = match &result {
                Ok(redis::Value::Nil) => Outcome::RedissonLocked,
                Ok(redis::Value::Int(pttl)) => Outcome::RedissonBusy { pttl: *pttl },
                Ok(other) => Outcome::Failed {
                    status: None,
                    what: format!("{other:?}"),
                },
                Err(e) => Outcome::Failed {
                    status: None,
                    what: e.to_string(),
                },
            };
            let locked = outcome == Outcome::RedissonLocked;
            let busy = matches!(outcome, Outcome::RedissonBusy { .. });
            self.shared.recorder.record(
                self.id,
                usize::MAX,
                &name,
                Family::Reentrant,
                send,
                Request::RedissonLock {
                    holder: holder.clone(),
                    ttl_ms,
                },
                outcome,
            );
            if locked {
                let mut renewed_at = send;
                let rounds = self.rng.random_range(0..3);
                for _ in 0..rounds {
                    self.pause(ttl_ms / 2).await;
                    let send = self.now();
                    let ok = matches!(
                        self.eval(
                            REDISSON_RENEW,
                            std::slice::from_ref(&name),
                            &[ttl_ms.to_string(), holder.clone()]
                        )
                        .await,
                        Ok(redis::Value::Int(1))
                    );
                    self.shared.recorder.record(
                        self.id,
                        usize::MAX,
                        &name,
                        Family::Reentrant,
                        send,
                        Request::RedissonRenew {
                            holder: holder.clone(),
                            ttl_ms,
                        },
                        Outcome::RedissonDone { ok },
                    );
                    if !ok {
                        return;
                    }
                    renewed_at = send;
                }
                if self.now() + 50_000 < renewed_at + ttl_ms * 1000 {
                    self.pause(ttl_ms / 3).await;
                }
                let send = self.now();
                let channel = format!("redisson_lock__channel:{{{name}}}");
                let ok = matches!(
                    self.eval(
                        REDISSON_UNLOCK,
                        &[name.clone(), channel],
                        &["0".to_owned(), ttl_ms.to_string(), holder.clone()]
                    )
                    .await,
                    Ok(redis::Value::Int(1))
                );
                self.shared.recorder.record(
                    self.id,
                    usize::MAX,
                    &name,
                    Family::Reentrant,
                    send,
                    Request::RedissonUnlock {
                        holder: holder.clone(),
                    },
                    Outcome::RedissonDone { ok },
                );
                return;
            }
            if !busy {
                return;
            }
            self.pause(100).await;
        }
    }

    async fn eval(
        &mut self,
        script: &str,
        keys: &[String],
        args: &[String],
    ) -> redis::RedisResult<redis::Value> {
        let Some(conn) = self.redis.as_mut() else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "no connection",
            )));
        };
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
        tokio::time::timeout(Duration::from_secs(2), cmd.query_async(conn))
            .await
            .unwrap_or_else(|_| Err(redis::RedisError::from((redis::ErrorKind::Io, "timeout"))))
    }

    async fn admin_round(&mut self) {
        tokio::time::sleep(Duration::from_millis(self.rng.random_range(1500..=3500))).await;
        if !self.running() {
            return;
        }
        let family =
            self.shared.plan.families[self.rng.random_range(0..self.shared.plan.families.len())];
        let names = self.shared.plan.names(family);
        let name = names[self.rng.random_range(0..names.len())].clone();
        let semaphore = family == Family::Semaphore;
        let path = if semaphore {
            format!("/v1/admin/semaphores/{name}?reason=harness")
        } else {
            format!("/v1/admin/locks/{name}?reason=harness")
        };
        self.call(
            &name,
            family,
            reqwest::Method::DELETE,
            path,
            None,
            Some(ADMIN_TOKEN),
            None,
            CLIENT_SLACK,
            Request::ForceRelease { semaphore },
        )
        .await;
    }
}
