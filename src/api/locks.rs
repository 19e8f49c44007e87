//! `/v1/locks`: the live locks, who holds a lock, and whether a fencing token is current.

use axum::Json;
use axum::extract::State;

use super::bodies;
use super::extract::{JsonBody, NamePath, Query};
use crate::auth::{Caller, ReaderRole};
use crate::locks::{FencingToken, ListCursor, NamePrefix};
use crate::problem::{Problem, ProblemDetails, ProblemKind};
use crate::state::AppState;
use crate::wire::{FenceCheckBody, FenceCheckReply, ListBody, ListQuery, LiveBody, LockBody};

#[utoipa::path(
    get,
    path = "/v1/locks/{name}",
    operation_id = "inspectLock",
    tag = "locks",
    params(("name" = String, Path)),
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "Holders, fair queue, fencing counter", body = LockBody),
        (status = 404, description = "lock_not_found: free and never taken; not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/locks/{name}`: holders, time left and fencing counter; 404 when free and unknown.
pub async fn inspect(
    caller: Caller<ReaderRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
) -> Result<Json<LockBody>, Problem> {
    caller.check_name(&name)?;
    let leases = state.leases_for(&caller);
    let Some(view) = leases.lock(&name).await? else {
        return Err(Problem::new(
            ProblemKind::LockNotFound,
            format!("lock {name} is free and has never been taken"),
        ));
    };
    let (waiting, waiting_count) = leases.locks().waiters_of(&name).await?;
    let mut body = bodies::lock(view.seen_by(&|lock| caller.patterns.allows(lock)));
    body.waiting = waiting.into_iter().map(bodies::waiter).collect();
    body.waiting_count = waiting_count;
    Ok(Json(body))
}

/// A page holds about this many names unless the client asks otherwise.
const PAGE_DEFAULT: u32 = 100;
const PAGE_MAX: u32 = 1000;

#[utoipa::path(
    get,
    path = "/v1/locks",
    operation_id = "listLocks",
    tag = "locks",
    params(ListQuery),
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "Live locks (held or waited for) and semaphores (permits out), a page at a time", body = ListBody),
        (status = 400, description = "invalid_query: a query parameter does not parse (a cursor not from a page, a limit out of 1-1000)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name: the prefix is not the start of a lock name", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `GET /v1/locks[?prefix=..][&cursor=..][&limit=..]`: the live locks and semaphores, found
/// with SCAN (a page costs O(page) Redis work, whatever the number of locks). A caller sees
/// its tenant's locks within its key's name patterns (a page may then hold fewer).
pub async fn list(
    caller: Caller<ReaderRole>,
    State(state): State<AppState>,
    Query(query): Query<ListQuery>,
) -> Result<Json<ListBody>, Problem> {
    let prefix = NamePrefix::parse(&query.prefix)?;
    let cursor = ListCursor::parse(query.cursor.as_deref().unwrap_or("")).map_err(|_| {
        Problem::new(
            ProblemKind::InvalidQuery,
            "cursor must be a page's next_cursor, as it was given",
        )
    })?;
    let limit = query.limit.unwrap_or(PAGE_DEFAULT);
    if !(1..=PAGE_MAX).contains(&limit) {
        return Err(Problem::new(
            ProblemKind::InvalidQuery,
            format!("limit must be between 1 and {PAGE_MAX}"),
        ));
    }
    // A listing costs Redis an inspection per name: it counts as that many requests.
    state.access.charge(&caller, limit)?;
    let leases = state.leases_for(&caller);
    let page = leases
        .live(&prefix, cursor, usize::try_from(limit).unwrap_or(100))
        .await?;
    let names: Vec<_> = page.entries.iter().map(|e| e.name()).collect();
    let waiting = leases.locks().waiting_counts(&names).await?;
    Ok(Json(ListBody {
        locks: page
            .entries
            .into_iter()
            .zip(waiting)
            .filter(|(entry, _)| caller.patterns.allows(entry.name().as_str()))
            .map(|(entry, waiting)| LiveBody {
                waiting,
                ..bodies::live(entry.seen_by(&|name| caller.patterns.allows(name)))
            })
            .collect(),
        next_cursor: page.next_cursor.map(|c| c.as_str().to_owned()),
    }))
}

#[utoipa::path(
    post,
    path = "/v1/locks/{name}/fence/check",
    operation_id = "checkFence",
    tag = "locks",
    params(("name" = String, Path)),
    request_body(content = FenceCheckBody, content_type = "application/json"),
    security((), ("api_key" = ["reader"])),
    responses(
        (status = 200, description = "Whether the token is the fencing token of a lease that holds the lock now (Chubby's CheckSequencer). The answer can be stale as soon as it is sent", body = FenceCheckReply),
        (status = 400, description = "malformed_json", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "not_found: an undecodable path", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, description = "payload_too_large: bodies are limited to 64 KiB", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, description = "unsupported_media_type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "invalid_lock_name, invalid_body (fencing_token missing or not a whole number)", body = ProblemDetails, content_type = "application/problem+json"),
    )
)]
/// `POST /v1/locks/{name}/fence/check` `{fencing_token}`: is this the token of a lease that
/// holds the lock now? For a resource that cannot keep the largest token it has seen. Built
/// on the lock's inspection (its holders carry their tokens), so it changes nothing.
pub async fn check_fence(
    caller: Caller<ReaderRole>,
    State(state): State<AppState>,
    NamePath(name): NamePath,
    JsonBody(body): JsonBody<FenceCheckBody>,
) -> Result<Json<FenceCheckReply>, Problem> {
    let Some(fencing_token) = body.fencing_token else {
        return Err(Problem::new(
            ProblemKind::InvalidBody,
            "fencing_token (the token a writer presents) is required",
        ));
    };
    caller.check_name(&name)?;
    let view = state.leases_for(&caller).lock(&name).await?;
    let token = FencingToken(fencing_token);
    let current = view
        .as_ref()
        .is_some_and(|v| v.holders.iter().any(|h| h.fencing_token == Some(token)));
    Ok(Json(FenceCheckReply {
        lock: name.to_string(),
        fencing_token,
        current,
        fencing_counter: view.map_or(0, |v| v.fencing_counter.0),
    }))
}
