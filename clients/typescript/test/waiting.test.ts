// Why a caller waits (issue 56): a refusal says how long the lock has been held and, once the
// server has seen a few holds of the name, how long it should still be; a fair lock's waiter
// is told its place and the estimate (onQueued). And when a lease's watch tells `expiring`:
// expiringSlackMs, the client's or the lock's own.
import assert from "node:assert/strict";
import { test } from "node:test";
import { LeaseLostError, LockHeldError, type Client, type Queued, type Signal } from "leasehold";
import { MAX_WAIT_MS, client, unique, until, within } from "./support.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Past holds of `name` (about 300 ms each), made before any refusal of it: the server reads a name's hold times at most once a second. */
async function holdBriefly(c: Client, name: string, times: number, kind: "reentrant" | "fair" = "reentrant"): Promise<void> {
  for (let i = 0; i < times; i++) {
    await c.withLock(name, { kind, ttlMs: 5000 }, () => sleep(300));
  }
}

async function refusal(c: Client, name: string): Promise<LockHeldError> {
  const error = await c.lock(name).then(
    () => assert.fail("acquired a held lock"),
    (e: unknown) => e,
  );
  assert.ok(error instanceof LockHeldError, String(error));
  return error;
}

test("a refusal says how long the lock has been held, and after three holds how long it should still be", async () => {
  const c = client();
  const fresh = unique("why-new");
  const first = await c.lock(fresh, { ttlMs: 5000, holder: "first" });
  await sleep(100);
  const early = await refusal(c, fresh);
  await first.release();
  assert.equal(early.holder, "first");
  assert.match(early.heldSince ?? "", /Z$/);
  assert.ok((early.heldForMs ?? 0) >= 100, `held for ${early.heldForMs}`);
  assert.equal(early.estimatedWaitMs, undefined); // no past holds of the name

  const name = unique("why");
  await holdBriefly(c, name, 3);
  const second = await c.lock(name, { ttlMs: 5000, holder: "second" });
  const refused = await refusal(c, name);
  await second.release();
  assert.equal(refused.holder, "second");
  assert.equal(typeof refused.heldForMs, "number");
  // Just granted: about the median past hold (300 ms) is left.
  const estimate = refused.estimatedWaitMs ?? -1;
  assert.ok(estimate > 100 && estimate < 1000, `estimated wait ${estimate}`);
});

test("a fair waiter is told its place and the estimate (onQueued)", async () => {
  const c = client();
  const name = unique("why-fair");
  await holdBriefly(c, name, 3, "fair");
  const head = await c.lock(name, { kind: "fair", ttlMs: 10_000, holder: "head" });
  const queued: Queued[] = [];
  const waiter = c.lock(name, { kind: "fair", waitMs: 15_000, onQueued: (q) => queued.push(q) });
  // The first answer in line at once, then one per poll (the server cuts each to --max-wait-ms).
  await until("two answers in line", () => queued.length >= 2, 2 * MAX_WAIT_MS + 5000);
  for (const place of queued) {
    assert.equal(place.position, 1);
    assert.equal(place.heldBy, "head");
    assert.equal(typeof place.heldForMs, "number");
    assert.equal(typeof place.estimatedWaitMs, "number");
  }
  // Told at once, behind a hold just granted: about the median past hold is left.
  const [firstTold, secondTold] = queued as [Queued, Queued];
  assert.ok((firstTold.estimatedWaitMs ?? 0) > 0 && (firstTold.estimatedWaitMs ?? 0) < 1000, JSON.stringify(queued));
  assert.ok((secondTold.heldForMs ?? 0) >= (firstTold.heldForMs ?? 0));
  await head.release();
  const lease = await within(10_000, waiter, "the fair waiter");
  assert.ok(lease.fencingToken > head.fencingToken);
  await lease.release();
});

test("a fair wait that runs out says who holds the lock", async () => {
  const c = client();
  const name = unique("why-fair-out");
  const head = await c.lock(name, { kind: "fair", ttlMs: 10_000, holder: "head" });
  const error = await c.lock(name, { kind: "fair", waitMs: 500 }).then(
    () => assert.fail("acquired a held lock"),
    (e: unknown) => e,
  );
  await head.release();
  assert.ok(error instanceof LockHeldError);
  assert.equal(error.position, 1);
  assert.equal(error.holder, "head");
  assert.equal(typeof error.heldForMs, "number");
});

test("expiring comes at the lease's slack, asked on every watch", async () => {
  const watches: URL[] = [];
  let blocked = false;
  const fetchThrough: typeof fetch = (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (url.pathname.endsWith("/watch")) watches.push(url);
    // As a paused or cut-off holder: its heartbeats no longer arrive.
    if (blocked && url.pathname.endsWith("/heartbeat")) return Promise.reject(new TypeError("fetch failed (test)"));
    return fetch(input, init);
  };
  const c = client({ fetch: fetchThrough, expiringSlackMs: 500 });
  const name = unique("slack");
  const other = await c.lock(`${name}-client`, { ttlMs: 3000 });
  await until("the first watch", () => watches.length === 1);
  await other.release();
  // The lock's own slack: 1.4 s of the 3 s TTL, told before the loss margin (1 s).
  const lease = await c.lock(name, { ttlMs: 3000, expiringSlackMs: 1400 });
  const signals: Signal[] = [];
  lease.on("expiring", (s) => signals.push(s));
  await until("the second watch", () => watches.length === 2);
  await sleep(200); // the watch is open on the server by now
  blocked = true;
  const stopped = performance.now();
  await until("expiring", () => signals.length > 0, 3000);
  const told = performance.now() - stopped;
  const remaining = signals[0]?.remainingMs ?? 0;
  // Told once 1.4 s were left (the default would be 1 s, the client's 0.5 s), at most 1.6 s
  // after the heartbeats stopped (the last one went out up to a third of the TTL before).
  assert.ok(remaining > 1000 && remaining <= 1400, `expiring with ${remaining} ms left`);
  assert.ok(told < 1900, `told ${told} ms after the heartbeats stopped`);
  assert.equal(watches[0]?.searchParams.get("expiring_slack_ms"), "500");
  for (const watch of watches.slice(1)) assert.equal(watch.searchParams.get("expiring_slack_ms"), "1400");
  await until("the loss", () => lease.state === "lost", 3000);
  assert.ok(lease.lostError instanceof LeaseLostError);
  await lease.release().catch(() => {});
});

test("expiringSlackMs must be a positive number", async () => {
  assert.throws(() => client({ expiringSlackMs: 0 }), RangeError);
  const c = client();
  assert.throws(() => c.lock(unique("slack-bad"), { expiringSlackMs: -5 }), RangeError); // as unknown options
});
