//! Where a lease lives, decided once when it is granted and written into its id, so that
//! every later call (heartbeat, release, inspect, watch, eviction) goes to that store without
//! asking any other.
//!
//! A lease id is a UUID made from its token's digest ([`LeaseToken::lease_id_in`]); its
//! version nibble is the lease's family, which this module names. Family 8 is the main Redis's:
//! every lease id made before families existed is one, so a lease taken by an older instance
//! keeps working across an upgrade (a RedLock lease taken by an older instance, made in
//! family 8 too, is looked for on the main Redis and not found: see the book's upgrade notes).

use crate::locks::{LeaseId, LeaseToken};

/// The stores a lease can live in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Placement {
    /// The main Redis (`--redis-url`): every lock kind and semaphore.
    Main,
    /// The RedLock nodes (`--redlock-nodes`), held by a majority of them.
    Redlock,
    /// A multilease's record on the main Redis, whose members are main leases.
    Multi,
    /// An election's candidate: a fair lock's ticket and lease on the main Redis, under the
    /// election's own name (`elections::ElectionName::lock`).
    Election,
}

impl Placement {
    const FAMILIES: [(Self, u8); 4] = [
        (Self::Main, LeaseId::MAIN_FAMILY),
        (Self::Redlock, 9),
        (Self::Multi, 10),
        (Self::Election, 11),
    ];

    /// The id family (UUID version nibble) of this store's leases.
    pub fn family(self) -> u8 {
        Self::FAMILIES
            .iter()
            .find(|(p, _)| *p == self)
            .map_or(LeaseId::MAIN_FAMILY, |(_, f)| *f)
    }

    /// Where lease `id` lives; an id of no known family (no lease of ours) is looked for on
    /// the main Redis, which answers that it does not know it.
    pub fn of(id: LeaseId) -> Self {
        let family = id.family();
        Self::FAMILIES
            .iter()
            .find(|(_, f)| *f == family)
            .map_or(Self::Main, |(p, _)| *p)
    }

    /// The id of this store's lease `token` proves.
    pub fn lease_id(self, token: &LeaseToken) -> LeaseId {
        token.lease_id_in(self.family())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_id_says_where_its_lease_lives() {
        let token = LeaseToken::generate();
        for placement in [
            Placement::Main,
            Placement::Redlock,
            Placement::Multi,
            Placement::Election,
        ] {
            let id = placement.lease_id(&token);
            assert_eq!(Placement::of(id), placement);
            assert!(token.proves(id));
        }
        // Every id made before families existed is the main Redis's.
        assert_eq!(Placement::of(token.lease_id()), Placement::Main);
        let v4 = LeaseId::parse("6f1c2a4e-8b1d-4c3e-9f00-112233445566").expect("a uuid");
        assert_eq!(Placement::of(v4), Placement::Main);
    }
}
