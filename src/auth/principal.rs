//! Who is calling, once their credential has been checked: which tenant they act in, which
//! roles they hold, which names they may use and what they may hold at once.

use std::net::IpAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::locks::{LockName, Locks};
use crate::problem::{Problem, ProblemKind};
use crate::tenant::Tenant;

/// What a caller may do. Roles are independent: an operator's key usually has `admin` and
/// `reader`; a service's `client` (and `reader` to inspect what it waits for).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Role {
    /// Take, renew and release leases; poll and leave fair tickets.
    Client,
    /// Inspect locks, semaphores and leases; the event stream, the dashboard, `/metrics`.
    Reader,
    /// Force releases, semaphore limits, API keys and the audit log.
    Admin,
}

impl Role {
    pub const ALL: &[Self] = <Self as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(raw: &str) -> Option<Self> {
        raw.parse().ok()
    }

    fn bit(self) -> u8 {
        match self {
            Self::Client => 1,
            Self::Reader => 2,
            Self::Admin => 4,
        }
    }
}

/// A set of roles.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Roles(u8);

impl Roles {
    pub const ALL: Self = Self(7);

    pub fn of(roles: &[Role]) -> Self {
        Self(roles.iter().fold(0, |bits, r| bits | r.bit()))
    }

    pub fn contains(self, role: Role) -> bool {
        self.0 & role.bit() != 0
    }

    pub fn to_vec(self) -> Vec<Role> {
        Role::ALL
            .iter()
            .copied()
            .filter(|r| self.contains(*r))
            .collect()
    }
}

/// The lock and semaphore names a key may use: globs over the name alphabet where `*`
/// stands for any run of characters (`jobs:*`, `*-report`, `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamePatterns(Vec<String>);

/// A name pattern that is not one.
#[derive(Debug, Clone, thiserror::Error)]
#[error("a name pattern has 1 to 200 ASCII letters, digits, . _ - : and * (any run of characters)")]
pub struct InvalidPattern;

impl NamePatterns {
    /// Every name.
    pub fn all() -> Self {
        Self(vec!["*".to_owned()])
    }

    /// No name at all (a stored key whose patterns no longer parse).
    pub fn none() -> Self {
        Self(Vec::new())
    }

    pub fn parse(patterns: &[String]) -> Result<Self, InvalidPattern> {
        if patterns.is_empty() || patterns.len() > 100 {
            return Err(InvalidPattern);
        }
        for p in patterns {
            let valid = !p.is_empty()
                && p.len() <= LockName::MAX_LEN
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '*'));
            if !valid {
                return Err(InvalidPattern);
            }
        }
        Ok(Self(patterns.to_vec()))
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    pub fn allows(&self, name: &str) -> bool {
        self.0.iter().any(|p| glob(p, name))
    }
}

/// `*` matches any run of characters; everything else itself. Iterative, with one
/// backtracking point, so a pattern of many stars costs O(pattern × name) at worst.
fn glob(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && p[i] == b'*' {
            star = Some((i, j));
            i += 1;
        } else if i < p.len() && p[i] == n[j] {
            i += 1;
            j += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == b'*')
}

/// What one caller may hold at once, across every instance (leases, waiters) or on each
/// instance (event streams). `u64::MAX`: unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Live leases (and fair tickets, which turn into leases).
    pub leases: u64,
    /// Requests waiting server-side at once.
    pub waiters: u64,
    /// Distinct lock and semaphore names given Redis state (until it is gone: their lease
    /// and an hour of history).
    pub names: u64,
    /// The same for every caller of the caller's tenant together.
    pub tenant_names: u64,
    /// Bytes of Redis state the caller may make Redis keep, estimated (`limits::budget`).
    pub state_bytes: u64,
    /// The same for every caller of the caller's tenant together.
    pub tenant_state_bytes: u64,
    /// Open event streams on one instance.
    pub streams: u64,
    /// Longest TTL a lease may ask for; `None`: the server's bound.
    pub max_ttl_ms: Option<u64>,
    /// Most permits one semaphore lease may hold; `None`: the server's bound.
    pub max_permits: Option<u32>,
    /// Whether requests count against the rate limit.
    pub rate_limited: bool,
}

impl Quotas {
    pub const UNLIMITED: Self = Self {
        leases: u64::MAX,
        waiters: u64::MAX,
        names: u64::MAX,
        tenant_names: u64::MAX,
        state_bytes: u64::MAX,
        tenant_state_bytes: u64::MAX,
        streams: u64::MAX,
        max_ttl_ms: None,
        max_permits: None,
        rate_limited: false,
    };
}

/// The credential a caller proved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    /// No credential, where anonymous callers are let in; limited by address.
    Anonymous(IpAddr),
    /// The operator's admin token.
    AdminToken,
    /// An API key.
    Key { id: String, name: String },
}

/// A caller whose credential checked out.
#[derive(Debug, Clone)]
pub struct Principal {
    pub who: Who,
    pub tenant: Tenant,
    pub roles: Roles,
    pub patterns: Arc<NamePatterns>,
    pub quotas: Quotas,
    /// The dashboard session the caller came with (its id), if it came with one: what it
    /// opens ends when the session does.
    pub session: Option<String>,
}

impl Principal {
    /// Whom histories and the audit log name: the key's name, `admin token`, or
    /// `anonymous <address>`.
    pub fn label(&self) -> String {
        match &self.who {
            Who::Anonymous(addr) => format!("anonymous {addr}"),
            Who::AdminToken => "admin token".to_owned(),
            Who::Key { name, .. } => name.clone(),
        }
    }

    /// What quotas and rates are counted under: the key, the admin token, or the address.
    pub fn owner(&self) -> String {
        match &self.who {
            Who::Anonymous(addr) => format!("addr:{addr}"),
            Who::AdminToken => "admin".to_owned(),
            Who::Key { id, .. } => format!("key:{id}"),
        }
    }

    /// Whose `Idempotency-Key` records are whose: the key's, the admin token's, or every
    /// anonymous caller's together. Not the address: one client's retry may reach another
    /// instance, or come back from another address (a NAT, a second interface), and anonymous
    /// callers hold no credential that tells them apart anyway.
    pub fn idempotency_scope(&self) -> String {
        match &self.who {
            Who::Anonymous(_) => "anonymous".to_owned(),
            Who::AdminToken => "admin".to_owned(),
            Who::Key { id, .. } => format!("key:{id}"),
        }
    }

    pub fn has(&self, role: Role) -> bool {
        self.roles.contains(role)
    }

    /// Refuses a name outside the caller's patterns (403 `name_not_allowed`).
    pub fn check_name(&self, name: &LockName) -> Result<(), Problem> {
        if self.patterns.allows(name.as_str()) {
            return Ok(());
        }
        Err(Problem::new(
            ProblemKind::NameNotAllowed,
            format!(
                "this API key may use names matching {:?} only",
                self.patterns.as_slice()
            ),
        ))
    }

    /// The lock domain in this caller's tenant, from the deployment's handle (`base`).
    pub fn locks(&self, base: &Locks, key_prefix: &str) -> Locks {
        if self.tenant.is_default() {
            return base.clone();
        }
        base.in_space(self.tenant.key_space(key_prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_runs_of_characters() {
        let p = NamePatterns::parse(&["jobs:*".into(), "*-report".into()]).expect("valid");
        assert!(p.allows("jobs:nightly"));
        assert!(p.allows("jobs:"));
        assert!(p.allows("daily-report"));
        assert!(!p.allows("job:x"));
        assert!(!p.allows("report"));
        assert!(NamePatterns::all().allows("anything"));
        assert!(glob("a*b*c", "aXbYc"));
        assert!(!glob("a*b*c", "aXbY"));
        assert!(glob("**", ""));
        assert!(NamePatterns::parse(&["a b".into()]).is_err());
        assert!(NamePatterns::parse(&[]).is_err());
    }

    #[test]
    fn role_sets_hold_what_they_were_made_of() {
        let roles = Roles::of(&[Role::Client, Role::Admin]);
        assert!(roles.contains(Role::Client) && roles.contains(Role::Admin));
        assert!(!roles.contains(Role::Reader));
        assert_eq!(roles.to_vec(), [Role::Client, Role::Admin]);
        assert!(Role::ALL.iter().all(|&r| Roles::ALL.contains(r)));
    }
}
