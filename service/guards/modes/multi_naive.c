/*
 * modes/multi_naive.c - the "multi-naive" mode: the redis mode's lock (watchdog, fenced), a
 * cart's locks taken in the order the cart lists them (mode.cart, service/sale/order.c) instead of
 * in ascending goods id.
 *
 * Two carts naming the same goods in opposite orders each hold one lock and wait for the
 * other's, until both wait bounds run out: 503 lock_timeout for both, nothing sold. Redis
 * has no deadlock detector to break the cycle (PostgreSQL has: pg-multi-naive). Liveness,
 * not safety: the fence still keeps every sale right. A single deduct is the redis mode's.
 */
#include "service/guards/guards.h"

int guard_multi_naive_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                            size_t detail_len)
{
    return guards__redis_enter(env, goods_id, env->lease_ms, true, hold, detail, detail_len);
}
