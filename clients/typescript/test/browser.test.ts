// The package in a real browser (headless Chromium), loaded as ESM from a page on the same
// origin as the API (a proxy serves both): a lock, a loss told through the watch stream, and
// `await using` run by the browser itself. Skipped where Chromium is not installed.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { ADMIN_TOKEN, URL_, unique, within } from "./support.js";

const chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"].find((p) => existsSync(p));
const dist = fileURLToPath(new URL("../../dist/", import.meta.url));

const PAGE = `<!doctype html>
<script type="module">
import { Client, LeaseLostError } from "/dist/index.js";
const params = new URLSearchParams(location.search);
const name = params.get("name");
const out = { secure: isSecureContext, randomUUID: typeof crypto.randomUUID };
try {
  const client = new Client(location.origin);
  out.fence = await client.withLock(name + "-a", { ttlMs: 5000 }, async (lease) => lease.fencingToken);
  const lease = await client.lock(name + "-b", { ttlMs: 30000 });
  const lost = new Promise((resolve) => lease.signal.addEventListener("abort", () => resolve(performance.now())));
  const sent = performance.now();
  const forced = await fetch("/v1/admin/locks/" + name + "-b", { method: "DELETE", headers: { authorization: "Bearer " + params.get("admin") } });
  out.forced = forced.status;
  out.lossMs = (await lost) - sent;
  out.lost = lease.signal.reason instanceof LeaseLostError ? lease.signal.reason.reason : String(lease.signal.reason);
  {
    await using held = await client.lock(name + "-c");
    out.usingHeld = held.state;
    out.usingLease = held;
  }
  out.usingAfter = out.usingLease.state;
  delete out.usingLease;
} catch (error) {
  out.error = String(error && error.stack || error);
}
await fetch("/result", { method: "POST", body: JSON.stringify(out) });
</script>`;

test("in Chromium: lock, loss told by the watch stream, await using", { skip: chromium === undefined ? "no Chromium here" : false }, async () => {
  let report: (result: Record<string, unknown>) => void = () => {};
  const result = new Promise<Record<string, unknown>>((resolve) => (report = resolve));
  const server = http.createServer(async (request, response) => {
    const url = request.url ?? "/";
    if (url.startsWith("/page")) {
      response.writeHead(200, { "content-type": "text/html" }).end(PAGE);
    } else if (url.startsWith("/dist/") && /^\/dist\/[a-z]+\.js$/.test(url)) {
      response.writeHead(200, { "content-type": "text/javascript" }).end(await readFile(join(dist, url.slice(6))));
    } else if (url === "/result") {
      let body = "";
      request.on("data", (chunk) => (body += chunk));
      request.on("end", () => {
        response.end();
        report(JSON.parse(body) as Record<string, unknown>);
      });
    } else if (url.startsWith("/v1/")) {
      // The API on the page's origin: the browser's Origin and Host name this server, and the
      // request goes on to Leasehold unchanged.
      const upstream = http.request(URL_ + url, { method: request.method, headers: request.headers }, (answer) => {
        response.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(response);
      });
      upstream.on("error", () => response.destroy());
      response.on("close", () => upstream.destroy());
      request.pipe(upstream);
    } else {
      response.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const profile = await mkdtemp(join(tmpdir(), "leasehold-chromium-"));
  const browser = spawn(
    chromium!,
    ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", `--user-data-dir=${profile}`,
      `${origin}/page?name=${unique("browser")}&admin=${ADMIN_TOKEN}`],
    { stdio: "ignore", detached: true },
  );
  try {
    const out = await within(45_000, result, "the page's result");
    assert.equal(out["error"], undefined, String(out["error"]));
    assert.ok(typeof out["fence"] === "number" && out["fence"] > 0);
    assert.equal(out["forced"], 200);
    assert.equal(out["lost"], "force_released");
    assert.ok((out["lossMs"] as number) < 1000, `loss told after ${out["lossMs"]} ms`);
    assert.equal(out["usingHeld"], "held");
    assert.equal(out["usingAfter"], "released");
    console.log(`in Chromium: loss told ${(out["lossMs"] as number).toFixed(1)} ms after the force release was sent`);
  } finally {
    try {
      process.kill(-browser.pid!, "SIGKILL"); // the browser and its helper processes
    } catch {
      // already gone
    }
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await rm(profile, { recursive: true, force: true });
  }
});
