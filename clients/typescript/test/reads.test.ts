// What the server tells beyond a grant, read through the client: a force release that lifts a
// lock-delay, a multilease's locks hidden from a reader, RedLock's nodes and validity on the
// grant and every renewal, and a grant or renewal that stands on its Redis primary alone.
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { Client } from "leasehold";
import { ADMIN_TOKEN, KEYS_ADMIN_TOKEN, KEYS_URL, REDLOCK_URL, admin, client, unique, until } from "./support.js";

test("a force release of a free lock in its lock-delay lifts the delay", async () => {
  const c = client();
  const ops = client({ apiKey: ADMIN_TOKEN });
  const name = unique("lifted");
  const lease = await c.lock(name, { ttlMs: 30_000, lockDelayMs: 30_000 });
  const first = await ops.forceRelease(name, { reason: "ts client test" });
  assert.ok(first.released && first.removed.length === 1 && first.delay_lifted !== true, JSON.stringify(first));
  await until("the holder to be told", () => lease.lost);
  assert.ok((await c.inspectLock(name)).delayed_until);
  const second = await ops.forceRelease(name, { reason: "ts client test" });
  assert.ok(second.released && second.delay_lifted === true && second.removed.length === 0, JSON.stringify(second));
  await (await c.lock(name)).release();
});

test("a reader sees a multilease without the locks its key may not name", async () => {
  const key = async (spec: Record<string, unknown>): Promise<string> => {
    const made = await admin("POST", "/v1/admin/keys", { name: unique("key"), ...spec }, KEYS_URL, KEYS_ADMIN_TOKEN);
    assert.equal(made.status, 201, JSON.stringify(made.body));
    return made.body.secret as string;
  };
  const holder = client({ apiKey: await key({ roles: ["client"] }) }, KEYS_URL);
  const visible = unique("jobs");
  const reader = client({ apiKey: await key({ roles: ["reader"], patterns: [visible] }) }, KEYS_URL);
  const lease = await holder.multilease([visible, unique("payroll")], { ttlMs: 30_000 });
  try {
    const membership = (await reader.inspectLock(visible)).holders[0]?.multilease;
    assert.deepEqual(membership, { lease_id: lease.leaseId, locks: [visible], hidden_locks: 1 });
    const seen = await reader.inspectLease(visible, lease.members[0]!.lease_id);
    assert.equal(seen.multilease?.hidden_locks, 1);
  } finally {
    await lease.release();
  }
});

test("a RedLock lease says its nodes and validity on the grant and every renewal", async () => {
  const c = client({}, REDLOCK_URL);
  const name = unique("red");
  const ttlMs = 1500;
  const lease = await c.lock(name, { ttlMs, kind: "redlock" });
  try {
    assert.equal(lease.kind, "redlock");
    assert.equal(lease.nodesAcked, 3);
    assert.ok((lease.validityMs ?? 0) > 0 && (lease.validityMs ?? 0) < ttlMs, String(lease.validityMs));
    assert.equal((await c.inspectLock(name)).kind, "redlock");
    // Past two TTLs it holds by its renewals (every 500 ms), whose answers replaced the grant's.
    await new Promise((resolve) => setTimeout(resolve, 2 * ttlMs));
    lease.throwIfLost();
    assert.equal(lease.nodesAcked, 3);
    assert.ok((lease.validityMs ?? 0) > 0 && (lease.validityMs ?? 0) < ttlMs, String(lease.validityMs));
  } finally {
    await lease.release();
  }
});

test("a degraded grant and renewal show on the lease (a stand-in server: only Sentinel and Cluster degrade)", async () => {
  let beats = 0;
  const grant = (extra: Record<string, unknown>) => ({
    lease_id: "l1", token: "lht_t", lock: "d", kind: "reentrant", holder: null, fencing_token: 1, reentry_count: 1,
    ttl_ms: 900, expires_at: "2030-01-01T00:00:00Z", ...extra,
  });
  const server = http.createServer((req, res) => {
    const answer = (status: number, body: unknown, type = "application/json") => {
      res.writeHead(status, { "content-type": type });
      res.end(JSON.stringify(body));
    };
    const path = new URL(req.url ?? "/", "http://x").pathname;
    req.resume();
    if (req.method === "POST" && path === "/v1/locks/d/leases") return answer(201, grant({ replicas_acked: 0, degraded: "no_replica" }));
    if (req.method === "POST" && path === "/v1/multileases") {
      return answer(201, grant({
        lease_id: "m1",
        members: [
          { lock: "a", kind: "reentrant", lease_id: "a1", fencing_token: 3, replicas_acked: 2 },
          { lock: "b", kind: "reentrant", lease_id: "b1", fencing_token: 4, replicas_acked: 1, degraded: "not_replicated" },
        ],
      }));
    }
    if (req.method === "POST" && path.endsWith("/heartbeat")) {
      beats += 1;
      return answer(200, grant({ replicas_acked: 1, degraded: "not_replicated" }));
    }
    if (req.method === "DELETE") return answer(200, { lease_id: "l1", lock: "d", released: true, reentry_count: 0, locks: [] });
    // The watch: a server without one, so the heartbeats alone keep the lease.
    return answer(404, { type: "/problems/not_found", title: "No such resource", status: 404, detail: "", code: "not_found" }, "application/problem+json");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const c = new Client(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { apiKey: null });
    const lease = await c.lock("d", { ttlMs: 900 });
    assert.equal(lease.degraded, "no_replica");
    assert.equal(lease.replicasAcked, 0);
    await until("a renewal's answer", () => beats > 0 && lease.degraded === "not_replicated", 3000);
    assert.equal(lease.replicasAcked, 1);
    await lease.release();
    const multi = await c.multilease(["a", "b"], { ttlMs: 900 });
    assert.equal(multi.replicasAcked, 1);
    assert.equal(multi.degraded, "not_replicated");
    assert.deepEqual(multi.members.map((m) => m.degraded), [undefined, "not_replicated"]);
    await multi.release();
  } finally {
    server.closeAllConnections();
    server.close();
  }
});
