/**
 * Releasing on the way out of a Node process. While a lease is held (by a client with
 * `releaseOnSignal`, the default), SIGINT, SIGTERM and SIGHUP release every held lease (for
 * at most {@link EXIT_RELEASE_MS}) and then end the process by the same signal, as it would
 * have ended without us. When the program listens for the signal itself, it has its own
 * shutdown, and that is left to it: its `withLock` and `await using` blocks release as they
 * end. Browsers and other runtimes without `process.on` get nothing here: a lease left behind
 * there expires after its TTL.
 */

export interface Releasable {
  releaseForExit(): Promise<void>;
}

interface NodeProcess {
  pid: number;
  on(signal: string, listener: () => void): unknown;
  removeListener(signal: string, listener: () => void): unknown;
  listenerCount(signal: string): number;
  kill(pid: number, signal: string): unknown;
}

/** How long the releases may take before the process ends anyway. */
export const EXIT_RELEASE_MS = 3000;

const SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;
const held = new Set<Releasable>();
const listeners = new Map<string, () => void>();
let exiting = false;

function nodeProcess(): NodeProcess | undefined {
  const candidate = (globalThis as { process?: Partial<NodeProcess> }).process;
  if (
    typeof candidate?.on === "function" &&
    typeof candidate.removeListener === "function" &&
    typeof candidate.listenerCount === "function" &&
    typeof candidate.kill === "function"
  ) {
    return candidate as NodeProcess;
  }
  return undefined;
}

/** @internal A lease is held: release it if a signal ends the process. */
export function track(lease: Releasable): void {
  held.add(lease);
  if (held.size === 1 && !exiting) install();
}

/** @internal The lease has ended. */
export function untrack(lease: Releasable): void {
  held.delete(lease);
  if (held.size === 0) uninstall();
}

function install(): void {
  const process = nodeProcess();
  if (process === undefined) return;
  for (const signal of SIGNALS) {
    if (listeners.has(signal)) continue;
    const listener = () => onSignal(process, signal);
    listeners.set(signal, listener);
    try {
      process.on(signal, listener);
    } catch {
      listeners.delete(signal); // a signal this platform cannot listen for
    }
  }
}

function uninstall(): void {
  const process = nodeProcess();
  for (const [signal, listener] of listeners) process?.removeListener(signal, listener);
  listeners.clear();
}

function onSignal(process: NodeProcess, signal: string): void {
  if (process.listenerCount(signal) > 1) return; // the program handles it
  exiting = true;
  const leases = [...held];
  uninstall();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, EXIT_RELEASE_MS);
  });
  void Promise.race([Promise.allSettled(leases.map((lease) => lease.releaseForExit())), timeout]).then(() => {
    clearTimeout(timer);
    process.kill(process.pid, signal);
  });
}
