// Signals before the loss (clients/PROTOCOL.md): each one the watch tells reaches
// lease.on("signal") and lease.on("<kind>"); an operator's revocation (client.revoke) is told
// on the lease, and a lease not released in time is given up as lost (reason `revoked`) before
// its deadline; the watch is opened again with Last-Event-ID.
import assert from "node:assert/strict";
import { test } from "node:test";
import { AuthError, InvalidRequestError, LeaseLostError, LockHeldError, NotFoundError, type Signal } from "leasehold";
import { ADMIN_TOKEN, MAX_WAIT_MS, Proxy, aborted, assertRevocationIgnored, client, unique, until, within } from "./support.js";

const admin = () => client({ apiKey: ADMIN_TOKEN });

test("a revocation honoured: told with its reason and deadline, released in time, no loss", async () => {
  const c = client();
  const name = unique("revoke-ok");
  const signals: Signal[] = [];
  const kinds: Signal[] = [];
  const lease = await c.lock(name, { ttlMs: 3000 }); // loss margin 1 s
  lease.on("signal", (s) => signals.push(s)).on("revocation_requested", (s) => kinds.push(s));
  const answer = await admin().revoke(name, { graceMs: 5000, reason: "deploy v2" });
  assert.equal(answer.lock, name);
  const [revoked] = answer.leases;
  assert.equal(revoked?.lease_id, lease.leaseId);
  assert.equal(revoked?.again, false);
  const revocation = await until("the revocation told", () => lease.revocation, 3000);
  assert.equal(revocation.reason, "deploy v2");
  assert.equal(revocation.requestedBy, "admin token");
  assert.equal(revocation.deadline, revoked?.revocation.deadline);
  const grace = Date.parse(revocation.deadline) - Date.parse(revocation.requestedAt);
  assert.ok(grace > 4900 && grace < 5100, `grace ${grace} ms`);
  assert.deepEqual(kinds, signals.filter((s) => s.kind === "revocation_requested"));
  assert.equal(kinds.length, 1);
  assert.deepEqual(kinds[0]?.revocation, revocation);
  // Asked again: the first deadline stands.
  const again = (await admin().revoke(name, { graceMs: 60_000 })).leases[0];
  assert.equal(again?.again, true);
  assert.equal(again?.revocation.deadline, revocation.deadline);
  assert.equal(lease.state, "held");
  assert.deepEqual(await lease.release(), { released: true, reentryCount: 0 });
  assert.equal(lease.lost, false);
  assert.equal((await c.inspectLease(name, lease.leaseId)).state, "released");
});

test("a revocation ignored: the lease is given up as lost (revoked) before its deadline", async () => {
  const name = unique("revoke-late");
  // Loss margin 1 s: given up about 2 s after the answer.
  const expected = { reason: "maintenance", lossWithinMs: 3000, givenUpAfterMs: [1500, 3000] } as const;
  await assertRevocationIgnored(client(), name, { ttlMs: 6000 }, expected, async () => {
    await admin().revoke(name, { graceMs: 3000, reason: "maintenance" });
    return performance.now();
  });
});

test("a revocation told by a heartbeat's answer, without the watch", async () => {
  const c = client();
  const name = unique("revoke-hb");
  const lease = await c.lock(name, { ttlMs: 3000, watch: false }); // heartbeats every second
  const signals: Signal[] = [];
  lease.on("signal", (s) => signals.push(s));
  const lost = aborted(lease.signal);
  await admin().revoke(name, { graceMs: 4000 });
  const answered = performance.now();
  const revocation = await until("the revocation told", () => lease.revocation, 2500);
  assert.equal(revocation.reason, "");
  assert.deepEqual(
    signals.map((s) => [s.kind, s.id]),
    [["revocation_requested", undefined]],
  );
  const lostAt = await within(5000, lost, "the loss");
  assert.equal(lease.lostError?.reason, "revoked");
  assert.ok(lostAt - answered < 4000, "lost before the deadline");
  await assert.rejects(lease.release(), LeaseLostError);
});

test("a multilease member's revocation told by a heartbeat's answer, without the watch", async () => {
  const c = client();
  const [a, b] = [unique("revoke-hb-a"), unique("revoke-hb-b")];
  const lease = await c.multilease([a, b], { ttlMs: 3000, watch: false }); // heartbeats every second
  const signals: Signal[] = [];
  lease.on("signal", (s) => signals.push(s));
  const lost = aborted(lease.signal);
  await admin().revoke(b, { graceMs: 4000, reason: "move b" });
  const answered = performance.now();
  const revocation = await until("the revocation told", () => lease.revocation, 2500);
  assert.equal(revocation.reason, "move b");
  assert.deepEqual(
    signals.map((s) => [s.kind, s.lock, s.leaseId, s.id]),
    [["revocation_requested", b, lease.leaseId, undefined]],
  );
  assert.deepEqual(signals[0]?.revocation, revocation);
  const lostAt = await within(5000, lost, "the loss");
  assert.equal(lease.lostError?.reason, "revoked");
  assert.ok(lostAt - answered < 4000, `lost ${(lostAt - answered).toFixed(0)} ms after the revocation, past its deadline`);
  await assert.rejects(lease.release(), LeaseLostError);
  // Its release gave the other lock back too.
  await until("a given back", async () => !(await c.inspectLock(a).catch(() => ({ held: false }))).held, 2000);
});

// clients/parity.json multileaseRevocationEarliestDeadline.
test("a multilease keeps the revocation with the earliest deadline", async () => {
  const c = client();
  const [a, b, d] = [unique("revoke-first-a"), unique("revoke-first-b"), unique("revoke-first-c")];
  const lease = await c.multilease([a, b, d], { ttlMs: 3000 }); // loss margin 1 s
  const signals: Signal[] = [];
  lease.on("revocation_requested", (s) => signals.push(s));
  const lost = aborted(lease.signal);
  const first = (await admin().revoke(a, { graceMs: 8000, reason: "first" })).leases[0]?.revocation.deadline;
  await until("the first revocation told", () => lease.revocation?.deadline === first, 3000);
  const second = (await admin().revoke(b, { graceMs: 3000, reason: "second" })).leases[0]?.revocation.deadline;
  const answered = performance.now();
  // Told later with an earlier deadline: it replaces the first.
  await until("the earlier deadline kept", () => lease.revocation?.deadline === second, 3000);
  await admin().revoke(d, { graceMs: 6000, reason: "third" }); // later than the kept one: nothing changes
  await until("every revocation told", () => signals.length === 3, 3000);
  assert.deepEqual(
    signals.map((s) => [s.lock, s.revocation?.reason]),
    [[a, "first"], [b, "second"], [d, "third"]],
  );
  assert.equal(lease.revocation?.reason, "second");
  const lostAt = await within(5000, lost, "the loss");
  // b's deadline less the margin: about 2 s after b's revocation (a's would be 7 s).
  const after = lostAt - answered;
  assert.ok(after > 1500 && after < 3000, `given up ${after.toFixed(0)} ms after the earliest revocation`);
  assert.equal(lease.lostError?.reason, "revoked");
  assert.equal(lease.lostError?.member, b);
  assert.ok(lease.lostError?.message.includes(b), lease.lostError?.message);
  assert.deepEqual(
    lease.members.map((m) => [m.lock, m.revocation?.reason, m.revocation?.deadline === (m.lock === b ? second : m.revocation?.deadline)]),
    [[a, "first", true], [b, "second", true], [d, "third", true]],
  );
  await assert.rejects(lease.release(), LeaseLostError);
});

test("contended tells the holder how many wait", async () => {
  const c = client();
  const name = unique("contended");
  const lease = await c.lock(name, { ttlMs: 10_000 });
  try {
    const contended = new Promise<Signal>((resolve) => lease.on("contended", (s) => s.waiters && resolve(s)));
    const waiting = client().lock(name, { waitMs: Math.min(1200, MAX_WAIT_MS - 200) });
    const signal = await within(5000, contended, "contended");
    assert.equal(signal.waiters, 1);
    assert.equal(signal.lock, name);
    assert.ok(signal.id);
    await assert.rejects(waiting, LockHeldError);
  } finally {
    await lease.release();
  }
});

test("the watch is opened again with Last-Event-ID", async () => {
  const proxy = await new Proxy().start();
  try {
    const c = client({}, proxy.url);
    const name = unique("last-id");
    const lease = await c.lock(name, { ttlMs: 10_000 });
    const signals: Signal[] = [];
    lease.on("signal", (s) => signals.push(s));
    const waiting = client().lock(name, { waitMs: Math.min(1200, MAX_WAIT_MS - 200) }).catch(() => undefined);
    await until("contended", () => signals.length > 0, 5000);
    const last = signals[signals.length - 1]?.id;
    assert.ok(last);
    assert.equal(proxy.cutStreams(), 1);
    const watch = `/v1/locks/${name}/leases/${lease.leaseId}/watch`;
    const reopened = await until("the watch opened again", () => proxy.seen.filter((s) => s.path === watch)[1], 5000);
    assert.equal(reopened.lastEventId, last);
    // The server goes on counting: what it tells next has the next ids.
    await until("a signal on the reopened watch", () => signals.length > 1, 5000);
    assert.ok(Number(signals[1]?.id) > Number(last), JSON.stringify(signals));
    await waiting;
    await lease.release();
  } finally {
    await proxy.stop();
  }
});

test("revoke's problems are typed errors", async () => {
  const name = unique("revoke-err");
  await assert.rejects(admin().revoke(name, { graceMs: 1000 }), (e: unknown) => e instanceof NotFoundError && e.code === "lock_not_found" && e.status === 404);
  const lease = await client().lock(name, { ttlMs: 5000 });
  try {
    await assert.rejects(
      admin().revoke(name, { graceMs: 1000, leaseId: "00000000-0000-4000-8000-000000000000" }),
      (e: unknown) => e instanceof NotFoundError && e.code === "lease_not_found",
    );
    await assert.rejects(admin().revoke(name, { graceMs: 3_600_001 }), (e: unknown) => e instanceof InvalidRequestError && e.code === "invalid_body");
    await assert.rejects(client().revoke(name, { graceMs: 1000 }), AuthError);
    await assert.rejects(admin().revoke(name, { grace: 1000 } as never), TypeError);
  } finally {
    await lease.release();
  }
});
