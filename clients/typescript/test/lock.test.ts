// Acquire, wait, release, reentry, withLock, cancellation: against the real server.
import assert from "node:assert/strict";
import { test } from "node:test";
import { inspect } from "node:util";
import { ConflictError, Lease, LockHeldError } from "leasehold";
import { MAX_WAIT_MS, Proxy, client, pending, unique, until, within } from "./support.js";

test("acquire, wait for the holder's release, release", async () => {
  const c = client();
  const name = unique("wait");
  const first = await c.lock(name, { ttlMs: 10_000, holder: "first" });
  assert.ok(first instanceof Lease);
  assert.equal(first.state, "held");
  assert.equal(first.kind, "reentrant");
  assert.equal(first.reentryCount, 1);
  assert.equal(first.holder, "first");
  // Printing a lease or a client shows neither the lease's token nor the API key.
  const keyed = client({ apiKey: "lhk_secret-in-test" });
  for (const shown of [JSON.stringify(first), inspect(first), inspect({ first }), JSON.stringify(keyed), inspect(keyed)]) {
    assert.ok(!shown.includes(first.token) && !shown.includes("secret-in-test"), shown);
  }
  assert.match(inspect(first), new RegExp(first.leaseId));
  assert.ok(Number.isSafeInteger(first.fencingToken) && first.fencingToken > 0);

  const second = c.lock(name, { ttlMs: 10_000, waitMs: 10_000, holder: "second" });
  await until("the second acquire to wait server-side", async () => (await c.inspectLock(name)).waiting_count === 1);
  assert.ok(await pending(second));

  assert.deepEqual(await first.release(), { released: true, reentryCount: 0 });
  assert.equal(first.state, "released");
  const lease = await within(5000, second, "the waiting acquire");
  assert.ok(lease.fencingToken > first.fencingToken, "fencing tokens grow");
  assert.equal((await c.inspectLease(name, first.leaseId)).state, "released");
  assert.equal((await c.inspectLock(name)).holders[0]?.lease_id, lease.leaseId);
  const listed = await c.listLocks({ prefix: name });
  assert.deepEqual(listed.locks.map((l) => [l.name, l.holders]), [[name, 1]]);
  assert.equal(listed.next_cursor, null);
  await lease.release();
  assert.equal((await c.inspectLock(name)).held, false);
  // A second release of a released lease does nothing.
  assert.deepEqual(await lease.release(), { released: true, reentryCount: 0 });
});

test("a wait longer than the server's --max-wait-ms is asked again for the rest", async () => {
  const c = client();
  const name = unique("longwait");
  const holder = await c.lock(name, { ttlMs: 10_000 });
  const started = performance.now();
  // Held throughout: refused only once the whole wait has passed, not at the server's cut.
  const waitMs = MAX_WAIT_MS + 700;
  const error = await c.lock(name, { waitMs }).then(
    () => assert.fail("acquired a held lock"),
    (e: unknown) => e,
  );
  const waited = performance.now() - started;
  assert.ok(error instanceof LockHeldError, String(error));
  assert.equal(error.code, "lock_held");
  assert.ok(waited >= waitMs - 50, `gave up after ${waited.toFixed(0)} ms, asked ${waitMs}`);
  assert.ok(waited < waitMs + 2000, `gave up after ${waited.toFixed(0)} ms`);

  // A release after the server's cut is still seen by the same lock() call: seen through a
  // proxy, the acquire is sent again once the server's wait ran out.
  const proxy = await new Proxy().start();
  try {
    const late = client({}, proxy.url).lock(name, { waitMs: MAX_WAIT_MS * 4 });
    const acquires = () => proxy.seen.filter((s) => s.method === "POST" && s.path.startsWith(`/v1/locks/${name}/leases?`));
    await until("the acquire to be asked again", () => acquires().length === 2, MAX_WAIT_MS * 3);
    assert.equal(acquires()[0]?.status, 409, "the first ask was refused at the server's cut");
    await holder.release();
    const lease = await within(5000, late, "the re-asked acquire");
    assert.equal(lease.state, "held");
    await lease.release();
  } finally {
    await proxy.stop();
  }
});

test("reentry: same lease and fencing token, levels released one by one or all at once", async () => {
  const c = client();
  const name = unique("reentry");
  const lease = await c.lock(name, { ttlMs: 10_000 });
  await lease.reenter();
  await lease.reenter({ ttlMs: 8_000 });
  assert.equal(lease.reentryCount, 3);
  assert.equal(lease.ttlMs, 8_000);
  let info = await c.inspectLock(name);
  assert.equal(info.holders.length, 1);
  assert.equal(info.holders[0]?.reentry_count, 3);
  assert.equal(info.holders[0]?.fencing_token, lease.fencingToken);

  assert.deepEqual(await lease.release({ all: false }), { released: false, reentryCount: 2 });
  assert.equal(lease.state, "held");
  info = await c.inspectLock(name);
  assert.equal(info.holders[0]?.reentry_count, 2);
  assert.deepEqual(await lease.release(), { released: true, reentryCount: 0 });
  assert.equal((await c.inspectLock(name)).held, false);
});

test("an exclusive lock refuses reentry: ConflictError not_reentrant", async () => {
  const c = client();
  const name = unique("exclusive");
  await c.withLock(name, { kind: "exclusive" }, async (lease) => {
    const error = await lease.reenter().catch((e: unknown) => e);
    assert.ok(error instanceof ConflictError, String(error));
    assert.equal(error.code, "not_reentrant");
    assert.equal(error.status, 409);
    assert.equal(lease.state, "held");
  });
});

test("withLock releases when the work throws, and returns the work's value", async () => {
  const c = client();
  const name = unique("withlock");
  let leaseId = "";
  await assert.rejects(
    c.withLock(name, { ttlMs: 10_000 }, async (lease) => {
      leaseId = lease.leaseId;
      throw new Error("boom");
    }),
    /boom/,
  );
  assert.equal((await c.inspectLease(name, leaseId)).state, "released");
  const value = await c.withLock(name, (lease) => lease.fencingToken);
  assert.ok(value > 0);
  assert.equal((await c.inspectLock(name)).held, false);
});

test("an aborted wait gives up at once and takes nothing", async () => {
  const c = client();
  const name = unique("abort");
  const holder = await c.lock(name, { ttlMs: 10_000 });
  const controller = new AbortController();
  const waiting = c.lock(name, { waitMs: 20_000, signal: controller.signal });
  await until("the acquire to wait", async () => (await c.inspectLock(name)).waiting_count === 1);
  controller.abort(new Error("no longer needed"));
  await assert.rejects(within(2000, waiting, "the aborted acquire"), /no longer needed/);
  await until("the server to drop the waiter", async () => (await c.inspectLock(name)).waiting_count === 0);
  await holder.release();
  assert.equal((await c.inspectLock(name)).held, false, "the aborted waiter never took the lock");
  // Aborted before it starts: nothing is sent.
  await assert.rejects(c.lock(name, { signal: AbortSignal.abort(new Error("already")) }), /already/);
});
