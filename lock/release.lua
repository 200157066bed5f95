-- release.lua: give back one hold of the lock; at zero delete it and announce the release.
--
-- KEYS[1]  the lock: a hash {owner -> hold count} with a TTL
-- KEYS[2]  the fencing counter (read only: its value is the token published)
-- ARGV[1]  the owner, "<process id>:<thread number>"
-- ARGV[2]  the release channel, "<lock>:released"
-- ARGV[3]  the hold count the owner keeps after this call: its own count, kept by the
--          client, minus one (0: give the lock back)
--
-- Returns the owner's remaining hold count (0: the lock is free now), or -1 when ARGV[1]
-- does not hold the lock; then nothing at all is changed.
--
-- Idempotent, like acquire.lua: the count is set to what the client keeps, so a release
-- whose reply was lost, or an acquire that ran without the client knowing, cannot leave a
-- count behind that no release will ever bring to zero.
--
-- Why a script: "is it mine?" and "delete it" must be one step. As two commands, the lease
-- could run out between them and another owner take the lock, and the DEL would then
-- delete the other owner's lock.

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
    return -1
end

local count = tonumber(ARGV[3])
if count > 0 then
    -- Still held by the same owner (a reentrant hold was given back). The lease is left
    -- as it is.
    redis.call('HSET', KEYS[1], ARGV[1], count)
    return count
end

redis.call('DEL', KEYS[1])
-- Waiters subscribed to the channel wake now instead of sleeping out the TTL. The message
-- is the token of the holding that ended, for anyone watching with redis-cli.
redis.call('PUBLISH', ARGV[2], redis.call('GET', KEYS[2]) or '0')
return 0
