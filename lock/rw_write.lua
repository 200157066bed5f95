-- rw_write.lua: take the write side of a read-write lock for an owner, or say how long to wait.
--
-- KEYS[1]  the write side: a hash {owner -> hold count} whose TTL is the lease
-- KEYS[2]  the write side's fencing counter: only grows, no TTL (as acquire.lua's)
-- KEYS[3]  the read side: a hash {owner -> hold count}
-- KEYS[4]  the writers in line: a sorted set {owner -> ms (Redis clock) its place lapses}
-- ARGV[1]  the owner, "<process id>:<thread number>"
-- ARGV[2]  the lease, in milliseconds
-- ARGV[3]  the write hold count the owner has once this call succeeds (its own, plus one)
-- ARGV[4]  how long (ms) a place in line lasts unless the owner calls again; 0: do not queue
--
-- Returns {hold count, fencing token} when the owner now holds the write side, else {0, ms}:
-- how long the caller may sleep before it tries again (the holder's or readers' TTL).
--
-- The write side is free when nobody holds it and nobody holds the read side, this owner
-- included: a read holder that asks for the write side would wait for itself, so the
-- client refuses that at once (lock/rwlock.h) and the script never sees it from a client
-- that keeps its own count. While it waits, the caller's place in KEYS[4] keeps new readers
-- out (rw_read.lua). Writers among themselves take a free lock in no particular order.
--
-- Idempotent: the count is set, not incremented (acquire.lua says why).

local owner = ARGV[1]
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now_ms)

if redis.call('HEXISTS', KEYS[1], owner) == 1 then
    -- A reentrant take: nobody else can have moved the counter while we hold it.
    redis.call('HSET', KEYS[1], owner, ARGV[3])
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {tonumber(ARGV[3]), tonumber(redis.call('GET', KEYS[2]) or '0')}
end

local busy = redis.call('PTTL', KEYS[1])
if busy == -2 then
    busy = redis.call('PTTL', KEYS[3])
end
if busy ~= -2 then
    local keep = tonumber(ARGV[4])
    if keep > 0 then
        redis.call('ZADD', KEYS[4], now_ms + keep, owner)
        if redis.call('PTTL', KEYS[4]) < keep then
            redis.call('PEXPIRE', KEYS[4], keep)
        end
    end
    return {0, busy}
end

if redis.call('EXISTS', KEYS[2]) == 0 then
    -- No counter: first use or Redis lost its data; start at Redis' clock (acquire.lua).
    redis.call('SET', KEYS[2], t[1] .. string.format('%06d', tonumber(t[2])))
end
local token = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], owner, ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[4], owner)
return {tonumber(ARGV[3]), token}
