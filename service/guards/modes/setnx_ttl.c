/*
 * modes/setnx_ttl.c - rung 4, "setnx-ttl": SET key 1 NX PX lease to take, DEL to give back.
 *
 * The expiry cures rung 3's wedge: a dead holder's key expires. It brings the next flaw: a
 * section that outlasts the lease. Then a second request takes the expired lock and reads
 * the stock while the first is still inside (two in the section), and the first one's DEL,
 * which checks no owner, deletes the second one's lock and lets a third in.
 */
#include "lock/naive.h"
#include "service/guards/guards.h"

static int try_set_px(guard_env *env, guard_hold *hold, bool *acquired)
{
    return naive_set_nx_px(env->lock, hold->name, "1", env->fixed_lease_ms, acquired);
}

int guard_setnx_ttl_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                          size_t detail_len)
{
    return guards__poll(env, "setnx-ttl", goods_id, false, try_set_px, hold, detail, detail_len);
}

void guard_setnx_ttl_leave(guard_env *env, guard_hold *hold)
{
    guards__pause_before_release(hold);
    (void)naive_del(env->lock, hold->name); /* whoever holds it now: the flaw */
}
