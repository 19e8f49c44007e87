// Elections against the real server: a campaign that leads at once, waits in line and takes
// over when the leader resigns, loses its term; proclaim; observers that see every change in
// order and resume after a dropped connection; typed refusals.
import assert from "node:assert/strict";
import { test } from "node:test";
import { type ElectionEvent, InvalidRequestError, LeaseLostError, LockHeldError, Term } from "leasehold";
import { aborted, admin, client, unique, until, URL_, within } from "./support.js";

test("a campaign leads at once, and resigns at the end of its block", async () => {
  const c = client();
  const name = unique("elect");
  let number = 0;
  {
    await using term = await c.campaign(name, { value: "10.0.0.1:8080", ttlMs: 3000 });
    assert.ok(term instanceof Term);
    number = term.number;
    assert.ok(term.number > 0 && term.value === "10.0.0.1:8080" && term.kind === "election");
    const info = await c.leader(name);
    assert.equal(info.leader?.candidate_id, term.candidateId);
    assert.equal(info.leader?.term, term.number);
    assert.equal((await c.checkTerm(name, term.number)).current, true);
  }
  assert.equal((await c.leader(name)).leader, null);
  assert.equal((await c.checkTerm(name, number)).current, false);
});

test("a second campaign waits in line and leads after the first resigns, with a higher term", async () => {
  const c = client();
  const name = unique("handoff");
  const first = await c.campaign(name, { value: "a", ttlMs: 1000 });
  const second = c.campaign(name, { value: "b", ttlMs: 1000 });
  await until("the second candidate in line", async () => (await c.leader(name)).candidates.length === 1);
  await new Promise((resolve) => setTimeout(resolve, 2500)); // several TTLs: its polls keep its place
  const info = await c.leader(name);
  assert.equal(info.candidates.length, 1);
  assert.equal(info.leader?.term, first.number);
  await first.resign();
  const term = await within(5000, second, "the second campaign");
  assert.ok(term.number > first.number);
  assert.equal(term.value, "b");
  await term.resign();
});

test("a campaign cut short leaves the line", async () => {
  const c = client();
  const name = unique("cut");
  await using _first = await c.campaign(name, { value: "a" });
  await assert.rejects(c.campaign(name, { value: "b", waitMs: 300 }), LockHeldError);
  await assert.rejects(c.campaign(name, { value: "c", signal: AbortSignal.timeout(300) }));
  assert.equal((await c.leader(name)).candidates.length, 0);
});

test("an admin ending the term aborts the term's signal", async () => {
  const c = client();
  const name = unique("end");
  const term = await c.campaign(name, { value: "a", ttlMs: 30_000 });
  const lost = aborted(term.signal);
  const answer = await c.endTerm(name, { reason: "test" }).catch(() => admin("DELETE", `/v1/admin/elections/${name}`));
  assert.ok(answer);
  await within(2000, lost, "the loss signal");
  assert.ok(term.signal.reason instanceof LeaseLostError);
  assert.equal(term.lostError?.reason, "force_released");
  await assert.rejects(term.proclaim("late"), LeaseLostError);
  await assert.rejects(term.resign(), LeaseLostError);
});

test("a term whose TTL runs out is lost", async () => {
  // Heartbeats that never arrive (a partition): the term is given up before its TTL ends.
  const c = client({
    fetch: (input, init) =>
      new URL(String(input)).pathname.endsWith("/heartbeat") ? Promise.reject(new TypeError("refused by the test")) : fetch(input, init),
    retry: { attempts: 1 },
  });
  const name = unique("ttl");
  const term = await c.campaign(name, { value: "a", ttlMs: 1000, watch: false });
  await within(3000, aborted(term.signal), "the loss signal");
  assert.equal(term.lostError?.reason, "unrenewable");
  await new Promise((resolve) => setTimeout(resolve, 1000));
  assert.equal((await client().leader(name)).leader, null);
});

test("a leader's heartbeats name its term, and a heartbeat naming another lets it go: the loss", async () => {
  const heartbeats: URL[] = [];
  const c = client({
    fetch: (input, init) => {
      if (String(input).includes("/heartbeat")) heartbeats.push(new URL(String(input)));
      return fetch(input, init);
    },
  });
  const name = unique("term");
  const term = await c.campaign(name, { value: "a", ttlMs: 1000, watch: false });
  // Kept across several heartbeats, each naming the term, the term unchanged.
  await until("three heartbeats", () => heartbeats.length >= 3);
  for (const url of heartbeats) assert.equal(url.searchParams.get("term"), String(term.number));
  await term.renew();
  assert.equal(heartbeats.at(-1)?.searchParams.get("term"), String(term.number));
  assert.equal(term.signal.aborted, false);
  assert.equal((await c.leader(name)).leader?.term, term.number);
  // Another term lets the candidate go (410): the client's next heartbeat, naming its own, is
  // answered 410 too, and that is the loss.
  const answer = await fetch(`${URL_}/v1/elections/${name}/candidates/${term.candidateId}/heartbeat?term=${term.number + 1}`, {
    method: "POST",
    headers: { authorization: `Bearer ${term.token}` },
  });
  assert.equal(answer.status, 410);
  await within(3000, aborted(term.signal), "the loss signal");
  assert.ok(term.signal.reason instanceof LeaseLostError);
  await assert.rejects(term.resign(), LeaseLostError);
});

test("a value over 4096 bytes is a typed refusal", async () => {
  const c = client();
  const name = unique("big");
  await assert.rejects(c.campaign(name, { value: "x".repeat(4097) }), (e: unknown) => {
    assert.ok(e instanceof InvalidRequestError);
    assert.equal(e.code, "invalid_body");
    return true;
  });
  await using term = await c.campaign(name, { value: "ok" });
  await assert.rejects(term.proclaim("y".repeat(4097)), InvalidRequestError);
  assert.equal(term.value, "ok");
});

test("observe tells every change in order, and resumes after a dropped connection", async () => {
  const c = client();
  const name = unique("observe");
  let cut = false;
  let didCut = false;
  let gate!: () => void;
  const reconnect = new Promise<void>((resolve) => (gate = resolve));
  const lastIds: (string | null)[] = [];
  // A fetch that drops the observe stream on demand (the next chunk is lost with it), and
  // holds its reconnection until told.
  const cutting = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    if (!String(input).endsWith("/observe")) return fetch(input, init);
    lastIds.push(new Headers(init?.headers).get("last-event-id"));
    if (lastIds.length > 1) await reconnect;
    const response = await fetch(input, init);
    const reader = response.body!.getReader();
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const { done, value } = await reader.read();
        if (cut && !done) {
          cut = false;
          didCut = true;
          await reader.cancel();
          controller.error(new TypeError("cut by the test"));
          return;
        }
        if (done) controller.close();
        else controller.enqueue(value);
      },
      cancel: () => reader.cancel(),
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
  const stop = new AbortController();
  const events: ElectionEvent[] = [];
  const observing = (async () => {
    for await (const event of client({ fetch: cutting }).observe(name, { signal: stop.signal })) {
      events.push(event);
      if (events.length === 5) return;
    }
  })();
  await until("the first event", () => events.length === 1);
  const first = await c.campaign(name, { value: "a" });
  await until("the leader", () => events.length === 2);
  await first.proclaim("a2");
  await until("the new value", () => events.length === 3);
  cut = true; // the next message (the vacancy) is lost with the connection
  await first.resign();
  await until("the stream cut", () => didCut);
  // A whole term while the observer is away: the resumed stream tells it.
  const second = await c.campaign(name, { value: "b" });
  await second.resign();
  gate();
  await within(10_000, observing, "the observer");
  stop.abort();
  const seen = events.map((e) => [e.kind, e.term, e.value ?? null]);
  assert.deepEqual(seen, [
    ["vacant", 0, null],
    ["leader", first.number, "a"],
    ["leader", first.number, "a2"],
    ["leader", second.number, "b"],
    ["vacant", second.number, null],
  ]);
  assert.equal(lastIds[0], null);
  assert.equal(lastIds[1], events[2]!.id);
});
