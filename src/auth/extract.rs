//! What a route asks of its caller, as axum extractors: [`Caller`] with the role it needs
//! ([`ClientRole`], [`ReaderRole`], [`AdminRole`]), the [`Peer`] address, and a lease's bearer
//! token ([`bearer`]).

use crate::problem::{Problem, ProblemKind};
use axum::extract::{ConnectInfo, FromRef, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::Deref;
use std::sync::Arc;

use super::{Access, Principal, Role};

/// What a route needs from its caller.
pub trait Requirement: Send + Sync + 'static {
    const ROLE: Role;
    /// Whether `Authorization: Bearer` may carry the key: on routes that take no lease token.
    const BEARER: bool;
    /// Whether a dashboard session counts: read-only routes a dashboard page calls.
    const COOKIE: bool;
}

/// Take, renew and release leases (the bearer token is a lease's).
pub struct ClientRole;
/// Read lock state, events, metrics.
pub struct ReaderRole;
/// Operator actions.
pub struct AdminRole;

impl Requirement for ClientRole {
    const ROLE: Role = Role::Client;
    const BEARER: bool = false;
    const COOKIE: bool = false;
}

impl Requirement for ReaderRole {
    const ROLE: Role = Role::Reader;
    const BEARER: bool = true;
    const COOKIE: bool = true;
}

impl Requirement for AdminRole {
    const ROLE: Role = Role::Admin;
    const BEARER: bool = true;
    const COOKIE: bool = false;
}

/// A caller holding the role `R` needs, counted against its rate.
pub struct Caller<R> {
    /// Boxed: a parked waiter's request future holds its caller, and can let it go.
    pub principal: Box<Principal>,
    role: PhantomData<R>,
}

impl<R> Deref for Caller<R> {
    type Target = Principal;

    fn deref(&self) -> &Principal {
        &self.principal
    }
}

impl<S, R> FromRequestParts<S> for Caller<R>
where
    S: Send + Sync,
    R: Requirement,
    Arc<Access>: FromRef<S>,
{
    type Rejection = Problem;

    // Boxed, as `JsonBody`'s: resolving a key would otherwise set the size of every parked
    // waiter's request future.
    fn from_request_parts(
        parts: &mut Parts,
        state: &S,
    ) -> impl Future<Output = Result<Self, Self::Rejection>> + Send {
        let access = Arc::<Access>::from_ref(state);
        Box::pin(async move {
            let peer = peer_addr(parts);
            let principal = access.resolve::<R>(&parts.headers, peer).await?;
            access.authorize::<R>(&principal).await?;
            if principal.quotas.rate_limited {
                access.count(&principal.owner())?;
                access.count_tenant(&principal)?;
            }
            Ok(Self {
                principal: Box::new(principal),
                role: PhantomData,
            })
        })
    }
}

/// The client's address, as an extractor (never fails).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub IpAddr);

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(peer_addr(parts)))
    }
}

/// The client's address (the TCP peer); unspecified when served without one (in-process).
pub fn peer_addr(parts: &Parts) -> IpAddr {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip())
}

/// The `Authorization: Bearer <token>` header's token, if any; another scheme is a 401.
pub fn bearer(headers: &HeaderMap) -> Result<Option<String>, Problem> {
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| Some(token.trim().to_owned()))
        .ok_or_else(|| {
            Problem::new(
                ProblemKind::TokenMalformed,
                "use Authorization: Bearer <token>",
            )
        })
}
