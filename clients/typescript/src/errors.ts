/**
 * Errors. Every failure this package reports is a {@link LeaseholdError}; an answer of the
 * server (`application/problem+json`) is a {@link ProblemError} carrying the problem's stable
 * `code` and every member it had, as the subclass its status and code call for.
 */

/** The codes the server documents (README "Errors"); later servers may add others. */
export type ProblemCode =
  | "malformed_json"
  | "invalid_query"
  | "invalid_idempotency_key"
  | "token_missing"
  | "token_malformed"
  | "admin_token_required"
  | "api_key_required"
  | "api_key_invalid"
  | "token_mismatch"
  | "admin_token_invalid"
  | "admin_disabled"
  | "role_missing"
  | "name_not_allowed"
  | "tenant_not_allowed"
  | "cross_origin"
  | "host_not_allowed"
  | "lease_not_found"
  | "lock_not_found"
  | "key_not_found"
  | "not_found"
  | "method_not_allowed"
  | "body_timeout"
  | "lock_held"
  | "no_permits"
  | "kind_conflict"
  | "not_reentrant"
  | "upgrade_refused"
  | "mode_not_held"
  | "limit_mismatch"
  | "ticket_pending"
  | "reentry_too_deep"
  | "key_name_taken"
  | "lease_lost"
  | "ticket_expired"
  | "payload_too_large"
  | "idempotency_key_reused"
  | "unsupported_media_type"
  | "invalid_lock_name"
  | "invalid_ttl"
  | "invalid_body"
  | "reason_too_long"
  | "rate_limited"
  | "quota_exceeded"
  | "too_many_watches"
  | "redis_unavailable"
  | "shutting_down"
  | "too_many_waiters"
  | "queue_full"
  | "too_many_connections"
  | "request_timeout"
  | "internal"
  // An answer that was not problem+json (a proxy's error page, say): `unexpected_status`.
  | "unexpected_status"
  | (string & {});

/** The body of a problem answer: RFC 9457 members, `code`, and the extension members. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: ProblemCode;
  [member: string]: unknown;
}

/** Why a lease ended: `released`, `expired`, `force_released`, `left`, and later `evicted`... */
export type LossReason = "released" | "expired" | "force_released" | "left" | "evicted" | (string & {});

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

/** 400, 405, 408, 413, 415, 422: the request itself is wrong (a bad name, TTL, body...). */
export class InvalidRequestError extends ProblemError {}

/** 429: `rate_limited` or `quota_exceeded` (the `quota` member names which). */
export class RateLimitedError extends ProblemError {}

/** 5xx: the server could not answer now (`redis_unavailable`, `shutting_down`, ...). */
export class UnavailableError extends ProblemError {}

/** The error class for a problem answer. */
export function problemError(problem: Problem, retryAfterMs?: number): ProblemError {
  const { status, code } = problem;
  if (code === "lock_held" || code === "no_permits") return new LockHeldError(problem, retryAfterMs);
  if (code === "lease_lost" || code === "ticket_expired") return new LeaseLostError(problem, retryAfterMs);
  if (status === 409) return new ConflictError(problem, retryAfterMs);
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
