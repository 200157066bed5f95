/*
 * guards_poll.c - how the ladder's first rungs wait: try, sleep a fixed time, try again.
 *
 * This is the waiting the course starts from, before the lock of lock/ replaces it with a
 * wake-up on release: every waiter asks Redis RUNG_POLL_MS apart whether the lock is free,
 * so a release is noticed up to RUNG_POLL_MS late, and the waiters of all replicas keep
 * Redis busy asking. A helper of the polling modes (setnx, setnx-ttl, owner-get-del,
 * owner-lua), not a mode.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lock/naive.h"

#include "service/clock.h"
#include "service/guards/guards.h"
#include "service/guards/lock_names.h"
#include "service/guards/outage.h"

int guards__poll(guard_env *env, const char *rung, int64_t goods_id, bool with_token,
                 guards__try_fn try_once, guard_hold *hold, char *detail, size_t detail_len)
{
    int64_t start;
    bool acquired = false;
    char prefix[48];
    int rc;

    memset(hold, 0, sizeof(*hold));
    snprintf(prefix, sizeof(prefix), "lock:%s:goods:", rung);
    goods_lock_name(env->lock, prefix, goods_id, hold->name, sizeof(hold->name));
    start = clock_now_ns();
    hold->waited = true;
    if (env->lock == NULL) {
        snprintf(detail, detail_len, "redis lock client not configured");
        return GUARD_ERR_UNAVAILABLE;
    }
    if (with_token)
        naive_owner(env->lock, hold->token, sizeof(hold->token));
    for (;;) {
        rc = try_once(env, hold, &acquired);
        hold->wait_seconds = clock_seconds_since(start);
        if (rc != LOCK_OK) {
            outage_redis("Redis", rc, "take lock", detail, detail_len);
            return GUARD_ERR_UNAVAILABLE;
        }
        if (acquired)
            return GUARD_OK;
        if (hold->wait_seconds * 1000.0 + RUNG_POLL_MS > (double)env->wait_ms) {
            snprintf(detail, detail_len, "%s not had within %" PRId64 " ms", hold->name,
                     env->wait_ms);
            return GUARD_ERR_TIMEOUT;
        }
        clock_sleep_ms(RUNG_POLL_MS);
    }
}

/* SET name token NX PX: the owned modes' try (owner-get-del, owner-lua). */
int guards__try_owned_set(guard_env *env, guard_hold *hold, bool *acquired)
{
    return naive_set_nx_px(env->lock, hold->name, hold->token, env->fixed_lease_ms, acquired);
}
