// The client against the server's own tables (clients/PROTOCOL.md): every problem code the
// server can answer, and no other, has its error class; every operation of the server's
// OpenAPI document is covered as clients/parity.json says, by calls that exist, or not offered
// for a reason it gives; every behaviour it lists is held by the TypeScript test it names.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { Client, ERROR_CLASSES, Lease, PROBLEM_CODES, ProblemError, Term } from "leasehold";
import { URL_ } from "./support.js";

const parityFile = fileURLToPath(new URL("../../../parity.json", import.meta.url));
const clientFolder = fileURLToPath(new URL("../../", import.meta.url));

test("parity with the server: problem codes and operations", async () => {
  const doc = (await (await fetch(`${URL_}/openapi.json`)).json()) as any;
  const served: string[] = doc.components.schemas.Problem.properties.code.enum;
  assert.ok(served.length > 0, "the server lists its problem codes");
  assert.deepEqual([...PROBLEM_CODES].sort(), [...served].sort(), "PROBLEM_CODES is the server's list");
  assert.deepEqual(Object.keys(ERROR_CLASSES).sort(), [...served].sort(), "every code has its error class");
  for (const [code, cls] of Object.entries(ERROR_CLASSES)) {
    const error = new cls({ type: "", title: "", status: 400, detail: "", code });
    assert.ok(error instanceof ProblemError, code);
  }

  const parity = JSON.parse(await readFile(parityFile, "utf8")) as { operations: Record<string, Record<string, string | null>> };
  const operations: string[] = Object.values(doc.paths as Record<string, Record<string, { operationId: string }>>).flatMap(
    (item) => Object.values(item).map((op) => op.operationId),
  );
  assert.deepEqual(Object.keys(parity.operations).sort(), operations.sort(), "clients/parity.json lists the server's operations");
  const types: Record<string, object> = { Client: Client.prototype, Lease: Lease.prototype, Term: Term.prototype };
  for (const [operation, by] of Object.entries(parity.operations)) {
    const call = by["typescript"];
    if (call === null || call === undefined) {
      assert.ok(by["why_not"], `${operation}: not offered, and clients/parity.json says not why (why_not)`);
      continue;
    }
    const [type, method] = call.split(".");
    const proto = types[type!];
    assert.ok(proto !== undefined, `${operation}: no type ${type}`);
    if (method !== undefined) assert.equal(typeof (proto as any)[method], "function", `${operation}: ${call}`);
  }
});

test("parity: every behaviour clients/parity.json lists has its TypeScript test", async () => {
  const parity = JSON.parse(await readFile(parityFile, "utf8")) as { behaviours: Record<string, Record<string, string>> };
  assert.ok(Object.keys(parity.behaviours).length > 0, "clients/parity.json lists behaviours");
  for (const [behaviour, by] of Object.entries(parity.behaviours)) {
    assert.ok(by["rule"], `${behaviour}: says no rule`);
    const [path, name] = (by["typescript"] ?? "").split("::");
    const source = await readFile(`${clientFolder}${path}`, "utf8").catch(() => "");
    assert.ok(source.includes(`\ntest(${JSON.stringify(name)},`), `${behaviour}: no test ${by["typescript"]}`);
  }
});
