// A Node process ended by SIGTERM or SIGINT releases its leases on the way out.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { URL_, client, unique, within } from "./support.js";

const child = fileURLToPath(new URL("./fixtures/hold-child.js", import.meta.url));

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  test(`${signal} releases the held lease, then ends the process by ${signal}`, async () => {
    const name = unique(`signal-${signal.toLowerCase()}`);
    const proc = spawn(process.execPath, [child, URL_, name], { stdio: ["ignore", "pipe", "inherit"] });
    const exited = once(proc, "exit");
    try {
      const [line] = (await within(10_000, once(createInterface({ input: proc.stdout! }), "line"), "the child's lease")) as [string];
      const { leaseId } = JSON.parse(line) as { leaseId: string };
      assert.equal((await client().inspectLease(name, leaseId)).state, "held");
      proc.kill(signal);
      const [code, by] = (await within(5000, exited, "the child's exit")) as [number | null, string | null];
      assert.equal(by, signal, `ended by ${signal} (exit code ${code})`);
      assert.equal((await client().inspectLease(name, leaseId)).state, "released", "released, not left to expire");
    } finally {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    }
  });
}
