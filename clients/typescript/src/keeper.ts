/**
 * What keeps a held lease on this client, behind the {@link Lease} its caller holds, and what
 * ends it: its state (held until released or lost; a loss aborts its signal), what the server
 * last said of it (levels, TTL, expiry, copies, a revocation), the heartbeats at a third of its
 * TTL, the deadline that gives it up as lost, the watch stream and the signals it tells, and
 * the release, whose answer decides between released and lost.
 */
import { LeaseLostError, ProblemError, lossError } from "./errors.js";
import { randomKey, sleep, type Transport } from "./http.js";
import { hasLevels, type Place } from "./place.js";
import type { GrantBody, HeldMember, ReleaseBody, RenewalBody, Revocation, RwMode, Signal } from "./wire.js";
import { acked, type Acked } from "./acked.js";
import { track, untrack, type Releasable } from "./exit.js";
import { endsBefore, heartbeatRevocations, heldMember, isSignalKind, msLeft, parseSignal, type SignalListeners } from "./signals.js";
import type { SseEvent } from "./sse.js";
import { asLoss, lostEvent, watchLease } from "./watch.js";

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

const now = () => performance.now();

/**
 * Keeps a held lease (made with it by its {@link Lease}): renews it, watches it, tells its
 * signals, gives it up as lost, releases it. The Lease reads its public fields; only the
 * keeper sets them.
 */
export class Keeper {
  /** Aborted when the lease is lost, with a {@link LeaseLostError} as its `reason`. */
  readonly signal: AbortSignal;
  current: LeaseState = "held";
  lostWith: LeaseLostError | undefined;
  levels: number;
  ttl: number;
  expires: Date;
  acked: Acked;
  /** Of a multilease's members' revocations, the one with the earliest deadline (of equal ones, the first told). */
  revoked: Revocation | undefined;
  /** A multilease's locks; each shows its revocation once one was told. */
  members: readonly HeldMember[];

  private readonly transport: Transport;
  private readonly place: Place;
  private readonly path: string;
  private readonly name: string;
  private readonly leaseId: string;
  private readonly token: string;
  private readonly fencingToken: number;
  private readonly lease: Releasable;
  private readonly listeners: SignalListeners;
  private readonly lossController = new AbortController();
  private readonly stopper = new AbortController();
  private readonly releaseOnSignal: boolean;
  private renewedAt: number;
  private deadline: ReturnType<typeof setTimeout> | undefined;
  private releasesInFlight = 0;
  private pendingLoss: LeaseLostError | undefined;
  private gaveBack = false;
  /** When a revocation ends the lease (performance.now()), at the latest. */
  private revokedAt: number | undefined;
  /** The lock whose revocation is kept (`revoked`), and each one told (lock and deadline), once. */
  private revokedLock: string | undefined;
  private readonly revocationsTold = new Set<string>();

  /**
   * Starts keeping the lease at `path` that `lease` is (released on the way out of the
   * process with `releaseOnSignal`), telling its signals to `listeners`.
   */
  constructor(init: LeaseInit, path: string, listeners: SignalListeners, lease: Releasable) {
    const { grant } = init;
    this.transport = init.transport;
    this.place = init.place;
    this.name = init.place.name;
    this.leaseId = grant.lease_id;
    this.token = init.token;
    this.fencingToken = grant.fencing_token;
    this.acked = acked(grant);
    this.members = (grant.members ?? []).map(heldMember);
    this.levels = grant.reentry_count ?? 1;
    this.ttl = grant.ttl_ms;
    this.expires = new Date(grant.expires_at);
    this.renewedAt = init.sentAt;
    this.signal = this.lossController.signal;
    this.releaseOnSignal = init.releaseOnSignal;
    this.path = path;
    this.listeners = listeners;
    this.lease = lease;
    if (this.releaseOnSignal) track(lease);
    this.armDeadline();
    void this.renewLoop();
    if (init.watch) void this.watchLoop(init.expiringSlackMs);
  }

  async releaseNow(options: ReleaseOptions): Promise<ReleaseResult> {
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

  assertHeld(): void {
    if (this.current === "lost") throw this.lostWith;
    if (this.current === "released") throw new TypeError(`the lease ${this.leaseId} on ${this.name} was released`);
  }

  /**
   * A leader's heartbeat names its term (`?term=N`): should Redis have lost the grant and put
   * the candidate back in line, the server answers 410 instead of leading it into a new term
   * this client would take for the old one.
   */
  heartbeatQuery(): { term: number } | undefined {
    return this.place.kind === "election" ? { term: this.fencingToken } : undefined;
  }

  /**
   * Never adopts a new term silently: a heartbeat of a term that answers another is the loss
   * of the held one (`term_changed`, thrown), and the new one is given up.
   */
  keptTerm(body: RenewalBody): void {
    if (this.place.kind !== "election" || body.term === undefined || body.term === this.fencingToken) return;
    const loss = lossError("term_changed", `the heartbeat of term ${this.fencingToken} answered term ${body.term}`, {
      lease_id: this.leaseId,
      lock: this.name,
    });
    this.lose(loss);
    void this.transport.request({ method: "DELETE", path: this.path, token: this.token, retry: false }).catch(() => {});
    throw loss;
  }

  renewed(sentAt: number, body: RenewalBody | GrantBody): void {
    if (this.current !== "held") return;
    if (body.reentry_count !== undefined) this.levels = body.reentry_count;
    this.acked = acked(body);
    // While a revocation is pending (a multilease's: a member's), `ttl_ms` is what is left
    // until its deadline: the TTL the margin and the heartbeats are counted from stays the lease's.
    const told = heartbeatRevocations(body);
    if (sentAt >= this.renewedAt) {
      this.renewedAt = sentAt;
      if (told.length === 0) this.ttl = body.ttl_ms;
      this.expires = new Date(body.expires_at);
      this.armDeadline();
    }
    for (const { revocation, member } of told) {
      // Each signal names the revoked member's lock, as the watch's would.
      this.noteRevocation(revocation, sentAt + body.ttl_ms, { kind: "revocation_requested", leaseId: this.leaseId, lock: member ?? this.name, revocation });
    }
  }

  /**
   * An operator asked for the lease back: it is given up at `endsAt` (its deadline on our
   * clock) less the margin, unless released first. Of a multilease's members' revocations the
   * one with the earliest deadline is kept (of equal ones, the first told); each shows on its
   * member. `signal` is told once, whichever told it first.
   */
  private noteRevocation(revocation: Revocation, endsAt: number, signal: Signal): void {
    if (this.current !== "held") return;
    this.revokedAt = Math.min(this.revokedAt ?? Infinity, endsAt);
    const lock = signal.lock ?? this.name;
    const key = `${lock} ${revocation.deadline}`;
    const known = this.revocationsTold.has(key);
    this.revocationsTold.add(key);
    if (this.revoked === undefined || endsBefore(revocation, this.revoked)) {
      this.revoked = revocation;
      this.revokedLock = lock;
    }
    if (this.members.some((m) => m.lock === lock && m.revocation === undefined)) {
      this.members = this.members.map((m) => (m.lock === lock ? { ...m, revocation } : m));
    }
    this.armDeadline();
    if (!known) this.listeners.tell(signal);
  }

  /** One event of the watch stream: a signal (others a newer server may add are ignored). */
  private told(event: SseEvent): void {
    if (this.current !== "held" || this.releasesInFlight > 0 || !isSignalKind(event.event)) return;
    const signal = parseSignal(event.event, event.data, event.id);
    if (signal.revocation !== undefined) this.noteRevocation(signal.revocation, now() + msLeft(signal.revocation), signal);
    else this.listeners.tell(signal);
  }

  /** The loss of a lease given up before its revocation's deadline: a multilease's names the member whose revocation ended it. */
  private revokedLoss(): LeaseLostError {
    const member = this.place.kind === "multilease" ? this.revokedLock : undefined;
    const whose = member === undefined ? "" : ` of member ${JSON.stringify(member)}`;
    return lossError(
      "revoked",
      `an operator revoked the lease${whose} (${this.revoked?.reason || "no reason given"}) and it was not released before its deadline, ${this.revoked?.deadline}, less the margin`,
      member === undefined ? { lease_id: this.leaseId, lock: this.name } : { lease_id: this.leaseId, lock: this.name, member },
    );
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
          ? this.revokedLoss()
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
  lose(error: LeaseLostError, final = false): void {
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
    if (this.releaseOnSignal) untrack(this.lease);
  }
}
