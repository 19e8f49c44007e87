/**
 * What the reads answer, as the server sends them (snake_case): a lock or a semaphore, a
 * lease, a multilease, a page of the live names, a fencing token's check; and what an
 * operator's force release and revocation answer.
 */
import type { Metadata, RevocationBody, RwMode } from "./wire.js";

/** What `GET /v1/locks/{name}` says a name is used as (`kind`). */
export type LockViewKind = "reentrant" | "exclusive" | "fair" | "rw" | "redlock" | "semaphore" | "foreign" | (string & {});

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

/** `POST /v1/locks/{name}/fence/check`. */
export interface FenceCheck {
  lock: string;
  fencing_token: number;
  /** True when a lease holding the lock right now carries this token. */
  current: boolean;
  /** The highest fencing token handed out so far on this lock. */
  fencing_counter: number;
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
