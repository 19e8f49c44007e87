// `await using`: compiled by TypeScript (target ES2022, lib esnext.disposable) and run by this
// Node; and run again where the runtime has no Symbol.asyncDispose, with the package's polyfill.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { LeaseLostError } from "leasehold";
import { URL_, aborted, admin, client, unique, within } from "./support.js";

test("await using releases the lease when the block ends, normally or by a throw", async () => {
  const c = client();
  const name = unique("using");
  let id = "";
  {
    await using lease = await c.lock(name, { ttlMs: 10_000 });
    id = lease.leaseId;
    assert.equal((await c.inspectLock(name)).holders[0]?.lease_id, id);
  }
  assert.equal((await c.inspectLease(name, id)).state, "released");

  await assert.rejects(
    (async () => {
      await using lease = await c.lock(name, { ttlMs: 10_000 });
      id = lease.leaseId;
      throw new Error("boom");
    })(),
    /boom/,
  );
  assert.equal((await c.inspectLease(name, id)).state, "released");
});

test("await using a lease lost meanwhile throws LeaseLostError at the end of the block", async () => {
  const c = client();
  const name = unique("using-lost");
  const error = await (async () => {
    await using lease = await c.lock(name, { ttlMs: 10_000 });
    assert.equal((await admin("DELETE", `/v1/admin/locks/${name}`)).status, 200);
    await within(2000, aborted(lease.signal), "the loss signal");
  })().catch((e: unknown) => e);
  assert.ok(error instanceof LeaseLostError, String(error));
  assert.equal(error.reason, "force_released");
});

test("without a native Symbol.asyncDispose, the polyfill makes await using work", async () => {
  const child = fileURLToPath(new URL("./fixtures/polyfill-child.js", import.meta.url));
  const output = await new Promise<string>((resolve, reject) => {
    execFile(
      process.execPath,
      ["--experimental-vm-modules", "--no-warnings", child, URL_, unique("polyfill")],
      { timeout: 20_000 },
      (error, stdout, stderr) => (error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(stdout)),
    );
  });
  const result = JSON.parse(output.trim()) as Record<string, unknown>;
  assert.equal(result["nativeBefore"], "undefined", "the realm had no Symbol.asyncDispose");
  assert.equal(result["polyfilled"], true);
  assert.equal(result["heldInside"], true);
  assert.equal(result["stateAfter"], "released");
  assert.equal(result["serverState"], "released");
});
