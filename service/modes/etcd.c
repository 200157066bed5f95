/*
 * guard_etcd.c - the "etcd" rung: the etcd lock of lock/etcd/ on "goods-<id>" (a key per
 * waiter under a lease kept alive, ordered by create revision, a watch on the predecessor).
 * Every replica asks the same etcd, so it holds across replicas.
 *
 * Like the redis guard, it claims the goods row with its fencing token (db_stock_claim):
 * here the create revision of the holder's key, which etcd makes greater for every later
 * write of the cluster. etcd's revisions and Redis's counter are unrelated, so the token
 * names its source ("etcd"): db_stock_claim compares a token only with tokens of the same
 * source, and a row sold by both modes in turn is not refused for the other's number.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "service/clock.h"
#include "service/guards.h"
#include "service/log.h"

int guard_etcd__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                      size_t detail_len)
{
    struct timespec start;
    int64_t token = 0;
    int rc;

    memset(hold, 0, sizeof(*hold));
    if (env->etcd == NULL) {
        snprintf(detail, detail_len, "etcd lock client not configured");
        return GUARD_ERR_UNAVAILABLE;
    }
    /* etcd keys of the lock are "<name>/<lease>/<n>": the name has no '/'. */
    snprintf(hold->name, sizeof(hold->name), "goods-%" PRId64, goods_id);
    clock_gettime(CLOCK_MONOTONIC, &start);
    rc = etcd_lock_acquire(env->etcd, hold->name, env->wait_ms, &token);
    hold->waited = true;
    hold->wait_seconds = clock_seconds_since(&start);
    switch (rc) {
    case ETCD_LOCK_OK:
        hold->fenced = true;
        hold->fence = token;
        hold->fence_source = "etcd";
        return GUARD_OK;
    case ETCD_LOCK_ERR_TIMEOUT:
        snprintf(detail, detail_len, "etcd lock %s not had within %" PRId64 " ms", hold->name,
                 env->wait_ms);
        return GUARD_ERR_TIMEOUT;
    default:
        snprintf(detail, detail_len, "etcd: %s%s%s", etcd_lock_strerror(rc),
                 etcd_lock_last_error()[0] ? ": " : "", etcd_lock_last_error());
        return GUARD_ERR_UNAVAILABLE;
    }
}

int guard_etcd__still_held(guard_env *env, const guard_hold *hold)
{
    return etcd_lock_is_held(env->etcd, hold->name) == ETCD_LOCK_OK ? GUARD_OK : GUARD_ERR_LOST;
}

void guard_etcd__leave(guard_env *env, guard_hold *hold)
{
    int rc = etcd_lock_release(env->etcd, hold->name);

    /* A failed delete leaves the key to its lease: it goes when the lease does. */
    if (rc != ETCD_LOCK_OK) {
        char quoted[160];
        log_event(LOG_WARN, "unlock_failed", "lock=%s error=%s", hold->name,
                  log_quote(quoted, sizeof(quoted), etcd_lock_strerror(rc)));
    }
}
