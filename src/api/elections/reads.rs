//! Reading an election (its state, a term's check) and an admin ending a term.

use axum::Json;
use axum::extract::State;

use super::election_body;
use crate::api::bodies;
use crate::api::extract::{JsonBody, NamePath, Query};
use crate::auth::{AdminRole, Caller, ReaderRole};
use crate::leases::election::ElectionName;
use crate::operator::Reason;
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;
use crate::wire::{ElectionBody, ForceReleaseBody, TermCheckBody, TermCheckReply};

#[utoipa::path(
    get,
    path = "/v1/elections/{name}",
    operation_id = "inspectElection",
    tag = "elections",
    params(("name" = String, Path)),
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "The leader (null when nobody leads), the last term and the line", body = ElectionBody),
        (status = 404, description = "not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/elections/{name}`: who leads, the last term, and the line.
pub async fn inspect(
    caller: Caller<ReaderRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
) -> Result<Json<ElectionBody>, Problem> {
    caller.check_name(&name)?;
    let name = ElectionName::new(name);
    let view = state.leases_for(&caller).election(&name).await?;
    Ok(Json(election_body(&name, view)))
}

#[utoipa::path(
    post,
    path = "/v1/elections/{name}/fence/check",
    operation_id = "checkTerm",
    tag = "elections",
    params(("name" = String, Path)),
    request_body(content = TermCheckBody, content_type = "application/json"),
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "Whether the term is the current leader's (stale as soon as it is sent)", body = TermCheckReply),
        (status = 400, description = "malformed_json", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name, invalid_body (term missing)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/elections/{name}/fence/check` `{term}`: is this the current leader's term?
pub async fn check_term(
    caller: Caller<ReaderRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    JsonBody(body): JsonBody<TermCheckBody>,
) -> Result<Json<TermCheckReply>, Problem> {
    let Some(term) = body.term else {
        return Err(Problem::new(
            ProblemKind::InvalidBody,
            "term (the term a writer presents) is required",
        ));
    };
    caller.check_name(&name)?;
    let name = ElectionName::new(name);
    let (current, last_term) = state
        .leases_for(&caller)
        .is_current_term(&name, term)
        .await?;
    Ok(Json(TermCheckReply {
        election: name.to_string(),
        term,
        current,
        last_term,
    }))
}

#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EndTermQuery {
    /// Why, for the election's history and the audit log.
    #[serde(default)]
    reason: String,
}

#[utoipa::path(
    delete,
    path = "/v1/admin/elections/{name}",
    operation_id = "endTerm",
    tag = "admin",
    params(("name" = String, Path), EndTermQuery),
    security(("admin_token" = []), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The current term ended (`released: false` when nobody led): the next candidate leads with a higher term, after the leader's lock-delay if it asked for one", body = ForceReleaseBody),
        (status = 400, description = "invalid_query", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, description = "admin_token_required, token_malformed", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 403, description = "admin_token_invalid, admin_disabled", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name, reason_too_long", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `DELETE /v1/admin/elections/{name}[?reason=..]`: ends the current term (audited).
pub async fn end_term(
    caller: Caller<AdminRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    Query(query): Query<EndTermQuery>,
) -> Result<Json<ForceReleaseBody>, Problem> {
    let reason: Reason = state.reason(&query.reason)?;
    let name = ElectionName::new(name);
    let forced = state
        .operator(&caller, caller.label())
        .end_term(&name, &reason)
        .await?;
    Ok(Json(bodies::forced(forced)))
}
