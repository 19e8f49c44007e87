//! Multileases: several locks held as one lease, all or nothing (Redisson's RedissonMultiLock,
//! Curator's InterProcessMultiLock). Each member is an ordinary lease of its lock whose token
//! is derived from the multilease's ([`LeaseToken::member`]), so the one token proves every
//! member and Redis keeps no member token.

use super::{
    FencingToken, HolderLabel, IdempotencyKey, InvalidInput, LeaseId, LeaseKind, LeaseState,
    LeaseToken, LockDelay, LockName, Metadata, Timestamp, Ttl,
};

/// One lock a multilease asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiMember {
    pub name: LockName,
    /// A lock kind, never `Semaphore`.
    pub kind: LeaseKind,
}

/// What a client asks for when it takes several locks as one.
#[derive(Debug, Clone)]
pub struct MultiRequest {
    members: Vec<MultiMember>,
    pub ttl: Ttl,
    pub holder: Option<HolderLabel>,
    pub metadata: Option<Metadata>,
    /// A retry with the same key gets the first answer.
    pub idempotency: Option<IdempotencyKey>,
    /// Every member's lock-delay.
    pub lock_delay: Option<LockDelay>,
}

impl MultiRequest {
    /// As many members as one request may name: each is one script call to take, renew and
    /// release, and every call of a multilease touches all of them.
    pub const MAX_MEMBERS: usize = 16;

    pub fn new(
        members: Vec<MultiMember>,
        ttl: Ttl,
        holder: Option<HolderLabel>,
        metadata: Option<Metadata>,
        idempotency: Option<IdempotencyKey>,
    ) -> Result<Self, InvalidInput> {
        if members.is_empty() || members.len() > Self::MAX_MEMBERS {
            return Err(InvalidInput::Members(format!(
                "a multilease names 1 to {} locks, this names {}",
                Self::MAX_MEMBERS,
                members.len()
            )));
        }
        if let Some(m) = members.iter().find(|m| m.kind == LeaseKind::Semaphore) {
            return Err(InvalidInput::Members(format!(
                "{}: a multilease takes locks (reentrant, exclusive, fair, read, write), not semaphore permits",
                m.name
            )));
        }
        let mut names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(InvalidInput::Members(format!(
                "{} is named twice: a multilease holds each lock once",
                pair[0]
            )));
        }
        Ok(Self {
            members,
            ttl,
            holder,
            metadata,
            idempotency,
            lock_delay: None,
        })
    }

    /// The members in the order the client named them.
    pub fn members(&self) -> &[MultiMember] {
        &self.members
    }
}

/// One member of a granted multilease.
#[derive(Debug, Clone)]
pub struct MemberGrant {
    pub name: LockName,
    pub kind: LeaseKind,
    /// The member's own lease (its token is derived from the multilease's).
    pub lease_id: LeaseId,
    pub fencing_token: FencingToken,
    /// Replicas that acknowledged the member's grant (`None`: none were required).
    pub replicas_acked: Option<u32>,
    /// Set when the member's grant (or renewal) stands on its primary alone.
    pub degraded: Option<super::Degraded>,
    /// A renewal's: an operator's pending request that the member's lock be let go.
    pub revocation: Option<super::Revocation>,
}

/// A granted multilease: every member held.
#[derive(Debug, Clone)]
pub struct MultiGrant {
    pub lease_id: LeaseId,
    /// Shown in the answer that made it (and its replays).
    pub token: LeaseToken,
    /// In the order the client named them.
    pub members: Vec<MemberGrant>,
    pub holder: Option<String>,
    pub ttl_ms: u64,
    pub acquired_at: Timestamp,
    pub expires_at: Timestamp,
    /// The first answer to a retried Idempotency-Key.
    pub replayed: bool,
}

/// A multilease's heartbeat: every member renewed.
#[derive(Debug, Clone)]
pub struct MultiRenewal {
    pub lease_id: LeaseId,
    pub members: Vec<MemberGrant>,
    pub ttl_ms: u64,
    pub expires_at: Timestamp,
}

/// One member as anyone may see it.
#[derive(Debug, Clone)]
pub struct MemberView {
    pub name: LockName,
    pub kind: LeaseKind,
    pub lease_id: LeaseId,
}

/// A multilease as anyone may see it (never with its token).
#[derive(Debug, Clone)]
pub struct MultiView {
    pub lease_id: LeaseId,
    /// `Held`, `Released`, `Expired` or `ForceReleased` (a member's end ended it).
    pub state: LeaseState,
    pub members: Vec<MemberView>,
    pub holder: Option<String>,
    pub metadata: Option<Metadata>,
    pub ttl_ms: u64,
    pub acquired_at: Timestamp,
    pub expires_at: Timestamp,
    pub ended_at: Option<Timestamp>,
    /// The member whose loss ended it.
    pub lost_member: Option<String>,
    pub remaining_ms: Option<u64>,
}

/// What a member lease says of the multilease it belongs to (shown with the lock's holder).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Membership {
    pub lease_id: LeaseId,
    /// Every member's lock, in the order the client named them (those a viewer may see: see
    /// [`Membership::seen_by`]).
    pub locks: Vec<String>,
    /// Members whose names the viewer may not see (their count only).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub hidden_locks: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Membership {
    /// The membership as a viewer whose name patterns `allows` sees it: the names it may not
    /// see are counted, not named (a reader of `jobs-*` must not learn that a multilease also
    /// holds `payroll`).
    pub fn seen_by(mut self, allows: impl Fn(&str) -> bool) -> Self {
        let before = self.locks.len();
        self.locks.retain(|name| allows(name));
        self.hidden_locks += u32::try_from(before - self.locks.len()).unwrap_or(u32::MAX);
        self
    }
}

impl LeaseToken {
    /// The token of member `name` of the multilease this token proves.
    pub fn member(&self, name: &LockName) -> LeaseToken {
        self.derive(b"leasehold multilease member\0", name.as_str().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str) -> MultiMember {
        MultiMember {
            name: LockName::parse(name).expect("valid"),
            kind: LeaseKind::Reentrant,
        }
    }

    #[test]
    fn member_tokens_are_derived_apart_and_stable() {
        let token = LeaseToken::generate();
        let a = LockName::parse("a").expect("valid");
        let b = LockName::parse("b").expect("valid");
        assert_eq!(token.member(&a), token.member(&a));
        assert_ne!(token.member(&a), token.member(&b));
        assert_ne!(token.member(&a), token);
        assert_ne!(LeaseToken::generate().member(&a), token.member(&a));
        assert!(LeaseToken::parse(token.member(&a).expose()).is_ok());
    }

    #[test]
    fn a_request_names_each_lock_once_and_not_too_many() {
        let ttl = crate::locks::TtlPolicy {
            default_ms: 1000,
            min_ms: 1,
            max_ms: 10_000,
        }
        .default_ttl();
        assert!(MultiRequest::new(vec![member("a"), member("b")], ttl, None, None, None).is_ok());
        assert!(MultiRequest::new(vec![], ttl, None, None, None).is_err());
        assert!(MultiRequest::new(vec![member("a"), member("a")], ttl, None, None, None).is_err());
        let many = (0..=MultiRequest::MAX_MEMBERS)
            .map(|i| member(&format!("m{i}")))
            .collect();
        assert!(MultiRequest::new(many, ttl, None, None, None).is_err());
        let permits = MultiMember {
            kind: LeaseKind::Semaphore,
            ..member("s")
        };
        assert!(MultiRequest::new(vec![permits], ttl, None, None, None).is_err());
    }
}
