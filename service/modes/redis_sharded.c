/*
 * modes/redis_sharded.c - the "redis-sharded" mode: the goods' stock in segments, each a row
 * with a lock of lock/ and a fencing token of its own, so that sales of one goods run side by
 * side (service/sharded.c runs the sale over the segments). A request with a hook (fault
 * injection, the lab) sells from the goods row alone, under the redis mode's lock on the
 * whole goods, which this guard takes.
 */
#include "service/guards.h"

int guard_redis_sharded__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                               size_t detail_len)
{
    return guards__redis_enter(env, goods_id, env->lease_ms, true, hold, detail, detail_len);
}
