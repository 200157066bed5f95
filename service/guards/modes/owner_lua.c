/*
 * modes/owner_lua.c - rung 6, "owner-lua": the lock's value is the holder's token, and the
 * release compares and deletes in one Lua step (lock/delete_if_value.lua).
 *
 * The release is now right. Two flaws are left, which the next rungs fix:
 *   - it is not reentrant: a section that calls a helper guarded by the same lock (fault
 *     injection's `nested`) waits for itself, out to the wait bound: 503 lock_timeout;
 *   - the lease is fixed: a section that outlasts it has a second holder beside it.
 */
#include "lock/naive.h"
#include "service/guards/guards.h"

int guard_owner_lua_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                          size_t detail_len)
{
    return guards__poll(env, "owner-lua", goods_id, true, guards__try_owned_set, hold, detail,
                        detail_len);
}

void guard_owner_lua_leave(guard_env *env, guard_hold *hold)
{
    bool deleted = false;

    guards__pause_before_release(hold);
    (void)naive_delete_if_value(env->lock, hold->name, hold->token, &deleted);
}
