/*
 * guards_queue.c - the helper of the "etcd" and "zookeeper" modes (modes/etcd.c,
 * modes/zookeeper.c): one guard over the queue lock of lock/queue/ on "goods-<id>", its
 * backend the mode's (the client of lock/etcd/ or of lock/zookeeper/). A lease or session
 * kept alive, one node per waiter in a line ordered by the service, a watch on the
 * predecessor. Every replica asks the same etcd or ensemble, so it holds across replicas.
 *
 * Like the redis guard, it claims the goods row with its fencing token (db_stock_claim):
 * here the node's order number across the service (etcd's create revision, ZooKeeper's
 * czxid), which grows with every later write. Those counters and Redis's are unrelated, so
 * the token names its source ("etcd", "zookeeper"): db_stock_claim compares a token only
 * with tokens of the same source, and a row sold by two modes in turn is not refused for
 * the other's number.
 *
 * The owner of a holding is the request's thread (queue_lock_thread_owner): enter,
 * still_held and leave run on it. still_held and leave serve both rungs: the holding's
 * fence_source says which client took it.
 *
 * The two clients are this file's too: built from the settings at start-up
 * (guards__queue_init, from guard_env_create), freed with the guards, so that no other
 * file of service/ calls lock/etcd/ or lock/zookeeper/.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lock/etcd/etcd_lock.h"
#include "lock/queue/queue_lock.h"
#include "lock/zookeeper/zk_lock.h"
#include "service/clock.h"
#include "service/guards/guards.h"
#include "service/guards/outage.h"
#include "service/log.h"

const guards_queue_rung guards__queue_etcd = {"etcd", "etcd"};
const guards_queue_rung guards__queue_zookeeper = {"ZooKeeper", "zookeeper"};

/* Makes *client with `create` when `servers` is set (not NULL, not ""), on servers, the lease
 * lease_ms and the request bound timeout_ms (each 0: the queue lock's default), and adds
 * `need` to env->has. 0 (also when servers is not set), or -1. */
static int make_client(guard_env *env, queue_lock **client, unsigned need,
                       int (*create)(const queue_lock_options *, queue_lock **),
                       const char *servers, int64_t lease_ms, int timeout_ms)
{
    queue_lock_options o;

    if (servers == NULL || servers[0] == '\0')
        return 0; /* not configured: the mode is not served */
    queue_lock_options_init(&o);
    o.servers = servers;
    if (lease_ms > 0)
        o.lease_ms = lease_ms;
    if (timeout_ms > 0)
        o.request_timeout_ms = timeout_ms;
    if (create(&o, client) != QUEUE_LOCK_OK)
        return -1;
    env->has |= need;
    return 0;
}

int guards__queue_init(guard_env *env, const guard_env_options *opts)
{
    if (make_client(env, &env->etcd, MODE_NEEDS_ETCD, etcd_lock_client_create, opts->etcd_endpoint,
                    opts->queue_lease_ms, (int)opts->etcd_timeout_ms) != 0)
        return -1;
    return make_client(env, &env->zk, MODE_NEEDS_ZOOKEEPER, zk_lock_client_create,
                       opts->zookeeper_hosts, opts->queue_lease_ms, opts->zookeeper_timeout_ms);
}

void guards__queue_destroy(guard_env *env)
{
    queue_lock_destroy(env->etcd);
    queue_lock_destroy(env->zk);
    env->etcd = NULL;
    env->zk = NULL;
}

int guards__queue_enter(queue_lock *q, const guards_queue_rung *r, guard_env *env, int64_t goods_id,
                        guard_hold *hold, char *detail, size_t detail_len)
{
    char owner[QUEUE_LOCK_OWNER_MAX];
    int64_t start;
    int64_t token = 0;
    int rc;

    memset(hold, 0, sizeof(*hold));
    if (q == NULL) {
        snprintf(detail, detail_len, "%s lock client not configured", r->service);
        return GUARD_ERR_UNAVAILABLE;
    }
    /* The name is an etcd key prefix or a znode under /locks: it has no '/'. */
    snprintf(hold->name, sizeof(hold->name), "goods-%" PRId64, goods_id);
    queue_lock_thread_owner(owner);
    start = clock_now_ns();
    rc = queue_lock_acquire(q, hold->name, owner, env->wait_ms, &token);
    hold->waited = true;
    hold->wait_seconds = clock_seconds_since(start);
    switch (rc) {
    case QUEUE_LOCK_OK:
        hold->fenced = true;
        hold->fence = token;
        hold->fence_source = r->source;
        return GUARD_OK;
    case QUEUE_LOCK_ERR_TIMEOUT:
        snprintf(detail, detail_len, "%s lock %s not had within %" PRId64 " ms", r->service,
                 hold->name, env->wait_ms);
        return GUARD_ERR_TIMEOUT;
    default:
        outage_queue(r->service, rc, "take lock", detail, detail_len);
        return GUARD_ERR_UNAVAILABLE;
    }
}

/* The client a holding was taken with: its token's source names the rung. */
static queue_lock *client_of(const guard_env *env, const guard_hold *hold)
{
    return hold->fence_source == guards__queue_etcd.source ? env->etcd : env->zk;
}

int guards__queue_still_held(guard_env *env, const guard_hold *hold)
{
    char owner[QUEUE_LOCK_OWNER_MAX];

    queue_lock_thread_owner(owner);
    return queue_lock_is_held(client_of(env, hold), hold->name, owner) == QUEUE_LOCK_OK
               ? GUARD_OK
               : GUARD_ERR_LOST;
}

void guards__queue_leave(guard_env *env, guard_hold *hold)
{
    char owner[QUEUE_LOCK_OWNER_MAX];
    int rc;

    queue_lock_thread_owner(owner);
    rc = queue_lock_release(client_of(env, hold), hold->name, owner);
    /* A failed delete has ended the lease or session: the node goes with it. */
    if (rc != QUEUE_LOCK_OK) {
        char quoted[160];
        log_event(LOG_WARN, "unlock_failed", "lock=%s error=%s", hold->name,
                  log_quote(quoted, sizeof(quoted), queue_lock_strerror(rc)));
    }
}
