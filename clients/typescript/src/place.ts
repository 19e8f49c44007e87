/**
 * Where a lease lives on the server, decided once when it is acquired: the collection it is
 * acquired in (and its lease ids go under) and the kind of lease, which says what it can do:
 * a lock, a semaphore's permits, a multilease, or an election's term (a {@link Term}).
 */
export type PlaceKind = "lock" | "semaphore" | "multilease" | "election";

export interface Place {
  readonly kind: PlaceKind;
  /** The lock's, semaphore's or election's name; a multilease's locks, joined by commas. */
  readonly name: string;
  /** Where it is acquired (POST) and its leases' ids go under. */
  readonly collection: string;
}

const enc = encodeURIComponent;

export function lockPlace(name: string): Place {
  return { kind: "lock", name, collection: `/v1/locks/${enc(name)}/leases` };
}

export function semaphorePlace(name: string): Place {
  return { kind: "semaphore", name, collection: `/v1/semaphores/${enc(name)}/leases` };
}

export function multileasePlace(locks: readonly string[]): Place {
  return { kind: "multilease", name: locks.join(","), collection: "/v1/multileases" };
}

export function electionPlace(name: string): Place {
  return { kind: "election", name, collection: `/v1/elections/${enc(name)}/candidates` };
}

/** The lease's own path: heartbeat, release, watch and inspect hang off it. */
export function leasePath(place: Place, leaseId: string): string {
  return `${place.collection}/${enc(leaseId)}`;
}

/** Whether the lease has levels: re-entered, and released one at a time (locks only). */
export function hasLevels(place: Place): boolean {
  return place.kind === "lock";
}
