/*
 * modes/etcd.c - the "etcd" mode: the queue lock (guards_queue.c) with etcd as its service: a
 * key per waiter under a lease kept alive, ordered by create revision, a watch on the
 * predecessor's key. Every replica asks the same etcd, so it holds across replicas. The
 * fencing token is the holder key's create revision, which etcd makes greater for every
 * later write of the cluster; it is named by its source ("etcd"), as Redis's counter is
 * unrelated to it. Offered only by a replica with an etcd client (ETCD_ENDPOINT set).
 */
#include "service/guards/guards.h"

int guard_etcd_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                     size_t detail_len)
{
    return guards__queue_enter(env->etcd, &guards__queue_etcd, env, goods_id, hold, detail,
                               detail_len);
}
