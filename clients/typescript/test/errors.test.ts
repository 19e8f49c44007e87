// Errors are typed: one class per kind of answer, each carrying the problem's code and members.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AuthError,
  Client,
  ConflictError,
  InvalidRequestError,
  LeaseholdError,
  LockHeldError,
  NotFoundError,
  ProblemError,
} from "leasehold";
import { KEYS_ADMIN_TOKEN, KEYS_URL, URL_, admin, client, unique } from "./support.js";

async function failure(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => assert.fail("expected a failure"),
    (e: unknown) => e,
  );
}

test("lock_held: LockHeldError with the holder, its lease, Retry-After and the wait allowed", async () => {
  const c = client();
  const name = unique("held");
  await c.withLock(name, { ttlMs: 20_000, holder: "cron@db1" }, async (lease) => {
    const error = await failure(c.lock(name, { waitMs: 100, holder: "cron@db2" }));
    assert.ok(error instanceof LockHeldError);
    assert.ok(error instanceof ProblemError);
    assert.ok(error instanceof LeaseholdError);
    assert.equal(error.name, "LockHeldError");
    assert.equal(error.status, 409);
    assert.equal(error.code, "lock_held");
    assert.equal(error.type, "/problems/lock_held");
    assert.ok(error.title.length > 0 && error.detail.length > 0);
    assert.equal(error.holder, "cron@db1");
    assert.equal(error.leaseId, lease.leaseId);
    assert.equal(error.waitMs, 100);
    assert.ok(error.retryAfterMs !== undefined && error.retryAfterMs > 10_000);
    assert.equal(error.problem["holder"], "cron@db1");
  });
});

test("conflicts, bad input, unknown names, auth: each its class and code", async () => {
  const c = client();
  const name = unique("errors");
  await c.withLock(name, { kind: "fair" }, async () => {
    const kind = await failure(c.lock(name, { kind: "read" }));
    assert.ok(kind instanceof ConflictError);
    assert.equal(kind.code, "kind_conflict");
    assert.equal(kind.heldAs, "fair");
  });

  const badName = await failure(c.lock("no spaces allowed"));
  assert.ok(badName instanceof InvalidRequestError);
  assert.equal(badName.code, "invalid_lock_name");
  assert.equal(badName.status, 422);

  const badTtl = await failure(c.lock(name, { ttlMs: 5 }));
  assert.ok(badTtl instanceof InvalidRequestError);
  assert.equal(badTtl.code, "invalid_ttl");

  const unknown = await failure(c.inspectLock(unique("never-taken")));
  assert.ok(unknown instanceof NotFoundError);
  assert.equal(unknown.code, "lock_not_found");
  assert.equal(unknown.status, 404);

  const notAdmin = await failure(c.forceRelease(name));
  assert.ok(notAdmin instanceof AuthError);
  assert.equal(notAdmin.code, "admin_token_required");
  assert.equal(notAdmin.status, 401);

  const wrongAdmin = await failure(client({ apiKey: "not-the-admin-token" }).forceRelease(name));
  assert.ok(wrongAdmin instanceof AuthError, String(wrongAdmin));
});

test("fence checks: current for the holder's token only, while it holds", async () => {
  const c = client();
  const name = unique("fence");
  const lease = await c.lock(name, { ttlMs: 10_000 });
  assert.deepEqual(await c.checkFence(name, lease.fencingToken), {
    lock: name,
    fencing_token: lease.fencingToken,
    current: true,
    fencing_counter: lease.fencingToken,
  });
  assert.equal((await c.checkFence(name, lease.fencingToken - 1)).current, false);
  await lease.release();
  assert.equal((await c.checkFence(name, lease.fencingToken)).current, false);
});

test("API keys: sent in Leasehold-Key; missing, wrong or out-of-pattern keys are AuthErrors", async () => {
  const created = await admin(
    "POST",
    "/v1/admin/keys",
    { name: unique("key"), roles: ["client", "reader"], patterns: ["jobs:*"] },
    KEYS_URL,
    KEYS_ADMIN_TOKEN,
  );
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const secret: string = created.body.secret;
  const keyed = new Client(KEYS_URL, { apiKey: secret });
  const name = `jobs:${unique("keyed")}`;
  const value = await keyed.withLock(name, { ttlMs: 10_000 }, async (lease) => {
    assert.equal((await keyed.inspectLock(name)).holders[0]?.lease_id, lease.leaseId);
    return lease.fencingToken;
  });
  assert.ok(value > 0);

  const outside = await failure(keyed.lock(unique("elsewhere")));
  assert.ok(outside instanceof AuthError);
  assert.equal(outside.code, "name_not_allowed");

  const anonymous = await failure(new Client(KEYS_URL, { apiKey: null }).lock(name));
  assert.ok(anonymous instanceof AuthError);
  assert.equal(anonymous.code, "api_key_required");
  assert.equal(anonymous.status, 401);

  const wrong = await failure(new Client(KEYS_URL, { apiKey: "lhk_wrong" }).lock(name));
  assert.ok(wrong instanceof AuthError);
  assert.equal(wrong.code, "api_key_invalid");

  // The environment's key is the default, as for the leasehold CLI.
  const saved = process.env["LEASEHOLD_API_KEY"];
  process.env["LEASEHOLD_API_KEY"] = secret;
  try {
    await new Client(KEYS_URL).withLock(name, () => {});
  } finally {
    if (saved === undefined) delete process.env["LEASEHOLD_API_KEY"];
    else process.env["LEASEHOLD_API_KEY"] = saved;
  }
  // The admin token works as a key too (admin routes).
  assert.equal((await new Client(KEYS_URL, { apiKey: KEYS_ADMIN_TOKEN }).forceRelease(name)).released, false);
  assert.ok(URL_ !== KEYS_URL);
});
