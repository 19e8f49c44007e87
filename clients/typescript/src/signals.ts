/**
 * What a held lease's watch stream tells before its end (clients/PROTOCOL.md, "Signals
 * before the loss"): the events, parsed into {@link Signal}s, the listeners they are told to,
 * and when a revocation ends a lease on this client's clock.
 */
import { isObject } from "./http.js";
import type { GrantBody, HeldMember, MultileaseMember, RenewalBody, Revocation, Signal, SignalKind } from "./wire.js";

/** What {@link Lease.on} calls with each {@link Signal}. */
export type SignalListener = (signal: Signal) => void;

/** The watch stream's events before the loss (`lost` is the loss itself, not a signal). */
export const SIGNAL_KINDS: readonly SignalKind[] = ["expiring", "renewed", "degraded", "recovered", "contended", "revocation_requested"];

export function isSignalKind(event: string): event is SignalKind {
  return (SIGNAL_KINDS as readonly string[]).includes(event);
}

/** A revocation as the server sent it (in a heartbeat's answer or a watch event), if it is one. */
export function parseRevocation(body: unknown): Revocation | undefined {
  if (!isObject(body) || typeof body["deadline"] !== "string") return undefined;
  const text = (value: unknown) => (typeof value === "string" ? value : "");
  return {
    reason: text(body["reason"]),
    requestedBy: text(body["requested_by"]),
    requestedAt: text(body["requested_at"]) || body["deadline"],
    deadline: body["deadline"],
  };
}

/**
 * The revocations a heartbeat's answer carries, each with the member it is about: a lease's is
 * its own `revocation`; a multilease's answer has none of its own, but each revoked member's
 * entry carries one (each is told, with its lock, as the watch names it).
 */
export function heartbeatRevocations(body: RenewalBody | GrantBody): { revocation: Revocation; member?: string }[] {
  const own = "revocation" in body ? parseRevocation(body.revocation) : undefined;
  if (own !== undefined) return [{ revocation: own }];
  const told: { revocation: Revocation; member?: string }[] = [];
  for (const member of Array.isArray(body.members) ? body.members : []) {
    const revocation = isObject(member) ? parseRevocation(member.revocation) : undefined;
    if (revocation !== undefined) told.push({ revocation, member: member.lock });
  }
  return told;
}

/** Whether `a`'s deadline is earlier than `b`'s (both the server's clock): the one that ends a multilease. */
export function endsBefore(a: Revocation, b: Revocation): boolean {
  const [mine, theirs] = [Date.parse(a.deadline), Date.parse(b.deadline)];
  return !Number.isNaN(mine) && (Number.isNaN(theirs) || mine < theirs);
}

/** A grant's member as the lease shows it ({@link HeldMember}). */
export function heldMember(member: MultileaseMember): HeldMember {
  const { revocation, ...held } = member;
  const told = parseRevocation(revocation);
  return told === undefined ? held : { ...held, revocation: told };
}

/** The signal an event of the watch stream tells. */
export function parseSignal(kind: SignalKind, data: string, id: string | undefined): Signal {
  let body: Record<string, unknown> = {};
  try {
    const parsed = JSON.parse(data) as unknown;
    if (isObject(parsed)) body = parsed;
  } catch {
    // an event whose data does not parse still tells its kind
  }
  const signal: Signal = { kind };
  if (id !== undefined) signal.id = id;
  const text = (key: string) => (typeof body[key] === "string" ? (body[key] as string) : undefined);
  const number = (key: string) => (typeof body[key] === "number" ? (body[key] as number) : undefined);
  const leaseId = text("lease_id");
  if (leaseId !== undefined) signal.leaseId = leaseId;
  const lock = text("lock");
  if (lock !== undefined) signal.lock = lock;
  const remainingMs = number("remaining_ms");
  if (remainingMs !== undefined) signal.remainingMs = remainingMs;
  const validUntil = text("valid_until");
  if (validUntil !== undefined) signal.validUntil = validUntil;
  const since = text("since");
  if (since !== undefined) signal.since = since;
  const waiters = number("waiters");
  if (waiters !== undefined) signal.waiters = waiters;
  const revocation = parseRevocation(body["revocation"]);
  if (revocation !== undefined) signal.revocation = revocation;
  return signal;
}

/**
 * Milliseconds from now to a revocation's deadline, at most the grace the server gave
 * (`deadline` − `requestedAt`, both its own clock): a clock of ours that runs behind the
 * server's does not move the end later than that. At least 0.
 */
export function msLeft(revocation: Revocation): number {
  const deadline = Date.parse(revocation.deadline);
  if (Number.isNaN(deadline)) return 0;
  let left = deadline - Date.now();
  const requested = Date.parse(revocation.requestedAt);
  if (!Number.isNaN(requested)) left = Math.min(left, deadline - requested);
  return Math.max(0, left);
}

/** A lease's listeners ({@link Lease.on}): of every signal (`"signal"`), or of one kind. */
export class SignalListeners {
  private readonly listeners = new Map<string, Set<SignalListener>>();

  add(event: "signal" | SignalKind, listener: SignalListener): void {
    let set = this.listeners.get(event);
    if (set === undefined) this.listeners.set(event, (set = new Set()));
    set.add(listener);
  }

  delete(event: "signal" | SignalKind, listener: SignalListener): void {
    this.listeners.get(event)?.delete(listener);
  }

  /** Calls the listeners of every signal, then those of its kind; what one throws is reported as uncaught. */
  tell(signal: Signal): void {
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
}
