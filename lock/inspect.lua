-- inspect.lua: who holds the lock, read in one step (for the live page; changes nothing).
--
-- KEYS[1]  the lock: a hash {owner -> hold count} with a TTL
-- KEYS[2]  the fencing counter
--
-- Returns {owner, hold count, remaining TTL in ms, fencing counter}; owner "" and count 0
-- when the lock is free. The counter is the last token handed out: while the lock is held,
-- its holder's token.
--
-- Why a script: as four commands, the lock could change hands between them, and the owner,
-- its count and its TTL would describe three different holdings.

local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
local pairs = redis.call('HGETALL', KEYS[1])
if #pairs == 0 then
    return {'', 0, -2, fence}
end
return {pairs[1], tonumber(pairs[2]), redis.call('PTTL', KEYS[1]), fence}
