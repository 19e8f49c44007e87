//! What an operator may do to locks and semaphores, owned once: force release (a lock, a
//! semaphore, or whatever a name is held as), evict one lease, set a semaphore's limit. One
//! policy for the reason given, one audit entry per action; the API (`/v1/admin`) and the
//! dashboard's forms are thin adapters over it, so the two cannot drift apart. It acts
//! through the leases layer, so a name's RedLock leases are removed on every RedLock node.

mod revoke;

use serde_json::json;

pub use self::revoke::{MAX_GRACE_MS, RevokedLease};

use crate::audit::{self, AuditEntry, AuditLog};
use crate::auth::Principal;
use crate::leases::election::ElectionName;
use crate::leases::{LeaseError, Leases};
use crate::locks::{ForcedRelease, HeldAs, LeaseId, LimitChange, LockError, LockName, Resource};
use crate::problem::{Problem, ProblemKind};

/// Why an operator acted: one line of at most `--max-reason-chars` characters, kept in the
/// lock's history and the audit log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reason(String);

/// Why a reason was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReasonError {
    /// A line break would start a forged line in a text log or a history view.
    #[error("a reason may not hold control characters (line breaks, tabs)")]
    ControlCharacter,
    #[error("a reason has at most {0} characters (--max-reason-chars)")]
    TooLong(usize),
}

impl ReasonError {
    /// The problem for a reason given in the query string (or a form): a control character
    /// is a bad query (400 `invalid_query`); a reason in a JSON body answers
    /// [`Self::in_body`].
    pub fn in_query(self) -> Problem {
        let kind = match self {
            Self::ControlCharacter => ProblemKind::InvalidQuery,
            Self::TooLong(_) => ProblemKind::ReasonTooLong,
        };
        Problem::new(kind, self.to_string())
    }

    /// The problem for a reason given in a JSON body: a control character makes the body
    /// invalid (422 `invalid_body`), not the query.
    pub fn in_body(self) -> Problem {
        let kind = match self {
            Self::ControlCharacter => ProblemKind::InvalidBody,
            Self::TooLong(_) => ProblemKind::ReasonTooLong,
        };
        Problem::new(kind, self.to_string())
    }
}

impl Reason {
    /// What [`Reason::parse`] takes, as a pattern for the API's document: white space around
    /// (trimmed), and no control character (Unicode's `Cc`) in between. Written as every
    /// regex dialect that reads the document takes it (ECMA-262, Go's, Python's, Rust's):
    /// `\xHH` below U+0100 and the characters themselves above, never `\uHHHH` (Go's
    /// regexp refuses it: kin-openapi, under oapi-codegen, could not load the document).
    pub const PATTERN: &'static str = concat!(
        "^[\\t-\\r \\x85\\xA0\u{1680}\u{2000}-\u{200A}\u{2028}\u{2029}\u{202F}\u{205F}\u{3000}]*",
        "[^\\x00-\\x1F\\x7F-\\x9F]*",
        "[\\t-\\r \\x85\\xA0\u{1680}\u{2000}-\u{200A}\u{2028}\u{2029}\u{202F}\u{205F}\u{3000}]*$",
    );

    /// A reason as given (trimmed); refused when it holds a control character or is longer
    /// than `max` characters.
    pub fn parse(raw: &str, max: usize) -> Result<Self, ReasonError> {
        let raw = raw.trim();
        if raw.chars().any(char::is_control) {
            return Err(ReasonError::ControlCharacter);
        }
        if raw.chars().count() > max {
            return Err(ReasonError::TooLong(max));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a force release is aimed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aim {
    /// The lock of that name; a semaphore's name works too (its permits come back).
    Lock,
    /// The semaphore; with `clear`, the semaphore itself goes as well (its counter and limit).
    Semaphore { clear: bool },
}

/// An operator acting: who (for the records), and in which key space.
pub struct Operator<'a> {
    pub principal: &'a Principal,
    /// The principal's stores (in its key space).
    pub leases: Leases,
    pub audit: &'a AuditLog,
    /// How the records name who did it (a key's name, `admin token`, `dashboard admin`).
    pub by: String,
}

impl Operator<'_> {
    /// Removes every holder of `name` and wakes its waiters; the removed leases' holders get
    /// 410 from then on. Recorded in the lock's history and the audit log.
    pub async fn force_release(
        &self,
        name: &LockName,
        aim: Aim,
        reason: &Reason,
    ) -> Result<ForcedRelease, Problem> {
        self.principal.check_name(name)?;
        let (resource, clear, action) = match aim {
            Aim::Lock => (Resource::Lock, false, "force_release"),
            Aim::Semaphore { clear: false } => {
                (Resource::Semaphore, false, "force_release_semaphore")
            }
            Aim::Semaphore { clear: true } => {
                (Resource::Semaphore, true, "force_release_semaphore_clear")
            }
        };
        let forced = match self.release_as(resource, name, reason, clear).await {
            // A semaphore's name on the lock route: its permits come back, as on the
            // semaphore route.
            Err(LeaseError::Lock(LockError::KindConflict {
                held_as: HeldAs::Semaphore,
            })) if aim == Aim::Lock => {
                self.release_as(Resource::Semaphore, name, reason, false)
                    .await?
            }
            forced => forced?,
        };
        self.record(action, name.as_str(), reason, audit::removed(&forced))
            .await;
        Ok(forced)
    }

    /// Ends the current term of election `name` (its leader's lease): the next candidate
    /// leads with a higher term. Recorded like a force release.
    pub async fn end_term(
        &self,
        name: &ElectionName,
        reason: &Reason,
    ) -> Result<ForcedRelease, Problem> {
        self.principal.check_name(name.name())?;
        let forced = self
            .leases
            .end_term(name, &self.by, reason.as_str())
            .await?;
        self.record(
            "end_term",
            &name.lock().to_string(),
            reason,
            audit::removed(&forced),
        )
        .await;
        Ok(forced)
    }

    async fn release_as(
        &self,
        resource: Resource,
        name: &LockName,
        reason: &Reason,
        clear: bool,
    ) -> Result<ForcedRelease, LeaseError> {
        self.leases
            .force_release(resource, name, &self.by, reason.as_str(), clear)
            .await
    }

    /// Removes one lease of `name` (a dead reader among three, one holder's permits) and
    /// leaves the others; `resource` `None`: whatever the name is held as now. Recorded like a
    /// force release.
    pub async fn evict(
        &self,
        resource: Option<Resource>,
        name: &LockName,
        id: LeaseId,
        reason: &Reason,
    ) -> Result<ForcedRelease, Problem> {
        self.principal.check_name(name)?;
        let resource = match resource {
            Some(resource) => resource,
            None => self.held_as(name).await?,
        };
        let evicted = self
            .leases
            .evict(resource, name, id, &self.by, reason.as_str())
            .await?;
        self.record("evict", name.as_str(), reason, audit::removed(&evicted))
            .await;
        Ok(evicted)
    }

    /// Gives the semaphore `name` another size (1 to `max`). With fewer permits than are out,
    /// acquirers wait until enough come back; nobody is evicted.
    pub async fn set_limit(
        &self,
        name: &LockName,
        limit: u32,
        max: u32,
    ) -> Result<LimitChange, Problem> {
        self.principal.check_name(name)?;
        if !(1..=max).contains(&limit) {
            return Err(Problem::new(
                ProblemKind::InvalidBody,
                format!("limit must be between 1 and {max}"),
            ));
        }
        let change = self
            .leases
            .locks()
            .set_semaphore_limit(name, limit, &self.by)
            .await?;
        self.record(
            "semaphore_limit",
            name.as_str(),
            &Reason::default(),
            json!({"limit": change.limit, "previous": change.previous}),
        )
        .await;
        Ok(change)
    }

    /// The routes of whatever `name` is held as now (a lock, or a semaphore).
    pub async fn held_as(&self, name: &LockName) -> Result<Resource, Problem> {
        Ok(self
            .leases
            .lock(name)
            .await?
            .and_then(|view| view.kind)
            .map_or(Resource::Lock, HeldAs::resource))
    }

    async fn record(
        &self,
        action: &str,
        target: &str,
        reason: &Reason,
        details: serde_json::Value,
    ) {
        self.audit
            .record(&AuditEntry {
                at_ms: crate::locks::wall_ms(),
                by: self.by.clone(),
                action: action.to_owned(),
                tenant: self.principal.tenant.clone(),
                target: target.to_owned(),
                reason: reason.as_str().to_owned(),
                details,
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_one_line_and_not_too_long() {
        assert_eq!(
            Reason::parse("  stuck job ", 20).map(|r| r.0).ok(),
            Some("stuck job".to_owned())
        );
        assert_eq!(
            Reason::parse("a\nb", 20),
            Err(ReasonError::ControlCharacter)
        );
        assert_eq!(
            Reason::parse(&"x".repeat(21), 20),
            Err(ReasonError::TooLong(20))
        );
        assert!(
            Reason::parse(&"é".repeat(20), 20).is_ok(),
            "characters, not bytes"
        );
    }

    #[test]
    fn the_documented_pattern_takes_exactly_the_reasons_taken() {
        let pattern = regex::Regex::new(Reason::PATTERN).expect("a valid pattern");
        for raw in [
            "stuck job",
            "  stuck job \n",
            "\t\r\n",
            "",
            "é ü",
            "\u{a0}\n\u{a0}x\n",
            "a\nb",
            "\u{1c}a",
            "a\u{85}b",
            "x\u{7f}",
            "x\u{9f}y",
        ] {
            assert_eq!(
                pattern.is_match(raw),
                Reason::parse(raw, 500).is_ok(),
                "{raw:?}"
            );
        }
    }
}
