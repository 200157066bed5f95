/*
 * modes/redis_nofence.c - rung 8, "redis-nofence": the lock of lock/ with everything (owner,
 * reentrancy, watchdog, bounded wait, wake-up on release) except the fencing token.
 *
 * The watchdog renews the lease while the process runs. It cannot while the whole process
 * is stopped (a long GC pause, a VM migration, SIGSTOP): the lease runs out, another
 * replica takes the lock and reads the stock, and the stopped holder, resumed, commits the
 * write it had prepared. Fault injection's stop-before-commit stops the process right after
 * its last check. The `redis` rung is this one plus the token that PostgreSQL checks.
 * The tx-inside pitfall uses this guard too (see modes.c).
 */
#include "service/guards/guards.h"

int guard_redis_nofence_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                              size_t detail_len)
{
    return guards__redis_enter(env, goods_id, env->lease_ms, false, hold, detail, detail_len);
}
