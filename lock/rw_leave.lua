-- rw_leave.lua: a waiter of a read-write lock gives up its place in line.
--
-- KEYS[1]  the line it leaves: the writers' or the readers' (a sorted set {owner -> ms})
-- KEYS[2]  the readers' line
-- KEYS[3]  the write side (a hash)
-- ARGV[1]  the owner
-- ARGV[2]  the release channel (rw_release.lua)
--
-- Returns 1 when the owner was in the line, 0 otherwise. A writer that leaves may have been
-- the one keeping readers out (rw_read.lua): when no writer is left in line and nobody
-- writes, every reader in line is called, rather than left to sleep until its next try.

local owner = ARGV[1]
local was = redis.call('ZREM', KEYS[1], owner)
if KEYS[1] ~= KEYS[2] and redis.call('ZCARD', KEYS[1]) == 0 and
        redis.call('EXISTS', KEYS[3]) == 0 then
    for _, reader in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
        redis.call('PUBLISH', ARGV[2] .. ':' .. string.match(reader, '^[^:]*'), reader)
    end
end
return was
