//! One run of one fault: the Redis and Leasehold instances it needs, the clients and the
//! injector until the run has done enough, then the checkers over its history.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::check::{self, Report};
use crate::cluster::{self, Acks, Cluster, RedisMode};
use crate::faults::{self, Fault};
use crate::history::{Family, Recorder};
use crate::resource::Resources;
use crate::workload::{self, Client, Plan, Shared};
use crate::{Args, Tier};

/// Whether a Cluster-mode run has shown how the names spread over the primaries.
static SPREAD_SHOWN: AtomicBool = AtomicBool::new(false);

#[allow(clippy::too_many_arguments)]
pub async fn run_fault(
    args: &Args,
    plan: &Plan,
    binary: &Path,
    fault: Fault,
    acks: Option<Acks>,
    dir: &Path,
    duration: Duration,
    tag: u32,
) -> anyhow::Result<Report> {
    let _ = std::fs::remove_dir_all(dir);
    let mode = redis_mode(args, fault, acks);
    let mut cluster = Cluster::start(
        dir,
        binary,
        fault.persistence(),
        args.instances,
        fault.needs_netns(),
        std::process::id() % 50 + tag,
        mode,
        if fault.redlock_mode() { 3 } else { 0 },
    )
    .await?;
    let mut plan = plan.clone();
    if fault.redlock_mode() && !plan.families.contains(&Family::Redlock) {
        plan.families.push(Family::Redlock);
    }
    if fault.sentinel_mode() {
        // The Redisson-layout sessions talk to one Redis address; in Sentinel mode it moves.
        // (In Cluster mode they use a cluster client: see workload/redisson.rs.)
        plan.redisson = false;
    }
    if fault.cluster_mode() {
        show_spread(&mut cluster, &plan).await?;
    }
    let shared = Arc::new(Shared {
        plan: plan.clone(),
        targets: cluster.targets.clone(),
        recorder: Arc::new(Recorder::new()),
        resources: Arc::new(Resources::default()),
        redis_url: cluster.redis_url(),
        redis_cluster: cluster.cluster_nodes(),
        running: AtomicBool::new(true),
        pausing: AtomicBool::new(false),
        hold_until: std::sync::atomic::AtomicU64::new(0),
        winding_down: AtomicBool::new(false),
    });
    let injector = tokio::spawn(faults::inject(
        fault,
        cluster,
        shared.clone(),
        args.strict_failover,
    ));
    let clients: Vec<_> = (0..plan.clients)
        .map(|id| tokio::spawn(Client::new(id, args.seed, shared.clone()).run()))
        .chain(workload::spawn_observers(&shared, args.seed))
        .collect();
    run_until_done(args, &shared, duration).await;
    shared.running.store(false, Ordering::Relaxed);
    // Every request is bounded (its wait plus a slack), so clients finish soon.
    for c in clients {
        if tokio::time::timeout(Duration::from_secs(60), c)
            .await
            .is_err()
        {
            anyhow::bail!("a client did not finish within 60 s of the end of the run");
        }
    }
    let (cluster, windows) = injector.await?;
    cluster.stop().await;
    let ops = shared.recorder.take();
    if args.dump {
        let text: String = ops.iter().map(|op| format!("{op}\n")).collect();
        std::fs::write(dir.join("history.txt"), text)?;
    }
    let totals = shared.resources.totals();
    let mut report = check::check(&ops, &windows, &totals, 1500 * 3);
    report.multileases = shared.recorder.multileases();
    Ok(report)
}

/// Standalone, or the Sentinel or Cluster setup the fault runs against (with `acks`).
fn redis_mode(args: &Args, fault: Fault, acks: Option<Acks>) -> RedisMode {
    match acks {
        Some(acks) if fault.cluster_mode() => RedisMode::Cluster(cluster::ShardPlan {
            primaries: 3,
            node_timeout_ms: args.cluster_node_timeout_ms,
            acks,
            proxied: fault == Fault::ReplyLost,
        }),
        Some(acks) => RedisMode::Sentinel(cluster::HaPlan {
            replicas: 2,
            sentinels: 3,
            acks,
            follow: !args.no_follow,
        }),
        None => RedisMode::Standalone,
    }
}

/// Returns once the run lasted `duration` (and, in the full tier, made enough acquisitions)
/// and no fault asks for more time.
async fn run_until_done(args: &Args, shared: &Shared, duration: Duration) {
    let started = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let enough = match args.tier {
            Tier::Smoke => true,
            Tier::Full => shared.recorder.acquisitions() >= args.min_acquisitions,
        };
        if started.elapsed() >= duration && enough {
            // A fault may ask for more (to see every name served again after a failover);
            // it starts no other meanwhile.
            shared.winding_down.store(true, Ordering::Relaxed);
            if shared.recorder.now() >= shared.hold_until.load(Ordering::Relaxed) {
                break;
            }
        }
    }
}

/// Cluster mode: how the workload's names spread over the primaries, shown once per
/// invocation (they must land on every shard, or a fault could miss the locks).
async fn show_spread(cluster: &mut Cluster, plan: &Plan) -> anyhow::Result<()> {
    let names: Vec<String> = plan.families.iter().flat_map(|&f| plan.names(f)).collect();
    let spread = cluster.shard_spread(&names).await?;
    if !SPREAD_SHOWN.swap(true, Ordering::Relaxed) {
        eprintln!(
            "safety: Cluster mode: lock names per primary (CLUSTER KEYSLOT): {}",
            spread
                .iter()
                .map(|(port, names)| format!(
                    "127.0.0.1:{port} {} ({})",
                    names.len(),
                    names.join(" ")
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}
