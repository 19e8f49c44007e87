// Semaphores, read/write locks and fair locks.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ConflictError, LockHeldError, type Lease } from "leasehold";
import { MAX_WAIT_MS, Proxy, client, pending, unique, until, within } from "./support.js";

test("semaphore: permits up to the limit, no_permits past it, a release lets a waiter in", async () => {
  const c = client();
  const name = unique("sem");
  const a = await c.semaphore(name, { limit: 3, permits: 2, ttlMs: 10_000, holder: "a" });
  assert.equal(a.kind, "semaphore");
  assert.equal(a.permits, 2);
  const b = await c.semaphore(name, { limit: 3 });
  assert.equal(b.permits, 1);
  let info = await c.inspectSemaphore(name);
  assert.equal(info.limit, 3);
  assert.equal(info.used, 3);
  assert.equal(info.available, 0);

  const refused = await c.semaphore(name, { limit: 3 }).catch((e: unknown) => e);
  assert.ok(refused instanceof LockHeldError, String(refused));
  assert.equal(refused.code, "no_permits");
  assert.ok(refused.retryAfterMs !== undefined);

  const mismatch = await c.semaphore(name, { limit: 4 }).catch((e: unknown) => e);
  assert.ok(mismatch instanceof ConflictError, String(mismatch));
  assert.equal(mismatch.code, "limit_mismatch");
  assert.equal(mismatch.limit, 3);

  const waiting = c.semaphore(name, { limit: 3, permits: 2, waitMs: 10_000 });
  await until("the semaphore acquire to wait", async () => (await c.inspectSemaphore(name)).waiting_count === 1);
  await b.release();
  assert.ok(await pending(waiting), "one permit free is not two");
  await a.release();
  const c2 = await within(5000, waiting, "the waiting semaphore acquire");
  assert.equal(c2.permits, 2);
  info = await c.inspectSemaphore(name);
  assert.equal(info.used, 2);
  assert.deepEqual(info.holders.map((h) => h.lease_id), [c2.leaseId]);
  assert.equal((await c.inspectLease(name, c2.leaseId, { semaphore: true })).permits, 2);
  await c2.release();
  assert.equal((await c.inspectLease(name, c2.leaseId, { semaphore: true })).state, "released");

  const value = await c.withSemaphore(name, { limit: 3, permits: 3 }, async (lease) => {
    assert.equal((await c.inspectSemaphore(name)).available, 0);
    return lease.permits;
  });
  assert.equal(value, 3);
  assert.equal((await c.inspectSemaphore(name)).used, 0);
});

test("read/write: readers share, a writer waits for them, no upgrade, downgrade", async () => {
  const c = client();
  const name = unique("rw");
  const r1 = await c.lock(name, { kind: "read", ttlMs: 10_000 });
  const r2 = await c.lock(name, { kind: "read", ttlMs: 10_000 });
  assert.equal(r1.kind, "read");
  const info = await c.inspectLock(name);
  assert.equal(info.kind, "rw");
  assert.equal(info.mode, "read");
  assert.equal(info.holders.length, 2);

  const upgrade = await r1.reenter({ kind: "write" }).catch((e: unknown) => e);
  assert.ok(upgrade instanceof ConflictError, String(upgrade));
  assert.equal(upgrade.code, "upgrade_refused");

  const writer = c.lock(name, { kind: "write", waitMs: 10_000 });
  await until("the writer to wait", async () => (await c.inspectLock(name)).waiting_count === 1);
  assert.equal((await r1.release()).released, true, "a reader's release ends its lease (another reader holds on)");
  assert.ok(await pending(writer), "one reader left is enough to keep the writer out");
  await r2.release();
  const w = await within(5000, writer, "the writer");
  assert.equal(w.kind, "write");
  assert.equal((await c.inspectLock(name)).mode, "write");

  // Downgrade: a read hold with the write lease's token, then the write hold goes first.
  await w.reenter({ kind: "read" });
  assert.deepEqual(await w.release({ all: false }), { released: false, reentryCount: 1 });
  assert.equal((await c.inspectLock(name)).mode, "read");
  const r3 = await c.lock(name, { kind: "read" });
  assert.equal((await c.inspectLock(name)).holders.length, 2);
  await r3.release();
  await w.release();
  assert.equal((await c.inspectLock(name)).held, false);
});

test("fair lock: waiters get it in the order they came, across 202 tickets", async () => {
  const c = client();
  const name = unique("fair");
  const first = await c.lock(name, { kind: "fair", ttlMs: 10_000 });
  // Through a proxy that shows the ticket polls lock() makes, unseen by its caller.
  const proxy = await new Proxy().start();
  try {
    const waiter = client({}, proxy.url);
    const order: string[] = [];
    const grab = (who: string) =>
      waiter.lock(name, { kind: "fair", waitMs: 20_000, holder: who }).then((lease) => {
        order.push(who);
        return lease;
      });
    const second = grab("second");
    await until("the second waiter to queue", async () => (await c.inspectLock(name)).queue_length === 1);
    const third = grab("third");
    await until("the third waiter to queue", async () => (await c.inspectLock(name)).queue_length === 2);
    assert.deepEqual((await c.inspectLock(name)).queue.map((q) => q.holder), ["second", "third"]);
    // Held past the server's longest wait: each waiter got a 202 ticket, and polls it.
    const polls = () => proxy.seen.filter((s) => s.method === "POST" && s.path.includes("/tickets/"));
    await until("both waiters to poll their tickets", () => new Set(polls().map((s) => s.path.split("?")[0])).size === 2, MAX_WAIT_MS * 3);
    assert.equal(proxy.seen.filter((s) => s.status === 202).length >= 2, true);
    assert.ok(await pending(second));
    await first.release();
    const s: Lease = await within(5000, second, "the second waiter");
    assert.ok(await pending(third), "the third waits for the second");
    assert.equal(s.kind, "fair");
    assert.ok(s.fencingToken > first.fencingToken);
    await s.release();
    const t = await within(5000, third, "the third waiter");
    assert.ok(t.fencingToken > s.fencingToken);
    assert.deepEqual(order, ["second", "third"]);
    await t.release();
  } finally {
    await proxy.stop();
  }
});

test("fair lock: still queued when the wait runs out is LockHeldError, and the place is given up", async () => {
  const c = client();
  const name = unique("fairout");
  const holder = await c.lock(name, { kind: "fair", ttlMs: 10_000 });
  for (const waitMs of [0, 300]) {
    const error = await c.lock(name, { kind: "fair", waitMs }).catch((e: unknown) => e);
    assert.ok(error instanceof LockHeldError, String(error));
    assert.equal(error.code, "lock_held");
    assert.equal(error.position, 1);
    assert.equal((await c.inspectLock(name)).queue_length, 0, "the ticket left the queue");
  }
  await holder.release();
});
