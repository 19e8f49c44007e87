/**
 * Options are checked by name: an option this client does not know (a typo, `ttl` for `ttlMs`,
 * an option of a newer version) is refused with a TypeError naming it and the known ones,
 * rather than ignored: ignored, `{ ttl: 5000 }` would silently take the server's 30 s TTL.
 */

/** Throws a TypeError when `options` has a member not in `known`. */
export function checkOptions(options: object | undefined, known: readonly string[], where: string): void {
  if (options === undefined || options === null) return;
  if (typeof options !== "object") throw new TypeError(`${where}: options must be an object, not ${typeof options}`);
  const unknown = Object.keys(options).filter((name) => !known.includes(name));
  if (unknown.length > 0) {
    const names = unknown.map((name) => `"${name}"`).join(", ");
    throw new TypeError(`${where}: unknown option${unknown.length > 1 ? "s" : ""} ${names} (known: ${known.join(", ")})`);
  }
}

/** What every acquire takes. */
export const ACQUIRE_OPTIONS = ["ttlMs", "waitMs", "holder", "metadata", "signal", "watch"] as const;
export const LOCK_OPTIONS = [...ACQUIRE_OPTIONS, "kind", "policy", "lockDelayMs", "onQueued", "expiringSlackMs"] as const;
export const SEMAPHORE_OPTIONS = [...ACQUIRE_OPTIONS, "limit", "permits"] as const;
export const MULTILEASE_OPTIONS = [...ACQUIRE_OPTIONS, "lockDelayMs"] as const;
export const CAMPAIGN_OPTIONS = ["value", "ttlMs", "waitMs", "holder", "lockDelayMs", "signal", "watch", "onInLine"] as const;
export const CLIENT_OPTIONS = ["apiKey", "timeoutMs", "retry", "fetch", "releaseOnSignal", "expiringSlackMs"] as const;
export const RETRY_OPTIONS = ["attempts", "minDelayMs", "maxDelayMs"] as const;
