//! One instance's view of an account between flushes: the charges gathered for it, the sizes
//! Redis had for their members at the last call, and the **advance**: room in the account
//! that this instance took ahead (a member `r:<instance>` of its own), from which it admits
//! acquires without a Redis call until the advance is spent. The advance counts in the
//! account like any part, so the instances together never take an account past its cap: each
//! flush brings the charges the advance covered and takes what they spent out of it, then
//! grows it back if the account has room. An instance that stops renewing it (it died, or
//! its callers went quiet) frees it within [`ADVANCE_LIFE`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::charge::{Charge, Kind};

/// How long an advance lasts in Redis after the call that renewed it.
pub const ADVANCE_LIFE: Duration = Duration::from_secs(2);
/// How long this instance spends from an advance after a call renewed it: flushes (every
/// 250 ms) renew it well before Redis ends it.
const ADVANCE_USE: Duration = Duration::from_millis(1_000);

/// The account as this instance sees it.
#[derive(Default)]
pub(super) struct Local {
    /// Charges gathered since the last flush, folded by member, in order.
    pending: Vec<Charge>,
    /// Each pending member's place in `pending` and its size once its charge applies.
    planned: HashMap<String, (usize, u64)>,
    /// The sizes Redis had for the members of the last call.
    known: HashMap<String, u64>,
    /// What the pending charges add beyond `known`: the most they can grow the account.
    used: u64,
    /// The advance this instance holds, and until when it spends from it.
    advance: u64,
    usable_until: Option<Instant>,
}

impl Local {
    fn known(&self, member: &str) -> u64 {
        self.known.get(member).copied().unwrap_or(0)
    }

    /// `member`'s size once what is gathered applies.
    fn base(&self, member: &str) -> u64 {
        self.planned
            .get(member)
            .map_or_else(|| self.known(member), |&(_, size)| size)
    }

    /// The member's size once `charge` applies too.
    fn planned_size(&self, charge: &Charge) -> u64 {
        let base = self.base(&charge.member);
        match charge.kind {
            Kind::Set => charge.bytes,
            Kind::Add => base.saturating_add(charge.bytes).min(charge.most).max(base),
            Kind::Touch | Kind::Room => base,
            Kind::Del => 0,
        }
    }

    /// What `member` at `size` adds beyond what Redis has.
    fn beyond_known(&self, member: &str, size: u64) -> u64 {
        size.saturating_sub(self.known(member))
    }

    /// What `charge` adds to `used`, and the member's size after it.
    fn effect(&self, charge: &Charge) -> (u64, u64, u64) {
        let before = self.beyond_known(&charge.member, self.base(&charge.member));
        let size = self.planned_size(charge);
        (before, self.beyond_known(&charge.member, size), size)
    }

    /// Gathers `charges` for the next flush (never refused).
    pub(super) fn gather(&mut self, charges: impl IntoIterator<Item = Charge>) {
        for charge in charges {
            let (before, after, size) = self.effect(&charge);
            self.used = self.used.saturating_add(after).saturating_sub(before);
            match self.planned.get_mut(&charge.member) {
                Some((at, planned)) => {
                    *planned = size;
                    let earlier = &mut self.pending[*at];
                    if earlier.fresh && charge.kind == Kind::Del {
                        // Never sent: nothing to send for it (a fresh Del is skipped).
                        earlier.kind = Kind::Del;
                    } else {
                        earlier.absorb(charge);
                    }
                }
                None => {
                    self.planned
                        .insert(charge.member.clone(), (self.pending.len(), size));
                    self.pending.push(charge);
                }
            }
        }
    }

    /// Admits `charges` against the advance and gathers them; false when the advance cannot
    /// cover them (there is none, it is spent, or it ends soon): then Redis decides.
    pub(super) fn admit(&mut self, charges: &[Charge], now: Instant) -> bool {
        if self.usable_until.is_none_or(|until| now >= until) {
            return false;
        }
        let growth: u64 = charges
            .iter()
            .map(|c| {
                let (before, after, _) = self.effect(c);
                after.saturating_sub(before)
            })
            .sum();
        if self.used.saturating_add(growth) > self.advance {
            return false;
        }
        self.gather(charges.iter().cloned());
        true
    }

    /// Whether a call to Redis should ask for an advance (this instance has none in use).
    pub(super) fn wants_advance(&self, now: Instant) -> bool {
        self.usable_until.is_none_or(|until| now >= until)
    }

    /// Redis applied charges to `members`, which now have these sizes; the advance is
    /// `advance` (when the call asked for one).
    pub(super) fn learned(
        &mut self,
        members: impl IntoIterator<Item = (String, u64)>,
        advance: Option<u64>,
        now: Instant,
    ) {
        self.known.extend(members);
        if let Some(advance) = advance {
            self.renewed(advance, now);
        }
    }

    fn renewed(&mut self, advance: u64, now: Instant) {
        self.advance = advance;
        self.usable_until = (advance > 0).then(|| now + ADVANCE_USE);
    }

    /// What the next flush sends: the gathered charges and what they spent of the advance.
    /// Until its answer comes, what they spent is out of the advance here too.
    pub(super) fn take(&mut self) -> (Vec<Charge>, u64) {
        let spent = self.used;
        self.advance = self.advance.saturating_sub(spent);
        self.used = 0;
        self.planned.clear();
        let mut charges = std::mem::take(&mut self.pending);
        charges.retain(|c| !(c.fresh && c.kind == Kind::Del));
        (charges, spent)
    }

    /// The flush went through: Redis has `sizes` for the members it sent, and the advance is
    /// `advance`.
    pub(super) fn flushed(&mut self, sizes: HashMap<String, u64>, advance: u64, now: Instant) {
        self.known = sizes;
        self.renewed(advance, now);
    }

    /// The flush failed: whatever this instance holds in Redis is unknown, so it spends no
    /// more of it.
    pub(super) fn lost_track(&mut self) {
        self.known.clear();
        self.renewed(0, Instant::now());
    }

    /// Whether nothing is gathered (the account went quiet).
    pub(super) fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_advance_admits_until_what_it_covers_is_spent() {
        let now = Instant::now();
        let mut local = Local::default();
        assert!(!local.admit(&[Charge::set("n:a".into(), 100, 0)], now));
        local.learned([], Some(250), now);
        assert!(local.admit(&[Charge::set("n:a".into(), 100, 0)], now));
        // The same member again grows nothing more.
        assert!(local.admit(&[Charge::set("n:a".into(), 100, 0)], now));
        assert!(local.admit(&[Charge::set("l:x".into(), 150, 0)], now));
        assert!(!local.admit(&[Charge::set("l:y".into(), 1, 0)], now));
        // A freed record gives its room back.
        local.gather([Charge::del("l:x".into())]);
        assert!(local.admit(&[Charge::new_record("l:y".into(), 150, 0)], now));
        // A new record gone before it was sent is not sent.
        local.gather([
            Charge::new_record("l:z".into(), 10, 0),
            Charge::del("l:z".into()),
        ]);
        let (charges, spent) = local.take();
        let members: Vec<&str> = charges.iter().map(|c| c.member.as_str()).collect();
        assert_eq!((members, spent), (vec!["n:a", "l:x", "l:y"], 250));
        // What Redis already has counts no more.
        local.flushed(HashMap::from([("n:a".into(), 100)]), 250, now);
        assert!(local.admit(&[Charge::set("n:a".into(), 100, 0)], now));
        assert_eq!(local.used, 0);
        // A history at its most grows no more.
        local.learned([("h:a".into(), 900)], None, now);
        let entry = Charge::add("h:a".into(), 448, 900, 0);
        assert!(local.admit(std::slice::from_ref(&entry), now));
        assert_eq!(local.used, 0);
        // Past its time the advance admits nothing.
        assert!(!local.admit(&[entry], now + ADVANCE_USE));
    }
}
