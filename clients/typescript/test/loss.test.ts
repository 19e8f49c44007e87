// Loss: told at once by the watch stream, by the heartbeats without it; and the heartbeats
// keeping a lease alive well past its TTL.
import assert from "node:assert/strict";
import { appendFileSync } from "node:fs";
import { test } from "node:test";
import { Client, type Lease, LeaseLostError, LockHeldError } from "leasehold";
import { KEYS_ADMIN_TOKEN, KEYS_URL, Proxy, aborted, admin, client, unique, until, within } from "./support.js";

/** Prints a measurement, and keeps it for test.sh's closing lines. */
function report(line: string): void {
  console.log(line);
  const file = process.env["LEASEHOLD_TEST_REPORT"];
  if (file) appendFileSync(file, `${line}\n`);
}

test("an admin force release is told to the work at once (watch stream); latency measured", async () => {
  const c = client();
  const name = unique("loss");
  let forceAnswered = 0;
  let forceSent = 0;
  let lostAt = 0;
  const outcome = await c
    .withLock(name, { ttlMs: 30_000 }, async (lease) => {
      const lost = aborted(lease.signal);
      forceSent = performance.now();
      const answer = await admin("DELETE", `/v1/admin/locks/${name}?reason=client+test`);
      forceAnswered = performance.now();
      assert.equal(answer.status, 200);
      assert.equal(answer.body.removed[0].lease_id, lease.leaseId);
      lostAt = await within(2000, lost, "the loss signal");
      assert.ok(lease.lost);
      assert.ok(lease.signal.reason instanceof LeaseLostError);
      assert.throws(() => lease.throwIfLost(), LeaseLostError);
      return "finished";
    })
    .catch((e: unknown) => e);
  // The work resolved, but its lease was lost meanwhile: withLock says so.
  assert.ok(outcome instanceof LeaseLostError, String(outcome));
  assert.equal(outcome.reason, "force_released");
  assert.equal(outcome.code, "lease_lost");
  const afterAnswer = lostAt - forceAnswered;
  const afterSend = lostAt - forceSent;
  report(
    `loss latency (watch stream): ${afterAnswer.toFixed(1)} ms after the force release's answer ` +
      `(${afterSend.toFixed(1)} ms after it was sent)`,
  );
  assert.ok(afterSend < 1000, `the loss took ${afterSend.toFixed(0)} ms`);
});

test("without the watch stream, the heartbeat's 410 tells the loss within a third of the TTL", async () => {
  const c = client();
  const name = unique("loss-hb");
  const ttlMs = 3000;
  const lease = await c.lock(name, { ttlMs, watch: false });
  const lost = aborted(lease.signal);
  const answer = await admin("DELETE", `/v1/admin/locks/${name}`);
  assert.equal(answer.status, 200);
  const answered = performance.now();
  const lostAt = await within(ttlMs, lost, "the loss signal");
  const latency = lostAt - answered;
  report(`loss latency (heartbeat only, TTL ${ttlMs} ms): ${latency.toFixed(1)} ms after the force release's answer`);
  assert.ok(latency <= ttlMs / 3 + 250, `the loss took ${latency.toFixed(0)} ms`);
  assert.equal(lease.lostError?.reason, "force_released");
  await assert.rejects(lease.release(), LeaseLostError);
});

test("the heartbeats keep a lease alive across three times its TTL", async () => {
  const c = client();
  const name = unique("alive");
  const ttlMs = 1000;
  const lease = await c.lock(name, { ttlMs });
  const started = performance.now();
  await new Promise((resolve) => setTimeout(resolve, 3 * ttlMs + 500));
  assert.ok(performance.now() - started > 3 * ttlMs);
  assert.equal(lease.state, "held", lease.lostError?.message);
  const info = await c.inspectLease(name, lease.leaseId);
  assert.equal(info.state, "held");
  assert.ok(Date.parse(info.expires_at) > Date.now(), "renewed: it expires in the future");
  await assert.rejects(c.lock(name), LockHeldError, "still held against others");
  assert.deepEqual(await lease.release(), { released: true, reentryCount: 0 });
});

test("an admin eviction of this one lease is a loss too", async () => {
  const c = client();
  const name = unique("expire");
  const lease = await c.lock(name, { ttlMs: 1000 });
  const lost = aborted(lease.signal);
  const answer = await admin("DELETE", `/v1/admin/locks/${name}/leases/${lease.leaseId}?reason=evict`);
  assert.equal(answer.status, 200);
  await within(1000, lost, "the loss signal");
  assert.ok(lease.lostError instanceof LeaseLostError);
  assert.ok(["force_released", "evicted"].includes(String(lease.lostError.reason)), String(lease.lostError.reason));
});

test("more leases than the key's watch-stream quota: the rest are watched by heartbeats alone", async () => {
  // The server lets one caller hold 16 event streams per instance (--max-streams-per-client);
  // the 17th lease's watch is refused (429 quota_exceeded) and its loss still comes in time.
  const created = await admin("POST", "/v1/admin/keys", { name: unique("streams") }, KEYS_URL, KEYS_ADMIN_TOKEN);
  assert.equal(created.status, 201);
  const proxy = await new Proxy(KEYS_URL).start();
  const leases: Lease[] = [];
  try {
    const c = new Client(proxy.url, { apiKey: created.body.secret as string });
    const prefix = unique("streams");
    for (let i = 0; i < 17; i++) leases.push(await c.lock(`${prefix}-${i}`, { ttlMs: 3000 }));
    const refused = await until("a watch refused for the quota", () => proxy.seen.find((s) => s.path.endsWith("/watch") && s.status === 429));
    const unwatched = leases.find((lease) => refused.path.includes(lease.leaseId))!;
    await until("the other watches to open", () => proxy.streaming.size === 16);
    const lost = aborted(unwatched.signal);
    const answer = await admin("DELETE", `/v1/admin/locks/${unwatched.name}`, undefined, KEYS_URL, KEYS_ADMIN_TOKEN);
    assert.equal(answer.status, 200);
    const answered = performance.now();
    const latency = (await within(3000, lost, "the loss signal")) - answered;
    assert.equal(unwatched.lostError?.reason, "force_released");
    assert.ok(latency <= 1000 + 250, `${latency} ms`);
    report(`loss latency (the 17th lease of one key, over its watch quota; TTL 3000 ms): ${latency.toFixed(1)} ms`);
  } finally {
    await Promise.allSettled(leases.map((lease) => lease.release()));
    await proxy.stop();
  }
});
