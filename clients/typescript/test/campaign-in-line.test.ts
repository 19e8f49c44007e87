// A campaign waiting in line tells where it stands, as a fair lock's waiter does
// (clients/PROTOCOL.md, "Why the wait"): each answer in line reaches `onInLine` (its position,
// the leader now, the estimate), none after the grant; a hook that throws leaves the line, and
// the campaign rejects with what it threw (as a fair lock's `onQueued`).
import assert from "node:assert/strict";
import { test } from "node:test";
import type { InLine } from "leasehold";
import { client, unique, until, within } from "./support.js";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// clients/parity.json campaignInLine: B waits behind A and hears position 1 and A's holder,
// value and term; A resigns, B leads, and the hook heard nothing after the grant.
test("a campaign in line tells where it stands", async () => {
  const c = client();
  const name = unique("in-line");
  const a = await within(10_000, c.campaign(name, { value: "a", holder: "node-a", ttlMs: 3000 }), "A's campaign");
  const heard: InLine[] = [];
  const b = c.campaign(name, { value: "b", holder: "node-b", ttlMs: 3000, waitMs: 20_000, onInLine: (inLine) => heard.push(inLine) });
  b.catch(() => {}); // awaited below; a failure before then is not unhandled
  try {
    await until("B hears its place", () => heard.length > 0, 10_000);
    const first = heard[0]!;
    assert.equal(first.position, 1);
    assert.equal(first.estimatedWaitMs, undefined); // no ended term yet: no estimate
    assert.equal(first.leader?.holder, "node-a");
    assert.equal(first.leader?.value, "a");
    assert.equal(first.leader?.term, a.number);
  } finally {
    await a.resign();
  }
  const term = await within(10_000, b, "B's campaign");
  const told = heard.length;
  await sleep(1500); // longer than a poll: none comes after the grant
  await term.resign();
  assert.ok(told >= 1);
  assert.equal(heard.length, told, "told an answer after the grant");
  assert.ok(term.number > a.number);
});

test("a campaign whose onInLine throws leaves the line and rejects with what it threw", async () => {
  const c = client();
  const name = unique("in-line-throws");
  await using _a = await within(10_000, c.campaign(name, { value: "a" }), "A's campaign");
  const failure = new Error("the hook fails");
  const b = c.campaign(name, { value: "b", waitMs: 10_000, onInLine: () => { throw failure; } });
  await assert.rejects(within(10_000, b, "B's campaign"), (error) => error === failure);
  assert.equal((await c.leader(name)).candidates.length, 0);
});

test("a fair lock whose onQueued throws leaves the queue and rejects with what it threw", async () => {
  const c = client();
  const name = unique("queued-throws");
  await using _head = await c.lock(name, { kind: "fair", ttlMs: 10_000 });
  const failure = new Error("the hook fails");
  const waiter = c.lock(name, { kind: "fair", waitMs: 10_000, onQueued: () => { throw failure; } });
  await assert.rejects(within(10_000, waiter, "the fair waiter"), (error) => error === failure);
  assert.equal((await c.inspectLock(name)).queue_length, 0);
});
