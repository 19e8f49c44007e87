//! Elections, read at scrape time (as the census is, by `GET /metrics`: the metrics know no
//! lease store) from the live elections of the deployment's key space: terms started, time with nobody leading between two terms, and
//! candidates waiting in line. Counted from each election's terms log (every grant, in the
//! order Redis made them) and its history (when a term ended), not from what passed through
//! this instance: a term handed over by a resignation on another instance counts as well.
//! Every instance therefore counts the same terms: take the max over instances, not the sum.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::locks::feed::terms::TermEntry;
use crate::locks::{EventKind, LeaseId, LockEvent};

/// Most elections one scrape reads (in name order).
pub const ELECTIONS_SAMPLED: usize = 100;
/// Most elections whose place in their terms log is remembered (each is read at every
/// scrape while it is remembered).
const REMEMBERED: usize = 2 * ELECTIONS_SAMPLED;
/// Events of an election's history to read to find when its last term ended.
pub const HISTORY_READ: usize = 50;

/// `election` only with `--metrics-lock-names`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ElectionLabels {
    election: Option<String>,
}

impl EncodeLabelSet for ElectionLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel as _;
        if let Some(election) = &self.election {
            ("election", election.as_str()).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

/// How far one election's terms log was read.
#[derive(Debug, Clone, Default)]
struct Read {
    /// The last entry read.
    after: Option<String>,
    /// The candidate of the last term read (whose end the next term is measured from).
    leader: Option<LeaseId>,
}

/// The election metrics.
pub struct ElectionMetrics {
    lock_names: bool,
    /// Terms granted before this (ms since the epoch: this instance's start) are not counted.
    since_ms: u64,
    terms_started: Family<ElectionLabels, Counter>,
    leaderless: Family<ElectionLabels, Counter<f64, AtomicU64>>,
    waiting: Family<ElectionLabels, Gauge>,
    read: Mutex<HashMap<String, Read>>,
}

/// A term counted: when it started, and for how long nobody led before it (if known).
#[derive(Debug, Clone, PartialEq)]
struct Started {
    leaderless: Option<Duration>,
}

impl ElectionMetrics {
    pub fn new(lock_names: bool, since_ms: u64) -> Self {
        let m = Self {
            lock_names,
            since_ms,
            terms_started: Family::default(),
            leaderless: Family::default(),
            waiting: Family::default(),
            read: Mutex::new(HashMap::new()),
        };
        if !lock_names {
            // The usual series start at zero (see `Metrics::start_from_zero`).
            let all = ElectionLabels { election: None };
            let _ = m.terms_started.get_or_create(&all);
            let _ = m.leaderless.get_or_create(&all);
            let _ = m.waiting.get_or_create(&all);
        }
        m
    }

    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "election_terms_started",
            "Terms granted in the live elections (a new value in a term is not a term), read \
             from their terms logs at scrape time since this instance started; the same on \
             every instance",
            self.terms_started.clone(),
        );
        registry.register(
            "election_leaderless_seconds",
            "Seconds nobody led an election between two terms: from the end of a term (its \
             leader resigned, expired or an admin ended it) to the grant of the next, counted \
             when the next term starts",
            self.leaderless.clone(),
        );
        registry.register(
            "election_candidates_waiting",
            "Candidates waiting in line behind a leader (or for the lead) in the live elections",
            self.waiting.clone(),
        );
    }

    fn labels(&self, election: &str) -> ElectionLabels {
        ElectionLabels {
            election: self.lock_names.then(|| election.to_owned()),
        }
    }

    /// The elections this instance read before (found again at each scrape, whether or not
    /// the recent events name them).
    pub fn known(&self) -> Vec<String> {
        self.read
            .lock()
            .map(|read| read.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Where this instance's read of `election`'s terms log goes on from (`None`: it never
    /// read it; read it from its start).
    pub fn read_after(&self, election: &str) -> Option<String> {
        self.read
            .lock()
            .ok()
            .and_then(|read| read.get(election).and_then(|r| r.after.clone()))
    }

    /// The live elections' lines now (an election not given has nobody in line).
    pub fn set_waiting<'a>(&self, elections: impl Iterator<Item = (&'a str, u64)>) {
        self.waiting.clear();
        let mut total = 0_u64;
        for (name, waiting) in elections {
            if self.lock_names {
                self.waiting
                    .get_or_create(&self.labels(name))
                    .set(i64::try_from(waiting).unwrap_or(i64::MAX));
            }
            total = total.saturating_add(waiting);
        }
        if !self.lock_names {
            self.waiting
                .get_or_create(&ElectionLabels { election: None })
                .set(i64::try_from(total).unwrap_or(i64::MAX));
        }
    }

    /// `entries`: election `election`'s terms log read after [`Self::read_after`], in log
    /// order; `history`: its lock's history (newest first), where its terms' ends are.
    pub fn observed(&self, election: &str, entries: &[TermEntry], history: &[LockEvent]) {
        let Some(last) = entries.last() else {
            return;
        };
        let before = self
            .read
            .lock()
            .ok()
            .and_then(|read| read.get(election).and_then(|r| r.leader));
        let (started, leader) = started(entries, before, history, self.since_ms);
        let labels = self.labels(election);
        for term in started {
            self.terms_started.get_or_create(&labels).inc();
            if let Some(gap) = term.leaderless {
                self.leaderless
                    .get_or_create(&labels)
                    .inc_by(gap.as_secs_f64());
            }
        }
        if let Ok(mut read) = self.read.lock()
            && (read.len() < REMEMBERED || read.contains_key(election))
        {
            read.insert(
                election.to_owned(),
                Read {
                    after: Some(last.id.clone()),
                    leader,
                },
            );
        }
    }
}

/// The terms among `entries` (in log order) granted at or after `since_ms`, each with the time
/// nobody led before it: from its predecessor's end (in `history`, newest first) to its
/// grant. `leader`: the candidate of the term before the first entry. Also the candidate of
/// the last term.
fn started(
    entries: &[TermEntry],
    mut leader: Option<LeaseId>,
    history: &[LockEvent],
    since_ms: u64,
) -> (Vec<Started>, Option<LeaseId>) {
    let mut started = Vec::new();
    for entry in entries.iter().filter(|e| !e.proclaimed) {
        if entry.since.0 >= since_ms {
            let ended = leader.and_then(|c| ended_at(history, c));
            started.push(Started {
                leaderless: ended
                    .map(|end| Duration::from_millis(entry.since.0.saturating_sub(end))),
            });
        }
        leader = entry.candidate_id;
    }
    (started, leader)
}

/// When candidate `id`'s term ended, by the election's history.
fn ended_at(history: &[LockEvent], id: LeaseId) -> Option<u64> {
    let id = id.to_string();
    history
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::Released | EventKind::Expired | EventKind::ForceReleased
            ) || matches!(&e.kind, EventKind::Other(kind) if kind == "evicted")
        })
        .find(|e| {
            e.lease_id.as_deref() == Some(id.as_str())
                || serde_json::Value::Object(e.details.clone())
                    .to_string()
                    .contains(&id)
        })
        .map(|e| e.at_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locks::{LeaseToken, Timestamp};

    fn term(id: &str, term: u64, since: u64, candidate: LeaseId) -> TermEntry {
        TermEntry {
            id: id.to_owned(),
            candidate_id: Some(candidate),
            term,
            holder: None,
            value: None,
            since: Timestamp(since),
            proclaimed: false,
        }
    }

    fn ended(id: LeaseId, at_ms: u64) -> LockEvent {
        let lock = crate::locks::LockName::internal("election/e".into());
        let mut e = LockEvent::new(EventKind::Released, &lock, at_ms);
        e.lease_id = Some(id.to_string());
        e
    }

    #[test]
    fn a_term_counts_the_time_since_the_last_one_ended() {
        let a = LeaseToken::generate().lease_id();
        let b = LeaseToken::generate().lease_id();
        let c = LeaseToken::generate().lease_id();
        let entries = [
            term("1-0", 1, 1_000, a),
            TermEntry {
                proclaimed: true,
                ..term("2-0", 1, 1_500, a)
            },
            term("3-0", 2, 2_000, b),
            term("4-0", 3, 5_000, c),
        ];
        // b's end is known (4.5 s), a's is not in the history read.
        let history = [ended(b, 4_500)];
        let (started, leader) = started(&entries, None, &history, 0);
        assert_eq!(leader, Some(c));
        let gaps: Vec<_> = started.iter().map(|s| s.leaderless).collect();
        assert_eq!(gaps, [None, None, Some(Duration::from_millis(500))]);
        // Terms granted before the instance started are not counted.
        let (before_start, _) = super::started(&entries, None, &history, 3_000);
        assert_eq!(before_start.len(), 1);
    }
}
