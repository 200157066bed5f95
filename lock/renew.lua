-- renew.lua: the watchdog extends the lease of a holding, only if it is still that holding.
--
-- KEYS[1]  the lock: a hash {owner -> hold count} with a TTL
-- KEYS[2]  the fencing counter
-- ARGV[1]  the owner, "<process id>:<thread number>"
-- ARGV[2]  the new lease, in milliseconds
-- ARGV[3]  the holding's fencing token
--
-- Returns 1 when the lease was extended, 0 when the holding is gone: the lock expired (a
-- long pause, Redis lost it) or it is held by someone else now. The owner check keeps the
-- watchdog from extending another owner's lock; the token check keeps it from extending a
-- newer holding of the same thread (released and taken again while a renewal was on its
-- way), whose lease its taker chose.
--
-- Why a script: "is it still mine?" and "extend it" must be one step, like in release.lua.

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 and redis.call('GET', KEYS[2]) == ARGV[3] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
end
return 0
