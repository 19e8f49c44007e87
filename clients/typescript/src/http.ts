/**
 * The HTTP layer: one fetch per attempt, problem+json into typed errors, and the retries that
 * are safe: a call marked `retry` is sent again, unchanged (same `Idempotency-Key`), after a
 * 502/503/504, a 429 `rate_limited`, a dropped connection or a timeout; any other answer is
 * final. Callers mark only calls that cannot act twice: reads, heartbeats, ticket polls, and
 * acquires and releases carrying an `Idempotency-Key`.
 */
import {
  LeaseholdError,
  ProblemError,
  TransportError,
  problemError,
  type Problem,
} from "./errors.js";

export type Query = Record<string, string | number | boolean | undefined>;

/** How calls that are safe to repeat are retried. */
export interface RetryOptions {
  /** Tries in all, the first included (default 6). */
  attempts?: number | undefined;
  /** The first pause, doubled on each retry (default 100 ms), with jitter. */
  minDelayMs?: number | undefined;
  /** The longest pause, also the most of a server's `Retry-After` obeyed (default 5000 ms). */
  maxDelayMs?: number | undefined;
}

export interface Call {
  method: "GET" | "POST" | "PUT" | "DELETE";
  path: string;
  /** Evaluated per attempt when a function (an acquire's retry asks for the wait left). */
  query?: Query | (() => Query) | undefined;
  body?: unknown;
  /** A lease's or ticket's token, sent as `Authorization: Bearer`. */
  token?: string | undefined;
  idempotencyKey?: string | undefined;
  /** Safe to send again (see the module comment). */
  retry: boolean;
  signal?: AbortSignal | undefined;
  /** Statuses answered as replies instead of errors (besides 2xx). */
  accept?: readonly number[];
  /** The HTTP timeout of one attempt beyond its server-side `wait_ms` (default: the client's). */
  timeoutMs?: number | undefined;
  /** More request headers (an observe stream's `Last-Event-ID`). */
  headers?: Record<string, string> | undefined;
}

export interface Reply<T> {
  status: number;
  headers: Headers;
  body: T;
}

export interface TransportOptions {
  baseUrl: string;
  apiKey: string | undefined;
  fetch: typeof fetch;
  timeoutMs: number;
  retry: { attempts: number; minDelayMs: number; maxDelayMs: number };
}

export class Transport {
  constructor(readonly options: TransportOptions) {}

  /** Sends a call, retrying it when it is safe to; parses the JSON answer. */
  async request<T>(call: Call): Promise<Reply<T>> {
    const { attempts } = this.options.retry;
    for (let attempt = 1; ; attempt++) {
      let failure: unknown;
      try {
        const { response, text } = await this.attempt(call);
        if (response.ok || call.accept?.includes(response.status)) {
          return { status: response.status, headers: response.headers, body: parseJson(text) as T };
        }
        const error = toProblemError(response, text);
        if (!call.retry || attempt >= attempts || !retryable(error)) throw error;
        failure = error;
      } catch (error) {
        if (call.signal?.aborted) throw call.signal.reason;
        if (error instanceof LeaseholdError && !(error instanceof TransportError)) throw error;
        if (!call.retry || attempt >= attempts) {
          throw error instanceof TransportError
            ? error
            : new TransportError(`${call.method} ${call.path}: ${describe(error)}`, { cause: error });
        }
        failure = error;
      }
      const hinted = failure instanceof ProblemError ? failure.retryAfterMs : undefined;
      await sleep(this.backoff(attempt, hinted), call.signal);
    }
  }

  /**
   * Opens a streaming call (the watch): the response once its headers are in, its body
   * unread. Not retried, and no timeout: the caller's `signal` ends it, body included.
   */
  async open(call: Omit<Call, "retry">, signal: AbortSignal): Promise<Response> {
    try {
      return await this.options.fetch(this.url(call), this.init(call, signal));
    } catch (error) {
      if (signal.aborted) throw signal.reason;
      throw new TransportError(`${call.method} ${call.path}: ${describe(error)}`, { cause: error });
    }
  }

  /** The pause before retry number `attempt` (1 = the first retry). */
  backoff(attempt: number, hintedMs?: number): number {
    const { minDelayMs, maxDelayMs } = this.options.retry;
    if (hintedMs !== undefined) return Math.min(Math.max(hintedMs, 0), maxDelayMs);
    const ceiling = Math.min(maxDelayMs, minDelayMs * 2 ** (attempt - 1));
    return ceiling / 2 + Math.random() * (ceiling / 2);
  }

  private async attempt(call: Call): Promise<{ response: Response; text: string }> {
    const query = typeof call.query === "function" ? call.query() : call.query;
    const waitMs = Number(query?.["wait_ms"] ?? 0);
    const timeoutMs = waitMs + (call.timeoutMs ?? this.options.timeoutMs);
    const controller = new AbortController();
    const unlink = link(call.signal, controller);
    const timer = setTimeout(
      () => controller.abort(new TransportError(`${call.method} ${call.path}: no answer within ${timeoutMs} ms`)),
      timeoutMs,
    );
    try {
      const response = await this.options.fetch(this.url({ ...call, query }), this.init(call, controller.signal));
      // Once the answer has begun, it is read whatever the caller's signal says (a grant must
      // not be lost half-read: the server counts it as delivered). The timeout still holds.
      unlink();
      return { response, text: await response.text() };
    } catch (error) {
      if (call.signal?.aborted) throw call.signal.reason;
      if (controller.signal.aborted) throw controller.signal.reason;
      throw new TransportError(`${call.method} ${call.path}: ${describe(error)}`, { cause: error });
    } finally {
      clearTimeout(timer);
      unlink();
    }
  }

  private url(call: { path: string; query?: Query | (() => Query) | undefined }): string {
    const query = typeof call.query === "function" ? call.query() : call.query;
    let url = this.options.baseUrl + call.path;
    if (query !== undefined) {
      const params = new URLSearchParams();
      for (const [name, value] of Object.entries(query)) {
        if (value !== undefined) params.set(name, String(value));
      }
      const text = params.toString();
      if (text !== "") url += `?${text}`;
    }
    return url;
  }

  private init(call: Omit<Call, "retry">, signal: AbortSignal): RequestInit {
    const headers: Record<string, string> = { accept: "application/json, application/problem+json" };
    if (this.options.apiKey !== undefined) headers["leasehold-key"] = this.options.apiKey;
    if (call.token !== undefined) headers["authorization"] = `Bearer ${call.token}`;
    if (call.idempotencyKey !== undefined) headers["idempotency-key"] = call.idempotencyKey;
    Object.assign(headers, call.headers);
    const init: RequestInit = { method: call.method, headers, signal };
    if (call.body !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(call.body);
    }
    return init;
  }
}

/** The error of a non-2xx answer: its problem, or one made up for an answer that is not one. */
export function toProblemError(response: Response, text: string): ProblemError {
  const retryAfterMs = parseRetryAfter(response.headers.get("retry-after"));
  let problem: Problem | undefined;
  try {
    const body = JSON.parse(text) as unknown;
    if (isObject(body) && typeof body["code"] === "string") {
      problem = {
        type: String(body["type"] ?? `/problems/${body["code"]}`),
        title: String(body["title"] ?? response.statusText),
        detail: String(body["detail"] ?? ""),
        ...body,
        status: typeof body["status"] === "number" ? body["status"] : response.status,
        code: body["code"],
      };
    }
  } catch {
    // not JSON: made up below
  }
  problem ??= {
    type: "about:blank",
    title: response.statusText || `HTTP ${response.status}`,
    status: response.status,
    detail: `an answer that is not application/problem+json: ${text.slice(0, 200)}`,
    code: "unexpected_status",
  };
  return problemError(problem, retryAfterMs);
}

/** Whether an answer says "nothing happened, ask again" (for a call that may be repeated). */
export function retryable(error: ProblemError): boolean {
  if (error.status === 502 || error.status === 503 || error.status === 504) return true;
  return error.status === 429 && error.code === "rate_limited";
}

function parseJson(text: string): unknown {
  return text === "" ? undefined : (JSON.parse(text) as unknown);
}

function parseRetryAfter(header: string | null): number | undefined {
  if (header === null) return undefined;
  const seconds = Number(header);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const date = Date.parse(header);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

export function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? ` (${error.cause.message})` : "";
    return `${error.message}${cause}`;
  }
  return String(error);
}

/** Aborts `controller` when `signal` aborts; returns the undo. */
export function link(signal: AbortSignal | undefined, controller: AbortController): () => void {
  if (signal === undefined) return () => {};
  if (signal.aborted) {
    controller.abort(signal.reason);
    return () => {};
  }
  const onAbort = () => controller.abort(signal.reason);
  signal.addEventListener("abort", onAbort, { once: true });
  return () => signal.removeEventListener("abort", onAbort);
}

/** Resolves after `ms`; rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * An unguessable `Idempotency-Key` (a UUID v4). It must be: a retry with it replays the
 * lease's token. Node 18 has no global `crypto`; it then comes from `node:crypto`.
 */
export async function randomKey(): Promise<string> {
  let webCrypto: Crypto | undefined = (globalThis as { crypto?: Crypto }).crypto;
  if (webCrypto?.getRandomValues === undefined) {
    const module = "node:crypto"; // not a static import: browsers' bundlers leave it alone
    webCrypto = ((await import(module)) as { webcrypto: Crypto }).webcrypto;
  }
  if (typeof webCrypto.randomUUID === "function") return webCrypto.randomUUID();
  const bytes = webCrypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6]! & 0x0f) | 0x40;
  bytes[8] = (bytes[8]! & 0x3f) | 0x80;
  const hex = Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
