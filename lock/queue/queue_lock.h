/*
 * queue_lock.h - a reentrant distributed lock on a consensus service (etcd, ZooKeeper): one
 * recipe, written once, over a small backend that speaks one service's protocol.
 *
 * The recipe (etcd's concurrency.Mutex and Curator's InterProcessMutex are both this one):
 *   - the client keeps one lease (etcd) or session (ZooKeeper) alive: a thread of the client
 *     renews or confirms it every third of its TTL (lock/watchdog.h's schedule). A lease the
 *     service no longer knows (revoked, expired while this process was paused or cut off) is
 *     the lock lost: every holding taken under it is reported lost.
 *   - a waiter for lock N creates its own node in N's line, attached to the lease: the
 *     service orders the nodes (etcd's create revision, ZooKeeper's sequence number).
 *   - it holds the lock when no node of the line is before its own; otherwise it watches
 *     only its predecessor's deletion, so a release wakes one waiter, not the herd.
 *   - release deletes the node; a crashed holder's node goes with its lease.
 *   - the fencing token is the node's order number across the whole service (etcd's create
 *     revision, ZooKeeper's czxid): a later holder of any lock has a greater token.
 *   - a write whose answer is unclear (a create or a delete that timed out: it may land
 *     late) ends the lease or session at once: its node would otherwise sit in the line for
 *     as long as the lease is renewed, and every waiter of every replica would wait on it.
 *     This client's other holdings are lost with it (is_held says so); the next acquire
 *     starts a new lease.
 *
 * A holding belongs to an owner the caller names (queue_lock_thread_owner() gives the
 * calling thread's): the owner that holds N takes it again without a round trip and gets the
 * same token. Owners are not pthread_self(): a thread id is reused once its thread has
 * exited, and a new thread would inherit the holds of a dead one (lock/owner.h).
 *
 * The backends (lock/etcd/etcd_lock.h, lock/zookeeper/zk_lock.h) create a queue_lock; every
 * other call is here. The module does not log: it returns QUEUE_LOCK_* codes and keeps the
 * last error text per thread (queue_lock_last_error()).
 */
#ifndef LOCK_QUEUE_QUEUE_LOCK_H
#define LOCK_QUEUE_QUEUE_LOCK_H

#include <stdint.h>

enum {
    QUEUE_LOCK_OK = 0,
    QUEUE_LOCK_ERR_TIMEOUT = -1,  /* held by another for the whole wait */
    QUEUE_LOCK_ERR_SERVER = -2,   /* the service unreachable, timed out or answered an error */
    QUEUE_LOCK_ERR_NOT_HELD = -3, /* the owner does not hold this lock */
    QUEUE_LOCK_ERR_INVALID = -4,
    QUEUE_LOCK_ERR_NOMEM = -5,
    QUEUE_LOCK_ERR_LOST = -6, /* the lease or session this holding was taken under is gone */
};

#define QUEUE_LOCK_NAME_MAX 200 /* bytes of a lock's name */
#define QUEUE_LOCK_OWNER_MAX 40 /* bytes of an owner, with its NUL */

typedef struct queue_lock queue_lock;

/* How a backend's client is made (etcd_lock_client_create, zk_lock_client_create). */
typedef struct queue_lock_options {
    const char *servers;    /* where the service is (copied; at most 255 bytes): etcd's client
                               URL, "http://127.0.0.1:2379"; ZooKeeper's ensemble,
                               "127.0.0.1:2181[,host:port...]"; NULL: that default */
    int64_t lease_ms;       /* the lease: etcd's TTL (rounded up to whole seconds), ZooKeeper's
                               session timeout asked for (the server may clamp it);
                               default 10000; kept alive every lease/3 */
    int request_timeout_ms; /* bound on each request but etcd's watch (and on waiting for a
                               ZooKeeper session to connect); default 1000 */
} queue_lock_options;

/* The defaults above. */
void queue_lock_options_init(queue_lock_options *opts);

/*
 * Takes lock `name` (1 to QUEUE_LOCK_NAME_MAX bytes, no '/') for `owner` (1 to
 * QUEUE_LOCK_OWNER_MAX - 1 bytes), waiting at most wait_ms (0: try once) for the holders
 * before it, plus a bounded number of request timeouts while the service answers (each
 * backend's header says how many). Returns QUEUE_LOCK_OK with *token (may be NULL) set to
 * the holding's fencing token; QUEUE_LOCK_ERR_TIMEOUT (the waiter's node is deleted again);
 * QUEUE_LOCK_ERR_SERVER (also when the lease ended during the wait); QUEUE_LOCK_ERR_LOST
 * (the owner holds `name` under a lost lease: release it first); QUEUE_LOCK_ERR_INVALID;
 * QUEUE_LOCK_ERR_NOMEM.
 */
int queue_lock_acquire(queue_lock *q, const char *name, const char *owner, int64_t wait_ms,
                       int64_t *token);

/* Releases one hold of `owner`; at zero the node is deleted. QUEUE_LOCK_ERR_NOT_HELD when
 * the owner does not hold it; QUEUE_LOCK_ERR_SERVER when the delete failed (the holding is
 * forgotten all the same, and the lease is ended so that the node goes with it). A holding
 * whose lease is gone is forgotten with QUEUE_LOCK_OK: its node went with the lease. */
int queue_lock_release(queue_lock *q, const char *name, const char *owner);

/* QUEUE_LOCK_OK while `owner` holds `name` under a live lease (as far as the client knows,
 * without a round trip: the service heard from it less than a TTL ago);
 * QUEUE_LOCK_ERR_LOST when the lease is gone or went unconfirmed too long;
 * QUEUE_LOCK_ERR_NOT_HELD. */
int queue_lock_is_held(queue_lock *q, const char *name, const char *owner);

/* Stops the client's thread, ends its lease (or leaves it to its TTL: each backend says)
 * and frees it. Holdings are not released one by one: their nodes go with the lease. The
 * caller has stopped every thread that uses q. NULL is a no-op. */
void queue_lock_destroy(queue_lock *q);

/* The calling thread's owner name: a number given to each thread of the process on its
 * first call and never reused (lock/owner.h), so that holdings are per thread. */
void queue_lock_thread_owner(char out[QUEUE_LOCK_OWNER_MAX]);

const char *queue_lock_strerror(int code);
const char *queue_lock_last_error(void);

#endif
