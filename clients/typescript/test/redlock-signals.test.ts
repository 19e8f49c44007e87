// A RedLock lease's holder hears the signals any lease's does (clients/PROTOCOL.md, "Signals
// before the loss"): its watch tells what a majority of the nodes say, and `contended` counts
// the RedLock requests waiting for the name. Against the server test.sh started with three
// RedLock nodes of its own.
import assert from "node:assert/strict";
import { test } from "node:test";
import { LockHeldError, type Signal } from "leasehold";
import { REDLOCK_ADMIN_TOKEN, REDLOCK_URL, assertRevocationIgnored, client, unique, until, within } from "./support.js";

// clients/parity.json redlockSignals: contended while a RedLock request waits, then an
// operator's revocation, ignored here: given up as lost (revoked) before the deadline less the
// margin, as "a revocation ignored" (revocation.test.ts) checks of a main-Redis lease.
test("a redlock holder hears contended and a revocation", async () => {
  const c = client({}, REDLOCK_URL);
  const admin = client({ apiKey: REDLOCK_ADMIN_TOKEN }, REDLOCK_URL);
  const name = unique("redlock-signals");
  const signals: Signal[] = [];
  // Loss margin 1.67 s: given up about 1.3 s after the answer. Given back on the nodes.
  const expected = { reason: "rotate the nodes", lossWithinMs: 5000, givenUpAfterMs: [800, 2500] } as const;
  await assertRevocationIgnored(c, name, { ttlMs: 10_000, kind: "redlock" }, expected, async (lease) => {
    assert.equal(lease.kind, "redlock");
    lease.on("signal", (s) => signals.push(s));
    const contended = new Promise<Signal>((resolve) => lease.on("contended", (s) => s.waiters && resolve(s)));
    // A RedLock request that waits 3 s, then gives up: the lease is not released before the
    // revocation.
    const waiting = client({}, REDLOCK_URL).lock(name, { ttlMs: 10_000, kind: "redlock", waitMs: 3000 });
    waiting.catch(() => undefined); // awaited below; no unhandled rejection meanwhile
    const signal = await within(5000, contended, "contended");
    assert.ok((signal.waiters ?? 0) >= 1, JSON.stringify(signal));
    assert.equal(signal.lock, name);
    assert.ok(signal.id);
    await within(10_000, assert.rejects(waiting, LockHeldError), "the waiter's end");

    const answer = await admin.revoke(name, { graceMs: 3000, reason: "rotate the nodes" });
    const answered = performance.now();
    assert.equal(answer.leases.length, 1);
    assert.equal(answer.leases[0]?.lease_id, lease.leaseId);
    const deadline = answer.leases[0]?.revocation.deadline;
    const revocation = await until("the revocation told", () => lease.revocation, 3000);
    assert.equal(revocation.reason, "rotate the nodes");
    assert.equal(revocation.deadline, deadline);
    assert.deepEqual(
      signals.filter((s) => s.kind === "revocation_requested").map((s) => s.revocation?.reason),
      ["rotate the nodes"],
    );
    return answered;
  });
});
