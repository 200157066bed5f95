/*
 * modes/redis.c - the "redis" mode: the Redis lock of lock/ on "lock:goods:<id>", with a
 * bounded wait and watchdog renewal (guards_redis.c). Every replica asks the same Redis, so
 * it holds across replicas. Its fencing token claims the goods row at the read
 * (db_stock_claim), so a holder that lost its lock mid-section cannot sell from a stock
 * another holder also read.
 */
#include "service/guards/guards.h"

int guard_redis_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                      size_t detail_len)
{
    return guards__redis_enter(env, goods_id, env->lease_ms, true, hold, detail, detail_len);
}
