//! The live elections of a key space (a leader, or candidates in line), for the dashboard's
//! elections view and the election metrics, and an election's history of terms.
//!
//! The elections listed are those the lock index holds under `election/` (the first
//! `limit` of them: the index lists names in order), those named among the key space's
//! recent events (the events journal: a campaign, a grant, a heartbeat, a resignation, a
//! candidate in line), and those the caller names besides (the metrics: every election they
//! saw before), each read as it is now.

use std::collections::BTreeSet;

use super::{ElectionName, ElectionView};
use crate::leases::{LeaseError, Leases};
use crate::locks::LockName;
use crate::locks::feed::journal::READ_MAX;
use crate::locks::feed::terms::{LOG_START, TERMS_READ_MAX, TermEntry};
use crate::locks::{ListCursor, NamePrefix};

/// A live election, as [`Leases::elections`] lists it.
#[derive(Debug, Clone)]
pub struct ListedElection {
    pub name: ElectionName,
    pub view: ElectionView,
}

/// The listing: at most the elections asked for, and whether more were left out.
#[derive(Debug, Default)]
pub struct Elections {
    pub elections: Vec<ListedElection>,
    pub more: bool,
}

impl Leases {
    /// Up to `limit` live elections (someone leads or waits in line), in name order: those
    /// named among the key space's recent events, and those of `also`.
    pub async fn elections(
        &self,
        limit: usize,
        also: impl IntoIterator<Item = String>,
    ) -> Result<Elections, LeaseError> {
        let recent = self.locks.events_after(None, READ_MAX).await?;
        let prefix = NamePrefix::internal(ElectionName::LOCK_PREFIX);
        let indexed = self
            .locks
            .live(&prefix, ListCursor::default(), limit.saturating_add(1))
            .await?;
        let names: BTreeSet<String> = recent
            .events
            .iter()
            .map(|(_, e)| e.lock.as_str())
            .chain(indexed.entries.iter().map(|e| e.name().as_str()))
            .filter_map(|lock| ElectionName::of_lock(lock).map(str::to_owned))
            .chain(also)
            .collect();
        let mut listed = Elections::default();
        for raw in names {
            let Ok(name) = LockName::parse(&raw) else {
                continue;
            };
            let name = ElectionName::new(name);
            let view = self.election(&name).await?;
            if view.leader.is_none() && view.candidates_waiting == 0 {
                continue;
            }
            if listed.elections.len() == limit {
                listed.more = true;
                break;
            }
            listed.elections.push(ListedElection { name, view });
        }
        Ok(listed)
    }

    /// Election `name`'s last `count` terms as its terms log keeps them (the last 300, for an
    /// hour), newest first; a proclamation (a new value in a term) is an entry of its own.
    pub async fn term_history(
        &self,
        name: &ElectionName,
        count: usize,
    ) -> Result<Vec<TermEntry>, LeaseError> {
        // From the log's start: every entry it keeps (it keeps at most TERMS_READ_MAX).
        let read = self
            .locks
            .terms_after(&name.lock(), Some(LOG_START), TERMS_READ_MAX)
            .await?;
        Ok(read.entries.into_iter().rev().take(count).collect())
    }
}
