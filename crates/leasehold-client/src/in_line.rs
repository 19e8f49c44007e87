//! Where a candidate waiting in line stands ([`InLine`]), and the hook a kept campaign tells
//! it to ([`OnInLine`], `CampaignOptions::on_in_line`): `clients/PROTOCOL.md`, "Why the wait".
//! [`Client::stand`](crate::Client::stand) and [`Client::poll_candidate`](crate::Client::poll_candidate)
//! answer the whole [`CandidateBody`] already; [`Client::campaign`](crate::Client::campaign)
//! polls for its caller, so without the hook a candidate waiting minutes could not say where
//! it stands.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::{CandidateBody, LeaderBody};

/// Where a candidate stands, as one answer in line (a 202) tells it: `InLine::from(&waiting.candidate)`
/// for a [`Standing::InLine`](crate::Standing::InLine) of one's own.
#[derive(Debug, Clone, PartialEq)]
pub struct InLine {
    /// 1 is next (`None` only from a server that did not say).
    pub position: Option<u64>,
    /// Who leads now (its `holder`, `value`, `term`, ...); `None` when nobody does.
    pub leader: Option<LeaderBody>,
    /// The server's estimate of the wait until this candidate leads; `None` until the
    /// election has three ended terms to go by (not zero: zero is an estimate).
    pub estimated_wait: Option<Duration>,
}

impl From<&CandidateBody> for InLine {
    fn from(candidate: &CandidateBody) -> Self {
        Self {
            position: candidate.position,
            leader: candidate.leader.clone(),
            estimated_wait: candidate.estimated_wait_ms.map(Duration::from_millis),
        }
    }
}

/// A hook [`Client::campaign`](crate::Client::campaign) calls with each answer in line (the
/// campaign's own 202, then each poll's), never after the term is granted. It runs on the
/// campaign's task, between two requests: keep it quick. A hook that panics unwinds through
/// the campaign as any panic does, and the place in line is left in the background, as when
/// the campaign is dropped in line.
#[derive(Clone)]
pub struct OnInLine(Arc<dyn Fn(&InLine) + Send + Sync>);

impl OnInLine {
    pub fn new(hook: impl Fn(&InLine) + Send + Sync + 'static) -> Self {
        Self(Arc::new(hook))
    }

    pub(crate) fn tell(&self, candidate: &CandidateBody) {
        (self.0)(&InLine::from(candidate));
    }
}

impl fmt::Debug for OnInLine {
    // A closure shows nothing useful; `CampaignOptions` stays `Debug` all the same.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OnInLine(..)")
    }
}
