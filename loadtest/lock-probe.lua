-- lock-probe.lua - what loadtest/ladder's probe sees of one lock key, for its timelines.
--
-- Returns {PTTL, holder}: the key's remaining lease in ms (-1 no expiry, -2 no key) and who
-- holds it as Redis stores it (a string lock's value, or the fields of the reentrant lock's
-- hash: its owners). Read in one script so that the two belong to the same instant. It only
-- reads: the probe must not change what it watches.
local kind = redis.call('TYPE', KEYS[1]).ok
local holder = ''
if kind == 'string' then
    holder = redis.call('GET', KEYS[1])
elseif kind == 'hash' then
    holder = table.concat(redis.call('HKEYS', KEYS[1]), ',')
end
return {redis.call('PTTL', KEYS[1]), holder}
