-- leave.lua: a waiter gives up (its wait ran out, or an error ended it) and leaves the line.
--
-- KEYS[1]  the lock, KEYS[2] the waiters' line, KEYS[3] their liveness, KEYS[4] the fencing
--          counter (see acquire.lua)
-- ARGV[1]  the owner leaving, ARGV[2] the release channel (the next one is told on
--          "<ARGV[2]>:<its process id>", as release.lua tells a waiter)
-- ARGV[3]  the hold count the owner would have had, ARGV[4] its lease in ms (as for
--          acquire.lua)
--
-- Returns 1 if the owner was in line, 0 if not (already taken for dead, or never queued);
-- or {hold count, fencing token} when a release granted the lock to the owner after its
-- last call (release.lua): the owner then takes it after all, rather than leave a lock to
-- run out that nobody will use.
--
-- Why tell the next one: the release that freed the lock may have named the leaving
-- waiter, which will now never take it. Without this message, the next waiter would only
-- learn of the free lock when it next calls on its own, up to a liveness period later.

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    return {tonumber(ARGV[3]), tonumber(redis.call('GET', KEYS[4]) or '0')}
end

local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
local was_in = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if first == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
    local next_one = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if next_one ~= nil then
        redis.call('PUBLISH', ARGV[2] .. ':' .. string.match(next_one, '^[^:]*'), next_one)
    end
end
return was_in
