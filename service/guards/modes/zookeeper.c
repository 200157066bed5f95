/*
 * modes/zookeeper.c - the "zookeeper" mode: the queue lock (guards_queue.c) with ZooKeeper as
 * its service: an ephemeral sequential node per waiter under /locks/goods-<id>, in a
 * session kept alive, a watch on the predecessor's node. Every replica asks the same
 * ensemble, so it holds across replicas. The fencing token is the holder node's czxid (the
 * transaction that created it), named by its source ("zookeeper"). Offered only by a
 * replica with a ZooKeeper client (ZOOKEEPER_HOSTS set).
 */
#include "service/guards/guards.h"

int guard_zookeeper_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                          size_t detail_len)
{
    return guards__queue_enter(env->zk, &guards__queue_zookeeper, env, goods_id, hold, detail,
                               detail_len);
}
