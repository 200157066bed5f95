/*
 * guard_zookeeper.c - the "zookeeper" rung: the ZooKeeper lock of lock/zookeeper/ on
 * "goods-<id>" (an ephemeral sequential node per waiter under /locks/goods-<id>, a watch on
 * the predecessor, the session as the lease). Every replica asks the same ensemble, so it
 * holds across replicas.
 *
 * Like the redis and etcd guards, it claims the goods row with its fencing token
 * (db_stock_claim): here the czxid of the holder's node, the id of the transaction that
 * created it, which grows with every write to the ensemble. The token names its source
 * ("zookeeper"): db_stock_claim compares a token only with tokens of the same source.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "service/clock.h"
#include "service/guards.h"
#include "service/log.h"

int guard_zookeeper__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                           size_t detail_len)
{
    struct timespec start;
    int64_t token = 0;
    int rc;

    memset(hold, 0, sizeof(*hold));
    if (env->zk == NULL) {
        snprintf(detail, detail_len, "ZooKeeper lock client not configured");
        return GUARD_ERR_UNAVAILABLE;
    }
    /* The lock's name is a znode under /locks: it has no '/'. */
    snprintf(hold->name, sizeof(hold->name), "goods-%" PRId64, goods_id);
    clock_gettime(CLOCK_MONOTONIC, &start);
    rc = zk_lock_acquire(env->zk, hold->name, env->wait_ms, &token);
    hold->waited = true;
    hold->wait_seconds = clock_seconds_since(&start);
    switch (rc) {
    case ZK_LOCK_OK:
        hold->fenced = true;
        hold->fence = token;
        hold->fence_source = "zookeeper";
        return GUARD_OK;
    case ZK_LOCK_ERR_TIMEOUT:
        snprintf(detail, detail_len, "ZooKeeper lock %s not had within %" PRId64 " ms", hold->name,
                 env->wait_ms);
        return GUARD_ERR_TIMEOUT;
    default:
        snprintf(detail, detail_len, "zookeeper: %s%s%s", zk_lock_strerror(rc),
                 zk_lock_last_error()[0] ? ": " : "", zk_lock_last_error());
        return GUARD_ERR_UNAVAILABLE;
    }
}

int guard_zookeeper__still_held(guard_env *env, const guard_hold *hold)
{
    return zk_lock_is_held(env->zk, hold->name) == ZK_LOCK_OK ? GUARD_OK : GUARD_ERR_LOST;
}

void guard_zookeeper__leave(guard_env *env, guard_hold *hold)
{
    int rc = zk_lock_release(env->zk, hold->name);

    /* A failed delete has ended the session: the node went with it. */
    if (rc != ZK_LOCK_OK) {
        char quoted[160];
        log_event(LOG_WARN, "unlock_failed", "lock=%s error=%s", hold->name,
                  log_quote(quoted, sizeof(quoted), zk_lock_strerror(rc)));
    }
}
