import "./polyfill.js";
import {
  AuthError,
  LeaseLostError,
  NotFoundError,
  ProblemError,
  TransportError,
  lossError,
} from "./errors.js";
import { isObject, link, randomKey, sleep, toProblemError, type Transport } from "./http.js";
import { readEvents } from "./sse.js";
import type { GrantBody, LockKind, ReleaseBody, RenewalBody, RwMode } from "./types.js";
import { track, untrack } from "./exit.js";

/** `held` until released or lost; `released` and `lost` are final. */
export type LeaseState = "held" | "released" | "lost";

export interface ReleaseOptions {
  /** Release every reentry level (default true); false releases one. */
  all?: boolean | undefined;
  /** Read/write leases: the hold to release (default: write if held, else read). */
  mode?: RwMode | undefined;
  signal?: AbortSignal | undefined;
}

export interface ReleaseResult {
  /** True when the lease holds no level any more. */
  released: boolean;
  /** The levels left (0 once released). */
  reentryCount: number;
}

export interface ReenterOptions {
  /** A new TTL for the lease (every level); the lease's own when absent. */
  ttlMs?: number | undefined;
  /** How long to wait, in ms (a write lease's read reentry never waits). */
  waitMs?: number | undefined;
  /** Read/write: `read` on a write lease is a downgrade; otherwise the lease's own kind. */
  kind?: LockKind | undefined;
  signal?: AbortSignal | undefined;
}

/** @internal What a Lease is made from. */
export interface LeaseInit {
  transport: Transport;
  resource: "locks" | "semaphores";
  name: string;
  token: string;
  grant: GrantBody;
  /** When the request that brought the grant was sent (performance.now()). */
  sentAt: number;
  watch: boolean;
  releaseOnSignal: boolean;
}

/** How long the watch stream may stay silent (the server sends a comment every 15 s). */
const WATCH_IDLE_MS = 45_000;
/** The pause before opening a watch again that was refused for lack of room. */
const WATCH_RETRY_FULL_MS = 15_000;

/** Node's `util.inspect` hook: what console.log shows of a lease or client. */
export const inspect = Symbol.for("nodejs.util.inspect.custom");

const now = () => performance.now();

/**
 * A held lease. It renews itself at a third of its TTL and watches its event stream, and when
 * it loses its lock (it expired, an operator force-released it, ...) it aborts {@link signal}
 * at once. Release it with {@link release}, or let `await using` or `withLock` do so.
 */
export class Lease implements AsyncDisposable {
  /** The lock's (or semaphore's) name. */
  readonly name: string;
  readonly leaseId: string;
  /** The bearer token that proves this lease. Keep it secret. */
  readonly token: string;
  /**
   * A number that only grows per lock: pass it to the resource you protect, which refuses
   * writes carrying a smaller one than it has seen (or asks {@link Client.checkFence}).
   */
  readonly fencingToken: number;
  /** `reentrant`, `exclusive`, `fair`, `read`, `write` or `semaphore`. */
  readonly kind: string;
  readonly holder: string | undefined;
  /** Semaphore leases: the permits held. */
  readonly permits: number | undefined;
  /**
   * Aborted when the lease is lost, with a {@link LeaseLostError} as its `reason`. Pass it to
   * the work (fetch, streams, timers) so the work stops with the lock. A release does not
   * abort it.
   */
  readonly signal: AbortSignal;

  private readonly transport: Transport;
  private readonly path: string;
  private readonly lossController = new AbortController();
  private readonly stopper = new AbortController();
  private readonly releaseOnSignal: boolean;
  private current: LeaseState = "held";
  private lostWith: LeaseLostError | undefined;
  private levels: number;
  private ttl: number;
  private expires: Date;
  private renewedAt: number;
  private deadline: ReturnType<typeof setTimeout> | undefined;
  private releasesInFlight = 0;
  private pendingLoss: LeaseLostError | undefined;
  private releaseChain: Promise<unknown> = Promise.resolve();

  /** @internal Made by {@link Client.lock} and {@link Client.semaphore}. */
  constructor(init: LeaseInit) {
    const { grant } = init;
    this.transport = init.transport;
    this.name = init.name;
    this.leaseId = grant.lease_id;
    this.token = init.token;
    this.fencingToken = grant.fencing_token;
    this.kind = grant.kind;
    this.holder = grant.holder ?? undefined;
    this.permits = grant.permits ?? undefined;
    this.levels = grant.reentry_count;
    this.ttl = grant.ttl_ms;
    this.expires = new Date(grant.expires_at);
    this.renewedAt = init.sentAt;
    this.signal = this.lossController.signal;
    this.releaseOnSignal = init.releaseOnSignal;
    this.path = `/v1/${init.resource}/${encodeURIComponent(init.name)}/leases/${encodeURIComponent(grant.lease_id)}`;
    if (this.releaseOnSignal) track(this);
    this.armDeadline();
    void this.renewLoop();
    if (init.watch) void this.watchLoop();
  }

  get state(): LeaseState {
    return this.current;
  }

  /** True once the lease has lost its lock (then {@link signal} is aborted). */
  get lost(): boolean {
    return this.current === "lost";
  }

  /** Why the lease was lost, once it was. */
  get lostError(): LeaseLostError | undefined {
    return this.lostWith;
  }

  /** The levels held (reentries + 1). */
  get reentryCount(): number {
    return this.levels;
  }

  /** The TTL in ms that each renewal restarts. */
  get ttlMs(): number {
    return this.ttl;
  }

  /** When the lease runs out unless renewed, by the server's clock (as of its last answer). */
  get expiresAt(): Date {
    return this.expires;
  }

  /** Throws the {@link LeaseLostError} if the lease is lost: call it before a write. */
  throwIfLost(): void {
    if (this.lostWith !== undefined) throw this.lostWith;
  }

  /**
   * Takes one more level of this lease (a reentry: same lease, same fencing token), or, with
   * `kind: "read"` on a write lease, a read hold (a downgrade). Release it with
   * `release({ all: false })`, or every level at once with `release()`.
   */
  async reenter(options: ReenterOptions = {}): Promise<void> {
    this.assertHeld();
    if (this.path.startsWith("/v1/semaphores/")) throw new TypeError("semaphore leases cannot re-enter");
    const deadline = now() + Math.max(0, options.waitMs ?? 0);
    const key = await randomKey();
    const body: Record<string, unknown> = {};
    if (options.ttlMs !== undefined) body["ttl_ms"] = options.ttlMs;
    if (options.kind !== undefined) body["kind"] = options.kind;
    const sentAt = now();
    const reply = await this.transport.request<GrantBody>({
      method: "POST",
      path: `/v1/locks/${encodeURIComponent(this.name)}/leases`,
      query: () => ({ wait_ms: Math.max(0, Math.ceil(deadline - now())) }),
      body,
      token: this.token,
      idempotencyKey: key,
      retry: true,
      signal: options.signal,
    }).catch((error: unknown) => this.noticeLoss(error));
    this.renewed(sentAt, reply.body);
  }

  /** Renews the lease now (it renews itself anyway), optionally with a new TTL for later renewals too. */
  async renew(options: { ttlMs?: number | undefined; signal?: AbortSignal | undefined } = {}): Promise<void> {
    this.assertHeld();
    const sentAt = now();
    const reply = await this.transport.request<RenewalBody>({
      method: "POST",
      path: `${this.path}/heartbeat`,
      body: options.ttlMs === undefined ? undefined : { ttl_ms: options.ttlMs },
      token: this.token,
      retry: true,
      signal: options.signal,
    }).catch((error: unknown) => this.noticeLoss(error));
    this.renewed(sentAt, reply.body);
  }

  /**
   * Releases the lease: every level by default (`{ all: false }` for one). Retried with the
   * same `Idempotency-Key` when the answer is lost, so it never releases twice. Resolves once
   * the server has released it; rejects with the {@link LeaseLostError} when the lease had
   * already lost its lock (the work under it was not protected to its end). Calling it again
   * after a full release does nothing.
   */
  release(options: ReleaseOptions = {}): Promise<ReleaseResult> {
    const result = this.releaseChain.then(() => this.releaseNow(options));
    this.releaseChain = result.catch(() => {});
    return result;
  }

  /** `await using lease = await client.lock(...)`: releases every level; throws if the lease was lost. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }

  /** What JSON.stringify and console.log show: never the token. */
  toJSON(): Record<string, unknown> {
    return {
      name: this.name,
      leaseId: this.leaseId,
      kind: this.kind,
      fencingToken: this.fencingToken,
      holder: this.holder,
      permits: this.permits,
      state: this.current,
      reentryCount: this.levels,
      ttlMs: this.ttl,
      expiresAt: this.expires.toISOString(),
      lost: this.lostWith?.reason,
    };
  }

  [inspect](): string {
    return `Lease ${JSON.stringify(this.toJSON())}`;
  }

  /** @internal Releases on the way out of the process (a signal), within a bounded time. */
  async releaseForExit(): Promise<void> {
    if (this.current === "held") await this.release().catch(() => {});
  }

  private async releaseNow(options: ReleaseOptions): Promise<ReleaseResult> {
    if (this.current === "lost") throw this.lostWith;
    if (this.current === "released") return { released: true, reentryCount: 0 };
    const all = options.all ?? true;
    const key = await randomKey();
    const sentAt = now();
    this.releasesInFlight++;
    let reply: ReleaseBody;
    try {
      reply = (
        await this.transport.request<ReleaseBody>({
          method: "DELETE",
          path: this.path,
          query: { all: all ? true : undefined, mode: options.mode },
          token: this.token,
          idempotencyKey: key,
          retry: true,
          signal: options.signal,
        })
      ).body;
    } catch (error) {
      this.releasesInFlight--;
      if (error instanceof LeaseLostError) {
        this.lose(error, true);
        throw error;
      }
      const pending = this.releasesInFlight === 0 ? this.pendingLoss : undefined;
      if (pending?.reason === "released") {
        // Its answer never came, but the watch stream saw the lease end by this release.
        this.finish("released");
        return { released: true, reentryCount: 0 };
      }
      if (pending !== undefined) {
        this.lose(pending, true);
        throw pending;
      }
      // Not known whether it was released: a full release stops renewing, so it expires by its TTL.
      if (all && !(error instanceof ProblemError && error.status < 500)) this.finish("released");
      throw error;
    }
    this.releasesInFlight--;
    // `released` is true once this lease holds no level (other readers may still hold a read lock).
    if (reply.released || reply.reentry_count === 0) {
      this.finish("released");
      return { released: true, reentryCount: 0 };
    }
    this.levels = reply.reentry_count;
    // Releasing one level of several renews the lease for its TTL.
    if (sentAt > this.renewedAt) {
      this.renewedAt = sentAt;
      this.armDeadline();
    }
    const pending = this.pendingLoss;
    if (pending !== undefined && this.releasesInFlight === 0) {
      this.pendingLoss = undefined;
      if (pending.reason !== "released") this.lose(pending);
    }
    return { released: false, reentryCount: reply.reentry_count };
  }

  private assertHeld(): void {
    if (this.current === "lost") throw this.lostWith;
    if (this.current === "released") throw new TypeError(`the lease ${this.leaseId} on ${this.name} was released`);
  }

  /** Rethrows an error of a call made with the lease, after marking the lease lost if it says so. */
  private noticeLoss(error: unknown): never {
    if (error instanceof LeaseLostError) this.lose(error);
    throw error;
  }

  private renewed(sentAt: number, body: RenewalBody | GrantBody): void {
    if (this.current !== "held") return;
    this.levels = body.reentry_count;
    if (sentAt >= this.renewedAt) {
      this.renewedAt = sentAt;
      this.ttl = body.ttl_ms;
      this.expires = new Date(body.expires_at);
      this.armDeadline();
    }
  }

  /**
   * The lease certainly holds until `renewedAt + ttl` (the server counts the TTL from when it
   * ran the renewal, after we sent it). Past that with no renewal answered, it may have
   * expired: report it lost rather than let the work go on unprotected.
   */
  private armDeadline(): void {
    clearTimeout(this.deadline);
    if (this.current !== "held") return;
    this.deadline = setTimeout(() => {
      if (now() < this.renewedAt + this.ttl) {
        this.armDeadline();
        return;
      }
      this.lose(
        lossError(
          "expired",
          `no renewal of the lease reached the server within its TTL (${this.ttl} ms): it has expired, or is about to`,
          { lease_id: this.leaseId, lock: this.name },
        ),
      );
      if (this.current === "lost") {
        // It may still hold, if only the answers were lost: give it back for the next holder.
        void this.transport
          .request({ method: "DELETE", path: this.path, query: { all: true }, token: this.token, retry: false })
          .catch(() => {});
      }
    }, Math.max(0, this.renewedAt + this.ttl - now()));
  }

  /** Heartbeats at a third of the TTL; retried sooner when one fails, until the deadline says lost. */
  private async renewLoop(): Promise<void> {
    const stop = this.stopper.signal;
    let failures = 0;
    let retryAt = 0;
    while (!stop.aborted) {
      const due = failures === 0 ? this.renewedAt + this.ttl / 3 : retryAt;
      if (due > now()) {
        try {
          await sleep(due - now(), stop);
        } catch {
          return;
        }
        continue; // a reentry or a release may have renewed it meanwhile
      }
      const sentAt = now();
      try {
        const reply = await this.transport.request<RenewalBody>({
          method: "POST",
          path: `${this.path}/heartbeat`,
          token: this.token,
          retry: false, // retried by this loop, until the deadline
          signal: stop,
          timeoutMs: Math.min(Math.max(this.ttl / 2, 500), this.transport.options.timeoutMs),
        });
        this.renewed(sentAt, reply.body);
        failures = 0;
      } catch (error) {
        if (stop.aborted) return;
        const loss = asLoss(error);
        if (loss !== undefined) {
          this.lose(loss);
          if (this.current !== "held") return;
        }
        failures++;
        const hinted = error instanceof ProblemError ? error.retryAfterMs : undefined;
        retryAt = now() + Math.min(this.transport.backoff(failures, hinted), this.ttl / 6);
      }
    }
  }

  /** Follows the watch stream; reports `event: lost` at once; opens it again when it ends otherwise. */
  private async watchLoop(): Promise<void> {
    const stop = this.stopper.signal;
    let failures = 0;
    while (!stop.aborted) {
      const connection = new AbortController();
      const unlink = link(stop, connection);
      let idle: ReturnType<typeof setTimeout> | undefined;
      const alive = () => {
        clearTimeout(idle);
        idle = setTimeout(
          () => connection.abort(new TransportError(`the watch stream was silent for ${WATCH_IDLE_MS} ms`)),
          WATCH_IDLE_MS,
        );
      };
      let pause: number | undefined;
      try {
        alive();
        const response = await this.transport.open(
          { method: "GET", path: `${this.path}/watch`, token: this.token },
          connection.signal,
        );
        if (!response.ok) {
          const error = toProblemError(response, await response.text());
          const loss = asLoss(error);
          if (loss !== undefined) {
            this.lose(loss);
          } else if (error instanceof AuthError || error.status < 429) {
            return; // this lease cannot be watched here: the heartbeats still tell its loss
          } else {
            // Over the caller's stream quota (429), the instance's watches (503 too_many_watches),
            // or the instance unavailable: the heartbeats tell a loss meanwhile; try again rarely.
            pause = Math.max(error.retryAfterMs ?? 0, WATCH_RETRY_FULL_MS);
          }
          failures++;
        } else if (response.body !== null) {
          const opened = now();
          for await (const event of readEvents(response.body, alive)) {
            if (event.event === "lost") {
              this.lose(lostEvent(event.data, this));
              break;
            }
          }
          // It ended without news (the instance stopped, a proxy cut it): open it again, at
          // once if it had lasted, backing off if streams keep ending as soon as they open.
          failures = now() - opened > 5_000 ? 1 : failures + 1;
        }
      } catch {
        if (stop.aborted) return;
        failures++;
      } finally {
        clearTimeout(idle);
        unlink();
        connection.abort();
      }
      try {
        await sleep(pause ?? this.transport.backoff(Math.max(failures, 1)), stop);
      } catch {
        return;
      }
    }
  }

  /** Marks the lease lost and aborts {@link signal}; ignored once it has ended. */
  private lose(error: LeaseLostError, final = false): void {
    if (this.current !== "held") return;
    if (this.releasesInFlight > 0 && !final) {
      // Our own release ends the watch with `lost` (reason `released`); its answer decides.
      this.pendingLoss ??= error;
      return;
    }
    this.lostWith = error;
    this.finish("lost");
    this.lossController.abort(error);
  }

  private finish(state: "released" | "lost"): void {
    if (this.current !== "held") return;
    this.current = state;
    this.stopper.abort();
    clearTimeout(this.deadline);
    if (this.releaseOnSignal) untrack(this);
  }
}

/** The loss an error reports, if it reports one: 410, or the server not knowing the lease. */
function asLoss(error: unknown): LeaseLostError | undefined {
  if (error instanceof LeaseLostError) return error;
  if (error instanceof NotFoundError && error.code === "lease_not_found") {
    return lossError("unknown", error.detail, { cause_code: error.code });
  }
  if (error instanceof AuthError && error.code === "token_mismatch") {
    return lossError("unknown", error.detail, { cause_code: error.code });
  }
  return undefined;
}

function lostEvent(data: string, lease: Lease): LeaseLostError {
  let event: Record<string, unknown> = {};
  try {
    const parsed = JSON.parse(data) as unknown;
    if (isObject(parsed)) event = parsed;
  } catch {
    // a lost event whose data does not parse is still a loss
  }
  const reason = typeof event["reason"] === "string" ? event["reason"] : "unknown";
  return lossError(reason, `the lease ${lease.leaseId} on ${lease.name} ended: ${reason} (from its watch stream)`, {
    ...event,
  });
}
