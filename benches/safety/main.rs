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
mod one_run;
mod report;
mod resource;
mod workload;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};

use crate::cluster::Acks;
use crate::faults::Fault;
use crate::history::Family;
use crate::workload::Plan;

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
    let checkers_ok = self_check();
    if args.self_check || !checkers_ok {
        return Ok(checkers_ok);
    }
    let families: Vec<Family> = args
        .kinds
        .split(',')
        .map(|k| Family::parse(k.trim()).ok_or_else(|| anyhow::anyhow!("unknown kind {k:?}")))
        .collect::<Result<_, _>>()?;
    let faults = asked_faults(&args)?;
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
    let runs = planned_runs(&args, &faults)?;
    let mut outcomes = Vec::new();
    for (n, (fault, acks)) in runs.iter().copied().enumerate() {
        if fault.needs_root() && !cluster::can_partition() {
            let why = "needs root, iproute2 and iptables".to_owned();
            eprintln!("safety: {}: SKIPPED ({why})", fault.name());
            outcomes.push(report::Outcome {
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
            one_run::run_fault(&args, &plan, &binary, fault, acks, &dir, duration, n as u32)
                .await?;
        let seconds = started.elapsed().as_secs_f64();
        let label = format!("safety {name}");
        print!("{}", check::render(&label, args.seed, &report, args.show));
        if !report.failed() && !args.keep && !args.dump {
            let _ = std::fs::remove_dir_all(&dir);
        } else {
            eprintln!("safety: logs of this run are in {}", dir.display());
        }
        outcomes.push(report::Outcome {
            fault,
            acks,
            report: Some(report),
            seconds,
            skipped: None,
        });
    }
    if let Some(path) = &args.report {
        std::fs::write(path, report::faults_md(&args, &outcomes))?;
        eprintln!("safety: wrote {}", path.display());
    }
    Ok(report::summary(&outcomes))
}

/// Runs the checkers on known histories, printing each verdict: whether all were judged
/// as stated.
fn self_check() -> bool {
    let mut checkers_ok = true;
    for (history, passed) in check::self_check() {
        println!(
            "safety self-check: {history} => {}",
            if passed { "ok" } else { "MISJUDGED" }
        );
        checkers_ok &= passed;
    }
    checkers_ok
}

/// The faults `--fault` names ("all": every one).
fn asked_faults(args: &Args) -> anyhow::Result<Vec<Fault>> {
    if args.fault == "all" {
        return Ok(Fault::ALL.to_vec());
    }
    args.fault
        .split(',')
        .map(|f| Fault::parse(f.trim()).ok_or_else(|| anyhow::anyhow!("unknown fault {f:?}")))
        .collect()
}

/// A run's name: the fault's, with the acks of a Sentinel- or Cluster-mode run.
fn run_name(fault: Fault, acks: Option<Acks>) -> String {
    match acks {
        Some(a) => format!("{} (acks {a})", fault.name()),
        None => fault.name().to_owned(),
    }
}

/// Every run of this invocation: each fault, once per acks value in its mode.
fn planned_runs(args: &Args, faults: &[Fault]) -> anyhow::Result<Vec<(Fault, Option<Acks>)>> {
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
    Ok(runs)
}
