//! What an election's observer is told: each term once, in the order Redis granted them
//! (from the election's terms log, not from the order instances happen to publish events),
//! and a vacancy when nobody leads. [`Observed`] remembers what one observer was told, so
//! each look at the election tells it only what changed since.

use super::{ElectionView, Leader};
use crate::locks::feed::terms::{LOG_START, TermEntry, Terms};
use crate::locks::{LeaseId, Timestamp};

/// A change an observer is told of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A new term (or, at the start, the current one). `id`: its place in the terms log,
    /// which an observer resumes after (`None` when it was seen before it was read there).
    Leader {
        term: u64,
        value: Option<String>,
        holder: Option<String>,
        since: Option<Timestamp>,
        candidate_id: Option<LeaseId>,
        id: Option<String>,
    },
    /// Nobody leads; `term` was the last.
    Vacant { term: u64, id: Option<String> },
    /// Terms may be missing: the log no longer reaches back to where the observer was.
    Gap,
}

impl Change {
    fn leader(entry: &TermEntry) -> Self {
        Self::Leader {
            term: entry.term,
            value: entry.value.clone(),
            holder: entry.holder.clone(),
            since: Some(entry.since),
            candidate_id: entry.candidate_id,
            id: Some(entry.id.clone()),
        }
    }

    fn from_view(leader: &Leader, id: Option<String>) -> Self {
        Self::Leader {
            term: leader.term,
            value: leader.value.clone(),
            holder: leader.holder.clone(),
            since: leader.since,
            candidate_id: leader.candidate_id,
            id,
        }
    }
}

/// What one observer was told.
#[derive(Debug, Default)]
pub struct Observed {
    /// The last terms-log entry it was told of (or passed).
    last_id: Option<String>,
    /// The last term it was told of.
    term: u64,
    /// Whether it was last told that someone leads, and the value it was told.
    leading: bool,
    value: Option<String>,
    started: bool,
}

/// The SSE id of a vacancy after log entry `id`.
const VACANT_SUFFIX: &str = ".v";

impl Observed {
    /// An observer that resumes after the message with id `last` (`Last-Event-ID`); `None`
    /// when the id is none of ours.
    pub fn resuming(last: &str) -> Option<Self> {
        let (entry, leading) = match last.strip_suffix(VACANT_SUFFIX) {
            Some(entry) => (entry, false),
            None => (last, true),
        };
        let (ms, seq) = entry.split_once('-')?;
        if ms.parse::<u64>().is_err() || seq.parse::<u64>().is_err() {
            return None;
        }
        Some(Self {
            last_id: Some(entry.to_owned()),
            term: 0,
            leading,
            value: None,
            started: true,
        })
    }

    /// Where the next read of the terms log starts (after this entry); `None`: read its last
    /// term only.
    pub fn after(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// The SSE id of a vacancy now.
    fn vacant_id(&self) -> Option<String> {
        self.last_id
            .as_ref()
            .map(|id| format!("{id}{VACANT_SUFFIX}"))
    }

    /// The changes since what was told, given the terms read after [`Self::after`] and the
    /// election as it is now (read after them).
    pub fn changes(&mut self, terms: Terms, now: &ElectionView) -> Vec<Change> {
        if !self.started {
            return self.first(terms, now);
        }
        let mut told = Vec::new();
        if terms.gap {
            told.push(Change::Gap);
        }
        if self.term == 0 {
            // Resumed: the term of the entry it resumed after, as the log has it. (Not the
            // election's term now: a term granted after the log was read would be taken as
            // told, and skipped when the log gives it; the harness's reply-lost runs saw it.)
            self.term = terms.after_term.unwrap_or(0);
        }
        for entry in &terms.entries {
            self.last_id = Some(entry.id.clone());
            // A new value in the term it was told of: told once (a proclamation run twice is
            // logged twice).
            let proclaimed = entry.proclaimed && entry.term == self.term && self.leading;
            if proclaimed && entry.value != self.value {
                self.value = entry.value.clone();
                told.push(Change::leader(entry));
                continue;
            }
            // Told already, from the view, before the log was read that far.
            if entry.term <= self.term {
                continue;
            }
            self.term = entry.term;
            self.leading = true;
            self.value = entry.value.clone();
            told.push(Change::leader(entry));
        }
        if self.term == 0 && terms.gap {
            // Resumed where the log no longer reaches: it starts again from the election's
            // term (after its `resync`).
            self.term = now.term;
        }
        // A term read in the view but not yet in the log comes with its own wake-up: only
        // the log says which came first. A vacancy is the view's to say.
        if now.leader.is_none() && self.leading {
            self.leading = false;
            told.push(Change::Vacant {
                term: self.term,
                id: self.vacant_id(),
            });
        }
        told
    }

    /// The first look: the current state only (the leader, or a vacancy after the last term).
    fn first(&mut self, terms: Terms, now: &ElectionView) -> Vec<Change> {
        self.started = true;
        let last = terms.entries.last();
        // An election with no term yet: the next read starts at the log's beginning, so
        // the first terms are each told (reading "its last term only" would skip all but
        // the last of them).
        self.last_id = Some(last.map_or_else(|| LOG_START.to_owned(), |e| e.id.clone()));
        self.term = now.term.max(last.map_or(0, |e| e.term));
        match &now.leader {
            Some(leader) => {
                self.leading = true;
                self.value = leader.value.clone();
                self.term = self.term.max(leader.term);
                let id = last.filter(|e| e.term == leader.term).map(|e| e.id.clone());
                vec![Change::from_view(leader, id)]
            }
            None => {
                self.leading = false;
                vec![Change::Vacant {
                    term: self.term,
                    id: self.vacant_id(),
                }]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, term: u64) -> TermEntry {
        TermEntry {
            id: id.to_owned(),
            candidate_id: None,
            term,
            holder: None,
            value: Some(format!("v{term}")),
            since: Timestamp(term),
            proclaimed: false,
        }
    }

    fn proclaimed(id: &str, term: u64, value: &str) -> TermEntry {
        TermEntry {
            value: Some(value.to_owned()),
            proclaimed: true,
            ..entry(id, term)
        }
    }

    fn view(leader: Option<u64>, term: u64) -> ElectionView {
        ElectionView {
            leader: leader.map(|t| Leader {
                candidate_id: None,
                term: t,
                value: Some(format!("v{t}")),
                holder: None,
                since: Some(Timestamp(t)),
                expires_at: None,
            }),
            term,
            candidates: Vec::new(),
            candidates_waiting: 0,
        }
    }

    fn terms(entries: Vec<TermEntry>) -> Terms {
        Terms {
            entries,
            gap: false,
            after_term: None,
        }
    }

    fn kinds(changes: &[Change]) -> Vec<String> {
        changes
            .iter()
            .map(|c| match c {
                Change::Leader { term, .. } => format!("leader {term}"),
                Change::Vacant { term, .. } => format!("vacant {term}"),
                Change::Gap => "gap".into(),
            })
            .collect()
    }

    #[test]
    fn every_term_is_told_once_in_log_order_then_the_vacancy() {
        let mut seen = Observed::default();
        let first = seen.changes(terms(vec![entry("1-0", 10)]), &view(Some(10), 10));
        assert_eq!(kinds(&first), ["leader 10"]);
        // Two terms came and went between two looks; the view shows a third already, which
        // the log has not given yet: told in the log's order, the third when the log has it.
        let next = seen.changes(
            terms(vec![entry("2-0", 20), entry("3-0", 30)]),
            &view(Some(40), 40),
        );
        assert_eq!(kinds(&next), ["leader 20", "leader 30"]);
        let after = seen.changes(terms(vec![entry("4-0", 40)]), &view(None, 40));
        assert_eq!(kinds(&after), ["leader 40", "vacant 40"]);
        assert_eq!(
            after.last(),
            Some(&Change::Vacant {
                term: 40,
                id: Some("4-0.v".into())
            })
        );
        // Nothing new: nothing told.
        assert!(seen.changes(terms(vec![]), &view(None, 40)).is_empty());
    }

    #[test]
    fn a_new_value_in_the_term_is_told_once() {
        let mut seen = Observed::default();
        seen.changes(terms(vec![entry("1-0", 10)]), &view(Some(10), 10));
        let told = seen.changes(
            terms(vec![
                proclaimed("2-0", 10, "new"),
                proclaimed("3-0", 10, "new"),
                entry("4-0", 20),
                // A late proclamation of an ended term: not the leader's any more.
                proclaimed("5-0", 10, "late"),
            ]),
            &view(Some(20), 20),
        );
        let values: Vec<_> = told
            .iter()
            .map(|c| match c {
                Change::Leader { term, value, .. } => format!("{term} {value:?}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(values, ["10 Some(\"new\")", "20 Some(\"v20\")"]);
    }

    #[test]
    fn a_first_look_tells_the_current_state_only() {
        let mut vacant = Observed::default();
        let told = vacant.changes(terms(vec![entry("5-0", 50)]), &view(None, 50));
        assert_eq!(kinds(&told), ["vacant 50"]);
        // A term granted between the log's read and the view's: told from the view, and not
        // again when the log gives it.
        let mut racing = Observed::default();
        let told = racing.changes(terms(vec![entry("5-0", 50)]), &view(Some(60), 60));
        assert_eq!(kinds(&told), ["leader 60"]);
        let again = racing.changes(terms(vec![entry("6-0", 60)]), &view(Some(60), 60));
        assert!(again.is_empty(), "{again:?}");
        assert_eq!(racing.after(), Some("6-0"));
    }

    #[test]
    fn a_resumed_observer_gets_the_terms_it_missed_or_a_gap() {
        let mut resumed = Observed::resuming("2-0").expect("an id");
        let told = resumed.changes(
            terms(vec![entry("3-0", 30), entry("4-0", 40)]),
            &view(Some(40), 40),
        );
        assert_eq!(kinds(&told), ["leader 30", "leader 40"]);
        let mut after_vacancy = Observed::resuming("4-0.v").expect("an id");
        assert!(
            after_vacancy
                .changes(terms(vec![]), &view(None, 40))
                .is_empty()
        );
        let mut trimmed = Observed::resuming("1-0").expect("an id");
        let told = trimmed.changes(
            Terms {
                entries: vec![entry("9-0", 90)],
                gap: true,
                after_term: None,
            },
            &view(Some(90), 90),
        );
        assert_eq!(kinds(&told), ["gap", "leader 90"]);
        assert!(Observed::resuming("nonsense").is_none());
        assert!(Observed::resuming("1-x").is_none());
    }

    /// An observer that came before the first term is told every term from the first, not
    /// only the last of those granted before its next look (the election bench showed it).
    #[test]
    fn an_observer_of_an_election_with_no_term_yet_is_told_each_first_term() {
        let mut seen = Observed::default();
        let first = seen.changes(terms(vec![]), &view(None, 0));
        assert_eq!(kinds(&first), ["vacant 0"]);
        assert_eq!(seen.after(), Some(LOG_START));
        let next = seen.changes(
            terms(vec![entry("1-0", 10), entry("2-0", 20), entry("3-0", 30)]),
            &view(Some(30), 30),
        );
        assert_eq!(kinds(&next), ["leader 10", "leader 20", "leader 30"]);
    }

    /// A resumed observer whose first look read the log before a grant and the election
    /// after it: the new term is told when the log gives it, not taken as told already.
    #[test]
    fn a_resumed_observer_is_told_a_term_granted_between_its_two_reads() {
        let mut resumed = Observed::resuming("1-0").expect("an id");
        let first = resumed.changes(
            Terms {
                entries: vec![],
                gap: false,
                after_term: Some(10),
            },
            &view(Some(20), 20),
        );
        assert!(first.is_empty(), "{first:?}");
        let next = resumed.changes(terms(vec![entry("2-0", 20)]), &view(Some(20), 20));
        assert_eq!(kinds(&next), ["leader 20"]);
    }
}
