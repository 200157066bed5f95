-- fence_raise.lua: raise a lock's fencing counter to at least a value the storage has seen.
--
-- KEYS[1]  the fencing counter (an integer that only grows)
-- ARGV[1]  the largest token of this counter that the storage has accepted
--
-- Returns the counter after the call.
--
-- Why: after a failover, the promoted replica may hold a counter a few INCRs behind the old
-- master's (replication is asynchronous), so the next tokens are at or below what the storage
-- already accepted, and every sale is refused (lock_lost) until INCR catches up. The service,
-- told the stored token by its refusal, raises the counter past it here: one refused sale per
-- replica, not one per missing INCR. Never lowers it (tokens only grow); a counter that does
-- not exist is left to acquire.lua, which starts it at Redis' clock.
-- Why a script: "is it lower?" and "set it" must be one step, or a raise could undo an INCR
-- made in between.

local at_least = tonumber(ARGV[1])
local now = tonumber(redis.call('GET', KEYS[1]) or '-1')
if now >= 0 and now < at_least then
    redis.call('SET', KEYS[1], at_least)
    return at_least
end
return now
