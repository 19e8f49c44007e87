//! Who may do what. Both transports (the API and the dashboard) ask here; neither asks the
//! other.
//!
//! - A caller proves itself with an API key ([`keys`]) in the `Leasehold-Key` header, with the
//!   operator's admin token (same header, or `Authorization: Bearer` on routes that take no
//!   lease token), with a dashboard session ([`session`]), or not at all: anonymous callers
//!   are let in only while that is safe ([`AnonymousPolicy`]).
//! - The result is a [`Principal`]: tenant, roles, name patterns, quotas. Handlers take a
//!   [`Caller<R>`], which resolves it, checks the role `R` the route needs and counts the
//!   request against the caller's rate, so a route cannot be reached without saying which
//!   role it needs.
//! - [`browser`] turns away requests a web page on another site made a browser send.

pub mod browser;
mod extract;
mod key_cache;
pub mod keys;
pub mod principal;
pub mod revocation;
pub mod session;

use std::net::IpAddr;
use std::sync::Arc;

use axum::http::HeaderMap;
use subtle::ConstantTimeEq as _;

use crate::limits::ClientLimits;
use crate::limits::rate::RateLimits;
use crate::locks::TokenDigest;
use crate::problem::{Problem, ProblemKind};
use crate::tenant::Tenant;

pub use extract::{
    AdminRole, Caller, ClientRole, Peer, ReaderRole, Requirement, bearer, peer_addr,
};
pub use keys::{KeyError, KeyRecord, KeyStore};
pub use principal::{NamePatterns, Principal, Quotas, Role, Roles, Who};
pub use revocation::{Revocations, Watched};
pub use session::{Session, Sessions, SignedIn, same_origin};

/// The header an API key (or the admin token) travels in. Not `Authorization`, which carries
/// lease tokens; and a custom header, so a browser must ask before sending it cross-site (a
/// CORS preflight, which Leasehold never grants).
pub const KEY_HEADER: &str = "leasehold-key";

/// What a lease call that found no live lease costs, in requests (see [`Access::consume`]):
/// its lookup in the lock's history costs Redis up to about 0.4 ms, 16 cycles' worth.
pub const LOOKUP_COST: u32 = 16;

/// Who may call the admin routes with the operator's token.
#[derive(Clone)]
pub enum AdminAuth {
    /// No admin token configured (admin keys may still exist).
    Disabled,
    /// The SHA-256 of the admin token.
    Token(TokenDigest),
}

impl AdminAuth {
    pub fn from_token(token: Option<&str>) -> Self {
        token.map_or(Self::Disabled, |t| Self::Token(TokenDigest::of(t)))
    }

    /// Compares digests in constant time, so timing reveals nothing about the token.
    pub fn accepts(&self, presented: &str) -> bool {
        match self {
            Self::Disabled => false,
            Self::Token(expected) => bool::from(
                TokenDigest::of(presented)
                    .as_bytes()
                    .ct_eq(expected.as_bytes()),
            ),
        }
    }

    /// A short fingerprint of the token (of its digest), for sessions signed in with it.
    pub fn fingerprint(&self) -> Option<String> {
        match self {
            Self::Disabled => None,
            Self::Token(digest) => Some(TokenDigest::of(&digest.hex()).hex()[..16].to_owned()),
        }
    }
}

/// When callers without a credential are let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnonymousPolicy {
    /// `--allow-anonymous`: always.
    pub allow: bool,
    /// The server listens on loopback only: then while no API key exists.
    pub loopback: bool,
}

/// Everything that decides who a caller is; shared by every request.
#[derive(Clone)]
pub struct Access {
    pub admin: AdminAuth,
    pub keys: KeyStore,
    pub sessions: Sessions,
    pub anonymous: AnonymousPolicy,
    pub rates: Arc<RateLimits>,
    pub limits: ClientLimits,
    /// What each tenant may have, whatever its admins grant.
    pub tenant_caps: crate::limits::TenantCaps,
    /// Read-only dashboard pages and the event stream need a signed-in user (or a key) even
    /// where anonymous callers are let in.
    pub private_dashboard: bool,
    /// What is open with each API key or session, to end when it is revoked.
    pub revocations: Arc<Revocations>,
}

/// How a credential reached us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Header,
    Bearer,
}

impl Access {
    /// Whether a caller without a credential is let in now.
    pub async fn anonymous_allowed(&self) -> bool {
        if self.anonymous.allow {
            return true;
        }
        if !self.anonymous.loopback {
            return false;
        }
        match self.keys.any_exist().await {
            Ok(any) => !any,
            // Redis is away: nothing works anyway; keep the loopback default.
            Err(_) => true,
        }
    }

    /// An anonymous caller from `addr`: a client and reader of the default tenant, limited by
    /// its address (on loopback only with `limit_loopback`).
    pub fn anonymous(&self, addr: IpAddr) -> Principal {
        let limited = self.limits.limit_loopback || !addr.is_loopback();
        let quotas = if limited {
            Quotas {
                leases: self.limits.leases,
                waiters: self.limits.waiters,
                names: self.limits.names,
                tenant_names: self.limits.tenant_names,
                state_bytes: self.limits.state_bytes,
                tenant_state_bytes: self.limits.tenant_state_bytes,
                streams: self.limits.streams,
                max_ttl_ms: None,
                max_permits: None,
                rate_limited: true,
            }
        } else {
            Quotas::UNLIMITED
        };
        Principal {
            who: Who::Anonymous(addr),
            tenant: Tenant::default(),
            roles: Roles::of(&[Role::Client, Role::Reader]),
            patterns: Arc::new(NamePatterns::all()),
            quotas,
            session: None,
        }
    }

    /// The operator: every role in the default tenant, no quotas (its requests still count
    /// against the rate).
    pub fn operator(&self) -> Principal {
        Principal {
            who: Who::AdminToken,
            tenant: Tenant::default(),
            roles: Roles::ALL,
            patterns: Arc::new(NamePatterns::all()),
            quotas: Quotas {
                rate_limited: true,
                ..Quotas::UNLIMITED
            },
            session: None,
        }
    }

    /// The caller an API key makes: its tenant, roles, patterns and quotas (the server's
    /// defaults where the key names none).
    pub fn of_key(&self, record: &KeyRecord) -> Principal {
        let q = record.quotas;
        Principal {
            who: Who::Key {
                id: record.id.clone(),
                name: record.name.clone(),
            },
            tenant: record.tenant.clone(),
            roles: Roles::of(&record.roles),
            patterns: Arc::new(
                NamePatterns::parse(&record.patterns).unwrap_or_else(|_| NamePatterns::none()),
            ),
            quotas: Quotas {
                leases: q.leases.unwrap_or(self.limits.leases),
                waiters: q.waiters.unwrap_or(self.limits.waiters),
                names: q.names.unwrap_or(self.limits.names),
                tenant_names: self.limits.tenant_names,
                state_bytes: q.state_bytes.unwrap_or(self.limits.state_bytes),
                tenant_state_bytes: self.limits.tenant_state_bytes,
                streams: self.limits.streams,
                max_ttl_ms: q.max_ttl_ms,
                max_permits: q.max_permits,
                rate_limited: true,
            },
            session: None,
        }
    }

    /// The caller a dashboard session stands for, while its credential is still good.
    pub async fn of_session(&self, session: &Session) -> Option<Principal> {
        let principal = match &session.who {
            SignedIn::AdminToken { admin } => {
                (self.admin.fingerprint().as_ref() == Some(admin)).then(|| self.operator())?
            }
            SignedIn::Key { id } => {
                let record = self.keys.by_id(id).await.ok()??;
                self.of_key(&record)
            }
        };
        Some(Principal {
            session: Some(session.id().to_owned()),
            ..principal
        })
    }

    /// The principal a presented secret (admin token or API key) stands for, if any.
    pub async fn of_secret(&self, secret: &str) -> Result<Option<Principal>, Problem> {
        if self.admin.accepts(secret) {
            return Ok(Some(self.operator()));
        }
        if !secret.starts_with(keys::KEY_PREFIX) {
            return Ok(None);
        }
        match self.keys.resolve(secret).await {
            Ok(record) => Ok(record.map(|r| self.of_key(&r))),
            Err(e) => Err(key_store_problem(e)),
        }
    }

    /// Who is calling, from the request's headers, without checking any role.
    async fn resolve<R: Requirement>(
        &self,
        headers: &HeaderMap,
        peer: IpAddr,
    ) -> Result<Principal, Problem> {
        // An empty header is no key (what `-H "Leasehold-Key: $UNSET"` sends from some tools).
        let header = headers
            .get(KEY_HEADER)
            .map(|v| v.to_str().unwrap_or("?").trim().to_owned())
            .filter(|v| !v.is_empty());
        let presented = match header {
            Some(value) => Some((value, Via::Header)),
            None if R::BEARER => bearer(headers)?.map(|token| (token, Via::Bearer)),
            None => None,
        };
        if let Some((secret, via)) = presented {
            if let Some(principal) = self.of_secret(&secret).await? {
                return Ok(principal);
            }
            // A flood of made-up keys is counted against the address it comes from.
            self.count(&format!("addr:{peer}"))?;
            return Err(match via {
                Via::Header => Problem::new(
                    ProblemKind::ApiKeyInvalid,
                    "the Leasehold-Key header holds no valid API key (revoked, rotated out, or \
                     never issued)",
                ),
                Via::Bearer
                    if R::ROLE == Role::Admin && matches!(self.admin, AdminAuth::Disabled) =>
                {
                    Problem::new(
                        ProblemKind::AdminDisabled,
                        "this server has no admin token (--admin-token) and this is no admin API key",
                    )
                }
                Via::Bearer if R::ROLE == Role::Admin => {
                    Problem::new(ProblemKind::AdminTokenInvalid, "wrong admin token")
                }
                Via::Bearer => Problem::new(
                    ProblemKind::ApiKeyInvalid,
                    "the bearer token is neither the admin token nor a valid API key",
                ),
            });
        }
        if R::COOKIE
            && let Some(session) = self.sessions.from_headers(headers).await
            && let Some(principal) = self.of_session(&session).await
        {
            return Ok(principal);
        }
        if self.anonymous_allowed().await {
            return Ok(self.anonymous(peer));
        }
        Err(Problem::new(
            ProblemKind::ApiKeyRequired,
            "this server needs an API key: send it in the Leasehold-Key header (anonymous \
             callers are let in only on loopback while no key exists, or with \
             --allow-anonymous)",
        ))
    }

    /// Refuses a caller without the role `R` needs.
    async fn authorize<R: Requirement>(&self, principal: &Principal) -> Result<(), Problem> {
        if principal.has(R::ROLE) {
            return Ok(());
        }
        if matches!(principal.who, Who::Anonymous(_)) && R::ROLE == Role::Admin {
            let no_keys = matches!(self.keys.any_exist().await, Ok(false));
            if matches!(self.admin, AdminAuth::Disabled) && no_keys {
                return Err(Problem::new(
                    ProblemKind::AdminDisabled,
                    "start the server with --admin-token (LEASEHOLD_ADMIN_TOKEN) to use admin routes",
                ));
            }
            return Err(Problem::new(
                ProblemKind::AdminTokenRequired,
                "send the admin token as Authorization: Bearer <token>, or an admin API key in \
                 the Leasehold-Key header",
            ));
        }
        Err(Problem::new(
            ProblemKind::RoleMissing,
            format!(
                "this route needs the {} role; this key has {:?}",
                R::ROLE.as_str(),
                principal
                    .roles
                    .to_vec()
                    .iter()
                    .map(|r| r.as_str())
                    .collect::<Vec<_>>()
            ),
        ))
    }

    /// Counts what a costly request costs beyond the one request it was counted as already:
    /// `cost` requests in all (429 when over the rate). Unlimited callers pay nothing.
    pub fn charge(&self, principal: &Principal, cost: u32) -> Result<(), Problem> {
        if !principal.quotas.rate_limited || cost <= 1 {
            return Ok(());
        }
        self.rates
            .check_n(&principal.owner(), cost - 1)
            .map_err(|wait| {
                Problem::new(
                    ProblemKind::RateLimited,
                    format!(
                        "this request costs {cost} requests of this caller's rate ({} per \
                         second, bursts of {}): a listing costs one per name asked for",
                        self.limits.rate_per_second, self.limits.rate_burst
                    ),
                )
                .retry_after(wait)
            })
    }

    /// Counts what a request turned out to cost beyond the one request it was counted as:
    /// `cost` requests in all, taken from the caller's rate as far as it goes (its answer is
    /// given anyway; its next requests wait). A lease call that found no live lease looked it
    /// up in the lock's history: up to 300 entries, as much Redis work as
    /// [`LOOKUP_COST`] requests.
    pub fn consume(&self, principal: &Principal, cost: u32) {
        if principal.quotas.rate_limited && cost > 1 {
            self.rates.drain(&principal.owner(), cost - 1);
        }
    }

    /// Counts one request of `principal`'s tenant against the tenant's rate (429 when its
    /// callers together are over it).
    pub fn count_tenant(&self, principal: &Principal) -> Result<(), Problem> {
        self.rates
            .check_tenant(principal.tenant.as_str())
            .map_err(|wait| {
                Problem::new(
                    ProblemKind::RateLimited,
                    format!(
                        "more than {} requests per second (bursts of {}) from the callers of \
                         tenant {} together",
                        self.tenant_caps.rate_per_second,
                        self.tenant_caps.rate_burst,
                        principal.tenant
                    ),
                )
                .with("scope", "tenant")
                .retry_after(wait)
            })
    }

    /// Counts one request of `owner` against the request rate (429 when over it).
    pub fn count(&self, owner: &str) -> Result<(), Problem> {
        self.rates.check(owner).map_err(|wait| {
            Problem::new(
                ProblemKind::RateLimited,
                format!(
                    "more than {} requests per second (bursts of {}) from this caller",
                    self.limits.rate_per_second, self.limits.rate_burst
                ),
            )
            .retry_after(wait)
        })
    }
}

/// A Redis failure while looking a key up: 503, as for any other Redis failure.
fn key_store_problem(e: KeyError) -> Problem {
    tracing::warn!(error = %e, "cannot look an API key up");
    Problem::new(
        ProblemKind::RedisUnavailable,
        "Redis did not answer; try again",
    )
    .retry_after(std::time::Duration::from_secs(1))
}
