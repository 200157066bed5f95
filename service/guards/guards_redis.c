/*
 * guards_redis.c - the Redis lock of lock/ as a guard, on "lock:goods:<id>": a bounded
 * wait, a lease (renewed by the watchdog, or fixed), the fencing token when the mode wants
 * it. A helper of the modes built on that lock (redis, redis-nowatchdog, redis-nofence,
 * tx-inside, multi-naive, redis-batch, redis-sharded): each mode's file says which lease
 * and whether it is fenced.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "service/clock.h"
#include "service/guards/guards.h"
#include "service/guards/lock_names.h"
#include "service/guards/outage.h"
#include "service/log.h"

int guards__redis_take(guard_env *env, const char *name, int64_t wait_ms, int64_t lease_ms,
                       bool fenced, guard_hold *hold, char *detail, size_t detail_len)
{
    int64_t start;
    int64_t token = 0;
    int rc;

    memset(hold, 0, sizeof(*hold));
    if (env->lock == NULL) {
        snprintf(detail, detail_len, "redis lock client not configured");
        return GUARD_ERR_UNAVAILABLE;
    }
    snprintf(hold->name, sizeof(hold->name), "%s", name);
    start = clock_now_ns();
    rc = lock_try_lock(env->lock, hold->name, wait_ms, lease_ms, &token);
    hold->waited = true;
    hold->wait_seconds = clock_seconds_since(start);
    hold->handed_off = rc == LOCK_OK && lock_last_handoff_us() >= 0;
    hold->handoff_seconds = hold->handed_off ? (double)lock_last_handoff_us() / 1e6 : 0;
    switch (rc) {
    case LOCK_OK:
        hold->fenced = fenced;
        hold->fence = fenced ? token : 0;
        hold->fence_source = fenced ? "redis" : NULL;
        return GUARD_OK;
    case LOCK_ERR_TIMEOUT:
        snprintf(detail, detail_len, "%s not had within %" PRId64 " ms", hold->name, env->wait_ms);
        return GUARD_ERR_TIMEOUT;
    case LOCK_ERR_BUSY:
        outage_redis("Redis", rc, "take lock", detail, detail_len);
        return GUARD_ERR_BUSY;
    default:
        outage_redis("Redis", rc, "take lock", detail, detail_len);
        return GUARD_ERR_UNAVAILABLE;
    }
}

int guards__redis_enter(guard_env *env, int64_t goods_id, int64_t lease_ms, bool fenced,
                        guard_hold *hold, char *detail, size_t detail_len)
{
    char name[sizeof(hold->name)];
    int rc;

    goods_lock_name(env->lock, "lock:goods:", goods_id, name, sizeof(name));
    rc = guards__redis_take(env, name, env->wait_ms, lease_ms, fenced, hold, detail, detail_len);
    return rc == GUARD_ERR_BUSY ? GUARD_ERR_UNAVAILABLE : rc;
}

void guards__redis_fence_refused(guard_env *env, const guard_hold *hold, int64_t stored)
{
    int rc;

    if (env == NULL || env->lock == NULL || hold->fence_source == NULL ||
        strcmp(hold->fence_source, "redis") != 0 || stored <= hold->fence)
        return; /* another counter, or the token was not behind: nothing to raise */
    rc = lock_fence_raise(env->lock, hold->name, stored);
    log_event(rc == LOCK_OK ? LOG_INFO : LOG_WARN, "fence_raised",
              "lock=%s token=%" PRId64 " stored=%" PRId64 " rc=%d", hold->name, hold->fence, stored,
              rc);
}

int guards__redis_still_held(guard_env *env, const guard_hold *hold)
{
    return lock_is_held(env->lock, hold->name) == LOCK_OK ? GUARD_OK : GUARD_ERR_LOST;
}

void guards__redis_leave(guard_env *env, guard_hold *hold)
{
    int rc;

    guards__pause_before_release(hold);
    rc = lock_unlock(env->lock, hold->name);

    /* A failed unlock leaves the key to its lease: the watchdog has stopped renewing it
     * (lock_unlock forgets the holding either way), so it expires within one lease. */
    if (rc != LOCK_OK) {
        char quoted[160];
        log_event(LOG_WARN, "unlock_failed", "lock=%s error=%s", hold->name,
                  log_quote(quoted, sizeof(quoted), lock_strerror(rc)));
    }
}
