/**
 * The official client of Leasehold, the distributed lock service.
 *
 * ```ts
 * import { Client } from "leasehold";
 * const client = new Client(); // LEASEHOLD_SERVER and LEASEHOLD_API_KEY, or http://127.0.0.1:8080
 * await client.withLock("nightly-report", { ttlMs: 30_000 }, async (lease) => {
 *   await writeReport({ fencingToken: lease.fencingToken, signal: lease.signal });
 * });
 * ```
 */
import "./polyfill.js";

export { Client, DEFAULT_SERVER, type ClientOptions } from "./client.js";
export { Term } from "./election.js";
export { Lease, type ReenterOptions } from "./lease.js";
export type { LeaseState, ReleaseOptions, ReleaseResult } from "./keeper.js";
export type { SignalListener } from "./signals.js";
export {
  AuthError,
  ConflictError,
  InvalidRequestError,
  LeaseholdError,
  LeaseLostError,
  LockDelayError,
  LockHeldError,
  NotFoundError,
  ERROR_CLASSES,
  PROBLEM_CODES,
  ProblemError,
  RateLimitedError,
  TransportError,
  UnavailableError,
  type KnownProblemCode,
  type LossReason,
  type Problem,
  type ProblemCode,
} from "./errors.js";
export type { RetryOptions } from "./http.js";
export { SseParser, readEvents, type SseEvent } from "./sse.js";
export type * from "./wire.js";
export type * from "./acquire.js";
export type * from "./views.js";
export type * from "./leadership.js";
