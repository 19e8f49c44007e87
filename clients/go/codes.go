package leasehold

// The stable problem codes: every code the server's API can answer (its problem table, which
// it publishes as the Problem schema's code enum in /openapi.json; TestParityWithServer holds
// this list to it). A *Problem carries one in Code; errors.Is(err, &Problem{Code: c}) matches
// any problem with code c, and the sentinels below name the ones callers usually handle.
const (
	// Refusals of a lock's or semaphore's state (409, 410).
	CodeLockHeld       = "lock_held"
	CodeLockDelay      = "lock_delay"
	CodeKindConflict   = "kind_conflict"
	CodeNotReentrant   = "not_reentrant"
	CodeUpgradeRefused = "upgrade_refused"
	CodeLimitMismatch  = "limit_mismatch"
	CodeModeNotHeld    = "mode_not_held"
	CodeTicketPending  = "ticket_pending"
	CodeTicketExpired  = "ticket_expired"
	CodeNoPermits      = "no_permits"
	CodeLeaseLost      = "lease_lost"
	// What is not there (404).
	CodeLeaseNotFound = "lease_not_found"
	CodeLockNotFound  = "lock_not_found"
	// Lease tokens and the admin token (401, 403).
	CodeTokenMissing       = "token_missing"
	CodeTokenMalformed     = "token_malformed"
	CodeTokenMismatch      = "token_mismatch"
	CodeAdminTokenRequired = "admin_token_required"
	CodeAdminTokenInvalid  = "admin_token_invalid"
	CodeAdminDisabled      = "admin_disabled"
	// The request itself (400, 405, 413, 415, 422).
	CodeInvalidLockName       = "invalid_lock_name"
	CodeInvalidTTL            = "invalid_ttl"
	CodeInvalidLockDelay      = "invalid_lock_delay"
	CodeInvalidBody           = "invalid_body"
	CodeMalformedJson         = "malformed_json"
	CodeUnsupportedMediaType  = "unsupported_media_type"
	CodePayloadTooLarge       = "payload_too_large"
	CodeInvalidQuery          = "invalid_query"
	CodeInvalidIdempotencyKey = "invalid_idempotency_key"
	CodeIdempotencyKeyReused  = "idempotency_key_reused"
	CodeNotFound              = "not_found"
	CodeMethodNotAllowed      = "method_not_allowed"
	// The server or its Redis cannot answer now (503, 500).
	CodeRedisUnavailable = "redis_unavailable"
	CodeRedisFull        = "redis_full"
	CodeNotReplicated    = "not_replicated"
	CodeShuttingDown     = "shutting_down"
	CodeTooManyWatches   = "too_many_watches"
	CodeInternal         = "internal"
	// API keys, tenants, browsers (401, 403, 404, 409, 422).
	CodeAPIKeyRequired    = "api_key_required"
	CodeAPIKeyInvalid     = "api_key_invalid"
	CodeRoleMissing       = "role_missing"
	CodeNameNotAllowed    = "name_not_allowed"
	CodeTenantNotAllowed  = "tenant_not_allowed"
	CodeCrossOrigin       = "cross_origin"
	CodeHostNotAllowed    = "host_not_allowed"
	CodeKeyNotFound       = "key_not_found"
	CodeKeyNameTaken      = "key_name_taken"
	CodeTooManyKeys       = "too_many_keys"
	CodeQuotaAboveCeiling = "quota_above_ceiling"
	CodeReentryTooDeep    = "reentry_too_deep"
	CodeReasonTooLong     = "reason_too_long"
	// Limits (408, 429, 503, 504).
	CodeBodyTimeout        = "body_timeout"
	CodeRateLimited        = "rate_limited"
	CodeQuotaExceeded      = "quota_exceeded"
	CodeTooManyWaiters     = "too_many_waiters"
	CodeQueueFull          = "queue_full"
	CodeTooManyConnections = "too_many_connections"
	CodeRequestTimeout     = "request_timeout"
	// RedLock (503, 422).
	CodeNoQuorum        = "no_quorum"
	CodeRedlockDisabled = "redlock_disabled"
)

// problemCodes lists every code above, in the server's table order.
var problemCodes = []string{
	CodeLockHeld,
	CodeLockDelay,
	CodeKindConflict,
	CodeNotReentrant,
	CodeUpgradeRefused,
	CodeLimitMismatch,
	CodeModeNotHeld,
	CodeTicketPending,
	CodeTicketExpired,
	CodeNoPermits,
	CodeLeaseLost,
	CodeLeaseNotFound,
	CodeLockNotFound,
	CodeTokenMissing,
	CodeTokenMalformed,
	CodeTokenMismatch,
	CodeAdminTokenRequired,
	CodeAdminTokenInvalid,
	CodeAdminDisabled,
	CodeInvalidLockName,
	CodeInvalidTTL,
	CodeInvalidLockDelay,
	CodeInvalidBody,
	CodeMalformedJson,
	CodeUnsupportedMediaType,
	CodePayloadTooLarge,
	CodeInvalidQuery,
	CodeInvalidIdempotencyKey,
	CodeIdempotencyKeyReused,
	CodeNotFound,
	CodeMethodNotAllowed,
	CodeRedisUnavailable,
	CodeRedisFull,
	CodeNotReplicated,
	CodeShuttingDown,
	CodeTooManyWatches,
	CodeInternal,
	CodeAPIKeyRequired,
	CodeAPIKeyInvalid,
	CodeRoleMissing,
	CodeNameNotAllowed,
	CodeTenantNotAllowed,
	CodeCrossOrigin,
	CodeHostNotAllowed,
	CodeKeyNotFound,
	CodeKeyNameTaken,
	CodeTooManyKeys,
	CodeQuotaAboveCeiling,
	CodeReentryTooDeep,
	CodeReasonTooLong,
	CodeBodyTimeout,
	CodeRateLimited,
	CodeQuotaExceeded,
	CodeTooManyWaiters,
	CodeQueueFull,
	CodeTooManyConnections,
	CodeRequestTimeout,
	CodeNoQuorum,
	CodeRedlockDisabled,
}

// ProblemCodes returns every problem code this client knows (a copy): the server's list
// when this client was released. A newer server may answer others; a *Problem still
// carries them in Code.
func ProblemCodes() []string { return append([]string(nil), problemCodes...) }

// Sentinels for errors.Is: any *Problem with the same code matches, e.g.
// errors.Is(err, leasehold.ErrLockHeld). ErrLeaseLost also matches a *LostError. Any other
// code works the same way with a Problem of that code: errors.Is(err, &Problem{Code: c}).
var (
	ErrLockHeld  error = &Problem{Code: CodeLockHeld}
	ErrLockDelay error = &Problem{Code: CodeLockDelay}
	ErrNoPermits error = &Problem{Code: CodeNoPermits}
	ErrLeaseLost error = &Problem{Code: CodeLeaseLost}
)
