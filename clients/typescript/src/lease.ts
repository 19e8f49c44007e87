import "./polyfill.js";
import { LeaseLostError } from "./errors.js";
import { randomKey, type Transport } from "./http.js";
import { checkOptions } from "./options.js";
import { hasLevels, leasePath, type Place } from "./place.js";
import type { Degraded, GrantBody, HeldMember, LockKind, RenewalBody, Revocation, SignalKind } from "./wire.js";
import { Keeper, type LeaseInit, type LeaseState, type ReleaseOptions, type ReleaseResult } from "./keeper.js";
import { SignalListeners, type SignalListener } from "./signals.js";

export interface ReenterOptions {
  /** A new TTL for the lease (every level); the lease's own when absent. */
  ttlMs?: number | undefined;
  /** How long to wait, in ms (a write lease's read reentry never waits). */
  waitMs?: number | undefined;
  /** Read/write: `read` on a write lease is a downgrade; otherwise the lease's own kind. */
  kind?: LockKind | undefined;
  signal?: AbortSignal | undefined;
}

/** Node's `util.inspect` hook: what console.log shows of a lease or client. */
export const inspect = Symbol.for("nodejs.util.inspect.custom");

const now = () => performance.now();

/**
 * A held lease. It renews itself at a third of its TTL and watches its event stream, and when
 * it loses its lock (it expired, an operator force-released it, ...) it aborts {@link signal}
 * at once. Release it with {@link release}, or let `await using` or `withLock` do so.
 *
 * What the watch stream tells before a loss comes to {@link on}'s listeners (`"signal"` for
 * every {@link Signal}, or one kind: `"contended"`, `"revocation_requested"`, ...). An
 * operator's revocation sets {@link revocation}: release before its deadline; otherwise the
 * lease is given up as lost (reason `revoked`) at the deadline less the loss margin.
 */
export class Lease implements AsyncDisposable {
  /** The lock's (or semaphore's) name; a multilease's locks, joined by commas. */
  readonly name: string;
  readonly leaseId: string;
  /** The bearer token that proves this lease. Keep it secret. */
  readonly token: string;
  /**
   * A number that only grows per lock: pass it to the resource you protect, which refuses
   * writes carrying a smaller one than it has seen (or asks {@link Client.checkFence}).
   */
  readonly fencingToken: number;
  /** `reentrant`, `exclusive`, `fair`, `read`, `write`, `redlock`, `semaphore`, `multilease` or `election`. */
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

  /** @internal */
  protected readonly transport: Transport;
  private readonly place: Place;
  /** @internal */
  protected readonly path: string;
  private releaseChain: Promise<unknown> = Promise.resolve();
  private readonly listeners = new SignalListeners();
  /** What keeps the lease, and ends it (keeper.ts): its state and renewals live there. */
  private readonly keeper: Keeper;

  /** @internal Made by {@link Client.lock} and {@link Client.semaphore}. */
  constructor(init: LeaseInit) {
    const { grant } = init;
    this.transport = init.transport;
    this.place = init.place;
    this.name = init.place.name;
    this.leaseId = grant.lease_id;
    this.token = init.token;
    this.fencingToken = grant.fencing_token;
    this.kind = init.place.kind === "multilease" ? "multilease" : grant.kind;
    this.holder = grant.holder ?? undefined;
    this.permits = grant.permits ?? undefined;
    this.path = leasePath(init.place, grant.lease_id);
    this.keeper = new Keeper(init, this.path, this.listeners, this);
    this.signal = this.keeper.signal;
  }

  /**
   * A multilease's locks, each with its own lease and fencing token (pass each lock's token
   * to the resource that lock protects), and an operator's revocation of it once one was told;
   * empty for a lease of one lock or semaphore.
   */
  get members(): readonly HeldMember[] {
    return this.keeper.members;
  }

  get state(): LeaseState {
    return this.keeper.current;
  }

  /** True once the lease has lost its lock (then {@link signal} is aborted). */
  get lost(): boolean {
    return this.keeper.current === "lost";
  }

  /** Why the lease was lost, once it was. */
  get lostError(): LeaseLostError | undefined {
    return this.keeper.lostWith;
  }

  /** The levels held (reentries + 1). */
  get reentryCount(): number {
    return this.keeper.levels;
  }

  /**
   * Redis replicas that acknowledged the last grant or renewal (with the server's
   * `--min-replica-acks`; undefined when it requires none). A multilease's: its weakest member's.
   */
  get replicasAcked(): number | undefined {
    return this.keeper.acked.replicas;
  }

  /** RedLock leases: the nodes that granted or last extended it. */
  get nodesAcked(): number | undefined {
    return this.keeper.acked.nodes;
  }

  /** RedLock leases: how long, in ms, the last grant or renewal could be relied on when answered. */
  get validityMs(): number | undefined {
    return this.keeper.acked.validity;
  }

  /** Set when the last grant or renewal stands on its Redis primary alone (a failover could lose it). */
  get degraded(): Degraded | undefined {
    return this.keeper.acked.degraded;
  }

  /**
   * An operator's request that this lease let go ({@link Client.revoke}), once one came (on the
   * watch stream, or in a heartbeat's answer): release before its `deadline`.
   */
  get revocation(): Revocation | undefined {
    return this.keeper.revoked;
  }

  /**
   * Calls `listener` with each {@link Signal} the watch stream tells from now on: every one
   * (`"signal"`), or those of one kind (`"expiring"`, `"renewed"`, `"degraded"`,
   * `"recovered"`, `"contended"`, `"revocation_requested"`; a revocation a heartbeat's answer
   * told first comes as one too). An exception a listener throws is reported as uncaught (as an
   * `EventTarget`'s is), after the other listeners ran.
   */
  on(event: "signal" | SignalKind, listener: SignalListener): this {
    this.listeners.add(event, listener);
    return this;
  }

  /** Removes a listener {@link on} added. */
  off(event: "signal" | SignalKind, listener: SignalListener): this {
    this.listeners.delete(event, listener);
    return this;
  }

  /** The TTL in ms that each renewal restarts. */
  get ttlMs(): number {
    return this.keeper.ttl;
  }

  /** When the lease runs out unless renewed, by the server's clock (as of its last answer). */
  get expiresAt(): Date {
    return this.keeper.expires;
  }

  /** Throws the {@link LeaseLostError} if the lease is lost: call it before a write. */
  throwIfLost(): void {
    if (this.keeper.lostWith !== undefined) throw this.keeper.lostWith;
  }

  /**
   * Takes one more level of this lease (a reentry: same lease, same fencing token), or, with
   * `kind: "read"` on a write lease, a read hold (a downgrade). Release it with
   * `release({ all: false })`, or every level at once with `release()`.
   */
  async reenter(options: ReenterOptions = {}): Promise<void> {
    checkOptions(options, ["ttlMs", "waitMs", "kind", "signal"], "lease.reenter()");
    this.keeper.assertHeld();
    if (!hasLevels(this.place)) throw new TypeError(`${this.kind} leases cannot re-enter`);
    const deadline = now() + Math.max(0, options.waitMs ?? 0);
    const key = await randomKey();
    const body: Record<string, unknown> = {};
    if (options.ttlMs !== undefined) body["ttl_ms"] = options.ttlMs;
    if (options.kind !== undefined) body["kind"] = options.kind;
    const sentAt = now();
    const reply = await this.transport.request<GrantBody>({
      method: "POST",
      path: this.place.collection,
      query: () => ({ wait_ms: Math.max(0, Math.ceil(deadline - now())) }),
      body,
      token: this.token,
      idempotencyKey: key,
      retry: true,
      signal: options.signal,
    }).catch((error: unknown) => this.noticeLoss(error));
    this.keeper.renewed(sentAt, reply.body);
  }

  /** Renews the lease now (it renews itself anyway), optionally with a new TTL for later renewals too. */
  async renew(options: { ttlMs?: number | undefined; signal?: AbortSignal | undefined } = {}): Promise<void> {
    checkOptions(options, ["ttlMs", "signal"], "lease.renew()");
    this.keeper.assertHeld();
    const sentAt = now();
    const reply = await this.transport.request<RenewalBody>({
      method: "POST",
      path: `${this.path}/heartbeat`,
      query: this.keeper.heartbeatQuery(),
      body: options.ttlMs === undefined ? undefined : { ttl_ms: options.ttlMs },
      token: this.token,
      retry: true,
      signal: options.signal,
    }).catch((error: unknown) => this.noticeLoss(error));
    this.keeper.keptTerm(reply.body);
    this.keeper.renewed(sentAt, reply.body);
  }

  /**
   * Releases the lease: every level by default (`{ all: false }` for one). Retried with the
   * same `Idempotency-Key` when the answer is lost, so it never releases twice. Resolves once
   * the server has released it; rejects with the {@link LeaseLostError} when the lease had
   * already lost its lock (the work under it was not protected to its end). Calling it again
   * after a full release does nothing.
   */
  release(options: ReleaseOptions = {}): Promise<ReleaseResult> {
    checkOptions(options, ["all", "mode", "signal"], "lease.release()");
    if (!hasLevels(this.place) && (options.all === false || options.mode !== undefined)) {
      return Promise.reject(new TypeError(`a ${this.kind} lease has no levels: release it whole`));
    }
    const result = this.releaseChain.then(() => this.keeper.releaseNow(options));
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
      state: this.keeper.current,
      reentryCount: this.keeper.levels,
      ttlMs: this.keeper.ttl,
      expiresAt: this.keeper.expires.toISOString(),
      lost: this.keeper.lostWith?.reason,
      revocation: this.keeper.revoked,
    };
  }

  [inspect](): string {
    return `Lease ${JSON.stringify(this.toJSON())}`;
  }

  /** @internal Releases on the way out of the process (a signal), within a bounded time. */
  async releaseForExit(): Promise<void> {
    if (this.keeper.current === "held") await this.release().catch(() => {});
  }

  /** Rethrows an error of a call made with the lease, after marking the lease lost if it says so. */
  protected noticeLoss(error: unknown): never {
    if (error instanceof LeaseLostError) this.keeper.lose(error);
    throw error;
  }
}
