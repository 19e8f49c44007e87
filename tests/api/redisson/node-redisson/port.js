// Drives node-redisson (a Redisson port whose holder field is `<uuid>:<uuid>`) for
// tests/api/redisson/ports.rs, on the Redis behind the Unix socket in argv[2]. One line out per
// step, one command per line in:
//   node port.js SOCKET hold NAME      takes the lock (watchdog lease), prints "held <field>",
//                                     then unlocks on the line "unlock", prints "unlocked"
//   node port.js SOCKET wait NAME MS   tryLock waiting up to MS, prints "waiting" once the
//                                     first try was refused, then "acquired <ms waited>" or
//                                     "timeout"; then unlocks and prints "unlocked"
'use strict';
const readline = require('node:readline');
const { Redisson } = require('node-redisson');

const [socket, command, name, waitMs] = process.argv.slice(2);
const redisson = new Redisson({ redis: { options: { path: socket } } });
const lock = redisson.getLock(name);
const field = `${redisson.commandExecutor.id}:${lock.clientId}`;
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function main() {
  if (command === 'hold') {
    await lock.lock();
    console.log(`held ${field}`);
    await lines.next();
    await lock.unlock();
    console.log('unlocked');
  } else if (command === 'wait') {
    if (await lock.tryLock(0, 30000)) throw new Error('the lock was free');
    // Subscribed (PUBSUB NUMSUB tells the test) from the next try on.
    console.log('waiting');
    const start = Date.now();
    if (await lock.tryLock(Number(waitMs), 30000)) {
      console.log(`acquired ${Date.now() - start}`);
      await lock.unlock();
      console.log('unlocked');
    } else {
      console.log('timeout');
    }
  } else {
    throw new Error(`unknown command ${command}`);
  }
}

main()
  .then(() => redisson.quit())
  .then(() => process.exit(0))
  .catch((e) => {
    console.error(e);
    process.exit(1);
  });
