/**
 * A fair lock's queue, as an acquire waits in it: its ticket polled until its turn, each
 * answer in line told to the caller's `onQueued`, and the queue left when the wait runs out.
 * {@link tell} calls such a hook for a campaign's line too (`onInLine`).
 */
import { LeaseLostError, LockHeldError } from "./errors.js";
import type { Transport } from "./http.js";
import type { GrantBody, Queued, TicketBody } from "./wire.js";

const now = () => performance.now();

/** Where an answer in line says the waiter stands (what `onQueued` is told). */
export function queued(ticket: TicketBody): Queued {
  const place: Queued = { position: ticket.position };
  if (typeof ticket.estimated_wait_ms === "number") place.estimatedWaitMs = ticket.estimated_wait_ms;
  if (typeof ticket.held_by === "string") place.heldBy = ticket.held_by;
  if (typeof ticket.held_for_ms === "number") place.heldForMs = ticket.held_for_ms;
  return place;
}

/**
 * Tells a caller's hook (if any) where a waiter stands. Should the hook throw, the line is left
 * before the error goes on up: the place would otherwise hold up everyone behind it until its
 * TTL ran out.
 */
export async function tell<T>(hook: ((where: T) => void) | undefined, where: () => T, leave: () => Promise<void>): Promise<void> {
  if (hook === undefined) return;
  try {
    hook(where());
  } catch (error) {
    await leave();
    throw error;
  }
}

/**
 * Polls a fair lock's ticket until its turn (the grant), the end of the wait (then it leaves
 * the queue and throws a {@link LockHeldError} saying who held the lock at the last answer),
 * or its expiry (undefined). Tells `onQueued` of the ticket and of each poll's answer in line.
 */
export async function waitInQueue(
  transport: Transport,
  name: string,
  ticket: TicketBody,
  left: () => number,
  signal: AbortSignal | undefined,
  onQueued: ((queued: Queued) => void) | undefined,
): Promise<{ grant: GrantBody; token: string; sentAt: number } | undefined> {
  const token = ticket.token;
  if (typeof token !== "string") throw new TypeError("the server's ticket carried no token");
  const path = `/v1/locks/${encodeURIComponent(name)}/tickets/${encodeURIComponent(ticket.ticket_id)}`;
  let last = ticket;
  try {
    for (;;) {
      await tell(onQueued, () => queued(last), () => leaveQueue(transport, path, token));
      if (left() <= 0) {
        await leaveQueue(transport, path, token);
        throw new LockHeldError({
          type: "/problems/lock_held",
          title: "The lock is held by someone else",
          status: 409,
          detail: `still queued for ${name}, at position ${last.position}, when the wait ran out`,
          code: "lock_held",
          position: last.position,
          holder: last.held_by ?? undefined,
          held_for_ms: last.held_for_ms ?? undefined,
          estimated_wait_ms: last.estimated_wait_ms ?? undefined,
        });
      }
      const sentAt = now();
      const reply = await transport.request<GrantBody | TicketBody>({
        method: "POST",
        path,
        query: () => ({ wait_ms: left() }),
        token,
        retry: true, // a poll after the grant answers with the same grant
        signal,
        accept: [202],
      });
      if (reply.status !== 202) return { grant: reply.body as GrantBody, token, sentAt };
      last = reply.body as TicketBody;
    }
  } catch (error) {
    if (error instanceof LeaseLostError && error.code === "ticket_expired" && left() > 0) return undefined;
    if (signal?.aborted) await leaveQueue(transport, path, token);
    throw error;
  }
}

async function leaveQueue(transport: Transport, path: string, token: string): Promise<void> {
  await transport.request({ method: "DELETE", path, token, retry: true }).catch(() => {});
}
