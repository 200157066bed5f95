/*
 * modes/redis_sharded.c - the "redis-sharded" mode: the goods' stock in segments, each a row
 * with a lock of lock/ and a fencing token of its own, so that sales of one goods run side by
 * side (service/sale/sharded.c runs the sale over the segments, through mode_parts). A
 * segment's lock is the lock of lock/ with the watchdog's lease and its fencing token, named
 * "lock:goods:N:seg:K" (lock_names.h). A request with a hook (fault injection, the lab)
 * sells from the goods row alone, under the redis mode's lock on the whole goods, which
 * this guard's enter takes.
 */
#include <stdio.h>

#include "service/guards/guards.h"
#include "service/guards/lock_names.h"

int guard_redis_sharded_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                              size_t detail_len)
{
    return guards__redis_enter(env, goods_id, env->lease_ms, true, hold, detail, detail_len);
}

static int ready(guard_env *env, char *detail, size_t detail_len)
{
    if (env->lock != NULL)
        return GUARD_OK;
    snprintf(detail, detail_len, "redis lock client not configured");
    return GUARD_ERR_UNAVAILABLE;
}

static int enter_segment(guard_env *env, int64_t goods_id, int seg, int64_t wait_ms,
                         guard_hold *hold, char *detail, size_t detail_len)
{
    char name[sizeof(hold->name)];

    goods_segment_lock_name(env->lock, goods_id, seg, name, sizeof(name));
    return guards__redis_take(env, name, wait_ms, env->lease_ms, true, hold, detail, detail_len);
}

const mode_parts guard_redis_sharded_parts = {ready, enter_segment};
