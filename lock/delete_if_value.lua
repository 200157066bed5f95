-- delete_if_value.lua: delete a plain string lock only while it still holds our token.
--
-- KEYS[1]  the lock: a string whose value is the owner's token (SET key token NX PX lease)
-- ARGV[1]  the caller's token
--
-- Returns 1 when the key held ARGV[1] and was deleted, 0 otherwise (missing, or another
-- owner's: then nothing is changed).
--
-- Used by the ladder's owner-lua rung (lock/naive.h). Why a script: "is it mine?" and
-- "delete it" as two commands (GET, then DEL) leave a gap in which the lease can run out
-- and another owner take the lock; the DEL would then delete the other owner's lock. Redis
-- runs a script as one step, so there is no such gap.

if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
