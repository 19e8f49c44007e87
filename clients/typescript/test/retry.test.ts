// Retries: a proxy between the client and the server loses answers on purpose. The client
// must send the same request again with the same Idempotency-Key, and the server's replay must
// leave exactly one lease.
import assert from "node:assert/strict";
import { test } from "node:test";
import { LeaseLostError, TransportError, UnavailableError } from "leasehold";
import { Proxy, aborted, admin, client, unique, until, within } from "./support.js";

async function withProxy(body: (proxy: Proxy) => Promise<void>): Promise<void> {
  const proxy = await new Proxy().start();
  try {
    await body(proxy);
  } finally {
    await proxy.stop();
  }
}

const fast = { retry: { minDelayMs: 20, maxDelayMs: 200 } };

for (const [verdict, what] of [
  ["lose-answer-503", "a 503"],
  ["lose-answer-drop", "a dropped connection"],
] as const) {
  test(`an acquire whose answer is lost (${what}) is retried with the same key: one lease`, () =>
    withProxy(async (proxy) => {
      const name = unique("retry");
      let lost = false;
      proxy.rule = (request) => {
        if (!lost && request.method === "POST" && request.url?.startsWith(`/v1/locks/${name}/leases`)) {
          lost = true;
          return verdict;
        }
        return "forward";
      };
      const lease = await client(fast, proxy.url).lock(name, { ttlMs: 10_000 });
      const acquires = proxy.seen.filter((s) => s.method === "POST" && s.path.startsWith(`/v1/locks/${name}/leases?`));
      assert.equal(acquires.length, 2, "sent twice");
      assert.ok(acquires[0]?.idempotencyKey, "with an Idempotency-Key");
      assert.equal(acquires[1]?.idempotencyKey, acquires[0]?.idempotencyKey, "the same key both times");
      assert.equal(acquires[0]?.status, 201, "the server granted the first");
      assert.equal(acquires[1]?.status, 201);
      assert.equal(acquires[1]?.replayed, true, "the retry got the first answer again");
      // Exactly one grant: one holder, and no fencing token spent on a second.
      const info = await client().inspectLock(name);
      assert.equal(info.holders.length, 1);
      assert.equal(info.holders[0]?.lease_id, lease.leaseId);
      assert.equal(info.holders[0]?.reentry_count, 1);
      assert.equal(info.fencing_counter, lease.fencingToken);
      await lease.release();
      assert.equal((await client().inspectLock(name)).held, false);
    }));
}

test("a release whose answer is lost is retried with the same key: released once, not 410", () =>
  withProxy(async (proxy) => {
    const name = unique("retry-release");
    const c = client(fast, proxy.url);
    const lease = await c.lock(name, { ttlMs: 10_000 });
    await lease.reenter(); // two levels: a second release would take the second
    let lost = false;
    proxy.rule = (request) => {
      if (!lost && request.method === "DELETE") {
        lost = true;
        return "lose-answer-503";
      }
      return "forward";
    };
    assert.deepEqual(await lease.release({ all: false }), { released: false, reentryCount: 1 });
    const releases = proxy.seen.filter((s) => s.method === "DELETE");
    assert.equal(releases.length, 2);
    assert.equal(releases[1]?.idempotencyKey, releases[0]?.idempotencyKey);
    // The server replays the first answer (one level released, not two), though without the
    // Idempotent-Replayed header its acquires carry (reported).
    assert.equal(releases[1]?.status, 200);
    assert.equal((await client().inspectLock(name)).holders[0]?.reentry_count, 1, "one level released, not two");
    await lease.release();
  }));

test("503s past the retry budget are an UnavailableError; refused acquires take nothing", () =>
  withProxy(async (proxy) => {
    const name = unique("retry-budget");
    proxy.rule = () => "refuse-503";
    const c = client({ retry: { attempts: 3, minDelayMs: 10, maxDelayMs: 50 } }, proxy.url);
    const error = await c.lock(name).catch((e: unknown) => e);
    assert.ok(error instanceof UnavailableError, String(error));
    assert.equal(error.code, "redis_unavailable");
    assert.equal(error.status, 503);
    assert.equal(proxy.seen.length, 3);
  }));

test("a server that cannot be reached is a TransportError", async () => {
  const proxy = await new Proxy().start();
  const url = proxy.url;
  await proxy.stop(); // nothing listens there now
  const error = await client({ retry: { attempts: 2, minDelayMs: 10, maxDelayMs: 20 } }, url)
    .lock(unique("nowhere"))
    .catch((e: unknown) => e);
  assert.ok(error instanceof TransportError, String(error));
});

test("renewals that cannot reach the server: the lease is given up before its TTL runs out", () =>
  withProxy(async (proxy) => {
    const name = unique("cut-off");
    const ttlMs = 1500;
    const lease = await client(fast, proxy.url).lock(name, { ttlMs });
    const acquired = performance.now();
    const lost = aborted(lease.signal);
    proxy.rule = () => "refuse-503"; // heartbeats and the watch's reconnects all fail from now on
    // The watch stream already open still works; cut it too, as a partition would.
    proxy.stop().catch(() => {});
    const lostAt = await within(ttlMs + 1000, lost, "the loss signal");
    assert.ok(lease.lostError instanceof LeaseLostError);
    assert.equal(lease.lostError.reason, "unrenewable");
    assert.ok(lostAt - acquired <= ttlMs, `lost ${(lostAt - acquired).toFixed(0)} ms after the grant`);
    // Meanwhile the server still holds it (the heartbeats never arrived), until its TTL.
  }));

test("a watch stream cut without news is opened again, and still tells the loss at once", () =>
  withProxy(async (proxy) => {
    const name = unique("recut");
    const lease = await client(fast, proxy.url).lock(name, { ttlMs: 30_000 });
    const watches = () => proxy.seen.filter((s) => s.path.endsWith("/watch")).length;
    await until("the watch stream to open", () => proxy.streaming.size === 1);
    assert.equal(proxy.cutStreams(), 1);
    await until("the watch stream to be opened again", () => watches() === 2 && proxy.streaming.size === 1);
    assert.equal(lease.state, "held", "a cut stream is no loss");
    const lost = aborted(lease.signal);
    const sent = performance.now();
    assert.equal((await admin("DELETE", `/v1/admin/locks/${name}`)).status, 200);
    // Well before the first heartbeat (10 s): told by the reopened stream.
    const latency = (await within(2000, lost, "the loss signal")) - sent;
    assert.equal(lease.lostError?.reason, "force_released");
    assert.ok(latency < 1000, `${latency} ms`);
  }));
