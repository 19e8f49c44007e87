//! What one charge does to one member of an account, and the estimated sizes it charges.

/// Estimated sizes (bytes), from `INFO memory` measured around each kind of write on Redis
/// 7.0 (tests/api/quotas.rs holds them above what Redis measures).
pub struct Sizes;

impl Sizes {
    /// A name's state (its lock hash, state hash, names index entry, history stream).
    pub const NAME: u64 = 2_048;

    /// A lease's record, with its holder label and metadata (JSON bytes).
    pub fn lease(holder: usize, metadata: usize) -> u64 {
        1_024 + 2 * holder as u64 + 2 * metadata as u64
    }

    /// A semaphore lease's permits (measured: about 120 to 150 bytes each, whatever the
    /// holder label).
    pub fn permits(permits: u64) -> u64 {
        permits * 192
    }

    /// One history entry (JSON with the holder label, in a stream; measured: 400 to 1,000
    /// bytes with a 200-character label, less where consecutive entries look alike). A full
    /// history of heartbeats with that label measured 328 to 344 KB; at 448 + 2 × label its
    /// [`super::ENTRIES_KEPT`] entries were charged 338 KB, under the most measured. Now about
    /// 13% above it (389 KB): what Redis keeps moves with its stream's trimming.
    pub fn entry(holder: usize) -> u64 {
        576 + 2 * holder as u64
    }
}

/// What a charge does to its member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Its size is `bytes`.
    Set,
    /// Its size grows by `bytes`, up to `most`.
    Add,
    /// Its end moves to `until_ms` (if it is there).
    Touch,
    /// It goes.
    Del,
    /// An instance's advance (see `local`): `most` of it was spent by the charges sent with
    /// it, and it grows back to `bytes` if the account has room.
    Room,
}

impl Kind {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Set => "set",
            Self::Add => "add",
            Self::Touch => "touch",
            Self::Del => "del",
            Self::Room => "room",
        }
    }
}

/// One charge to one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub kind: Kind,
    pub member: String,
    pub bytes: u64,
    pub until_ms: u64,
    pub most: u64,
    /// The member is new (a reservation's or a new lease's record) and not sent yet: if it
    /// goes before the next flush, neither is sent.
    pub fresh: bool,
}

impl Charge {
    pub fn set(member: String, bytes: u64, until_ms: u64) -> Self {
        Self {
            kind: Kind::Set,
            member,
            bytes,
            until_ms,
            most: bytes,
            fresh: false,
        }
    }

    /// A record that Redis has not had before (a reservation, a new lease's record).
    pub fn new_record(member: String, bytes: u64, until_ms: u64) -> Self {
        Self {
            fresh: true,
            ..Self::set(member, bytes, until_ms)
        }
    }

    pub fn add(member: String, bytes: u64, most: u64, until_ms: u64) -> Self {
        Self {
            kind: Kind::Add,
            member,
            bytes,
            until_ms,
            most,
            fresh: false,
        }
    }

    pub fn touch(member: String, until_ms: u64) -> Self {
        Self {
            kind: Kind::Touch,
            member,
            bytes: 0,
            until_ms,
            most: 0,
            fresh: false,
        }
    }

    pub fn del(member: String) -> Self {
        Self {
            kind: Kind::Del,
            member,
            bytes: 0,
            until_ms: 0,
            most: 0,
            fresh: false,
        }
    }

    /// Folds `later` (for the same member) into this one: what sending both would do.
    pub(super) fn absorb(&mut self, later: Self) {
        match (self.kind, later.kind) {
            (Kind::Add, Kind::Add) => {
                self.bytes = self.bytes.saturating_add(later.bytes).min(later.most);
                self.most = later.most;
                self.until_ms = self.until_ms.max(later.until_ms);
            }
            (Kind::Set | Kind::Add | Kind::Touch, Kind::Touch) => {
                self.until_ms = self.until_ms.max(later.until_ms);
            }
            _ => *self = later,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathered_charges_fold_into_what_sending_them_all_would_do() {
        let mut first = Charge::add("h:a".into(), 10, 25, 100);
        first.absorb(Charge::add("h:a".into(), 10, 25, 200));
        first.absorb(Charge::add("h:a".into(), 10, 25, 150));
        assert_eq!(first, Charge::add("h:a".into(), 25, 25, 200));
        let mut lease = Charge::set("l:x".into(), 1000, 100);
        lease.absorb(Charge::touch("l:x".into(), 300));
        assert_eq!(lease, Charge::set("l:x".into(), 1000, 300));
        lease.absorb(Charge::del("l:x".into()));
        assert_eq!(lease.kind, Kind::Del);
    }

    #[test]
    fn sizes_grow_with_what_a_caller_chooses() {
        assert!(Sizes::lease(200, 4096) > Sizes::lease(0, 0) + 8_000);
        assert_eq!(Sizes::permits(1000), 192_000);
        assert!(Sizes::entry(200) > Sizes::entry(0) + 300);
    }
}
