//! FAULTS.md from a run (`--report`): one row per fault run, figures from this run.

use std::fmt::Write as _;

use crate::check::Report;
use crate::cluster::Acks;
use crate::faults::Fault;
use crate::{Args, run_name};

/// One fault run's result.
pub struct Outcome {
    pub fault: Fault,
    /// Sentinel and Cluster mode: the instances' `--min-replica-acks`.
    pub acks: Option<Acks>,
    pub report: Option<Report>,
    pub seconds: f64,
    pub skipped: Option<String>,
}

/// FAULTS.md: one row per fault, figures from this run.
pub fn faults_md(args: &Args, outcomes: &[Outcome]) -> String {
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

/// Prints the summary line of every run; whether none found a violation.
pub fn summary(outcomes: &[Outcome]) -> bool {
    let ok = outcomes
        .iter()
        .all(|o| o.report.as_ref().is_none_or(|r| !r.failed()));
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
    ok
}
