-- release.lua: give back one hold of the lock; at zero delete it and tell the first waiter.
--
-- KEYS[1]  the lock: a hash {owner -> hold count} with a TTL
-- KEYS[2]  the fencing counter (not used; the lock's keys travel together)
-- KEYS[3]  the waiters' line, KEYS[4] their liveness (see acquire.lua)
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
-- The message names the waiter whose turn it is, so that only its process wakes it and
-- nobody else tries in vain. A dead waiter is not named: it would never come.
-- Lapsed places at the head are dropped first (as in acquire.lua); the clock is read only
-- when someone is in line.
-- Written again in acquire.lua, on purpose (lock/README.md, "Why the line's head is found twice").
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if first ~= nil then
    local now = redis.call('TIME')
    local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    while first ~= nil and tonumber(redis.call('ZSCORE', KEYS[4], first) or '0') <= now_ms do
        redis.call('ZREM', KEYS[3], first)
        redis.call('ZREM', KEYS[4], first)
        first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    end
    -- The moment of the hand-off's start, for the next holder to measure the gap by
    -- (acquire.lua): a member of the liveness set that is never in the line itself, so no
    -- script takes it for a waiter, and it expires with the set.
    if first ~= nil then
        redis.call('ZADD', KEYS[4], tonumber(now[1]) * 1000000 + tonumber(now[2]), '~released')
    end
end
-- "" when nobody is in line: each process then wakes its oldest waiter, if any (one that
-- does not wait in line, or whose place Redis lost).
redis.call('PUBLISH', ARGV[2], first or '')
return 0
