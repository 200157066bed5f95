/*
 * modes/owner_get_del.c - rung 5, "owner-get-del": the lock's value is the holder's token;
 * the release reads it (GET), compares it in C, then deletes (DEL): two commands.
 *
 * The token fixes rung 4's "DEL removes another's lock", except in the gap between the GET
 * and the DEL: a lease that runs out there lets another holder in, and our DEL, already
 * decided, deletes its lock. A third request then enters beside the second. Fault
 * injection's pause-before-release puts a pause exactly in that gap.
 */
#include <string.h>

#include "lock/naive.h"
#include "service/guards/guards.h"

int guard_owner_get_del_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                              size_t detail_len)
{
    return guards__poll(env, "owner-get-del", goods_id, true, guards__try_owned_set, hold, detail,
                        detail_len);
}

void guard_owner_get_del_leave(guard_env *env, guard_hold *hold)
{
    char value[sizeof(hold->token)];
    bool found = false;

    if (naive_get(env->lock, hold->name, value, sizeof(value), &found) != LOCK_OK || !found ||
        strcmp(value, hold->token) != 0)
        return;                         /* not ours (any more): leave it */
    guards__pause_before_release(hold); /* the gap: the lease may run out right here */
    (void)naive_del(env->lock, hold->name);
}
