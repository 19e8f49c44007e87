/**
 * The wire bodies this client reads, as the server sends them (snake_case; see the README's
 * "API reference (v1)" and `GET /openapi.json`), and the options the client takes.
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

/** What `GET /v1/locks/{name}` says a name is used as (`kind`). */
export type LockViewKind = "reentrant" | "exclusive" | "fair" | "rw" | "redlock" | "semaphore" | "foreign" | (string & {});

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
}

/** `GET /v1/multileases/{id}`: a multilease as anyone may see it (never its token). */
export interface MultileaseInfo {
  lease_id: string;
  state: LeaseStateName | (string & {});
  members: { lock: string; kind: string; lease_id: string }[];
  holder?: string | null;
  metadata?: Metadata | null;
  /** The member whose end ended it, once it has. */
  lost_member?: string | null;
  ttl_ms: number;
  remaining_ms?: number | null;
  acquired_at: string;
  expires_at: string;
  ended_at?: string | null;
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

/** `POST /v1/admin/locks/{name}/revoke`: the leases asked to let go. */
export interface RevokeBody {
  lock: string;
  leases: {
    lease_id: string;
    holder?: string | null;
    fencing_token: number;
    revocation: RevocationBody;
    /** True for a lease asked already: its first deadline and reason stand. */
    again: boolean;
  }[];
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

/** `POST /v1/locks/{name}/fence/check`. */
export interface FenceCheck {
  lock: string;
  fencing_token: number;
  /** True when a lease holding the lock right now carries this token. */
  current: boolean;
  /** The highest fencing token handed out so far on this lock. */
  fencing_counter: number;
}

export type LeaseStateName = "held" | "queued" | "released" | "expired" | "force_released" | "left";

/** `GET /v1/{locks|semaphores}/{name}/leases/{lease_id}`: a lease as anyone may see it. */
export interface LeaseInfo {
  lease_id: string;
  lock: string;
  state: LeaseStateName | (string & {});
  kind: string;
  read_count?: number | null;
  write_count?: number | null;
  position?: number | null;
  permits?: number | null;
  holder?: string | null;
  metadata?: Metadata | null;
  fencing_token: number;
  reentry_count: number;
  ttl_ms: number;
  remaining_ms?: number | null;
  acquired_at: string;
  expires_at: string;
  ended_at?: string | null;
  /** The multilease this lease is a member of. */
  multilease?: Membership | null;
}

/** A lease that is a member of a multilease: which, and its locks. */
export interface Membership {
  lease_id: string;
  /** Its locks that the caller's key may see. */
  locks: string[];
  /** Its locks the caller's key may not see: counted, not named (absent when none). */
  hidden_locks?: number;
}

export interface HolderInfo {
  lease_id?: string | null;
  holder_id: string;
  holder?: string | null;
  metadata?: Metadata | null;
  reentry_count: number;
  read_count?: number | null;
  write_count?: number | null;
  kind?: string | null;
  fencing_token?: number | null;
  acquired_at?: string | null;
  /** The multilease this holder's lease is a member of. */
  multilease?: Membership | null;
}

export interface QueuedInfo {
  position: number;
  ticket_id?: string | null;
  holder_id: string;
  holder?: string | null;
  waiting_since?: string | null;
  deadline?: string | null;
}

export interface WaiterInfo {
  lease_id: string;
  holder?: string | null;
  kind?: string | null;
  permits?: number | null;
  waiting_since: string;
  instance: string;
}

/** `GET /v1/locks/{name}`. */
export interface LockInfo {
  lock: string;
  held: boolean;
  /** What the name is used as; null when free. */
  kind?: LockViewKind | null;
  mode?: RwMode | null;
  holders: HolderInfo[];
  queue: QueuedInfo[];
  queue_length: number;
  fencing_counter: number;
  remaining_ms?: number | null;
  expires_at?: string | null;
  held_since?: string | null;
  held_for_ms?: number | null;
  waiting?: WaiterInfo[];
  waiting_count?: number;
  /** The lock-delay (ms) its holder asked for, or the one the name is in now. */
  lock_delay_ms?: number | null;
  /** Nobody holds it, but it is in its lock-delay until then. */
  delayed_until?: string | null;
}

export interface PermitHolderInfo {
  lease_id?: string | null;
  holder?: string | null;
  metadata?: Metadata | null;
  permits: number;
  fencing_token?: number | null;
  acquired_at?: string | null;
  expires_at?: string | null;
}

/** `GET /v1/semaphores/{name}`. */
export interface SemaphoreInfo {
  semaphore: string;
  limit: number;
  used: number;
  available: number;
  fencing_counter: number;
  holders: PermitHolderInfo[];
  waiting?: WaiterInfo[];
  waiting_count?: number;
}

export interface LockSummary {
  name: string;
  kind: LockViewKind;
  holders: number;
  holder?: string | null;
  queue_length?: number | null;
  used?: number | null;
  limit?: number | null;
  remaining_ms?: number | null;
  held_for_ms?: number | null;
  waiting?: number | null;
}

/** `GET /v1/locks`: one page of the live locks and semaphores. */
export interface LockList {
  locks: LockSummary[];
  next_cursor?: string | null;
}

/** `DELETE /v1/admin/locks/{name}`: what a force release removed. */
export interface ForceReleaseBody {
  lock: string;
  /** False when nobody held it and it was in no lock-delay. */
  released: boolean;
  removed: HolderInfo[];
  /** Nobody held it, but it was in its lock-delay: the delay was lifted (absent otherwise). */
  delay_lifted?: boolean;
}

/** Options every acquisition takes. */
export interface AcquireOptions {
  /** The lease's TTL in ms (the server's default, 30 s unless configured, when absent). */
  ttlMs?: number | undefined;
  /**
   * How long to wait while someone else holds it, in ms (default 0: give up at once). The
   * waiting is server-side; a wait longer than the server's `--max-wait-ms` is asked again
   * for the rest, and a fair lock's queue ticket is polled until then.
   */
  waitMs?: number | undefined;
  /** A label for people, shown to operators and to refused acquirers. */
  holder?: string | undefined;
  /** A JSON object kept with the lease. */
  metadata?: Metadata | undefined;
  /** Gives up waiting when aborted (the lock is then not taken, or given back at once). */
  signal?: AbortSignal | undefined;
  /**
   * Watch the lease's event stream for its loss (default true). Without it, loss is found by
   * the heartbeats only: within a third of the TTL.
   */
  watch?: boolean | undefined;
}

export interface LockOptions extends AcquireOptions {
  /** `reentrant` (default), `exclusive`, `fair`, `read`, `write`, or `redlock` (a server with --redlock-nodes). */
  kind?: LockKind | undefined;
  /** Read/write locks: `readers_first` (default) or `fifo`. */
  policy?: RwPolicy | undefined;
  /**
   * Should the lease end other than by a release (it expired, an operator removed it), the
   * lock refuses new leases for this long, in ms (409 `lock_delay`, a {@link LockDelayError}):
   * a holder that was paused finds nobody else writing yet. At most the server's
   * `--max-lock-delay-ms` (60 s by default). Default 0: none.
   */
  lockDelayMs?: number | undefined;
  /**
   * While a fair lock waits in line: called with a {@link Queued} for each answer in line (at
   * once, then once per poll, at least every `--max-wait-ms` of the server). Keep it quick.
   */
  onQueued?: ((queued: Queued) => void) | undefined;
  /**
   * This lease's watch tells `expiring` this many ms before its end with no renewal since
   * (a positive number; default: the client's `expiringSlackMs`, else a third of the TTL; the
   * server takes at most half of it).
   */
  expiringSlackMs?: number | undefined;
}

/** One lock of a multilease: a name (a reentrant lock), or a name and kind. */
export type MultiLock = string | { name: string; kind?: Exclude<LockKind, "redlock"> | undefined };

export interface MultileaseOptions extends AcquireOptions {
  /** As for {@link LockOptions.lockDelayMs}, on every lock. */
  lockDelayMs?: number | undefined;
}

export interface SemaphoreOptions extends AcquireOptions {
  /** The semaphore's number of permits; every party must name the same. */
  limit: number;
  /** Permits this lease takes (default 1). */
  permits?: number | undefined;
}

/** What {@link Client.campaign} takes. */
export interface CampaignOptions {
  /** What the candidate publishes while it leads (its address, ...): text of at most 4096 bytes. */
  value: string;
  /** The term's TTL in ms, renewed at a third of it (the server's default when absent). */
  ttlMs?: number | undefined;
  /**
   * How long to wait in line, in ms: then a `LockHeldError`, and the line is left. Default:
   * without limit (until it leads, or `signal` aborts).
   */
  waitMs?: number | undefined;
  /** A label for people. */
  holder?: string | undefined;
  /** Should the term end other than by a resignation, nobody leads for this long, in ms. */
  lockDelayMs?: number | undefined;
  /** Gives up the campaign when aborted (the line is left, a term got meanwhile resigned). */
  signal?: AbortSignal | undefined;
  /** Watch the term's event stream for its loss (default true); else the heartbeats tell it. */
  watch?: boolean | undefined;
}

/** A candidate's standing, as the server answers it: a term once it leads, a position while in line. */
export interface CandidateBody {
  candidate_id: string;
  /** Only in the answer that made the candidate. */
  token?: string | null;
  election: string;
  term?: number;
  value?: string;
  ttl_ms?: number;
  expires_at?: string;
  position?: number;
  keep_by?: string;
  leader?: ElectionLeader | null;
  wait_ms?: number | null;
}

/** An election's leader, as anyone may see it. */
export interface ElectionLeader {
  candidate_id: string | null;
  term: number;
  value: string | null;
  holder: string | null;
  since: string | null;
  expires_at: string | null;
}

/** `GET /v1/elections/{name}` ({@link Client.leader}). */
export interface ElectionInfo {
  election: string;
  /** `null` when nobody leads. */
  leader: ElectionLeader | null;
  /** The last term handed out; 0 before the first. */
  term: number;
  /** The first candidates in line, in order. */
  candidates: { position: number; candidate_id: string | null; holder: string | null; since: string | null }[];
  candidates_waiting: number;
}

/** {@link Client.checkTerm}'s answer. */
export interface TermCheck {
  election: string;
  term: number;
  /** The term is the leader's now (stale as soon as it is answered). */
  current: boolean;
  last_term: number;
}

/** One change {@link Client.observe} tells. */
export interface ElectionEvent {
  /** `leader` (a new term, or a new value in a term), `vacant` (nobody leads), `resync` (terms may be missing). */
  kind: "leader" | "vacant" | "resync";
  /** The term (a `vacant` event's: the last one). */
  term: number;
  value?: string;
  holder?: string;
  since?: string;
  candidateId?: string;
  /** Its place in the election's terms log (what a reconnection resumes from). */
  id?: string;
}
