/** What a grant or a renewal says of the copies behind a lease (clients/PROTOCOL.md). */
import type { Degraded, GrantBody, RenewalBody } from "./wire.js";

export interface Acked {
  /** Redis replicas that acknowledged it; a multilease's: its weakest member's. */
  replicas: number | undefined;
  /** RedLock: the nodes that granted or extended it. */
  nodes: number | undefined;
  /** RedLock: how long, in ms, it could be relied on when answered. */
  validity: number | undefined;
  /** Why it stands on its Redis primary alone; a multilease's: its first such member's. */
  degraded: Degraded | undefined;
}

/** What `body` says of the copies behind the lease. */
export function acked(body: RenewalBody | GrantBody): Acked {
  const members = body.members ?? [];
  const replicas = members.length > 0
    ? members.reduce<number | undefined>((least, m) => (typeof m.replicas_acked === "number" ? Math.min(least ?? Infinity, m.replicas_acked) : least), undefined)
    : (body.replicas_acked ?? undefined);
  return {
    replicas,
    nodes: "nodes_acked" in body ? (body.nodes_acked ?? undefined) : undefined,
    validity: "validity_ms" in body ? (body.validity_ms ?? undefined) : undefined,
    degraded: body.degraded ?? members.find((m) => m.degraded != null)?.degraded ?? undefined,
  };
}
