// What the tests share: the servers test.sh started, admin calls, unique names, bounded waits,
// and a small HTTP proxy that can lose answers on purpose.
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { Client, LeaseLostError, type ClientOptions, type Lease, type LockOptions } from "leasehold";

function required(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === "") throw new Error(`${name} is not set: run the tests with ./test.sh`);
  return value;
}

/** The main server (anonymous callers allowed; --max-wait-ms short, so long waits are asked again). */
export const URL_ = required("LEASEHOLD_TEST_URL");
export const ADMIN_TOKEN = required("LEASEHOLD_TEST_ADMIN_TOKEN");
export const MAX_WAIT_MS = Number(required("LEASEHOLD_TEST_MAX_WAIT_MS"));
/** A second server, for API keys (once a key exists, anonymous callers are refused there). */
export const KEYS_URL = required("LEASEHOLD_TEST_KEYS_URL");
export const KEYS_ADMIN_TOKEN = required("LEASEHOLD_TEST_KEYS_ADMIN_TOKEN");
/** A third server, whose `kind: "redlock"` goes to three Redis masters of its own. */
export const REDLOCK_URL = required("LEASEHOLD_TEST_REDLOCK_URL");
export const REDLOCK_ADMIN_TOKEN = required("LEASEHOLD_TEST_REDLOCK_ADMIN_TOKEN");

export function client(options: ClientOptions = {}, url = URL_): Client {
  return new Client(url, { apiKey: null, ...options });
}

let counter = 0;
/** A lock name no other test uses. */
export function unique(prefix: string): string {
  counter += 1;
  return `ts-${prefix}-${process.pid}-${counter}-${Math.random().toString(36).slice(2, 8)}`;
}

/** An admin call with the admin token; returns the JSON answer. */
export async function admin(method: string, path: string, body?: unknown, url = URL_, token = ADMIN_TOKEN): Promise<{ status: number; body: any }> {
  const init: RequestInit = { method, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" } };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(url + path, init);
  const text = await response.text();
  return { status: response.status, body: text === "" ? undefined : JSON.parse(text) };
}

/** Waits until `check` returns a truthy value (polling every 20 ms), at most `timeoutMs`. */
export async function until<T>(what: string, check: () => Promise<T> | T, timeoutMs = 5000): Promise<NonNullable<T>> {
  const end = performance.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (performance.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Resolves when `signal` aborts, with the time it did (performance.now()). */
export function aborted(signal: AbortSignal): Promise<number> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve(performance.now());
    else signal.addEventListener("abort", () => resolve(performance.now()), { once: true });
  });
}

/** Rejects if `promise` takes longer than `ms`. */
export function within<T>(ms: number, promise: Promise<T>, what = "the promise"): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** What a revocation ignored should come to (see {@link assertRevocationIgnored}). */
export interface RevocationIgnored {
  /** The revocation's reason, which the loss carries. */
  reason: string;
  /** How long after `ignore` ends the loss may take. */
  lossWithinMs: number;
  /** When the lease is given up, in ms after the revocation's answer. */
  givenUpAfterMs: readonly [low: number, high: number];
}

/**
 * A revocation ignored: holds `name` with `c.withLock` and runs `ignore` in it, which asks for
 * the lease's revocation (and checks what it likes) and resolves with when the revocation was
 * answered (performance.now()), then never releases. The lease must be given up as lost
 * (revoked), carrying the revocation, at the deadline less the margin (`givenUpAfterMs`), so
 * that the work stops before the server may grant the lock to anyone else; withLock rejects
 * with that loss, and its release gives the lock back at once rather than at the deadline.
 */
export async function assertRevocationIgnored(
  c: Client,
  name: string,
  options: LockOptions,
  expected: RevocationIgnored,
  ignore: (lease: Lease) => Promise<number>,
): Promise<void> {
  let answered = 0;
  let lostAt = 0;
  let leaseId = "";
  const outcome = await c
    .withLock(name, options, async (lease) => {
      leaseId = lease.leaseId;
      // Before `ignore`: the loss may come while it still runs.
      const lost = aborted(lease.signal);
      answered = await ignore(lease);
      lostAt = await within(expected.lossWithinMs, lost, "the loss");
      assert.equal(lease.lostError?.reason, "revoked");
      assert.equal(lease.revocation?.reason, expected.reason);
    })
    .catch((e: unknown) => e);
  assert.ok(outcome instanceof LeaseLostError, String(outcome));
  assert.equal(outcome.reason, "revoked");
  const after = lostAt - answered;
  const [low, high] = expected.givenUpAfterMs;
  assert.ok(after > low && after < high, `given up ${after.toFixed(0)} ms after the revocation`);
  await until("given back", async () => (await c.inspectLease(name, leaseId)).state === "released", 2000);
}

/** Whether `promise` is still pending after the current turns of the event loop. */
export async function pending(promise: Promise<unknown>): Promise<boolean> {
  const marker = Symbol("pending");
  const winner = await Promise.race([promise.then(() => "settled", () => "settled"), new Promise((r) => setImmediate(() => r(marker)))]);
  return winner === marker;
}

export interface Seen {
  method: string;
  path: string;
  idempotencyKey: string | undefined;
  /** A watch opened again: the last event id it read. */
  lastEventId: string | undefined;
  /** What the server answered, when it was asked. */
  status?: number;
  replayed?: boolean;
}

/**
 * What the proxy does with a request: forward it (the default), forward it and throw its
 * answer away (answering 503, or dropping the connection), or refuse it without asking.
 */
export type Verdict = "forward" | "lose-answer-503" | "lose-answer-drop" | "refuse-503";

/** An HTTP proxy in front of the main server that can lose answers on purpose. */
export class Proxy {
  readonly seen: Seen[] = [];
  /** The answers being streamed through (watch streams), until they end. */
  readonly streaming = new Set<http.ServerResponse>();
  rule: (request: http.IncomingMessage) => Verdict = () => "forward";
  private server: http.Server;
  url = "";

  constructor(private readonly target = URL_) {
    this.server = http.createServer((request, response) => this.handle(request, response));
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Cuts every stream going through, as a proxy or an instance going away would. */
  cutStreams(): number {
    const count = this.streaming.size;
    for (const response of this.streaming) response.socket?.destroy();
    return count;
  }

  private handle(request: http.IncomingMessage, response: http.ServerResponse): void {
    const verdict = this.rule(request);
    const seen: Seen = {
      method: request.method ?? "",
      path: request.url ?? "",
      idempotencyKey: request.headers["idempotency-key"] as string | undefined,
      lastEventId: request.headers["last-event-id"] as string | undefined,
    };
    this.seen.push(seen);
    if (verdict === "refuse-503") {
      request.resume();
      unavailable(response);
      return;
    }
    const upstream = http.request(this.target + (request.url ?? "/"), { method: request.method, headers: request.headers }, (answer) => {
      seen.status = answer.statusCode ?? 0;
      seen.replayed = answer.headers["idempotent-replayed"] === "true";
      if (verdict === "forward") {
        response.writeHead(answer.statusCode ?? 502, answer.headers);
        if (answer.headers["content-type"]?.startsWith("text/event-stream")) {
          this.streaming.add(response);
          response.on("close", () => this.streaming.delete(response));
        }
        answer.pipe(response);
        return;
      }
      // The server acted and answered; the answer is lost on its way back.
      answer.resume();
      answer.on("end", () => {
        if (verdict === "lose-answer-503") unavailable(response);
        else response.socket?.destroy();
      });
    });
    upstream.on("error", () => response.socket?.destroy());
    response.on("close", () => upstream.destroy());
    request.pipe(upstream);
  }
}

function unavailable(response: http.ServerResponse): void {
  response.writeHead(503, { "content-type": "application/problem+json", "retry-after": "0" });
  response.end(
    JSON.stringify({
      type: "/problems/redis_unavailable",
      title: "Service unavailable",
      status: 503,
      detail: "the test proxy lost the answer",
      code: "redis_unavailable",
    }),
  );
}
