/*
 * modes/cache_aside.c - the "cache-aside" mode: the redis mode's sale (its lock, fenced), and
 * after the commit the cached stock's entry deleted (service/guards/cache.c), so that the next
 * cached read misses and fills it again from PostgreSQL, with no lock. The flaw lives on the
 * read side: a miss that read the table before the sale and writes the cache after its
 * delete leaves the old stock cached until the TTL (cache.h).
 */
#include "service/guards/cache.h"
#include "service/guards/guards.h"

typedef struct cache_state {
    int64_t goods_id;
} cache_state;
GUARD_STATE_FITS(cache_state);

int guard_cache_aside_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                            size_t detail_len)
{
    int rc = guards__redis_enter(env, goods_id, env->lease_ms, true, hold, detail, detail_len);

    GUARD_STATE(cache_state, hold)->goods_id = goods_id;
    return rc;
}

void guard_cache_aside_leave(guard_env *env, guard_hold *hold)
{
    cache_forget(env->lock, GUARD_STATE(cache_state, hold)->goods_id);
    guards__redis_leave(env, hold);
}
