/*
 * modes/cache_rwlock.c - the "cache-rwlock" mode: cache-aside with the read-write lock of
 * lock/rwlock.h. The sale takes the redis mode's lock (fenced), then the write side of
 * "rwlock:goods:<id>", and gives the write side back only after its commit and the cache
 * entry's delete; a cached read that misses holds the read side from its database read to its
 * cache write (service/guards/cache.c). Both sales and fills take the two in one order (the goods
 * lock, then a side), so nothing waits in a cycle.
 */
#include <inttypes.h>
#include <stdio.h>

#include "lock/rwlock.h"
#include "service/guards/cache.h"
#include "service/guards/guards.h"
#include "service/guards/outage.h"
#include "service/log.h"

typedef struct rw_state {
    int64_t goods_id;
    char rwlock[48]; /* the read-write lock's name */
} rw_state;
GUARD_STATE_FITS(rw_state);

int guard_cache_rwlock_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                             size_t detail_len)
{
    rw_state *st;
    int rc = guards__redis_enter(env, goods_id, env->lease_ms, true, hold, detail, detail_len);

    if (rc != GUARD_OK)
        return rc;
    st = GUARD_STATE(rw_state, hold);
    st->goods_id = goods_id;
    cache_rwlock_name(env->lock, goods_id, st->rwlock, sizeof(st->rwlock));
    rc = lock_rw_lock(env->lock, st->rwlock, LOCK_RW_WRITE, env->wait_ms, env->lease_ms, NULL);
    if (rc == LOCK_OK)
        return GUARD_OK;
    guards__redis_leave(env, hold);
    if (rc == LOCK_ERR_TIMEOUT) {
        snprintf(detail, detail_len, "%s (write side) not had within %" PRId64 " ms", st->rwlock,
                 env->wait_ms);
        return GUARD_ERR_TIMEOUT;
    }
    outage_redis("Redis", rc, "take write side", detail, detail_len);
    return GUARD_ERR_UNAVAILABLE;
}

int guard_cache_rwlock_still_held(guard_env *env, const guard_hold *hold)
{
    const rw_state *st = GUARD_CSTATE(rw_state, hold);

    if (lock_rw_is_held(env->lock, st->rwlock, LOCK_RW_WRITE) != LOCK_OK)
        return GUARD_ERR_LOST;
    return guards__redis_still_held(env, hold);
}

void guard_cache_rwlock_leave(guard_env *env, guard_hold *hold)
{
    rw_state *st = GUARD_STATE(rw_state, hold);

    cache_forget(env->lock, st->goods_id);
    if (lock_rw_unlock(env->lock, st->rwlock, LOCK_RW_WRITE) != LOCK_OK)
        log_event(LOG_WARN, "unlock_failed", "lock=%s side=write", st->rwlock);
    guards__redis_leave(env, hold);
}
