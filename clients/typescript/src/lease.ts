import "./polyfill.js";
import { LeaseLostError, ProblemError, lossError } from "./errors.js";
import { randomKey, sleep, type Transport } from "./http.js";
import { checkOptions } from "./options.js";
import { hasLevels, leasePath, type Place } from "./place.js";
import type {
  Degraded,
  GrantBody,
  LockKind,
  MultileaseMember,
  ReleaseBody,
  RenewalBody,
  Revocation,
  RwMode,
  Signal,
  SignalKind,
} from "./types.js";
import { acked, type Acked } from "./acked.js";
import { track, untrack } from "./exit.js";
import { isSignalKind, msLeft, parseRevocation, parseSignal } from "./signals.js";
import type { SseEvent } from "./sse.js";
import { asLoss, lostEvent, watchLease } from "./watch.js";

/** What {@link Lease.on} calls with each {@link Signal}. */
export type SignalListener = (signal: Signal) => void;

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
  place: Place;
  token: string;
  grant: GrantBody;
  /** When the request that brought the grant was sent (performance.now()). */
  sentAt: number;
  watch: boolean;
  releaseOnSignal: boolean;
  /** The watch's `expiring_slack_ms` (undefined: the server's default). */
  expiringSlackMs?: number | undefined;
}

/**
 * What is left of a lease's TTL when renewals that keep failing give it up as lost: a sixth
 * of the TTL, at least a second, at most a third (clients/PROTOCOL.md). Given up then, before
 * the server may grant the lock to someone else, not at the TTL itself.
 */
export function lossMargin(ttlMs: number): number {
  return Math.min(Math.max(ttlMs / 6, 1000), ttlMs / 3);
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
  /**
   * A multilease's locks, each with its own lease and fencing token (pass each lock's token
   * to the resource that lock protects); empty for a lease of one lock or semaphore.
   */
  readonly members: readonly MultileaseMember[];
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
  private gaveBack = false;
  private acked: Acked;
  private revoked: Revocation | undefined;
  /** When a revocation ends the lease (performance.now()), at the latest. */
  private revokedAt: number | undefined;
  private readonly listeners = new Map<string, Set<SignalListener>>();

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
    this.members = grant.members ?? [];
    this.acked = acked(grant);
    this.holder = grant.holder ?? undefined;
    this.permits = grant.permits ?? undefined;
    this.levels = grant.reentry_count ?? 1;
    this.ttl = grant.ttl_ms;
    this.expires = new Date(grant.expires_at);
    this.renewedAt = init.sentAt;
    this.signal = this.lossController.signal;
    this.releaseOnSignal = init.releaseOnSignal;
    this.path = leasePath(init.place, grant.lease_id);
    if (this.releaseOnSignal) track(this);
    this.armDeadline();
    void this.renewLoop();
    if (init.watch) void this.watchLoop(init.expiringSlackMs);
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

  /**
   * Redis replicas that acknowledged the last grant or renewal (with the server's
   * `--min-replica-acks`; undefined when it requires none). A multilease's: its weakest member's.
   */
  get replicasAcked(): number | undefined {
    return this.acked.replicas;
  }

  /** RedLock leases: the nodes that granted or last extended it. */
  get nodesAcked(): number | undefined {
    return this.acked.nodes;
  }

  /** RedLock leases: how long, in ms, the last grant or renewal could be relied on when answered. */
  get validityMs(): number | undefined {
    return this.acked.validity;
  }

  /** Set when the last grant or renewal stands on its Redis primary alone (a failover could lose it). */
  get degraded(): Degraded | undefined {
    return this.acked.degraded;
  }

  /**
   * An operator's request that this lease let go ({@link Client.revoke}), once one came (on the
   * watch stream, or in a heartbeat's answer): release before its `deadline`.
   */
  get revocation(): Revocation | undefined {
    return this.revoked;
  }

  /**
   * Calls `listener` with each {@link Signal} the watch stream tells from now on: every one
   * (`"signal"`), or those of one kind (`"expiring"`, `"renewed"`, `"degraded"`,
   * `"recovered"`, `"contended"`, `"revocation_requested"`; a revocation a heartbeat's answer
   * told first comes as one too). An exception a listener throws is reported as uncaught (as an
   * `EventTarget`'s is), after the other listeners ran.
   */
  on(event: "signal" | SignalKind, listener: SignalListener): this {
    let set = this.listeners.get(event);
    if (set === undefined) this.listeners.set(event, (set = new Set()));
    set.add(listener);
    return this;
  }

  /** Removes a listener {@link on} added. */
  off(event: "signal" | SignalKind, listener: SignalListener): this {
    this.listeners.get(event)?.delete(listener);
    return this;
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
    checkOptions(options, ["ttlMs", "waitMs", "kind", "signal"], "lease.reenter()");
    this.assertHeld();
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
    this.renewed(sentAt, reply.body);
  }

  /** Renews the lease now (it renews itself anyway), optionally with a new TTL for later renewals too. */
  async renew(options: { ttlMs?: number | undefined; signal?: AbortSignal | undefined } = {}): Promise<void> {
    checkOptions(options, ["ttlMs", "signal"], "lease.renew()");
    this.assertHeld();
    const sentAt = now();
    const reply = await this.transport.request<RenewalBody>({
      method: "POST",
      path: `${this.path}/heartbeat`,
      query: this.heartbeatQuery(),
      body: options.ttlMs === undefined ? undefined : { ttl_ms: options.ttlMs },
      token: this.token,
      retry: true,
      signal: options.signal,
    }).catch((error: unknown) => this.noticeLoss(error));
    this.keptTerm(reply.body);
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
    checkOptions(options, ["all", "mode", "signal"], "lease.release()");
    if (!hasLevels(this.place) && (options.all === false || options.mode !== undefined)) {
      return Promise.reject(new TypeError(`a ${this.kind} lease has no levels: release it whole`));
    }
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
      revocation: this.revoked,
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
    if (this.current === "lost" && this.place.kind === "multilease" && !this.gaveBack) {
      // A lost multilease still holds its other locks: its release gives them back now, not
      // at the end of their TTL (the server answers 410, as expected).
      this.gaveBack = true;
      await this.transport.request({ method: "DELETE", path: this.path, token: this.token, retry: true }).catch(() => {});
    }
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
          query: hasLevels(this.place) ? { all: all ? true : undefined, mode: options.mode } : undefined,
          token: this.token,
          // A multilease's release and a resignation keep no key: a retry of one that went
          // through answers 410 released.
          idempotencyKey: this.place.kind === "multilease" || this.place.kind === "election" ? undefined : key,
          retry: true,
          signal: options.signal,
        })
      ).body;
    } catch (error) {
      this.releasesInFlight--;
      if (error instanceof LeaseLostError && error.reason === "released") {
        // A retry whose first attempt went through (or the token's other holder released it).
        this.finish("released");
        return { released: true, reentryCount: 0 };
      }
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
  protected noticeLoss(error: unknown): never {
    if (error instanceof LeaseLostError) this.lose(error);
    throw error;
  }

  /**
   * A leader's heartbeat names its term (`?term=N`): should Redis have lost the grant and put
   * the candidate back in line, the server answers 410 instead of leading it into a new term
   * this client would take for the old one.
   */
  private heartbeatQuery(): { term: number } | undefined {
    return this.place.kind === "election" ? { term: this.fencingToken } : undefined;
  }

  /**
   * Never adopts a new term silently: a heartbeat of a term that answers another is the loss
   * of the held one (`term_changed`, thrown), and the new one is given up.
   */
  private keptTerm(body: RenewalBody): void {
    if (this.place.kind !== "election" || body.term === undefined || body.term === this.fencingToken) return;
    const loss = lossError("term_changed", `the heartbeat of term ${this.fencingToken} answered term ${body.term}`, {
      lease_id: this.leaseId,
      lock: this.name,
    });
    this.lose(loss);
    void this.transport.request({ method: "DELETE", path: this.path, token: this.token, retry: false }).catch(() => {});
    throw loss;
  }

  private renewed(sentAt: number, body: RenewalBody | GrantBody): void {
    if (this.current !== "held") return;
    if (body.reentry_count !== undefined) this.levels = body.reentry_count;
    this.acked = acked(body);
    // While a revocation is pending, `ttl_ms` is what is left until its deadline: the TTL the
    // margin and the heartbeats are counted from stays the lease's.
    const revocation = "revocation" in body ? parseRevocation(body.revocation) : undefined;
    if (sentAt >= this.renewedAt) {
      this.renewedAt = sentAt;
      if (revocation === undefined) this.ttl = body.ttl_ms;
      this.expires = new Date(body.expires_at);
      this.armDeadline();
    }
    if (revocation !== undefined) this.noteRevocation(revocation, sentAt + body.ttl_ms);
  }

  /**
   * An operator asked for the lease back: it is given up at `endsAt` (its deadline on our
   * clock) less the margin, unless released first. Told once, whichever told it first.
   */
  private noteRevocation(revocation: Revocation, endsAt: number, signal?: Signal): void {
    if (this.current !== "held") return;
    this.revokedAt = Math.min(this.revokedAt ?? Infinity, endsAt);
    const known = this.revoked !== undefined && this.revoked.deadline === revocation.deadline;
    this.revoked = revocation;
    this.armDeadline();
    if (!known) this.tell(signal ?? { kind: "revocation_requested", leaseId: this.leaseId, lock: this.name, revocation });
  }

  /** One event of the watch stream: a signal (others a newer server may add are ignored). */
  private told(event: SseEvent): void {
    if (this.current !== "held" || this.releasesInFlight > 0 || !isSignalKind(event.event)) return;
    const signal = parseSignal(event.event, event.data, event.id);
    if (signal.revocation !== undefined) this.noteRevocation(signal.revocation, now() + msLeft(signal.revocation), signal);
    else this.tell(signal);
  }

  private tell(signal: Signal): void {
    const listeners = [...(this.listeners.get("signal") ?? []), ...(this.listeners.get(signal.kind) ?? [])];
    for (const listener of listeners) {
      try {
        listener(signal);
      } catch (error) {
        queueMicrotask(() => {
          throw error;
        });
      }
    }
  }

  /**
   * The lease certainly holds until `renewedAt + ttl` (the server counts the TTL from when it
   * ran the renewal, after we sent it). When no renewal has been answered by the loss margin
   * before that, report it lost (`unrenewable`) before the server may grant the lock to
   * someone else, rather than let the work go on unprotected.
   */
  private armDeadline(): void {
    clearTimeout(this.deadline);
    if (this.current !== "held") return;
    // A revocation moves the end to its deadline; the margin is the same.
    const revoked = () => this.revokedAt !== undefined && this.revokedAt <= this.renewedAt + this.ttl;
    const giveUpAt = () => Math.min(this.renewedAt + this.ttl, this.revokedAt ?? Infinity) - lossMargin(this.ttl);
    this.deadline = setTimeout(() => {
      if (now() < giveUpAt()) {
        this.armDeadline();
        return;
      }
      this.lose(
        revoked()
          ? lossError(
              "revoked",
              `an operator revoked the lease (${this.revoked?.reason || "no reason given"}) and it was not released before its deadline, ${this.revoked?.deadline}, less the margin`,
              { lease_id: this.leaseId, lock: this.name },
            )
          : lossError(
              "unrenewable",
              `no renewal of the lease was answered in time (its TTL is ${this.ttl} ms): someone else may hold the lock soon`,
              { lease_id: this.leaseId, lock: this.name },
            ),
      );
      if (this.current === "lost") {
        // It may still hold, if only the answers were lost: give it back for the next holder.
        void this.transport
          .request({
            method: "DELETE",
            path: this.path,
            query: hasLevels(this.place) ? { all: true } : undefined,
            token: this.token,
            retry: false,
          })
          .catch(() => {});
      }
    }, Math.max(0, giveUpAt() - now()));
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
          query: this.heartbeatQuery(),
          token: this.token,
          retry: false, // retried by this loop, until the deadline
          signal: stop,
          timeoutMs: Math.min(Math.max(this.ttl / 2, 500), this.transport.options.timeoutMs),
        });
        this.keptTerm(reply.body);
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
        retryAt = now() + Math.min(this.transport.backoff(failures, hinted), lossMargin(this.ttl) / 2);
      }
    }
  }

  /** Follows the watch stream (see watch.ts) until the lease ends, asking for its slack on every opening. */
  private watchLoop(slackMs: number | undefined): Promise<void> {
    return watchLease(
      this.transport,
      { path: `${this.path}/watch`, query: slackMs === undefined ? undefined : { expiring_slack_ms: slackMs } },
      this.token,
      this.stopper.signal,
      (loss) => this.lose(loss),
      (data) => lostEvent(data, this.leaseId, this.name),
      (event) => this.told(event),
    );
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
