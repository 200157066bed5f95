/*
 * modes/redis_batch.c - the "redis-batch" mode: the redis mode's lock (watchdog, fenced),
 * taken once per batch. A replica's concurrent requests for one goods are queued
 * (service/sale/batch.c); the request at the head of the queue enters this guard, takes every
 * request that came meanwhile, and sells them all in one transaction under one holding of
 * the lock and one fencing token: the lock's round trip and the commit are paid once per
 * batch, not once per sale. A request with a hook (fault injection, the lab) runs alone,
 * under this same guard.
 */
#include "service/guards/guards.h"

int guard_redis_batch_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                            size_t detail_len)
{
    return guards__redis_enter(env, goods_id, env->lease_ms, true, hold, detail, detail_len);
}
