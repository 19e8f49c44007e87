// Multileases and lock-delays through the client, against the real server: all or nothing,
// a member's loss is the whole lease's (its signal aborts), each lock's fencing token, and a
// lock-delay refusing the next holder (LockDelayError) but not after a release.
import assert from "node:assert/strict";
import { test } from "node:test";
import { LeaseLostError, LockDelayError, LockHeldError } from "leasehold";
import { admin, aborted, client, unique, within } from "./support.js";

test("multilease: all or nothing, one lease over every lock, a fencing token each", async () => {
  const c = client();
  const [a, b] = [unique("multi-a"), unique("multi-b")];
  const other = await c.lock(b, { ttlMs: 20_000, holder: "other", kind: "write" });
  const refused = await c.multilease([a, { name: b, kind: "write" }], { ttlMs: 20_000 }).catch((e: unknown) => e);
  assert.ok(refused instanceof LockHeldError, String(refused));
  const members = refused.problem["members"] as { lock: string; holder: string }[];
  assert.deepEqual(members.map((m) => [m.lock, m.holder]), [[b, "other"]]);
  assert.equal((await c.inspectLock(a).catch(() => ({ held: false }))).held, false, `${a} is held after a refusal`);
  await other.release();

  const lease = await c.multilease([a, { name: b, kind: "write" }], { ttlMs: 20_000, holder: "both" });
  assert.equal(lease.kind, "multilease");
  assert.equal(lease.name, `${a},${b}`);
  assert.deepEqual(lease.members.map((m) => [m.lock, m.kind]), [[a, "reentrant"], [b, "write"]]);
  for (const member of lease.members) {
    const shown = await c.inspectLock(member.lock);
    assert.equal(shown.holders[0]?.lease_id, member.lease_id);
    assert.equal(shown.holders[0]?.fencing_token, member.fencing_token);
    assert.ok(member.fencing_token > 0);
  }
  assert.equal((await c.inspectMultilease(lease.leaseId)).state, "held");
  await lease.renew();
  assert.deepEqual(await lease.release(), { released: true, reentryCount: 0 });
  for (const name of [a, b]) assert.equal((await c.inspectLock(name).catch(() => ({ held: false }))).held, false);
  await assert.rejects(lease.release({ all: false }), TypeError, "a multilease has no levels");
});

test("multilease: a member force-released aborts the whole lease's signal, and its lock-delay holds", async () => {
  const c = client();
  const [a, b] = [unique("lost-a"), unique("lost-b")];
  const lease = await c.multilease([a, b], { ttlMs: 30_000, lockDelayMs: 30_000 });
  const lost = aborted(lease.signal);
  assert.equal((await admin("DELETE", `/v1/admin/locks/${b}?reason=test`)).status, 200);
  await within(10_000, lost, "the multilease's loss signal");
  const error = lease.lostError;
  assert.ok(error instanceof LeaseLostError);
  assert.equal(error.reason, "force_released");
  assert.equal(error.member, b);
  // Its release gives the other lock back now, and says the lease had been lost.
  await assert.rejects(lease.release(), LeaseLostError);
  assert.equal((await c.inspectLock(a).catch(() => ({ held: false }))).held, false, `${a} kept after the release`);
  // The member's lock is in the lock-delay the multilease asked for.
  const delayed = await c.lock(b).catch((e: unknown) => e);
  assert.ok(delayed instanceof LockDelayError, String(delayed));
  assert.equal(delayed.code, "lock_delay");
  assert.ok(typeof delayed.delayedUntil === "string" && (delayed.retryAfterMs ?? 0) > 0);
});

test("lock-delay: a lease ended by an operator keeps the lock that long; a wait goes through it; a release frees at once", async () => {
  const c = client();
  const name = unique("delay");
  const delayMs = 1500;
  const lease = await c.lock(name, { ttlMs: 20_000, lockDelayMs: delayMs });
  assert.equal((await admin("DELETE", `/v1/admin/locks/${name}?reason=test`)).status, 200);
  const freed = performance.now();
  await within(10_000, aborted(lease.signal), "the loss signal");
  const refused = await c.lock(name).catch((e: unknown) => e);
  assert.ok(refused instanceof LockDelayError && refused instanceof LockHeldError, String(refused));
  // Longer than the delay and than the server's --max-wait-ms (which the client asks again past).
  const next = await c.lock(name, { waitMs: 10_000 });
  const waited = performance.now() - freed;
  assert.ok(waited >= delayMs - 100, `granted ${waited.toFixed(0)} ms after the force release, within its lock-delay`);
  await next.release();
  const again = await c.lock(name, { lockDelayMs: delayMs });
  await again.release();
  await (await c.lock(name)).release(); // no delay after a release
});

test("unknown options are refused with a TypeError naming them, not ignored", async () => {
  const c = client();
  assert.throws(() => c.lock("x", { ttl: 5000 } as never), /client\.lock\(\): unknown option "ttl" \(known: .*ttlMs/);
  assert.throws(() => c.multilease(["x"], { lockDelay: 1 } as never), /unknown option "lockDelay"/);
  assert.throws(() => c.multilease([{ name: "x", knd: "read" } as never]), /unknown option "knd"/);
  assert.throws(() => c.semaphore("x", { limit: 1, permit: 2 } as never), /unknown option "permit"/);
  assert.throws(() => client({ timeout: 1 } as never), /new Client\(\): unknown option "timeout"/);
  assert.throws(() => client({ retry: { tries: 2 } } as never), /retry: unknown option "tries"/);
  const lease = await c.lock(unique("options"));
  assert.throws(() => lease.release({ everything: true } as never), /lease\.release\(\): unknown option "everything"/);
  await lease.release();
});
