// node-redisson's RLock (the Redisson lock algorithm in Node, from the npm registry), driven
// through the same two loops as common.py's: node_redisson.py runs this and summarises what it
// prints (the raw samples, one JSON object), so every system's figures are computed alike.
//
//   node redisson.js SOCKET uncontended|contended CLIENTS SECONDS HOLD_MS PREFIX SERVER_PIDS
//
// Each client is its own Redisson instance (its command connection and its subscriber
// connection), holding with an explicit 30 s lease (no watchdog, as redis-py's timeout) and
// waiting at most 30 s (see take). A waiter subscribes to the lock's channel and wakes on the
// unlock message (no polling).
'use strict';
const fs = require('node:fs');
const { Redisson } = require('node-redisson');

const [socket, mode, clientsArg, secondsArg, holdArg, prefix, pidsArg] = process.argv.slice(2);
const clients = Number(clientsArg);
const seconds = Number(secondsArg);
const holdMs = Number(holdArg);
const serverPids = new Set((pidsArg || '').split(',').filter(Boolean).map(Number));
const now = () => performance.now() / 1000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// CPU clock ticks of the server processes (and their children), as common.cpu_ticks.
function cpuTicks() {
  let total = 0;
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let fields;
    try {
      fields = fs.readFileSync(`/proc/${entry}/stat`, 'utf8').split(')').pop().trim().split(/\s+/);
    } catch {
      continue;
    }
    if (serverPids.has(Number(entry)) || serverPids.has(Number(fields[1]))) {
      total += Number(fields[11]) + Number(fields[12]);
    }
  }
  return total;
}

// lock(30000): wait without limit, hold 30 s; the wait is bounded here instead. Not
// tryLock(30000, 30000): node-redisson 1.0.4's tryLock takes the whole time waited so far off
// its budget again at every wake-up, so under contention it gave up after about 2 s.
async function take(lock) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error('not acquired within 30 s')), 30000);
  });
  try {
    await Promise.race([lock.lock(30000), limit]);
  } finally {
    clearTimeout(timer);
  }
}

async function uncontended(instances) {
  const acq = [];
  const rel = [];
  const cpu0 = process.cpuUsage();
  const ticks0 = cpuTicks();
  const started = now();
  const deadline = started + seconds;
  await Promise.all(instances.map(async (r, i) => {
    const lock = r.getLock(`${prefix}-u-${i}`);
    while (now() < deadline) {
      const t0 = now();
      await take(lock);
      const t1 = now();
      await lock.unlock();
      acq.push(t1 - t0);
      rel.push(now() - t1);
    }
  }));
  const secs = now() - started;
  const cpu = process.cpuUsage(cpu0);
  return { acq, rel, secs, client_cpu_s: (cpu.user + cpu.system) / 1e6, server_ticks: cpuTicks() - ticks0 };
}

// A waiter that misses the unlock message (node-redisson subscribes after its failed try, so a
// release in between goes unheard) sleeps until the next one, or until the lock's TTL: the
// last waiters of a run can be left waiting on a free lock. They are given GRACE_S after the
// run, then counted as stalled rather than waited for.
const GRACE_S = 5;

async function contended(instances) {
  const name = `${prefix}-contended-${clients}-${holdMs}`;
  const events = [];
  const asks = [];
  let grants = 0;
  let stalled = 0;
  let wake = [];
  const ticks0 = cpuTicks();
  const started = now();
  const deadline = started + seconds;
  let giveUp;
  const graceOver = new Promise((resolve) => { giveUp = setTimeout(resolve, (seconds + GRACE_S) * 1000); });
  await Promise.all(instances.map(async (r, i) => {
    const lock = r.getLock(name);
    while (now() < deadline) {
      const asked = now();
      if ((await Promise.race([take(lock).then(() => true), graceOver.then(() => false)])) === false) {
        stalled += 1;
        asks.push([asked, null, i]);
        return;
      }
      const at = now();
      events.push([at, 'grant', i]);
      asks.push([asked, at, i]);
      const mine = ++grants;
      wake.forEach((f) => f());
      wake = [];
      await sleep(Math.max(0, holdMs - (now() - at) * 1000));
      await lock.unlock();
      events.push([now(), 'release', i]);
      // Stand back until another client holds the lock (at most 1 s), as common.py does.
      const until = now() + 1;
      while (grants === mine && now() < until) {
        await Promise.race([new Promise((resolve) => wake.push(resolve)), sleep(1000)]);
      }
    }
  }));
  clearTimeout(giveUp);
  const end = Math.min(now(), deadline + GRACE_S);
  return { events, asks, stalled, secs: end - started, end, server_ticks: cpuTicks() - ticks0 };
}

async function main() {
  const instances = Array.from({ length: clients }, () => new Redisson({ redis: { options: { path: socket } } }));
  const result = mode === 'uncontended' ? await uncontended(instances) : await contended(instances);
  await Promise.all(instances.map((r) => r.quit()));
  // Written in full before the exit below (a pipe takes a large write in pieces).
  await new Promise((resolve) => process.stdout.write(JSON.stringify(result) + '\n', resolve));
}

// node-redisson leaves a timer per wait (up to the lock's TTL) behind: exit when done.
main()
  .then(() => process.exit(0))
  .catch((e) => {
    console.error(e);
    process.exit(1);
  });
