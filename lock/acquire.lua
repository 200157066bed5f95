-- acquire.lua: take the lock for an owner when it is free and the owner's turn, or say how
-- long to wait.
--
-- KEYS[1]  the lock: a hash {owner -> hold count} whose TTL is the lease
-- KEYS[2]  the fencing counter: an integer that only grows, no TTL
-- KEYS[3]  the waiters' line: a sorted set {owner -> arrival time in microseconds}
-- KEYS[4]  the waiters' liveness: a sorted set {owner -> ms (Redis clock) after which the
--          owner, if it has not come back, is taken for dead and leaves the line}
-- ARGV[1]  the owner, "<process id>:<thread number>"
-- ARGV[2]  the lease, in milliseconds
-- ARGV[3]  the hold count the owner has once this call succeeds: its own count, kept by the
--          client, plus one
-- ARGV[4]  how long (ms) the owner's place in line lasts unless it calls again; 0: do not
--          queue (a single try, or a client that does not wait in line)
-- ARGV[5]  the release channel: when this call drops dead waiters, the new first in line is
--          told on "<ARGV[5]>:<its process id>" (release.lua says why a channel per process)
-- ARGV[6]  the token of the holding the owner knows it has ("0": none it knows of)
--
-- Returns {hold count, fencing token} when ARGV[1] now holds the lock: a take, a reentrant
-- take, or the take of a lock release.lua granted it while it waited. A token names one
-- holding, and every holding's is larger than any before it (next_token). Otherwise
-- {0, fencing counter, ms}: how many ms the caller may sleep before it tries again (-1: no
-- bound but its own deadline): the holder's TTL, or, when the lock is free but another
-- waiter is first in line, how long that waiter has to come and take it.
--
-- Idempotent: the count is set, not incremented. When a reply is lost (a timeout, a dropped
-- connection) the client cannot know whether the script ran; running it again, or running
-- the next release, leaves Redis with the count the client keeps, never one more than the
-- client will ever give back (which the watchdog would renew for ever).
--
-- Why a script: "is it free, and is it my turn?" and "take it" must be one step. As separate
-- commands, two clients could both see the lock free and both take it. Redis runs a script
-- to its end before it runs any other client's command, so nothing comes between.
--
-- Why a line: without it, a release is won by whichever process's waiter reaches Redis
-- first, and each process sends one waiter per release. Every process then wins about the
-- same share of the hand-offs however many of its threads wait, so one that fell behind
-- never catches up (lock/README.md, "Fair hand-off", has the measurements). With the line,
-- the lock goes to the waiter that has waited longest, whichever process it is in.

local owner = ARGV[1]

-- Redis' clock, read once and only when needed: an uncontended take never reads it.
local clock = nil
local function now()
    if clock == nil then
        local t = redis.call('TIME')
        clock = {tonumber(t[1]), tonumber(t[2])}
    end
    return clock
end
local function now_ms()
    return now()[1] * 1000 + math.floor(now()[2] / 1000)
end

-- The first in line whose place has not lapsed, its place's end (ms), and whether lapsed
-- places were dropped from the head on the way. A waiter that stopped calling (its process
-- died, or lost Redis) leaves the line once it reaches the head, so that a dead waiter cannot
-- keep a free lock from everyone else for long; one behind the head harms nobody until then
-- (and the line's keys expire when nobody calls). A place with no end at all counts as lapsed.
-- Written again in release.lua, on purpose (lock/README.md, "Why the line's head is found twice").
local function first_alive()
    local dropped = false
    while true do
        local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
        if first == nil then
            return nil, dropped, 0
        end
        local until_ms = tonumber(redis.call('ZSCORE', KEYS[4], first) or '0')
        if until_ms > now_ms() then
            return first, dropped, until_ms
        end
        redis.call('ZREM', KEYS[3], first)
        redis.call('ZREM', KEYS[4], first)
        dropped = true
    end
end

-- Joins the line, or keeps the caller's place in it (NX: the arrival time is the first one),
-- and pushes its liveness forward. The line's keys expire when nobody calls any more.
local function stay_in_line()
    local keep = tonumber(ARGV[4])
    if keep <= 0 then
        return
    end
    redis.call('ZADD', KEYS[3], 'NX', now()[1] * 1000000 + now()[2], owner)
    redis.call('ZADD', KEYS[4], now_ms() + keep, owner)
    for i = 3, 4 do
        if redis.call('PTTL', KEYS[i]) < keep then
            redis.call('PEXPIRE', KEYS[i], keep)
        end
    end
end

-- The token of a new holding: past the counter, and past Redis' clock in microseconds. The
-- counter alone only grows on one server: after a failover to a replica that had not yet
-- received the last INCRs (replication is asynchronous), or a restart without persistence,
-- it would hand out again tokens that the storage has already seen, and two holdings would
-- share one. The clock carries the tokens past those (a lock is taken far less often than a
-- million times a second, so the counter never runs ahead of it for long). The counter is
-- set to the token, which is what renew.lua and a reentrant take compare with.
-- Written again in release.lua, on purpose (a script run by EVALSHA cannot call another's).
local function next_token()
    local token = redis.call('INCR', KEYS[2])
    local clock_us = now()[1] * 1000000 + now()[2]
    if clock_us > token then
        token = clock_us
        redis.call('SET', KEYS[2], string.format('%d', token))
    end
    return token
end

-- Not taken: {0, the fencing counter now, ms the caller may sleep}. The counter lets the
-- caller tell a grant made for this wait (release.lua: a larger token) from a message about
-- an earlier one that arrives late.
local function waiting(ms)
    return {0, tonumber(redis.call('GET', KEYS[2]) or '0'), ms}
end

if redis.call('EXISTS', KEYS[1]) == 0 then
    local first, dropped, until_ms = first_alive()
    if first ~= nil and first ~= owner then
        -- Free, but someone has waited longer: the caller waits behind them. If the head of
        -- the line just changed (lapsed places dropped), nobody told the new head: tell it.
        stay_in_line()
        if dropped then
            redis.call('PUBLISH', ARGV[5] .. ':' .. string.match(first, '^[^:]*'), first)
        end
        return waiting(math.max(until_ms - now_ms(), 1))
    end
    if first == owner then
        redis.call('ZREM', KEYS[3], owner)
        redis.call('ZREM', KEYS[4], owner)
    end
    -- A new holding, with a token larger than any before it.
    local token = next_token()
    redis.call('HSET', KEYS[1], owner, ARGV[3])
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {tonumber(ARGV[3]), token}
end

if redis.call('HEXISTS', KEYS[1], owner) == 1 then
    -- Ours already (a reentrant take, this very call run again after its reply was lost, or
    -- a grant from release.lua that the owner takes this way: a lease it chose itself, a
    -- grant it did not hear of): set the count and restart the lease. While we hold it no
    -- other take moves the counter, so a counter equal to the token the owner knows says the
    -- holding is the one it knows, with the same token. Otherwise the owner does not know
    -- this holding's token (an answer was lost), or the counter moved under it (raised by
    -- fence_raise.lua past a token the storage saw, after a failover): its old token may be
    -- another holding's now, so it gets a new one, and its old one is refused from now on.
    redis.call('HSET', KEYS[1], owner, ARGV[3])
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
    if counter > 0 and counter == tonumber(ARGV[6] or '0') then
        return {tonumber(ARGV[3]), counter}
    end
    return {tonumber(ARGV[3]), next_token()}
end

-- Someone else's: wait in line; the caller may sleep until the lease runs out.
stay_in_line()
return waiting(redis.call('PTTL', KEYS[1]))
