-- Redisson's RLock acquire (RedissonLock.tryLockInnerAsync), verbatim: the honest ceiling for one
-- uncontended acquire. KEYS[1] = lock; ARGV[1] = lease ms, ARGV[2] = "<client uuid>:<thread id>".
if (redis.call('exists', KEYS[1]) == 0) then redis.call('hset', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; return redis.call('pttl', KEYS[1]);
