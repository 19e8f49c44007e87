/**
 * A lease's watch stream (`GET .../watch`, server-sent events): told the moment the lease
 * ends (`event: lost`) and of each signal before (`expiring`, `contended`,
 * `revocation_requested`, ...), opened again with `Last-Event-ID` when it ends without news,
 * given up (the heartbeats carry on) when the server will not let this lease be watched.
 */
import { AuthError, LeaseLostError, NotFoundError, TransportError, lossError } from "./errors.js";
import { isObject, link, sleep, toProblemError, type Query, type Transport } from "./http.js";
import { readEvents, type SseEvent } from "./sse.js";

/** How long the watch stream may stay silent (the server sends a comment every 15 s). */
const WATCH_IDLE_MS = 45_000;
/** The pause before opening a watch again that was refused for lack of room. */
const WATCH_RETRY_FULL_MS = 15_000;
const now = () => performance.now();

/** The loss an error reports, if it reports one: 410, or the server not knowing the lease. */
export function asLoss(error: unknown): LeaseLostError | undefined {
  if (error instanceof LeaseLostError) return error;
  if (error instanceof NotFoundError && error.code === "lease_not_found") {
    return lossError("unknown", error.detail, { cause_code: error.code });
  }
  if (error instanceof AuthError && error.code === "token_mismatch") {
    return lossError("unknown", error.detail, { cause_code: error.code });
  }
  return undefined;
}

/**
 * Follows the watch stream at `stream.path` (with `stream.query`) until `stop` aborts or the lease is lost: reports
 * `event: lost` at once (through `lose`, with the error `lost` makes of its data), and every
 * other event to `told`. Opened again, it sends the last `id:` read as `Last-Event-ID`: the
 * server goes on counting, and tells again what still stands.
 */
export async function watchLease(
  transport: Transport,
  stream: { path: string; query: Query | undefined },
  token: string,
  stop: AbortSignal,
  lose: (loss: LeaseLostError) => void,
  lost: (data: string) => LeaseLostError,
  told: (event: SseEvent) => void = () => {},
): Promise<void> {
  let failures = 0;
  let lastId: string | undefined;
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
      const response = await transport.open(
        {
          method: "GET",
          ...stream,
          token,
          headers: lastId === undefined ? undefined : { "last-event-id": lastId },
        },
        connection.signal,
      );
      if (!response.ok) {
        const error = toProblemError(response, await response.text());
        const loss = asLoss(error);
        if (loss !== undefined) {
          lose(loss);
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
          if (event.id !== undefined) lastId = event.id;
          if (event.event === "lost") {
            lose(lost(event.data));
            break;
          }
          told(event);
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
      await sleep(pause ?? transport.backoff(Math.max(failures, 1)), stop);
    } catch {
      return;
    }
  }
}

/** The loss the data of an `event: lost` tells (a multilease's names the member in `lock`). */
export function lostEvent(data: string, leaseId: string, name: string): LeaseLostError {
  let event: Record<string, unknown> = {};
  try {
    const parsed = JSON.parse(data) as unknown;
    if (isObject(parsed)) event = parsed;
  } catch {
    // a lost event whose data does not parse is still a loss
  }
  const reason = typeof event["reason"] === "string" ? event["reason"] : "unknown";
  return lossError(reason, `the lease ${leaseId} on ${name} ended: ${reason} (from its watch stream)`, {
    ...event,
  });
}
