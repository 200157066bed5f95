-- release.lua: give back one hold of the lock; at zero hand it to the first waiter in line.
--
-- KEYS[1]  the lock: a hash {owner -> hold count} with a TTL
-- KEYS[2]  the fencing counter (the grant's token)
-- KEYS[3]  the waiters' line, KEYS[4] their liveness (see acquire.lua)
-- ARGV[1]  the owner, "<process id>:<thread number>"
-- ARGV[2]  the release channel, "<lock>:released": a message naming nobody goes there, to
--          every process; one naming a waiter goes to "<ARGV[2]>:<its process id>" (the
--          owner's text before ':'), the channel of the one process that has it
-- ARGV[3]  the hold count the owner keeps after this call: its own count, kept by the
--          client, minus one (0: give the lock back)
--
-- Returns the owner's remaining hold count (0: the owner gave it back: the lock is free, or
-- granted to the first live waiter in line), or -1 when ARGV[1] does not hold the lock; then
-- nothing at all is changed.
--
-- The grant: the first waiter becomes the holder inside this script (hold count 1, a new
-- fencing token, a lease as long as its place in line had left) and the message on its
-- process's channel says so: "<owner> <token> <release time in us>". The head of
-- acquire.lua's line is found here a second time, in a loop of four lines: a script run by
-- EVALSHA cannot call another script's functions (lock/README.md, "Fair hand-off").
--
-- Why a channel per process for a named waiter: on one shared channel every process's
-- subscriber thread woke at every hand-off, and all but the waiter's found nobody of theirs
-- named: with three replicas on one hot lock, two wasted wake-ups per sale, each a context
-- switch (lock/README.md, "One channel per process").
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

-- The channel of the process an owner lives in: its id is the owner's text before ':'.
local function process_channel(owner)
    return ARGV[2] .. ':' .. string.match(owner, '^[^:]*')
end

local count = tonumber(ARGV[3])
if count > 0 then
    -- Still held by the same owner (a reentrant hold was given back). The lease is left
    -- as it is.
    redis.call('HSET', KEYS[1], ARGV[1], count)
    return count
end

redis.call('DEL', KEYS[1])
-- The lock is free. If someone is in line, it goes to the first of them at once (a grant):
-- the waiter then starts its section as soon as the message reaches it, without a round
-- trip of its own to take the lock, so the serial order loses one round trip per hand-off.
-- Lapsed places at the head are dropped first (as in acquire.lua): a dead waiter is not
-- granted anything. The clock is read only when someone is in line.
-- Written again in acquire.lua, on purpose (lock/README.md, "Why the line's head is found twice").
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
local now, until_ms
if first ~= nil then
    now = redis.call('TIME')
    local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    while first ~= nil do
        until_ms = tonumber(redis.call('ZSCORE', KEYS[4], first) or '0')
        if until_ms > now_ms then
            break
        end
        redis.call('ZREM', KEYS[3], first)
        redis.call('ZREM', KEYS[4], first)
        first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    end
    -- The grant lasts only as long as the waiter's place would have: a waiter that died
    -- costs the others at most that (the liveness period), not a lease. A waiter that takes
    -- it renews it to a full lease at once (its watchdog, or its own acquire.lua). Its
    -- token is a new holding's, as acquire.lua makes them. No counter (Redis lost its
    -- data): no grant; the waiter is only named, and its acquire.lua starts the counter.
    if first ~= nil and redis.call('EXISTS', KEYS[2]) == 1 then
        redis.call('ZREM', KEYS[3], first)
        redis.call('ZREM', KEYS[4], first)
        -- The next token, past the counter and the clock in microseconds (acquire.lua's
        -- next_token, written again here on purpose: EVALSHA scripts share no functions).
        local token = redis.call('INCR', KEYS[2])
        local clock_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
        if clock_us > token then
            token = clock_us
            redis.call('SET', KEYS[2], string.format('%d', token))
        end
        redis.call('HSET', KEYS[1], first, 1)
        redis.call('PEXPIRE', KEYS[1], until_ms - now_ms)
        -- "<owner> <token> <release time in us>": the waiter measures the hand-off from it.
        -- (%d: a token of 16 digits would print as 1.7e+15 with Lua's own conversion.)
        redis.call('PUBLISH', process_channel(first),
                   string.format('%s %d %s%06d', first, token, now[1], tonumber(now[2])))
        return 0
    end
end
-- Nobody in line: "" to every process, and each then wakes its oldest waiter, if any (one
-- that does not wait in line, or whose place Redis lost). Or a waiter named without a grant,
-- on its process's channel.
if first == nil then
    redis.call('PUBLISH', ARGV[2], '')
else
    redis.call('PUBLISH', process_channel(first), first)
end
return 0
