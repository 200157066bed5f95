/*
 * etcd_lock.h - the queue lock (lock/queue/queue_lock.h) on etcd v3, spoken over etcd's JSON
 * gRPC gateway (POST /v3/...) with libcurl and jansson: etcd's own concurrency.Mutex, done
 * by hand.
 *
 * etcd's side of the recipe:
 *   - the lease is an etcd lease, granted on first use with a TTL of lease_ms and kept alive
 *     every lease/3 by the queue lock's keeper thread.
 *   - a waiter for lock N puts its own key "N/<lease id>/<n>" with the lease attached. Its
 *     create revision (the cluster-wide revision of that put) is its place in the line and
 *     its fencing token: etcd's revision only grows, for every key of the cluster.
 *   - it watches only its predecessor, the key with the greatest smaller create revision.
 *   - an unclear put or delete revokes the lease at once and stops renewing it: a put that
 *     lands after the revoke is refused (its lease is gone), one that landed before goes
 *     with the lease. Bound: the revoke's answer, or the TTL if etcd answers neither.
 *
 * Every call of the queue lock is answered within wait_ms + 9 request timeouts while etcd
 * hangs: before the line, the lease (which may wait for another thread's grant: two) and
 * the put, each once more on a lease etcd had dropped (six), and a revoke after an unclear
 * answer; after the wait, one last look at the line, the delete of the waiter's key and
 * perhaps its revoke.
 */
#ifndef LOCK_ETCD_ETCD_LOCK_H
#define LOCK_ETCD_ETCD_LOCK_H

#include "lock/queue/queue_lock.h"

#include <stdint.h>

/* A queue lock whose backend is etcd: use it with queue_lock_acquire() and the rest. */
typedef queue_lock etcd_lock_client;

/* Creates the client (opts->servers: etcd's client URL, plain http://) and starts its
 * keep-alive thread. Connects lazily: succeeds while etcd is down. QUEUE_LOCK_OK,
 * QUEUE_LOCK_ERR_INVALID or QUEUE_LOCK_ERR_NOMEM. Free with queue_lock_destroy(), which
 * leaves the keys of holdings to the lease's TTL. */
int etcd_lock_client_create(const queue_lock_options *opts, etcd_lock_client **out);

/* The lease id in use (0: none yet or lost), for tests that revoke it. */
int64_t etcd_lock_lease_id(etcd_lock_client *c);

#endif
