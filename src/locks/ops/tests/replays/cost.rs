//! What the usual calls cost Redis: a measurement run by hand, not a check.

use super::*;

/// Redis's `usec_per_call` of FCALL in `INFO commandstats`, and how many calls it counts.
async fn fcall_cost(lab: &Lab) -> (f64, u64) {
    let info: String = lab.query(redis::cmd("INFO").arg("commandstats")).await;
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_fcall:"))
        .unwrap_or_default();
    let field = |name: &str| {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or("0")
            .to_owned()
    };
    (
        field("usec_per_call").parse().unwrap_or(0.0),
        field("calls").parse().unwrap_or(0),
    )
}

/// What one call of each usual function costs Redis (µs, `INFO commandstats`): a new lease on
/// a free lock of each kind and its release, and a semaphore's permit. Not a check: run it
/// by hand (`--ignored --nocapture`) before and after a change to those paths.
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn usual_calls_cost() {
    const NAMES: usize = 500;
    const ROUNDS: usize = 7;
    let lab = Lab::start().await;
    let policy = TtlPolicy {
        default_ms: 30_000,
        min_ms: 1,
        max_ms: 3_600_000,
    };
    let mut out = BTreeMap::<String, Vec<f64>>::new();
    for kind in [LeaseKind::Reentrant, LeaseKind::Read, LeaseKind::Semaphore] {
        let request = AcquireRequest {
            ttl: Some(policy.default_ttl()),
            holder: None,
            metadata: None,
            kind: Some(kind),
            policy: RwPolicy::ReadersFirst,
            idempotency: None,
            lock_delay: None,
        };
        let permits = PermitRequest {
            ttl: policy.default_ttl(),
            holder: None,
            metadata: None,
            limit: 4,
            permits: 1,
            idempotency: None,
        };
        // Round 0 warms every name up (its state hash exists, as a used name's does).
        for round in 0..=ROUNDS {
            let tokens: Vec<LeaseToken> = (0..NAMES).map(|_| LeaseToken::generate()).collect();
            let nonce = request_nonce();
            lab.query::<()>(redis::cmd("CONFIG").arg("RESETSTAT")).await;
            acquire_each(&lab, kind, &tokens, (&request, &permits), &nonce).await;
            let (acquire, _) = fcall_cost(&lab).await;
            lab.query::<()>(redis::cmd("CONFIG").arg("RESETSTAT")).await;
            release_each(&lab, kind, &tokens).await;
            let (release, _) = fcall_cost(&lab).await;
            if round > 0 {
                out.entry(format!("{} acquire", kind.as_str()))
                    .or_default()
                    .push(acquire);
                out.entry(format!("{} release", kind.as_str()))
                    .or_default()
                    .push(release);
            }
        }
    }
    for (what, mut runs) in out {
        runs.sort_by(f64::total_cmp);
        println!(
            "{what}: median {:.2} us per call (runs {runs:.2?})",
            runs[runs.len() / 2]
        );
    }
}

/// The name of the cost loop's lock `i` of `kind`.
fn cost_name(kind: LeaseKind, i: usize) -> String {
    format!("cost-{}-{i}", kind.as_str())
}

/// A new lease on each free name of `kind` (its permit for a semaphore), one call each.
async fn acquire_each(
    lab: &Lab,
    kind: LeaseKind,
    tokens: &[LeaseToken],
    (request, permits): (&AcquireRequest, &PermitRequest),
    nonce: &str,
) {
    for (i, token) in tokens.iter().enumerate() {
        let cmd = if kind == LeaseKind::Semaphore {
            Lab::fcall(
                &cost_name(kind, i),
                &SemaphoreAcquire {
                    request: permits,
                    id: token.lease_id(),
                    token,
                    nonce,
                },
            )
        } else {
            Lab::fcall(
                &cost_name(kind, i),
                &Acquire {
                    op: Op::New,
                    request,
                    id: token.lease_id(),
                    token,
                    liveness_ms: 0,
                    arrived_ms: 0,
                    nonce,
                },
            )
        };
        let reply = lab.send(&cmd).await;
        assert!(reply.contains("\"acquired\""), "{reply}");
    }
}

/// Each lease of `acquire_each` released, one call each.
async fn release_each(lab: &Lab, kind: LeaseKind, tokens: &[LeaseToken]) {
    for (i, token) in tokens.iter().enumerate() {
        let nonce = request_nonce();
        let how = ReleaseHow::Asked {
            all: false,
            mode: None,
            idempotency: None,
            nonce: &nonce,
        };
        let cmd = if kind == LeaseKind::Semaphore {
            Lab::fcall(
                &cost_name(kind, i),
                &SemaphoreRelease {
                    lease: token.lease_id(),
                    token,
                    how,
                },
            )
        } else {
            Lab::fcall(
                &cost_name(kind, i),
                &Release {
                    lease: token.lease_id(),
                    token,
                    how,
                },
            )
        };
        let reply = lab.send(&cmd).await;
        assert!(reply.contains("\"released\""), "{reply}");
    }
}
