/**
 * What an acquisition takes: the options of {@link Client.lock}, {@link Client.multilease}
 * and {@link Client.semaphore} (and of their `with...` forms).
 */
import type { LockKind, Metadata, Queued, RwPolicy } from "./wire.js";

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
   * Should it throw, the queue is left and the acquire rejects with what it threw.
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
