//! The safety harness: real `leasehold serve` processes (two or more) over real HTTP against a
//! real `redis-server`, many concurrent clients doing at random what users do, faults injected
//! while they run, and checkers over the recorded history (see `check/`): mutual exclusion,
//! fencing, liveness. On a violation it prints the seed and the slice of history that shows
//! it, and exits 1.
//!
//! ```text
//! cargo bench --bench safety -- --tier smoke            # every fault once, ~10 minutes (CI: ~8)
//! cargo bench --bench safety -- --tier full --report FAULTS.md
//! cargo bench --bench safety -- --fault redis-freeze --seed 7 --duration 60 --clients 32
//! cargo bench --bench safety -- --fault slot-migration,reply-lost --cluster-acks 1
//! ```
//!
//! The seed fixes every random choice of every client; the timing of a real system does not
//! repeat exactly, so a seed makes a failure likely to recur rather than certain.
//!
//! The partition faults need root (network namespace, veth, iptables); without it those
//! faults are skipped and say so.
//!
//! Modes: most faults run against one `redis-server`; the Sentinel-mode faults against a
//! master with 2 replicas and 3 Sentinels, once per `--replica-acks` value; the Cluster-mode
//! faults (cluster-failover, slot-migration, primary-partition, reply-lost) against a Redis Cluster of 3
//! primaries with 1 replica each, the instances started with `--redis-cluster`, once per
//! `--cluster-acks` value. `--fault all` runs every mode's faults.

mod check;
mod cluster;
mod faults;
mod history;
mod resource;
mod workload;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};

use crate::check::Report;
use crate::cluster::{Acks, Cluster, RedisMode};
use crate::faults::Fault;
use crate::history::{Family, Recorder};
use crate::resource::Resources;
use crate::workload::{Client, Plan, Shared};

/// Whether a Cluster-mode run has shown how the names spread over the primaries.
static SPREAD_SHOWN: AtomicBool = AtomicBool::new(false);

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Tier {
    /// Every fault once for `--duration` seconds (default 15): the CI tier.
    Smoke,
    /// Every fault until at least `--min-acquisitions` acquisitions (default 10,000).
    Full,
}

#[derive(Debug, Parser)]
#[command(about = "Randomized safety harness for Leasehold (see benches/safety/main.rs)")]
struct Args {
    /// Seed of every client's random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seconds each fault runs (smoke tier; a lower bound in the full tier).
    #[arg(long)]
    duration: Option<u64>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Lock families the clients use: reentrant, exclusive, fair, rw, semaphore, election (and
    /// redlock, only where RedLock nodes run: the redlock-node-kill fault adds it).
    #[arg(long, default_value = "reentrant,exclusive,fair,rw,semaphore,election")]
    kinds: String,
    /// Faults to run (comma-separated names, or "all"): none, redis-crash-aof-always,
    /// redis-crash-aof-everysec, redis-crash-no-persistence, redis-freeze, holder-pause,
    /// instance-kill-stop, subscriber-drop, partition, redis-full, in Sentinel mode
    /// sentinel-failover, old-master-returns, replicas-stalled, master-partition, and in
    /// Cluster mode cluster-failover, slot-migration, primary-partition, reply-lost, and
    /// with RedLock nodes redlock-node-kill (whose runs add RedLock leases to the kinds).
    #[arg(long, default_value = "all")]
    fault: String,
    #[arg(long, value_enum, default_value_t = Tier::Smoke)]
    tier: Tier,
    /// Full tier: acquisitions each fault runs for at least.
    #[arg(long, default_value_t = 10_000)]
    min_acquisitions: usize,
    /// Leasehold instances on loopback (the partition fault adds one in a namespace).
    #[arg(long, default_value_t = 2)]
    instances: usize,
    /// Lock names per family.
    #[arg(long, default_value_t = 2)]
    names: usize,
    /// Write the per-fault table to this file (FAULTS.md).
    #[arg(long)]
    report: Option<PathBuf>,
    /// The leasehold binary to test (default: this build's).
    #[arg(long)]
    leasehold_bin: Option<PathBuf>,
    /// No Redisson-layout client sessions.
    #[arg(long)]
    no_redisson: bool,
    /// No Idempotency-Key retries.
    #[arg(long)]
    no_idempotency: bool,
    /// No multilease sessions (several lock names held as one lease).
    #[arg(long)]
    no_multileases: bool,
    /// Keep each run's directory (logs, AOF) even when it passes.
    #[arg(long)]
    keep: bool,
    /// Violations printed in full per fault.
    #[arg(long, default_value_t = 3)]
    show: usize,
    /// Write each run's whole history to history.txt in its directory (kept).
    #[arg(long)]
    dump: bool,
    /// Only run the checkers on known histories (no Redis, no server), then exit. Every run
    /// does this first.
    #[arg(long)]
    self_check: bool,
    /// `--min-replica-acks` values the Sentinel-mode faults run with, each in turn (the
    /// report shows them side by side).
    #[arg(long, default_value = "2,1,0")]
    replica_acks: String,
    /// `--min-replica-acks` values the Cluster-mode faults run with, each in turn (each
    /// shard has one replica: auto waits for it while it is there, 1 always, 0 never).
    #[arg(long, default_value = "auto,1,0")]
    cluster_acks: String,
    /// Cluster mode: the nodes' `cluster-node-timeout` in ms (how long a silent primary
    /// takes to be failed over).
    #[arg(long, default_value_t = 1000)]
    cluster_node_timeout_ms: u64,
    /// Count a failover with fewer acks than replicas as losing nothing (to show the
    /// checkers catch what it loses).
    #[arg(long)]
    strict_failover: bool,
    /// Sentinel mode with instance 0 staying on the first master's address instead of
    /// following the Sentinels (a client that never follows a failover; to show what the
    /// faults catch).
    #[arg(long)]
    no_follow: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

struct Outcome {
    fault: Fault,
    /// Sentinel and Cluster mode: the instances' `--min-replica-acks`.
    acks: Option<Acks>,
    report: Option<Report>,
    seconds: f64,
    skipped: Option<String>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    tokio::select! {
        result = run(args) => match result {
            Ok(true) => std::process::ExitCode::SUCCESS,
            Ok(false) => std::process::ExitCode::FAILURE,
            Err(e) => {
                eprintln!("safety: {e:?}");
                std::process::ExitCode::from(2)
            }
        },
        signal = stop_signal() => {
            // Returning drops the runtime and with it every task's cluster: its servers and
            // Redis are killed (kill_on_drop) and a partition's namespace and rules removed.
            // Without this, a stopped run left them all running.
            eprintln!("safety: {signal}: stopped; the servers and Redis this run started go with it");
            std::process::ExitCode::from(130)
        }
    }
}

/// The first SIGINT or SIGTERM (never, if they cannot be watched).
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
    }
}

async fn run(args: Args) -> anyhow::Result<bool> {
    // The checkers first, on histories whose verdict is known: a checker that misjudges them
    // would make the run's verdict worthless.
    let mut checkers_ok = true;
    for (history, passed) in check::self_check() {
        println!(
            "safety self-check: {history} => {}",
            if passed { "ok" } else { "MISJUDGED" }
        );
        checkers_ok &= passed;
    }
    if args.self_check || !checkers_ok {
        return Ok(checkers_ok);
    }
    let families: Vec<Family> = args
        .kinds
        .split(',')
        .map(|k| Family::parse(k.trim()).ok_or_else(|| anyhow::anyhow!("unknown kind {k:?}")))
        .collect::<Result<_, _>>()?;
    let faults: Vec<Fault> = if args.fault == "all" {
        Fault::ALL.to_vec()
    } else {
        args.fault
            .split(',')
            .map(|f| Fault::parse(f.trim()).ok_or_else(|| anyhow::anyhow!("unknown fault {f:?}")))
            .collect::<Result<_, _>>()?
    };
    let binary = args
        .leasehold_bin
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_leasehold")));
    let duration = Duration::from_secs(args.duration.unwrap_or(match args.tier {
        Tier::Smoke => 15,
        Tier::Full => 60,
    }));
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "safety-{}-{}",
        std::process::id(),
        args.seed
    ));
    eprintln!(
        "safety: testing {} with {} clients, seed {}, faults: {}",
        binary.display(),
        args.clients,
        args.seed,
        faults
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let plan = Plan {
        clients: args.clients,
        families,
        names_per_family: args.names,
        semaphore_limit: 3,
        redisson: !args.no_redisson,
        admin: true,
        idempotency: !args.no_idempotency,
        multileases: !args.no_multileases,
    };
    let parse_acks = |flag: &str, raw: &str| -> anyhow::Result<Vec<Acks>> {
        raw.split(',')
            .map(|a| Acks::parse(a).ok_or_else(|| anyhow::anyhow!("bad {flag} {a:?}")))
            .collect()
    };
    let acks_values = parse_acks("--replica-acks", &args.replica_acks)?;
    let cluster_acks = parse_acks("--cluster-acks", &args.cluster_acks)?;
    let runs: Vec<(Fault, Option<Acks>)> = faults
        .iter()
        .flat_map(|&f| {
            let values = if f.sentinel_mode() {
                &acks_values
            } else if f.cluster_mode() {
                &cluster_acks
            } else {
                return vec![(f, None)];
            };
            // `auto` is `1` while every shard keeps its replica: a Cluster fault that fails
            // nothing over runs once for both (CI's time goes to the faults that differ).
            let same_as_one =
                f.cluster_mode() && !f.fails_over() && values.contains(&Acks::Count(1));
            values
                .iter()
                .filter(|&&a| !(same_as_one && a == Acks::Auto))
                .map(|&a| (f, Some(a)))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut outcomes = Vec::new();
    for (n, (fault, acks)) in runs.iter().copied().enumerate() {
        if fault.needs_root() && !cluster::can_partition() {
            let why = "needs root, iproute2 and iptables".to_owned();
            eprintln!("safety: {}: SKIPPED ({why})", fault.name());
            outcomes.push(Outcome {
                fault,
                acks,
                report: None,
                seconds: 0.0,
                skipped: Some(why),
            });
            continue;
        }
        let name = run_name(fault, acks);
        // (No spaces: Redis's config files take the directory unquoted.)
        let dir = root.join(name.replace(" (acks ", "-acks-").replace(')', ""));
        let started = Instant::now();
        let report =
            run_fault(&args, &plan, &binary, fault, acks, &dir, duration, n as u32).await?;
        let seconds = started.elapsed().as_secs_f64();
        let label = format!("safety {name}");
        print!("{}", check::render(&label, args.seed, &report, args.show));
        if !report.failed() && !args.keep && !args.dump {
            let _ = std::fs::remove_dir_all(&dir);
        } else {
            eprintln!("safety: logs of this run are in {}", dir.display());
        }
        outcomes.push(Outcome {
            fault,
            acks,
            report: Some(report),
            seconds,
            skipped: None,
        });
    }
    let ok = outcomes
        .iter()
        .all(|o| o.report.as_ref().is_none_or(|r| !r.failed()));
    if let Some(path) = &args.report {
        std::fs::write(path, faults_md(&args, &outcomes))?;
        eprintln!("safety: wrote {}", path.display());
    }
    println!(
        "safety: {} faults, {} => {}",
        outcomes.len(),
        outcomes
            .iter()
            .filter_map(|o| o.report.as_ref())
            .map(|r| format!("{} grants", r.grants))
            .collect::<Vec<_>>()
            .join(" + "),
        if ok { "ok" } else { "VIOLATIONS (see above)" }
    );
    Ok(ok)
}

/// A run's name: the fault's, with the acks of a Sentinel- or Cluster-mode run.
fn run_name(fault: Fault, acks: Option<Acks>) -> String {
    match acks {
        Some(a) => format!("{} (acks {a})", fault.name()),
        None => fault.name().to_owned(),
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_fault(
    args: &Args,
    plan: &Plan,
    binary: &std::path::Path,
    fault: Fault,
    acks: Option<Acks>,
    dir: &std::path::Path,
    duration: Duration,
    tag: u32,
) -> anyhow::Result<Report> {
    let _ = std::fs::remove_dir_all(dir);
    let mode = match acks {
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
    };
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
        // The workload's names must land on every shard, or a fault could miss the locks.
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

/// FAULTS.md: one row per fault, figures from this run.
fn faults_md(args: &Args, outcomes: &[Outcome]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Faults\n");
    let _ = writeln!(
        md,
        "One run of the safety harness's full tier: `cargo bench --bench safety -- --tier full \
         --seed {} --clients {} --names {} --report FAULTS.md` ({} Leasehold instances on \
         loopback, one more in a network namespace for the partition; one redis-server; {} \
         clients over {} names per lock family). Every figure below is copied from that run. \"Overlapping holds\" counts \
         pairs of conflicting holds by conservative bounds (see `benches/safety/check/`); those \
         across a Redis data loss are listed apart, as the book's safety guarantees say they can \
         happen. \"Semantic\" counts broken promises of the API (a replay that is not the first \
         answer, a release of one level that lets the lock go, `all=true` leaving levels), \
         except across a data loss. The Sentinel-mode faults run against a master with 2 replicas \
         and 3 Sentinels, once with each `--min-replica-acks` (the instances' replica \
         acknowledgements): with acks from every replica (2) a failover may lose no grant; \
         with fewer (1, the default `auto` with replicas; 0) the promoted replica may lack \
         grants, and overlaps after them are counted across data loss. The Cluster-mode \
         faults run against a Redis Cluster of 3 primaries with 1 replica each \
         (`cluster-node-timeout` {} ms; the instances started with `--redis-cluster`), once \
         with each `--cluster-acks` value: with 1 a failover may lose no grant; with 0 \
         overlaps across the failover are counted across data loss.\n",
        args.seed,
        args.clients,
        args.names,
        args.instances,
        args.clients,
        args.names,
        args.cluster_node_timeout_ms
    );
    let _ = writeln!(
        md,
        "| fault | what | ops | acquisitions | grants | overlapping holds | overlaps across data loss | fence regressions | lost updates | longest unavailability | waiters answered late | parked while free | names not served again | semantic | election terms (observer events: skipped, out of order; granted after leaving) | result |"
    );
    let _ = writeln!(
        md,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for o in outcomes {
        match (&o.report, &o.skipped) {
            (Some(r), _) => {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} ms | {} | {} | {} | {} | {} ({}: {}, {}; {}) | {} ({:.0} s) |",
                    run_name(o.fault, o.acks),
                    o.fault.describe(),
                    r.ops,
                    r.acquisitions,
                    r.grants,
                    r.overlaps,
                    r.expected_overlaps,
                    r.fence_regressions,
                    r.lost_updates,
                    r.longest_unavailable_us / 1000,
                    r.late_answers,
                    r.parked_while_free,
                    r.not_served_again,
                    r.semantic,
                    r.election_terms,
                    r.observed_events,
                    r.observer_skips,
                    r.observer_disorder,
                    r.granted_after_leaving,
                    if r.failed() { "VIOLATIONS" } else { "ok" },
                    o.seconds
                );
            }
            (None, why) => {
                let _ = writeln!(
                    md,
                    "| {} | {} | – | – | – | – | – | – | – | – | – | – | – | – | – | skipped: {} |",
                    run_name(o.fault, o.acks),
                    o.fault.describe(),
                    why.as_deref().unwrap_or("?")
                );
            }
        }
    }
    md
}
