/*
 * guard_redis.c - the "redis" rung: the Redis lock of lock/ on "lock:goods:<id>", with a
 * bounded wait and watchdog renewal. Every replica asks the same Redis, so it holds across
 * replicas. Its fencing token claims the goods row at the read (db_stock_claim), so a holder
 * that lost its lock mid-section cannot sell from a stock another holder also read.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "service/clock.h"
#include "service/guards.h"
#include "service/log.h"

void goods_lock_name(const lock_client *lock, const char *prefix, int64_t goods_id, char *buf,
                     size_t len)
{
    if (lock_client_is_cluster(lock))
        snprintf(buf, len, "%s{%" PRId64 "}", prefix, goods_id);
    else
        snprintf(buf, len, "%s%" PRId64, prefix, goods_id);
}

int guards__redis_enter(guard_env *env, int64_t goods_id, int64_t lease_ms, bool fenced,
                        guard_hold *hold, char *detail, size_t detail_len)
{
    struct timespec start;
    int64_t token = 0;
    int rc;

    memset(hold, 0, sizeof(*hold));
    if (env->lock == NULL) {
        snprintf(detail, detail_len, "redis lock client not configured");
        return GUARD_ERR_UNAVAILABLE;
    }
    goods_lock_name(env->lock, "lock:goods:", goods_id, hold->name, sizeof(hold->name));
    clock_gettime(CLOCK_MONOTONIC, &start);
    rc = lock_try_lock(env->lock, hold->name, env->wait_ms, lease_ms, &token);
    hold->waited = true;
    hold->wait_seconds = clock_seconds_since(&start);
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
        snprintf(detail, detail_len, "redis: no connection free within the wait bound");
        return GUARD_ERR_UNAVAILABLE;
    default:
        snprintf(detail, detail_len, "redis: %s%s%s", lock_strerror(rc),
                 lock_last_error()[0] ? ": " : "", lock_last_error());
        return GUARD_ERR_UNAVAILABLE;
    }
}

void guard_fence_refused(guard_env *env, const guard_hold *hold, int64_t stored)
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

int guard_redis__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                       size_t detail_len)
{
    return guards__redis_enter(env, goods_id, env->lease_ms, true, hold, detail, detail_len);
}

int guard_redis__still_held(guard_env *env, const guard_hold *hold)
{
    return lock_is_held(env->lock, hold->name) == LOCK_OK ? GUARD_OK : GUARD_ERR_LOST;
}

void guard_redis__leave(guard_env *env, guard_hold *hold)
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
