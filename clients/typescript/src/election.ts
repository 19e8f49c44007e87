/**
 * Leader election: a campaign waits in line until it leads and gives a {@link Term}, a
 * {@link Lease} whose place is the election's candidate (renewed, watched and resigned as any
 * lease: see clients/PROTOCOL.md, "Elections"); {@link observeElection} follows who leads.
 */
import { LockHeldError, ProblemError, TransportError } from "./errors.js";
import { isObject, link, randomKey, sleep, toProblemError, retryable, type Transport } from "./http.js";
import type { LeaseInit } from "./keeper.js";
import { Lease } from "./lease.js";
import { electionPlace, leasePath, type Place } from "./place.js";
import { tell } from "./queue.js";
import { readEvents } from "./sse.js";
import type { CampaignOptions, CandidateBody, ElectionEvent, InLine } from "./leadership.js";
import type { GrantBody } from "./wire.js";

const now = () => performance.now();
/** The wait asked for when the caller waits without limit (the server cuts it to its own). */
const FOREVER_WAIT_MS = 3_600_000;
/** The pause before asking again after a lock-delay refusal. */
const REASK_PAUSE_MS = 100;
/** How long an observe stream may stay silent (the server sends a comment every 15 s). */
const OBSERVE_IDLE_MS = 45_000;

/**
 * This client's term as an election's leader. It renews itself at a third of its TTL and
 * watches its event stream; {@link signal} is aborted with a `LeaseLostError` the moment the
 * term is lost (an admin ended it, its TTL ran out). The client never campaigns again behind
 * the caller's back. `await using term = await client.campaign(...)` resigns at the block's end.
 */
export class Term extends Lease {
  /** The term: a fencing token that only grows per election. Pass it with the leader's writes. */
  readonly number: number;
  private published: string;

  /** @internal Made by {@link Client.campaign}. */
  constructor(init: LeaseInit, value: string) {
    super(init);
    this.number = init.grant.fencing_token;
    this.published = value;
  }

  /** What the leader publishes to observers now ({@link proclaim} changes it). */
  get value(): string {
    return this.published;
  }

  /** The candidate's id (the term's lease id). */
  get candidateId(): string {
    return this.leaseId;
  }

  /**
   * Publishes a new value in the same term: observers get it as a `leader` event. Rejects with
   * the `LeaseLostError` (and the term is lost) once the term has ended.
   */
  async proclaim(value: string, options: { signal?: AbortSignal | undefined } = {}): Promise<void> {
    this.throwIfLost();
    await this.transport
      .request({ method: "PUT", path: `${this.path}/value`, body: { value }, token: this.token, retry: true, signal: options.signal })
      .catch((error: unknown) => this.noticeLoss(error));
    this.published = value;
  }

  /** Resigns (the next candidate leads at once) and stops keeping the term; `release()` whole. */
  async resign(options: { signal?: AbortSignal | undefined } = {}): Promise<void> {
    await this.release({ signal: options.signal });
  }

  override toJSON(): Record<string, unknown> {
    return { ...super.toJSON(), term: this.number, value: this.published };
  }
}

/** @internal What a campaign needs of its client. */
export interface CampaignContext {
  transport: Transport;
  releaseOnSignal: boolean;
  expiringSlackMs: number | undefined;
}

/** @internal {@link Client.campaign}: stands, waits in line, and keeps the term it gets. */
export async function campaign(ctx: CampaignContext, name: string, options: CampaignOptions): Promise<Term> {
  const { signal } = options;
  signal?.throwIfAborted();
  const place = electionPlace(name);
  const body: Record<string, unknown> = { value: options.value };
  if (options.ttlMs !== undefined) body["ttl_ms"] = options.ttlMs;
  if (options.holder !== undefined) body["holder"] = options.holder;
  if (options.lockDelayMs !== undefined) body["lock_delay_ms"] = options.lockDelayMs;
  const deadline = options.waitMs === undefined ? Infinity : now() + Math.max(0, options.waitMs);
  const left = () => (deadline === Infinity ? FOREVER_WAIT_MS : Math.max(0, Math.ceil(deadline - now())));
  const key = await randomKey(); // one per campaign: its retries get the first answer
  for (;;) {
    const sentAt = now();
    let reply;
    try {
      reply = await ctx.transport.request<CandidateBody>({
        method: "POST",
        path: place.collection,
        query: () => ({ wait_ms: left() }),
        body,
        idempotencyKey: key,
        retry: true,
        signal,
        accept: [202],
      });
    } catch (error) {
      if (signal?.aborted) await giveBack(ctx, place, body, key);
      // A lock-delay after a term that ended badly: waited through, as a held lock is.
      if (error instanceof LockHeldError && left() > 0) {
        await sleep(Math.min(REASK_PAUSE_MS, left()), signal);
        continue;
      }
      throw error;
    }
    const token = reply.body.token;
    if (typeof token !== "string") throw new TypeError("the server's candidate carried no token");
    if (reply.status === 202) return waitInLine(ctx, place, reply.body, token, left, options);
    return keep(ctx, place, reply.body, token, sentAt, options);
  }
}

/** Where an answer in line says the candidate stands (what `onInLine` is told). */
function inLine(candidate: CandidateBody): InLine {
  const place: InLine = { position: candidate.position ?? 0 };
  if (isObject(candidate.leader)) place.leader = candidate.leader;
  if (typeof candidate.estimated_wait_ms === "number") place.estimatedWaitMs = candidate.estimated_wait_ms;
  return place;
}

/**
 * Long-polls the candidate until it leads; the wait or the signal ending leaves the line. Tells
 * `onInLine` of the campaign's answer in line and of each poll's.
 */
async function waitInLine(
  ctx: CampaignContext,
  place: Place,
  candidate: CandidateBody,
  token: string,
  left: () => number,
  options: CampaignOptions,
): Promise<Term> {
  const path = leasePath(place, candidate.candidate_id);
  let last = candidate;
  try {
    for (;;) {
      await tell(options.onInLine, () => inLine(last), () => leave(ctx.transport, path, token));
      const position = last.position;
      if (left() <= 0) {
        await leave(ctx.transport, path, token);
        throw new LockHeldError({
          type: "/problems/lock_held",
          title: "Another candidate leads",
          status: 409,
          detail: `still in line for ${place.name}, at position ${position}, when the wait ran out; left the line`,
          code: "lock_held",
          position,
        });
      }
      const sentAt = now();
      const reply = await ctx.transport.request<CandidateBody>({
        method: "GET",
        path,
        query: () => ({ wait_ms: left() }),
        token,
        retry: true,
        signal: options.signal,
        accept: [202],
      });
      if (reply.status !== 202) return keep(ctx, place, { ...reply.body, candidate_id: candidate.candidate_id }, token, sentAt, options);
      last = reply.body;
    }
  } catch (error) {
    if (options.signal?.aborted) await leave(ctx.transport, path, token);
    throw error;
  }
}

async function keep(
  ctx: CampaignContext,
  place: Place,
  candidate: CandidateBody,
  token: string,
  sentAt: number,
  options: CampaignOptions,
): Promise<Term> {
  const grant: GrantBody = {
    lease_id: candidate.candidate_id,
    lock: place.name,
    kind: "election",
    holder: options.holder ?? null,
    fencing_token: candidate.term ?? 0,
    reentry_count: 1,
    ttl_ms: candidate.ttl_ms ?? options.ttlMs ?? 30_000,
    expires_at: candidate.expires_at ?? new Date().toISOString(),
  };
  const init = { transport: ctx.transport, place, token, grant, sentAt, watch: options.watch ?? true, releaseOnSignal: ctx.releaseOnSignal, expiringSlackMs: ctx.expiringSlackMs };
  const term = new Term(init, candidate.value ?? options.value);
  if (options.signal?.aborted) {
    // Given up while the term was on its way: resign it.
    await term.release().catch(() => {});
    throw options.signal.reason;
  }
  return term;
}

/** Leaves the line (or resigns, should the turn have come meanwhile). */
async function leave(transport: Transport, path: string, token: string): Promise<void> {
  await transport.request({ method: "DELETE", path, token, retry: true }).catch(() => {});
}

/** A campaign cut short while its request was out: asked again with its key, without waiting, and what it got is given up. */
async function giveBack(ctx: CampaignContext, place: Place, body: unknown, key: string): Promise<void> {
  const reply = await ctx.transport
    .request<CandidateBody>({ method: "POST", path: place.collection, query: { wait_ms: 0 }, body, idempotencyKey: key, retry: false, accept: [202] })
    .catch(() => undefined);
  const token = reply?.body.token;
  if (reply !== undefined && typeof token === "string") await leave(ctx.transport, leasePath(place, reply.body.candidate_id), token);
}

/**
 * @internal {@link Client.observe}: the election's state, then every change, in order; a
 * dropped or silent stream is opened again with `Last-Event-ID`. Ends when `signal` aborts;
 * throws the problem of a refusal that another try would not change.
 */
export async function* observeElection(
  transport: Transport,
  name: string,
  options: { signal?: AbortSignal | undefined; lastEventId?: string | undefined } = {},
): AsyncGenerator<ElectionEvent, void, undefined> {
  const { signal } = options;
  const path = `/v1/elections/${encodeURIComponent(name)}/observe`;
  let last = options.lastEventId;
  let failures = 0;
  while (signal?.aborted !== true) {
    const connection = new AbortController();
    const unlink = link(signal, connection);
    let idle: ReturnType<typeof setTimeout> | undefined;
    const alive = () => {
      clearTimeout(idle);
      idle = setTimeout(() => connection.abort(new TransportError(`the observe stream was silent for ${OBSERVE_IDLE_MS} ms`)), OBSERVE_IDLE_MS);
    };
    let pause: number | undefined;
    try {
      alive();
      const headers: Record<string, string> = { accept: "text/event-stream" };
      if (last !== undefined) headers["last-event-id"] = last;
      const response = await transport.open({ method: "GET", path, headers }, connection.signal);
      if (!response.ok) {
        const error = toProblemError(response, await response.text());
        if (!retryable(error) && error.status !== 429) throw error;
        pause = error.retryAfterMs;
      } else if (response.body !== null) {
        for await (const event of readEvents(response.body, alive)) {
          if (event.event !== "leader" && event.event !== "vacant" && event.event !== "resync") continue;
          if (event.id !== undefined) last = event.id;
          failures = 0;
          yield parseEvent(event.event, event.data, event.id);
        }
      }
    } catch (error) {
      if (signal?.aborted) return;
      if (error instanceof ProblemError) throw error; // refused for good; anything else: try again
    } finally {
      clearTimeout(idle);
      unlink();
      connection.abort();
    }
    failures++;
    try {
      await sleep(transport.backoff(failures, pause), signal);
    } catch {
      return;
    }
  }
}

function parseEvent(kind: ElectionEvent["kind"], data: string, id: string | undefined): ElectionEvent {
  let body: Record<string, unknown> = {};
  try {
    const parsed = JSON.parse(data) as unknown;
    if (isObject(parsed)) body = parsed;
  } catch {
    // an event whose data does not parse still tells its kind
  }
  const text = (v: unknown) => (typeof v === "string" ? v : undefined);
  const event: ElectionEvent = { kind, term: typeof body["term"] === "number" ? body["term"] : 0 };
  const fields = { value: text(body["value"]), holder: text(body["holder"]), since: text(body["since"]), candidateId: text(body["candidate_id"]), id };
  for (const [k, v] of Object.entries(fields)) if (v !== undefined) (event as unknown as Record<string, unknown>)[k] = v;
  return event;
}
