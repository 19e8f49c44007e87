/**
 * The bodies of a lease's own calls, as the server sends them (snake_case; see the README's
 * "API reference (v1)" and `GET /openapi.json`): its grant, its place in a fair lock's queue,
 * its renewals, an operator's revocation, its release and its loss; the kinds of lock they
 * name; and what the client tells the caller of them ({@link Queued}, {@link Revocation},
 * {@link Signal}).
 */

/** The kinds of lock an acquire may ask for. */
export type LockKind = "reentrant" | "exclusive" | "fair" | "read" | "write" | "redlock";

/** Read/write locks: who goes first when a writer waits. */
export type RwPolicy = "readers_first" | "fifo";

/** Read/write leases: which hold a release gives back. */
export type RwMode = "read" | "write";

/**
 * Why a grant or renewal stands on its Redis primary alone, so a failover could lose it:
 * `no_replica` (the lock's shard has no replica a failover could promote) or `not_replicated`
 * (too few replicas acknowledged a heartbeat in time). A newer server may name others.
 */
export type Degraded = "no_replica" | "not_replicated" | (string & {});

/** A JSON object kept with a lease (at most 4 KiB as JSON). */
export type Metadata = Record<string, unknown>;

/** A grant (201 new lease, 200 reentry, 201 from a fair ticket's poll). */
export interface GrantBody {
  lease_id: string;
  /** Only in the 201 of a new lease. */
  token?: string | null;
  lock: string;
  kind: string;
  holder?: string | null;
  fencing_token: number;
  reentry_count: number;
  permits?: number | null;
  ttl_ms: number;
  expires_at: string;
  wait_ms?: number | null;
  /** Redis replicas that acknowledged the grant (with --min-replica-acks; absent when none are required). */
  replicas_acked?: number | null;
  /** RedLock grants: the nodes that granted it (a majority of the server's --redlock-nodes). */
  nodes_acked?: number | null;
  /** RedLock grants: how long it may be relied on, in ms (TTL less elapsed and drift). */
  validity_ms?: number | null;
  /** Present when the grant stands on its Redis primary alone. */
  degraded?: Degraded | null;
  /** A multilease's locks, each with its own lease and fencing token. */
  members?: MultileaseMember[];
}

/** One lock of a held multilease. */
export interface MultileaseMember {
  lock: string;
  kind: string;
  /** The member's own lease on its lock (what `GET /v1/locks/{lock}` shows as the holder). */
  lease_id: string;
  /** This lock's fencing token: pass it with every write to the resource this lock protects. */
  fencing_token: number;
  /** Redis replicas that acknowledged this member's grant (absent when none are required). */
  replicas_acked?: number | null;
  /** Present when this member's grant or renewal stands on its Redis primary alone. */
  degraded?: Degraded | null;
  /** A heartbeat's answer: an operator revoked this member's lock (the multilease ends with it). */
  revocation?: RevocationBody | null;
}

/**
 * One lock of a held multilease as {@link Lease.members} shows it: the grant's member, and an
 * operator's revocation of its lock once one was told (by the watch or a heartbeat's answer).
 */
export interface HeldMember extends Omit<MultileaseMember, "revocation"> {
  revocation?: Revocation;
}

/** A fair lock's place in its queue (202). */
export interface TicketBody {
  ticket_id: string;
  token?: string | null;
  lock: string;
  position: number;
  poll_by: string;
  poll_timeout_ms: number;
  wait_ms?: number | null;
  /** The holding lease's label. */
  held_by?: string | null;
  /** How long the holder has held the lock, in ms. */
  held_for_ms?: number | null;
  /** The server's estimate of the wait until this ticket's turn, in ms (absent: too few past holds). */
  estimated_wait_ms?: number | null;
}

/**
 * Where a fair lock's waiter stands, as an answer in line tells it ({@link LockOptions.onQueued}):
 * `position` (1: next), `estimatedWaitMs` (the server's estimate of the wait until its turn,
 * from the name's recent hold times; absent until it has seen three), `heldBy` (the holding
 * lease's label) and `heldForMs` (how long it has held the lock).
 */
export interface Queued {
  position: number;
  estimatedWaitMs?: number;
  heldBy?: string;
  heldForMs?: number;
}

/** A successful heartbeat (a multilease's has `members` instead of `lock`, `fencing_token`, `reentry_count`). */
export interface RenewalBody {
  lease_id: string;
  lock?: string;
  fencing_token?: number;
  reentry_count?: number;
  ttl_ms: number;
  expires_at: string;
  replicas_acked?: number | null;
  members?: MultileaseMember[];
  /** RedLock leases: the nodes that extended it. */
  nodes_acked?: number | null;
  /** RedLock leases: how long the extension may be relied on, in ms. */
  validity_ms?: number | null;
  /** Present when the extension stands on its Redis primary alone. */
  degraded?: Degraded | null;
  /** An election term's: the term it keeps (never another than the one held). */
  term?: number;
  /** While an operator's revocation is pending: then `ttl_ms` stops at its deadline. */
  revocation?: RevocationBody | null;
}

/** An operator's revocation as the server sends it (RFC 3339 times). */
export interface RevocationBody {
  reason: string;
  requested_by: string;
  requested_at: string;
  deadline: string;
}

/**
 * An operator's request that the holder let go ({@link Client.revoke}): why (`reason`, empty
 * when none was given), who asked, when, and the `deadline` by which the lease ends unless
 * released first (RFC 3339 times, as the server sent them).
 */
export interface Revocation {
  reason: string;
  requestedBy: string;
  requestedAt: string;
  deadline: string;
}

/** What a held lease's watch stream tells before its end (a {@link Signal}'s `kind`). */
export type SignalKind = "expiring" | "renewed" | "degraded" | "recovered" | "contended" | "revocation_requested";

/**
 * One thing a held lease's watch stream told before its end (`lease.on("signal", ...)`):
 * `expiring` (`remainingMs`, `validUntil`: heartbeat now, or stop before then), `renewed`
 * (`validUntil`), `degraded` (`since`, `validUntil`: the server cannot reach Redis),
 * `recovered` (`validUntil`), `contended` (`waiters`: how many wait for the name now) or
 * `revocation_requested` (`revocation`). Times are RFC 3339 text, as the server sent them.
 */
export interface Signal {
  kind: SignalKind;
  /** Its place in the watch stream (absent when a heartbeat's answer told the revocation). */
  id?: string;
  leaseId?: string;
  /** The lock (a multilease's: the member it is about). */
  lock?: string;
  remainingMs?: number;
  validUntil?: string;
  since?: string;
  waiters?: number;
  revocation?: Revocation;
}

/** A release's answer. */
export interface ReleaseBody {
  lease_id: string;
  lock: string;
  released: boolean;
  reentry_count: number;
}

/** The data of the watch stream's `event: lost`. */
export interface LostEvent {
  lease_id: string;
  lock: string;
  reason: string;
  ended_at: string;
}
