-- leave.lua: a waiter gives up (its wait ran out, or an error ended it) and leaves the line.
--
-- KEYS[1]  the lock, KEYS[2] the waiters' line, KEYS[3] their liveness (see acquire.lua)
-- ARGV[1]  the owner leaving, ARGV[2] the release channel (the next one is told on
--          "<ARGV[2]>:<its process id>", as release.lua tells a waiter)
--
-- Returns 1 if the owner was in line, 0 if not (already taken for dead, or never queued); or
-- 2 when the owner holds the lock: a release granted it to the owner after its last call
-- (release.lua), or the owner's last acquire.lua ran and its answer was lost. Nothing is
-- changed then: the owner takes the holding with acquire.lua after all, rather than leave a
-- lock to run out that nobody will use. acquire.lua gives it its count, its lease and its
-- token (the one the owner knows while the counter still says it, else a new one): a token
-- answered here would be the counter, which fence_raise.lua may have moved under the
-- holding to a token another holding presented, and that check is acquire.lua's, written
-- once.
--
-- Why tell the next one: the release that freed the lock may have named the leaving
-- waiter, which will now never take it. Without this message, the next waiter would only
-- learn of the free lock when it next calls on its own, up to a liveness period later.

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
    return 2
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
