-- leave.lua: a waiter gives up (its wait ran out, or an error ended it) and leaves the line.
--
-- KEYS[1]  the lock, KEYS[2] the waiters' line, KEYS[3] their liveness (see acquire.lua)
-- ARGV[1]  the owner leaving, ARGV[2] the release channel
--
-- Returns 1 if the owner was in line, 0 if not (already taken for dead, or never queued).
--
-- Why tell the next one: the release that freed the lock may have named the leaving
-- waiter, which will now never take it. Without this message, the next waiter would only
-- learn of the free lock when it next calls on its own, up to a liveness period later.

local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
local was_in = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if first == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
    local next_one = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if next_one ~= nil then
        redis.call('PUBLISH', ARGV[2], next_one)
    end
end
return was_in
