-- rw_read.lua: take the read side of a read-write lock for an owner, or say how long to wait.
--
-- KEYS[1]  the write side: a hash {owner -> hold count} whose TTL is the writer's lease
-- KEYS[2]  the read side: a hash {owner -> hold count} whose TTL is the longest reader's lease
-- KEYS[3]  the read side's counter: moves on each time the read side goes from free to held,
--          so a read holding has a token (renewals check it, as renew.lua does)
-- KEYS[4]  the writers in line: a sorted set {owner -> ms (Redis clock) its place lapses}
-- KEYS[5]  the readers in line: the same, for readers a write release must call
-- ARGV[1]  the owner, "<process id>:<thread number>"
-- ARGV[2]  the lease, in milliseconds
-- ARGV[3]  the read hold count the owner has once this call succeeds (its own, plus one)
-- ARGV[4]  how long (ms) a place in line lasts unless the owner calls again; 0: do not queue
--
-- Returns {hold count, token} when the owner now holds the read side, else {0, ms}: how long
-- the caller may sleep before it tries again (-1: until a release calls it or its deadline).
--
-- Readers share: any number of owners hold the read side at once. A writer excludes them,
-- and a writer in line shuts the door on new readers: without that, a stream of readers
-- whose holds overlap keeps the read side held for ever and the writer never gets in (the
-- starvation Redisson's RReadWriteLock allows: its read lock is granted whenever the mode is
-- read). An owner that holds the read or the write side already takes a read hold at once,
-- writers in line or not: it would otherwise wait for itself.
--
-- Idempotent: the count is set, not incremented (acquire.lua says why).

local owner = ARGV[1]
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Waiters that stopped calling (a dead process) leave the line: a dead writer cannot keep
-- readers out for longer than one place.
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now_ms)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now_ms)

-- Written again in rw_write.lua, on purpose: a script cannot call another (lock/README.md,
-- "Why the line's head is found twice").
local function wait(ms)
    local keep = tonumber(ARGV[4])
    if keep > 0 then
        redis.call('ZADD', KEYS[5], now_ms + keep, owner)
        if redis.call('PTTL', KEYS[5]) < keep then
            redis.call('PEXPIRE', KEYS[5], keep)
        end
    end
    return {0, ms}
end

local mine = redis.call('HEXISTS', KEYS[2], owner) == 1 or redis.call('HEXISTS', KEYS[1], owner) == 1
if not mine then
    if redis.call('EXISTS', KEYS[1]) == 1 then
        return wait(redis.call('PTTL', KEYS[1]))
    end
    local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
    if first[1] ~= nil then
        -- A writer waits: let the readers in already drain; it calls us once it is done.
        return wait(math.max(tonumber(first[2]) - now_ms, 1))
    end
end

if redis.call('EXISTS', KEYS[2]) == 0 then
    if redis.call('EXISTS', KEYS[3]) == 0 then
        redis.call('SET', KEYS[3], t[1] .. string.format('%06d', tonumber(t[2])))
    end
    redis.call('INCR', KEYS[3])
end
redis.call('HSET', KEYS[2], owner, ARGV[3])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
    -- Never shorten: another reader's lease may run longer than ours.
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
redis.call('ZREM', KEYS[5], owner)
return {tonumber(ARGV[3]), tonumber(redis.call('GET', KEYS[3]))}
