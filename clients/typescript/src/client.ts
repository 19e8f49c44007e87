import "./polyfill.js";
import { LeaseLostError, LockHeldError } from "./errors.js";
import { Transport, randomKey, type Query, type Reply, type RetryOptions } from "./http.js";
import { Lease, inspect } from "./lease.js";
import { Term, campaign, observeElection } from "./election.js";
import {
  CAMPAIGN_OPTIONS,
  CLIENT_OPTIONS,
  LOCK_OPTIONS,
  MULTILEASE_OPTIONS,
  RETRY_OPTIONS,
  SEMAPHORE_OPTIONS,
  checkOptions,
} from "./options.js";
import { leasePath, lockPlace, multileasePlace, semaphorePlace, type Place } from "./place.js";
import { waitInQueue } from "./queue.js";
import type { AcquireOptions, LockOptions, MultiLock, MultileaseOptions, SemaphoreOptions } from "./acquire.js";
import type { CampaignOptions, ElectionEvent, ElectionInfo, TermCheck } from "./leadership.js";
import type {
  FenceCheck,
  ForceReleaseBody,
  LeaseInfo,
  LockInfo,
  LockList,
  MultileaseInfo,
  RevokeBody,
  SemaphoreInfo,
} from "./views.js";
import type { GrantBody, TicketBody } from "./wire.js";

export interface ClientOptions {
  /**
   * The API key, sent in the `Leasehold-Key` header (an admin token works too). Default: the
   * `LEASEHOLD_API_KEY` environment variable under Node, else none; `null` sends none.
   */
  apiKey?: string | null | undefined;
  /**
   * The HTTP timeout of a request beyond the server-side wait it asks for, in ms (default
   * 10000): a long-poll of `waitMs` gets `waitMs + timeoutMs`.
   */
  timeoutMs?: number | undefined;
  /** How calls that are safe to repeat are retried after a 503, a 504 or a dropped connection. */
  retry?: RetryOptions | undefined;
  /**
   * When the leases' watches tell `expiring`: this many ms before the end with no renewal
   * since (default: a third of the TTL; the server takes at most half of it). A lock's
   * `expiringSlackMs` overrides it.
   */
  expiringSlackMs?: number | undefined;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch | undefined;
  /**
   * Under Node, release held leases when SIGINT, SIGTERM or SIGHUP would end the process
   * (default true). See the README, "Loss and exits".
   */
  releaseOnSignal?: boolean | undefined;
}

/** The server when none is named: `LEASEHOLD_SERVER` under Node, else this. */
export const DEFAULT_SERVER = "http://127.0.0.1:8080";

type Work<T> = (lease: Lease) => Promise<T> | T;

/** What an acquire asks for: where the lease will live, and the request's body. */
interface Target {
  place: Place;
  body: Record<string, unknown>;
}

/** What an acquire takes: every kind's options, and a lock's own of this client's doing. */
type Acquiring = AcquireOptions & Pick<LockOptions, "onQueued" | "expiringSlackMs">;

const now = () => performance.now();

/**
 * A Leasehold server. Cheap to make; one per server is plenty (connections are kept alive and
 * shared by the platform's fetch).
 *
 * ```ts
 * const client = new Client("http://127.0.0.1:8080");
 * await client.withLock("nightly-report", { ttlMs: 30_000 }, async (lease) => { ... });
 * ```
 */
export class Client {
  /** The server's base URL, without a trailing slash. */
  readonly url: string;
  private readonly transport: Transport;
  private readonly releaseOnSignal: boolean;
  private readonly expiringSlackMs: number | undefined;

  constructor(url?: string, options: ClientOptions = {}) {
    checkOptions(options, CLIENT_OPTIONS, "new Client()");
    checkOptions(options.retry, RETRY_OPTIONS, "new Client() retry");
    const base = url ?? env("LEASEHOLD_SERVER") ?? DEFAULT_SERVER;
    this.url = base.replace(/\/+$/, "");
    const apiKey = options.apiKey === undefined ? env("LEASEHOLD_API_KEY") : (options.apiKey ?? undefined);
    const fetchImpl = options.fetch ?? globalThis.fetch;
    if (typeof fetchImpl !== "function") throw new TypeError("no fetch: pass one in ClientOptions.fetch");
    this.transport = new Transport({
      baseUrl: this.url,
      apiKey: apiKey === "" ? undefined : apiKey,
      // Called as a plain function: a browser's fetch refuses any other `this` (Illegal invocation).
      fetch: (input, init) => fetchImpl(input, init),
      timeoutMs: options.timeoutMs ?? 10_000,
      retry: {
        attempts: options.retry?.attempts ?? 6,
        minDelayMs: options.retry?.minDelayMs ?? 100,
        maxDelayMs: options.retry?.maxDelayMs ?? 5_000,
      },
    });
    this.releaseOnSignal = options.releaseOnSignal ?? true;
    this.expiringSlackMs = checkSlack(options.expiringSlackMs, "new Client()");
  }

  /**
   * Takes the lock `name`, waiting up to `waitMs` for it; resolves with the held
   * {@link Lease}, which renews itself until released and aborts its `signal` if lost.
   * Rejects with {@link LockHeldError} when someone else still holds it after the wait.
   * Fair locks queue: the ticket is polled here until it is this caller's turn.
   */
  lock(name: string, options: LockOptions = {}): Promise<Lease> {
    checkOptions(options, LOCK_OPTIONS, "client.lock()");
    checkSlack(options.expiringSlackMs, "client.lock()");
    const body: Record<string, unknown> = common(options);
    if (options.kind !== undefined) body["kind"] = options.kind;
    if (options.policy !== undefined) body["policy"] = options.policy;
    if (options.lockDelayMs !== undefined) body["lock_delay_ms"] = options.lockDelayMs;
    return this.acquire({ place: lockPlace(name), body }, options);
  }

  /**
   * Takes every lock of `locks` as one lease, all or nothing (a name is a reentrant lock;
   * `{ name, kind }` picks the kind). One heartbeat renews them all and the loss of any is
   * the loss of the whole: the lease's `signal` aborts, its `lostError.member` naming the
   * lock. Each lock has its own fencing token: `lease.members`. Rejects with
   * {@link LockHeldError} (its `problem.members` naming each lock refused) when they are not
   * all free within `waitMs`; nothing is held then.
   */
  multilease(locks: readonly MultiLock[], options: MultileaseOptions = {}): Promise<Lease> {
    checkOptions(options, MULTILEASE_OPTIONS, "client.multilease()");
    const asked = locks.map((lock) => (typeof lock === "string" ? { name: lock } : lock));
    if (asked.length === 0) return Promise.reject(new TypeError("client.multilease(): no locks"));
    for (const lock of asked) checkOptions(lock, ["name", "kind"], "client.multilease() lock");
    const body: Record<string, unknown> = {
      ...common(options),
      locks: asked.map((lock) => (lock.kind === undefined ? { name: lock.name } : { name: lock.name, kind: lock.kind })),
    };
    if (options.lockDelayMs !== undefined) body["lock_delay_ms"] = options.lockDelayMs;
    return this.acquire({ place: multileasePlace(asked.map((lock) => lock.name)), body }, options);
  }

  /**
   * Takes `permits` (default 1) of the semaphore `name` of `limit` permits. Rejects with
   * {@link LockHeldError} (code `no_permits`) when not enough are free after the wait.
   */
  semaphore(name: string, options: SemaphoreOptions): Promise<Lease> {
    checkOptions(options, SEMAPHORE_OPTIONS, "client.semaphore()");
    const body: Record<string, unknown> = { ...common(options), limit: options.limit };
    if (options.permits !== undefined) body["permits"] = options.permits;
    return this.acquire({ place: semaphorePlace(name), body }, options);
  }

  /**
   * Runs `work` under the lock and releases it however `work` ends. If the lease was lost
   * meanwhile, rejects with the {@link LeaseLostError} (its `cause`: what `work` threw, if
   * anything), even when `work` resolved: its writes were not protected to their end.
   */
  withLock<T>(name: string, work: Work<T>): Promise<T>;
  withLock<T>(name: string, options: LockOptions, work: Work<T>): Promise<T>;
  withLock<T>(name: string, ...args: [Work<T>] | [LockOptions, Work<T>]): Promise<T> {
    const [options, work] = args.length === 1 ? [{}, args[0]] : args;
    return this.run(this.lock(name, options), work);
  }

  /** {@link withLock} for a multilease: releases every lock however `work` ends. */
  withMultilease<T>(locks: readonly MultiLock[], options: MultileaseOptions, work: Work<T>): Promise<T> {
    return this.run(this.multilease(locks, options), work);
  }

  /** {@link withLock} for a semaphore's permits. */
  withSemaphore<T>(name: string, options: SemaphoreOptions, work: Work<T>): Promise<T> {
    return this.run(this.semaphore(name, options), work);
  }

  /**
   * Asks whether `fencingToken` is held on `name` right now (for a resource that cannot keep
   * the largest token it has seen). True only when the server read it: see the README's race.
   */
  async checkFence(name: string, fencingToken: number, signal?: AbortSignal): Promise<FenceCheck> {
    return this.get<FenceCheck>("POST", `/v1/locks/${enc(name)}/fence/check`, signal, undefined, {
      fencing_token: fencingToken,
    });
  }

  /** `GET /v1/locks/{name}`: its holders, queue and waiters (404 NotFoundError when never taken). */
  inspectLock(name: string, signal?: AbortSignal): Promise<LockInfo> {
    return this.get<LockInfo>("GET", `/v1/locks/${enc(name)}`, signal);
  }

  /** `GET /v1/semaphores/{name}`. */
  inspectSemaphore(name: string, signal?: AbortSignal): Promise<SemaphoreInfo> {
    return this.get<SemaphoreInfo>("GET", `/v1/semaphores/${enc(name)}`, signal);
  }

  /** `GET /v1/{locks|semaphores}/{name}/leases/{id}`: a lease's state, `held` or how it ended. */
  inspectLease(
    name: string,
    leaseId: string,
    options: { semaphore?: boolean | undefined; signal?: AbortSignal | undefined } = {},
  ): Promise<LeaseInfo> {
    checkOptions(options, ["semaphore", "signal"], "client.inspectLease()");
    const place = options.semaphore === true ? semaphorePlace(name) : lockPlace(name);
    return this.get<LeaseInfo>("GET", leasePath(place, leaseId), options.signal);
  }

  /** `GET /v1/multileases/{id}`: its locks, and `held` or how (and by which member) it ended. */
  inspectMultilease(leaseId: string, signal?: AbortSignal): Promise<MultileaseInfo> {
    return this.get<MultileaseInfo>("GET", leasePath(multileasePlace([]), leaseId), signal);
  }

  /** `GET /v1/locks`: one page of the live locks and semaphores; pass `next_cursor` back as `cursor`. */
  listLocks(
    options: {
      prefix?: string | undefined;
      cursor?: string | undefined;
      limit?: number | undefined;
      signal?: AbortSignal | undefined;
    } = {},
  ): Promise<LockList> {
    checkOptions(options, ["prefix", "cursor", "limit", "signal"], "client.listLocks()");
    return this.get<LockList>("GET", "/v1/locks", options.signal, {
      prefix: options.prefix,
      cursor: options.cursor,
      limit: options.limit,
    });
  }

  /**
   * Admin (the admin token or an admin key as `apiKey`): removes every holder of `name`
   * (their holders see their leases lost), or lifts the lock-delay of a free lock
   * (`delay_lifted`). Never retried: a repeat could remove the next holder.
   */
  async forceRelease(
    name: string,
    options: { reason?: string | undefined; signal?: AbortSignal | undefined } = {},
  ): Promise<ForceReleaseBody> {
    checkOptions(options, ["reason", "signal"], "client.forceRelease()");
    const reply = await this.transport.request<ForceReleaseBody>({
      method: "DELETE",
      path: `/v1/admin/locks/${enc(name)}`,
      query: { reason: options.reason },
      retry: false,
      signal: options.signal,
    });
    return reply.body;
  }

  /**
   * Admin (the admin token or an admin key as the client's `apiKey`): asks the holders of the
   * lock `name` (or only the lease `leaseId`) to let go within `graceMs` (at most an hour).
   * Each is told (`revocation_requested` on its watch, {@link Lease.revocation}), its heartbeats
   * extend it no further than the deadline, and a lease not released by then is evicted (its
   * holder loses it, reason `revoked`). Resolves with the leases asked (`again`: asked already,
   * its first deadline stands); a `NotFoundError` (`lock_not_found` when nobody holds the
   * name, `lease_not_found`), an `InvalidRequestError`. Never retried, as
   * {@link forceRelease}: a retry could ask the next holder.
   */
  async revoke(
    name: string,
    options: { graceMs: number; reason?: string | undefined; leaseId?: string | undefined; signal?: AbortSignal | undefined },
  ): Promise<RevokeBody> {
    checkOptions(options, ["graceMs", "reason", "leaseId", "signal"], "client.revoke()");
    if (typeof options?.graceMs !== "number") throw new TypeError("client.revoke(): graceMs is a number of ms");
    const body: Record<string, unknown> = { grace_ms: options.graceMs };
    if (options.reason !== undefined) body["reason"] = options.reason;
    if (options.leaseId !== undefined) body["lease_id"] = options.leaseId;
    const reply = await this.transport.request<RevokeBody>({
      method: "POST",
      path: `/v1/admin/locks/${enc(name)}/revoke`,
      body,
      retry: false,
      signal: options.signal,
    });
    return reply.body;
  }

  /**
   * Stands in the election `name` and waits in line (first come, first served; the place is
   * kept by polling) until it leads, for `waitMs` at most (default: without limit; then a
   * `LockHeldError`, the line left). The {@link Term} is kept as a lease is: `term.number` is
   * the term (a fencing token), `term.signal` aborts the moment it is lost, and
   * `await using term = await client.campaign(...)` resigns at the block's end.
   */
  campaign(name: string, options: CampaignOptions): Promise<Term> {
    checkOptions(options, CAMPAIGN_OPTIONS, "client.campaign()");
    if (typeof options.value !== "string") return Promise.reject(new TypeError("client.campaign(): value is text"));
    const ctx = { transport: this.transport, releaseOnSignal: this.releaseOnSignal, expiringSlackMs: this.expiringSlackMs };
    return campaign(ctx, name, options);
  }

  /**
   * `for await (const event of client.observe(name))`: the election's state now, then every
   * change in order (`leader`, `vacant`); a dropped connection is opened again with
   * `Last-Event-ID`, so no term is skipped. Ends when `signal` aborts, or the loop is left.
   */
  observe(
    name: string,
    options: { signal?: AbortSignal | undefined; lastEventId?: string | undefined } = {},
  ): AsyncIterable<ElectionEvent> {
    checkOptions(options, ["signal", "lastEventId"], "client.observe()");
    return observeElection(this.transport, name, options);
  }

  /** `GET /v1/elections/{name}`: its leader (`null` when nobody leads), last term and line. */
  leader(name: string, signal?: AbortSignal): Promise<ElectionInfo> {
    return this.get<ElectionInfo>("GET", `/v1/elections/${enc(name)}`, signal);
  }

  /** Whether `term` is the election's current leader's (stale as soon as answered, as a fence check). */
  checkTerm(name: string, term: number, signal?: AbortSignal): Promise<TermCheck> {
    return this.get<TermCheck>("POST", `/v1/elections/${enc(name)}/fence/check`, signal, undefined, { term });
  }

  /** Admin: ends the election's current term (its leader is told; the next candidate leads). Never retried. */
  async endTerm(
    name: string,
    options: { reason?: string | undefined; signal?: AbortSignal | undefined } = {},
  ): Promise<ForceReleaseBody> {
    checkOptions(options, ["reason", "signal"], "client.endTerm()");
    const reply = await this.transport.request<ForceReleaseBody>({
      method: "DELETE",
      path: `/v1/admin/elections/${enc(name)}`,
      query: { reason: options.reason },
      retry: false,
      signal: options.signal,
    });
    return reply.body;
  }

  /** What JSON.stringify and console.log show: never the API key. */
  toJSON(): Record<string, unknown> {
    return { url: this.url, apiKey: this.transport.options.apiKey === undefined ? null : "[set]" };
  }

  [inspect](): string {
    return `Client ${JSON.stringify(this.toJSON())}`;
  }

  private async get<T>(
    method: "GET" | "POST",
    path: string,
    signal?: AbortSignal,
    query?: Query,
    body?: unknown,
  ): Promise<T> {
    const reply = await this.transport.request<T>({ method, path, query, body, retry: true, signal });
    return reply.body;
  }

  private async run<T>(acquired: Promise<Lease>, work: Work<T>): Promise<T> {
    const lease = await acquired;
    let result: T;
    try {
      result = await work(lease);
    } catch (error) {
      await lease.release().catch(() => {});
      const lost = lease.lostError;
      if (lost === undefined || error === lost) throw error;
      throw new LeaseLostError(lost.problem, lost.retryAfterMs, { cause: error });
    }
    await lease.release();
    return result;
  }

  /** The acquire loop: retries, waits the server cut short, fair tickets. */
  private async acquire(target: Target, options: Acquiring): Promise<Lease> {
    const { signal } = options;
    signal?.throwIfAborted();
    const deadline = now() + Math.max(0, options.waitMs ?? 0);
    const left = () => Math.max(0, Math.ceil(deadline - now()));
    const path = target.place.collection;
    // A fair lock is asked without a wait, then its ticket (if queued) is polled for the wait:
    // servers up to 0.1.0 answer a fair acquire that carries an Idempotency-Key and waits
    // without being granted with 422 idempotency_key_reused (the wait polls the ticket under
    // the acquire's key). Polls need no key: a repeated poll answers with the same grant.
    const fair = target.body["kind"] === "fair";
    for (;;) {
      // One key per acquisition: its retries (same key, same body) get the first answer.
      const key = await randomKey();
      let asked = 0;
      const sentAt = now();
      let reply: Reply<GrantBody | TicketBody>;
      try {
        reply = await this.transport.request<GrantBody | TicketBody>({
          method: "POST",
          path,
          // `wait_ms` is not part of the key's fingerprint: a retry asks for the wait left.
          query: () => {
            asked = fair ? 0 : left();
            return { wait_ms: asked };
          },
          body: target.body,
          idempotencyKey: key,
          retry: true,
          signal,
          accept: [202],
        });
      } catch (error) {
        // The server cut the wait to its --max-wait-ms: ask again for the rest (a lock-delay,
        // a LockHeldError too, is waited through the same way).
        if (error instanceof LockHeldError && (error.waitMs ?? asked) < asked && left() > 0) continue;
        throw error;
      }
      if (reply.status === 202) {
        const ticket = reply.body as TicketBody;
        const granted = await waitInQueue(this.transport, target.place.name, ticket, left, signal, options.onQueued);
        if (granted === undefined) continue; // the ticket expired: ask again, while the wait lasts
        return this.lease(target, granted.grant, granted.token, granted.sentAt, options);
      }
      const grant = reply.body as GrantBody;
      if (typeof grant.token !== "string") throw new TypeError("the server's grant carried no token");
      return this.lease(target, grant, grant.token, sentAt, options);
    }
  }

  private async lease(
    target: Target,
    grant: GrantBody,
    token: string,
    sentAt: number,
    options: Acquiring,
  ): Promise<Lease> {
    const lease = new Lease({
      transport: this.transport,
      place: target.place,
      token,
      grant,
      sentAt,
      watch: options.watch ?? true,
      releaseOnSignal: this.releaseOnSignal,
      expiringSlackMs: options.expiringSlackMs ?? this.expiringSlackMs,
    });
    if (options.signal?.aborted) {
      // Given up while the grant was on its way: give it back.
      await lease.release().catch(() => {});
      throw options.signal.reason;
    }
    return lease;
  }
}

function common(options: AcquireOptions): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  if (options.ttlMs !== undefined) body["ttl_ms"] = options.ttlMs;
  if (options.holder !== undefined) body["holder"] = options.holder;
  if (options.metadata !== undefined) body["metadata"] = options.metadata;
  return body;
}

/** An `expiringSlackMs` option, checked: absent, or a positive number of ms. */
function checkSlack(slackMs: number | undefined, where: string): number | undefined {
  if (slackMs === undefined || (typeof slackMs === "number" && Number.isFinite(slackMs) && slackMs > 0)) {
    return slackMs === undefined ? undefined : Math.ceil(slackMs);
  }
  throw new RangeError(`${where}: expiringSlackMs must be a positive number of ms, not ${String(slackMs)}`);
}

function enc(segment: string): string {
  return encodeURIComponent(segment);
}

function env(name: string): string | undefined {
  const process = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  const value = process?.env?.[name];
  return value === undefined || value === "" ? undefined : value;
}
