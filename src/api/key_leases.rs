//! What an API key holds, for the admin who must clean up after it: `GET
//! /v1/admin/keys/{key_id}/leases` lists its live leases (whatever its tenant: the admin
//! token sees every tenant's), and revoking a key ends them (`end_leases`, on by default): a
//! revoked key's holder can neither renew nor release, so its leases would otherwise block
//! their names until their TTLs ran out (up to `--max-ttl-ms`).

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;

use serde_json::json;

use super::extract::{Path, Query};
use super::keys::{audit_in, key_body, key_problem, visible_key};
use crate::auth::keys::KeyRecord;
use crate::auth::{AdminRole, Caller, Principal};
use crate::locks::{LeaseId, LockName, Timestamp};
use crate::operator::Operator;
use crate::problem::{Problem, ProblemDetails};
use crate::state::AppState;
use crate::wire::KeyBody;
use crate::wire::{KeyLeaseBody, KeyLeasesBody};

/// A live lease of a key, as its quota account keeps it: `<name>\t<lease id>`.
pub(super) fn member(name: &LockName, id: LeaseId) -> String {
    format!("{name}\t{id}")
}

/// The live leases of the key `record`: (name, lease id, until when it counts).
async fn leases_of(
    state: &AppState,
    record: &KeyRecord,
) -> Result<Vec<(LockName, LeaseId, u64)>, Problem> {
    let account = state.ledger.leases(&format!("key:{}", record.id), 1);
    let members = state
        .ledger
        .live(&account)
        .await
        .map_err(|e| Problem::from(crate::locks::LockError::from(e)))?;
    Ok(members
        .into_iter()
        .filter_map(|(member, until)| {
            let (name, id) = member.split_once('\t')?;
            Some((LockName::parse(name).ok()?, LeaseId::parse(id)?, until))
        })
        .collect())
}

#[utoipa::path(
    get,
    path = "/v1/admin/keys/{key_id}/leases",
    operation_id = "listKeyLeases",
    tag = "admin",
    params(("key_id" = String, Path, description = "The key's id")),
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The key's live leases and fair tickets (names in its tenant's key space)", body = KeyLeasesBody),
        (status = 401, description = "admin_token_required, token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "key_not_found", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/admin/keys/{key_id}/leases`: what the key holds now.
pub async fn list(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<KeyLeasesBody>, Problem> {
    let record = visible_key(&state, &caller, &id).await?;
    let leases = leases_of(&state, &record).await?;
    Ok(Json(KeyLeasesBody {
        key_id: record.id.clone(),
        tenant: record.tenant.to_string(),
        leases: leases
            .into_iter()
            .map(|(name, id, until)| KeyLeaseBody {
                lock: name.to_string(),
                lease_id: super::bodies::lease_id(id),
                counts_until: Timestamp(until).rfc3339(),
            })
            .collect(),
    }))
}

/// `DELETE /v1/admin/keys/{key_id}`'s query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RevokeQuery {
    /// End the key's live leases too (evicted, audited; their waiters wake): default true.
    /// false leaves them to run out their TTLs (nobody can renew or release them).
    #[serde(default = "yes")]
    pub end_leases: bool,
}

fn yes() -> bool {
    true
}

/// Ends every live lease of the revoked key `record`, as evictions by `caller` (audited,
/// reason "API key revoked"). Returns how many were ended.
pub(super) async fn end_leases(
    state: &AppState,
    caller: &Principal,
    record: &KeyRecord,
) -> Result<u64, Problem> {
    let operator = Operator {
        principal: caller,
        leases: state.leases_in(&record.tenant),
        audit: &state.audit,
        by: caller.label(),
    };
    let reason = state.reason(&format!("API key {} ({}) revoked", record.name, record.id))?;
    let mut ended = 0;
    for (name, id, _) in leases_of(state, record).await? {
        match operator.evict(None, &name, id, &reason).await {
            Ok(forced) if !forced.removed.is_empty() => ended += 1,
            Ok(_) => {}
            Err(problem) => {
                tracing::warn!(lock = %name, lease_id = %id, problem = ?problem, "could not end a revoked key's lease");
            }
        }
    }
    // They count no more.
    let account = state.ledger.leases(&format!("key:{}", record.id), 1);
    if let Err(e) = state.ledger.clear(&account).await {
        tracing::warn!(error = %e, "cannot clear a revoked key's quota account");
    }
    Ok(ended)
}

#[utoipa::path(
    delete,
    path = "/v1/admin/keys/{key_id}",
    operation_id = "revokeKey",
    tag = "admin",
    params(("key_id" = String, Path, description = "The key's id"), RevokeQuery),
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "Revoked: every instance refuses it within a second or two; its live leases ended (ended_leases) unless end_leases=false", body = KeyBody),
        (status = 400, description = "invalid_query", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required, token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "key_not_found", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `DELETE /v1/admin/keys/{key_id}`: the key stops working on every instance, and its
/// leases end (unless `end_leases=false`).
pub async fn revoke(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<RevokeQuery>,
) -> Result<Json<KeyBody>, Problem> {
    visible_key(&state, &caller, &id).await?;
    let record = state.access.keys.revoke(&id).await.map_err(key_problem)?;
    let ended = if query.end_leases {
        Some(end_leases(&state, &caller, &record).await?)
    } else {
        None
    };
    audit_in(
        &state,
        &caller,
        &record.tenant,
        "key_revoked",
        &record.name,
        "",
        json!({"id": record.id, "tenant": record.tenant, "ended_leases": ended}),
    )
    .await;
    Ok(Json(KeyBody {
        ended_leases: ended,
        ..key_body(&record)
    }))
}
