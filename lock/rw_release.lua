-- rw_release.lua: give back holds of one side of a read-write lock, and call who may go on.
--
-- KEYS[1]  the side given back: the write side or the read side (a hash {owner -> count})
-- KEYS[2]  the other side
-- KEYS[3]  the writers in line: a sorted set {owner -> ms its place lapses}
-- KEYS[4]  the readers in line: the same
-- ARGV[1]  the owner
-- ARGV[2]  the release channel, "<lock>:released"; a waiter is called on
--          "<channel>:<its process id>" with its owner as the message (release.lua's form,
--          with no grant: the waiter takes the lock with its own next try)
-- ARGV[3]  the hold count the owner keeps on this side (its own count minus one; 0: all)
--
-- Returns the count left, or -1 when the owner held nothing on this side (nothing changes).
--
-- Who is called once the side is free: a writer in line first (the oldest place to lapse,
-- which is the one that called least recently), and only when both sides are free, since
-- it could take nothing otherwise; with no writer in line, once the write side is free,
-- every reader in line (readers share: they all go on at once). So a writer released wakes
-- the readers it kept out, and the last reader out wakes the writer that waits for it.
-- A side written as one hash per side lets the watchdog renew each with one key (rw_renew).

local owner = ARGV[1]
if redis.call('HEXISTS', KEYS[1], owner) == 0 then
    return -1
end
local keep = tonumber(ARGV[3])
if keep > 0 then
    redis.call('HSET', KEYS[1], owner, keep)
    return keep
end
redis.call('HDEL', KEYS[1], owner)
if redis.call('EXISTS', KEYS[1]) == 1 then
    return 0 -- other readers still hold the read side
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now_ms)

local function call(waiter)
    redis.call('PUBLISH', ARGV[2] .. ':' .. string.match(waiter, '^[^:]*'), waiter)
end

local writer = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if writer ~= nil then
    if redis.call('EXISTS', KEYS[2]) == 0 then
        call(writer)
    end
    return 0
end
for _, reader in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
    call(reader)
end
return 0
