/*
 * lock_names.h - the Redis names of the goods' locks, one rule for every mode and route
 * that names one (the guards, GET /api/lock, the lab's lock view).
 */
#ifndef SERVICE_LOCK_NAMES_H
#define SERVICE_LOCK_NAMES_H

#include <stddef.h>
#include <stdint.h>

#include "lock/lock.h"

/*
 * The Redis name of goods_id's lock, prefix + id ("lock:goods:" gives "lock:goods:42"), into
 * buf. When the lock client routes over a Redis Cluster (REDIS_CLUSTER_NODES), the id is a
 * hash tag instead ("lock:goods:{42}"), so that every key derived from the name (lock/keys.h:
 * "lock:goods:{42}:fence", ...) is in the id's slot, on one master. The single-instance name
 * is the one API.md shows. lock may be NULL (no client: the single-instance form).
 */
void goods_lock_name(const lock_client *lock, const char *prefix, int64_t goods_id, char *buf,
                     size_t len);

/* The lock of segment `seg` of a goods (redis-sharded): "lock:goods:N:seg:K", or on a Redis
 * Cluster "lock:goods:{N:seg:K}": each segment a hash tag of its own, so that the segments of
 * one hot goods spread over the cluster's masters (a lock's own keys still share its tag's
 * slot). */
void goods_segment_lock_name(const lock_client *lock, int64_t goods_id, int seg, char *buf,
                             size_t len);

#endif
