-- acquire.lua: take the lock for an owner, or say how long it is still held.
--
-- KEYS[1]  the lock: a hash {owner -> hold count} whose TTL is the lease
-- KEYS[2]  the fencing counter: an integer that only grows, no TTL
-- ARGV[1]  the owner, "<process id>:<thread number>"
-- ARGV[2]  the lease, in milliseconds
-- ARGV[3]  the hold count the owner has once this call succeeds: its own count, kept by the
--          client, plus one
--
-- Returns {hold count, fencing token} when ARGV[1] now holds the lock, or, when another
-- owner holds it, its remaining TTL in milliseconds (a plain integer; -1 if it has none).
--
-- Idempotent: the count is set, not incremented. When a reply is lost (a timeout, a dropped
-- connection) the client cannot know whether the script ran; running it again, or running
-- the next release, leaves Redis with the count the client keeps, never one more than the
-- client will ever give back (which the watchdog would renew for ever).
--
-- Why a script: "is it free?" and "take it" must be one step. As two commands, two clients
-- could both see the lock free and both take it. Redis runs a script to its end before it
-- runs any other client's command, so nothing can come between the check and the change.

if redis.call('EXISTS', KEYS[1]) == 0 then
    -- Free: a new holding. Its token is the next value of the counter, so every holding
    -- ever made of this lock has a larger token than the one before.
    if redis.call('EXISTS', KEYS[2]) == 0 then
        -- No counter: first use, or Redis lost its data (a restart without persistence, a
        -- failover to a replica that had not received the counter yet). Start it at Redis'
        -- clock in microseconds rather than at 0, so that tokens still grow past every
        -- token handed out before (which were at most their counter's start plus one per
        -- acquisition: far fewer than a million a second).
        local now = redis.call('TIME')
        redis.call('SET', KEYS[2], now[1] .. string.format('%06d', tonumber(now[2])))
    end
    local token = redis.call('INCR', KEYS[2])
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {tonumber(ARGV[3]), token}
end

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
    -- Ours already (a reentrant take, or this very call run again after its reply was lost):
    -- set the count and restart the lease. Nobody else can have moved the counter while we
    -- hold the lock, so its value is still our holding's token.
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    local token = tonumber(redis.call('GET', KEYS[2]) or '0')
    return {tonumber(ARGV[3]), token}
end

-- Someone else's: the caller may sleep this long before the lease runs out.
return redis.call('PTTL', KEYS[1])
