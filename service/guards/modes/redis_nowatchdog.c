/*
 * modes/redis_nowatchdog.c - rung 7, "redis-nowatchdog": the reentrant lock of lock/ with a
 * fixed lease (LOCK_FIXED_LEASE_MS) and no renewal, and no fencing token yet.
 *
 * Reentrancy and the owner check are right now. What is left is time: a section that runs
 * longer than the lease (a slow query, a pause) loses the lock while it works, and a second
 * holder reads the stock beside it. The check before COMMIT (lock_is_held) catches a
 * holder that notices; one paused after that check (fault injection's pause-before-commit)
 * commits anyway. The next rung's watchdog keeps the lease alive for as long as the holder
 * runs.
 */
#include "service/guards/guards.h"

int guard_redis_nowatchdog_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                                 size_t detail_len)
{
    return guards__redis_enter(env, goods_id, env->fixed_lease_ms, false, hold, detail, detail_len);
}
