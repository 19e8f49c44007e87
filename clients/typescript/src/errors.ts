/**
 * Errors. Every failure this package reports is a {@link LeaseholdError}; an answer of the
 * server (`application/problem+json`) is a {@link ProblemError} carrying the problem's stable
 * `code` and every member it had, as the subclass its status and code call for.
 */

/**
 * Every code the server's API can answer: its problem table, which it publishes as the
 * `Problem` schema's `code` enum in `/openapi.json` (the parity test holds this list to it).
 */
export const PROBLEM_CODES = [
  "lock_held", "lock_delay", "kind_conflict", "not_reentrant", "upgrade_refused", "limit_mismatch", "mode_not_held", "ticket_pending", "ticket_expired", "no_permits", "lease_lost",
  "lease_not_found", "lock_not_found",
  "token_missing", "token_malformed", "token_mismatch", "admin_token_required", "admin_token_invalid", "admin_disabled",
  "invalid_lock_name", "invalid_ttl", "invalid_lock_delay", "invalid_body", "malformed_json", "unsupported_media_type", "payload_too_large", "invalid_query", "invalid_idempotency_key", "idempotency_key_reused", "not_found", "method_not_allowed",
  "redis_unavailable", "redis_full", "not_replicated", "shutting_down", "too_many_watches", "internal",
  "api_key_required", "api_key_invalid", "role_missing", "name_not_allowed", "tenant_not_allowed", "cross_origin", "host_not_allowed", "key_not_found", "key_name_taken", "too_many_keys", "quota_above_ceiling", "reentry_too_deep", "reason_too_long",
  "body_timeout", "rate_limited", "quota_exceeded", "too_many_waiters", "queue_full", "too_many_connections", "request_timeout",
  "no_quorum", "redlock_disabled",
] as const;

/** A code of {@link PROBLEM_CODES}. */
export type KnownProblemCode = (typeof PROBLEM_CODES)[number];

/**
 * A problem's code: one the server documents, `unexpected_status` for an answer that was not
 * problem+json (a proxy's error page, say), or a code of a newer server.
 */
export type ProblemCode = KnownProblemCode | "unexpected_status" | (string & {});

/** The body of a problem answer: RFC 9457 members, `code`, and the extension members. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: ProblemCode;
  [member: string]: unknown;
}

/** Why a lease ended: `released`, `expired`, `force_released`, `revoked`, `left`, and later `evicted`...; given up by this client: `unrenewable`, `revoked`. */
export type LossReason = "released" | "expired" | "force_released" | "revoked" | "left" | "evicted" | (string & {});

/** The root of every error this package throws. */
export class LeaseholdError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The request never got an answer: the connection failed, or timed out, on every try. */
export class TransportError extends LeaseholdError {}

/** An error answer of the server. `code` is stable; `problem` holds every member it sent. */
export class ProblemError extends LeaseholdError {
  readonly status: number;
  readonly code: ProblemCode;
  readonly type: string;
  readonly title: string;
  readonly detail: string;
  readonly problem: Problem;
  /** When a retry may succeed, in ms (`retry_after_ms`, else the `Retry-After` header). */
  readonly retryAfterMs: number | undefined;

  constructor(problem: Problem, retryAfterMs?: number, options?: { cause?: unknown }) {
    super(`${problem.status} ${problem.code}: ${problem.detail || problem.title}`, options);
    this.problem = problem;
    this.status = problem.status;
    this.code = problem.code;
    this.type = problem.type;
    this.title = problem.title;
    this.detail = problem.detail;
    const member = problem["retry_after_ms"];
    this.retryAfterMs = typeof member === "number" ? member : retryAfterMs;
  }

  protected str(member: string): string | undefined {
    const value = this.problem[member];
    return typeof value === "string" ? value : undefined;
  }

  protected num(member: string): number | undefined {
    const value = this.problem[member];
    return typeof value === "number" ? value : undefined;
  }
}

/**
 * Not acquired within the wait: `lock_held` (a lock) or `no_permits` (a semaphore). Also
 * thrown for a fair lock still queued when the wait ran out (`position` then says where).
 */
export class LockHeldError extends ProblemError {
  /** The holder's label, when it gave one. */
  get holder(): string | undefined {
    return this.str("holder");
  }
  /** The holding lease (undefined for a Redisson client). */
  get leaseId(): string | undefined {
    return this.str("lease_id");
  }
  /** The Redis hash field of the holder. */
  get holderId(): string | undefined {
    return this.str("holder_id");
  }
  /** The server-side wait this request was allowed, in ms. */
  get waitMs(): number | undefined {
    return this.num("wait_ms");
  }
  /** Fair locks: the place in the queue when the wait ran out (1 = next). */
  get position(): number | undefined {
    return this.num("position");
  }
  /** When the holding lease was granted (RFC 3339; undefined for a Redisson holder). */
  get heldSince(): string | undefined {
    return this.str("held_since");
  }
  /** How long the holder had held the lock when the server answered, in ms. */
  get heldForMs(): number | undefined {
    return this.num("held_for_ms");
  }
  /**
   * The server's estimate of how long until the holder lets go, in ms, from the name's recent
   * hold times (undefined until it has seen three).
   */
  get estimatedWaitMs(): number | undefined {
    return this.num("estimated_wait_ms");
  }
}

/**
 * Not acquired within the wait because the lock is in its lock-delay (`lock_delay`): its last
 * lease ended other than by a release and asked for one. A wait goes on through it.
 */
export class LockDelayError extends LockHeldError {
  /** When the delay ends (RFC 3339). */
  get delayedUntil(): string | undefined {
    return this.str("delayed_until");
  }
}

/**
 * The lease has lost its lock (`lease_lost`, or `ticket_expired` for a fair ticket polled too
 * late): it expired, an operator force-released it, or it was released. This is also the
 * `reason` of a lost lease's `signal`.
 */
export class LeaseLostError extends ProblemError {
  /** `expired`, `released`, `force_released`, `left`, ... */
  get reason(): LossReason | undefined {
    return this.str("reason");
  }
  /** A multilease's: the lock whose end ended it. */
  get member(): string | undefined {
    return this.str("member") ?? this.str("lock");
  }
}

/** A 409 other than "held": `kind_conflict`, `not_reentrant`, `upgrade_refused`, ... */
export class ConflictError extends ProblemError {
  /** `kind_conflict`: what the lock is used as. */
  get heldAs(): string | undefined {
    return this.str("held_as");
  }
  /** `limit_mismatch`: the semaphore's limit. */
  get limit(): number | undefined {
    return this.num("limit");
  }
}

/** 401 and 403: no or a wrong API key or token, a missing role, a name outside the key's patterns. */
export class AuthError extends ProblemError {}

/** 404: `lease_not_found`, `lock_not_found`, `key_not_found`, `not_found`. */
export class NotFoundError extends ProblemError {}

/** 400, 405, 408, 413, 415, 422: the request itself is wrong (a bad name, TTL, lock-delay, body...). */
export class InvalidRequestError extends ProblemError {}

/** 429: `rate_limited` or `quota_exceeded` (the `quota` member names which). */
export class RateLimitedError extends ProblemError {}

/** 5xx: the server could not answer now (`redis_unavailable`, `shutting_down`, `no_quorum`, ...). */
export class UnavailableError extends ProblemError {}

type ErrorClass = new (problem: Problem, retryAfterMs?: number) => ProblemError;

/**
 * The class each code is thrown as: the ones callers handle by type have their own, the rest
 * their family's (by status). Every code the server can answer is here (the parity test
 * checks it), so no known code falls through to a guess.
 */
export const ERROR_CLASSES: { readonly [code in KnownProblemCode]: ErrorClass } = {
  lock_held: LockHeldError, lock_delay: LockDelayError, no_permits: LockHeldError,
  lease_lost: LeaseLostError, ticket_expired: LeaseLostError,
  kind_conflict: ConflictError, not_reentrant: ConflictError, upgrade_refused: ConflictError,
  limit_mismatch: ConflictError, mode_not_held: ConflictError, ticket_pending: ConflictError,
  reentry_too_deep: ConflictError, key_name_taken: ConflictError, too_many_keys: ConflictError,
  lease_not_found: NotFoundError, lock_not_found: NotFoundError, key_not_found: NotFoundError, not_found: NotFoundError,
  token_missing: AuthError, token_malformed: AuthError, token_mismatch: AuthError,
  admin_token_required: AuthError, admin_token_invalid: AuthError, admin_disabled: AuthError,
  api_key_required: AuthError, api_key_invalid: AuthError, role_missing: AuthError,
  name_not_allowed: AuthError, tenant_not_allowed: AuthError, cross_origin: AuthError, host_not_allowed: AuthError,
  quota_above_ceiling: AuthError,
  invalid_lock_name: InvalidRequestError, invalid_ttl: InvalidRequestError, invalid_lock_delay: InvalidRequestError,
  invalid_body: InvalidRequestError, malformed_json: InvalidRequestError, unsupported_media_type: InvalidRequestError,
  payload_too_large: InvalidRequestError, invalid_query: InvalidRequestError,
  invalid_idempotency_key: InvalidRequestError, idempotency_key_reused: InvalidRequestError,
  method_not_allowed: InvalidRequestError, body_timeout: InvalidRequestError, reason_too_long: InvalidRequestError,
  redlock_disabled: InvalidRequestError,
  rate_limited: RateLimitedError, quota_exceeded: RateLimitedError,
  redis_unavailable: UnavailableError, redis_full: UnavailableError, not_replicated: UnavailableError,
  shutting_down: UnavailableError, too_many_watches: UnavailableError, internal: UnavailableError,
  too_many_waiters: UnavailableError, queue_full: UnavailableError, too_many_connections: UnavailableError,
  request_timeout: UnavailableError, no_quorum: UnavailableError,
};

/** The error class for a problem answer: by its code, else (a newer server's code) by its status. */
export function problemError(problem: Problem, retryAfterMs?: number): ProblemError {
  const { status, code } = problem;
  const known = Object.prototype.hasOwnProperty.call(ERROR_CLASSES, code)
    ? ERROR_CLASSES[code as KnownProblemCode]
    : undefined;
  if (known !== undefined) return new known(problem, retryAfterMs);
  if (status === 409) return new ConflictError(problem, retryAfterMs);
  if (status === 410) return new LeaseLostError(problem, retryAfterMs);
  if (status === 401 || status === 403) return new AuthError(problem, retryAfterMs);
  if (status === 404) return new NotFoundError(problem, retryAfterMs);
  if (status === 429) return new RateLimitedError(problem, retryAfterMs);
  if (status >= 500) return new UnavailableError(problem, retryAfterMs);
  if (status >= 400) return new InvalidRequestError(problem, retryAfterMs);
  return new ProblemError(problem, retryAfterMs);
}

/** A loss this client saw (the watch stream, or a heartbeat that could not reach the server). */
export function lossError(reason: LossReason, detail: string, extra: Record<string, unknown> = {}): LeaseLostError {
  return new LeaseLostError({
    type: "/problems/lease_lost",
    title: "The lease no longer holds the lock",
    status: 410,
    detail,
    code: "lease_lost",
    ...extra,
    reason,
  });
}
