/*
 * modes/setnx.c - rung 3, "setnx": SETNX key 1 to take, DEL to give back, polling to wait.
 *
 * The key has no expiry and no owner. While every holder lives, it excludes as well as any
 * lock. But a holder that dies inside its section (a crash, a kill -9, a lost machine)
 * never runs its DEL, and nothing else ever will: every later request for the goods waits
 * out its bound and answers 503 lock_timeout, until a person deletes the key by hand.
 * Fault injection's crash-in-section shows it.
 */
#include "lock/naive.h"
#include "service/guards/guards.h"

static int try_setnx(guard_env *env, guard_hold *hold, bool *acquired)
{
    return naive_setnx(env->lock, hold->name, acquired);
}

int guard_setnx_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                      size_t detail_len)
{
    return guards__poll(env, "setnx", goods_id, false, try_setnx, hold, detail, detail_len);
}

void guard_setnx_leave(guard_env *env, guard_hold *hold)
{
    guards__pause_before_release(hold);
    (void)naive_del(env->lock, hold->name); /* a failed DEL leaves the goods locked: the flaw */
}
