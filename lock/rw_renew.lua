-- rw_renew.lua: the watchdog extends the lease of one side of a read-write lock.
--
-- KEYS[1]  the side: a hash {owner -> hold count} with a TTL
-- KEYS[2]  that side's counter (the write side's fencing counter, the read side's count of
--          times it was taken from free)
-- ARGV[1]  the owner
-- ARGV[2]  the lease, in milliseconds
-- ARGV[3]  the holding's token
--
-- Returns 1 when the holding is still there (its side now lives at least ARGV[2] more ms),
-- 0 when it is gone. As renew.lua, with one difference: the read side is shared, so a
-- renewal never shortens the TTL another reader's longer lease set.

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 and redis.call('GET', KEYS[2]) == ARGV[3] then
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    return 1
end
return 0
