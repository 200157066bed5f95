/*
 * backend.h - what a consensus service must offer the queue-lock recipe (queue_lock.h):
 * a lease kept alive, a node per waiter in an ordered line, a watch on one node's deletion.
 * Internal to lock/: each backend (lock/etcd/, lock/zookeeper/) fills a queue_lock__backend
 * with its protocol and nothing else; the holdings, reentrancy, bounded waits, giving up and
 * the rule for unclear writes are the recipe's (queue_lock.c).
 *
 * Every call but keep_alive may come from many threads at once, and every call that makes a
 * request bounds it by the backend's request timeout. Errors are QUEUE_LOCK_* codes with the
 * thread's error text set (lock/error.h).
 */
#ifndef LOCK_QUEUE_BACKEND_H
#define LOCK_QUEUE_BACKEND_H

#include "lock/queue/queue_lock.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A node's name in the backend's own form (etcd: a key, or its base64; ZooKeeper: a path). */
#define QUEUE_LOCK__NODE_MAX 512

/* create() only: the service may have applied the write (its answer was lost), so the
 * recipe ends the lease; reported to the caller as QUEUE_LOCK_ERR_SERVER. */
#define QUEUE_LOCK__UNCLEAR (-100)
/* create() only: the lease was gone before the write (the service said so), nothing was
 * written; the backend has dropped the lease, and the recipe tries once more on a new one. */
#define QUEUE_LOCK__STALE (-101)

/* The lease (etcd) or session (ZooKeeper) one acquire works under. */
typedef struct queue_lock__session {
    uint64_t id;  /* the backend's number for it, never reused: a holding names its lease */
    void *handle; /* the backend's own, valid until put_session */
} queue_lock__session;

typedef struct queue_lock__backend {
    const char *service; /* "etcd", "ZooKeeper": for error texts */
    const char *default_servers; /* where the service is when the options do not say */

    /* Makes the backend's state for the client q (kept for queue_lock__wake) from checked
     * options (servers: the options' or the default). Connects lazily. NULL: no memory. */
    void *(*open)(queue_lock *q, const char *servers, const queue_lock_options *opts);

    /* A live lease for one acquire, granted or connected if there is none (bounded: the
     * backend's header says by how much). Pair with put_session. */
    int (*get_session)(void *be, queue_lock__session *s);
    void (*put_session)(void *be, queue_lock__session *s);

    /* Creates the waiter's node for lock `name` under s: its name into node
     * (QUEUE_LOCK__NODE_MAX) and its fencing token into *token. QUEUE_LOCK_OK,
     * QUEUE_LOCK__UNCLEAR, QUEUE_LOCK__STALE or an error. */
    int (*create)(void *be, const queue_lock__session *s, const char *name, char *node,
                  int64_t *token);

    /* Lists the line of `name` and finds the node just before `node` (created with token):
     * its name into pred (QUEUE_LOCK__NODE_MAX), "" when node is first (the lock is had).
     * *cursor: what watch_deletion needs to miss no deletion after this listing. */
    int (*predecessor)(void *be, const queue_lock__session *s, const char *name,
                       const char *node, int64_t token, char *pred, int64_t *cursor);

    /* Waits until pred is deleted or until deadline_ns. QUEUE_LOCK_OK: look at the line
     * again (deleted, out of time, or the watch ended); an error otherwise (the lease
     * ended during the wait is QUEUE_LOCK_ERR_SERVER). */
    int (*watch_deletion)(void *be, const queue_lock__session *s, const char *pred,
                          int64_t cursor, int64_t deadline_ns);

    /* Deletes a node made under lease `session`. QUEUE_LOCK_OK when it is gone (also when
     * the lease is, which took it); an error when the answer is unclear (the recipe then
     * ends the lease). */
    int (*remove)(void *be, uint64_t session, const char *node);

    /* Ends lease `session` now (if it is still the one in use): it is no longer renewed,
     * its holdings are lost, and the service is asked to drop it with its nodes (best
     * effort: otherwise its TTL does). */
    void (*end)(void *be, uint64_t session);

    /* Whether lease `session` is the live one, as far as the backend knows without a round
     * trip. May be called with the recipe's mutex held: it takes only the backend's. */
    bool (*alive)(void *be, uint64_t session);

    /* The keeper thread's round (one thread, lock/watchdog.h's schedule): renews or confirms
     * the lease when due and tidies up; returns when it wants the next round (monotonic ns).
     * queue_lock__wake() brings a round forward. */
    int64_t (*keep_alive)(void *be);

    /* Ends the lease and frees the backend; the keeper thread has stopped. */
    void (*destroy)(void *be);
} queue_lock__backend;

/* The table of a backend whose functions are named <prefix>_open ... <prefix>_destroy, in
 * the order of queue_lock__backend: `static const queue_lock__backend etcd_backend =
 * QUEUE_LOCK__BACKEND(etcd, "etcd", "http://127.0.0.1:2379");`. */
#define QUEUE_LOCK__BACKEND(prefix, service_name, servers)                                     \
    {                                                                                          \
        .service = service_name, .default_servers = servers, .open = prefix##_open,            \
        .get_session = prefix##_get_session,                                                   \
        .put_session = prefix##_put_session, .create = prefix##_create,                        \
        .predecessor = prefix##_predecessor, .watch_deletion = prefix##_watch_deletion,        \
        .remove = prefix##_remove, .end = prefix##_end, .alive = prefix##_alive,               \
        .keep_alive = prefix##_keep_alive, .destroy = prefix##_destroy,                        \
    }

/*
 * A client over backend ops (which must outlive it), for the backend's public create: checks
 * opts (servers shorter than 256 bytes and not empty, a lease and a request timeout > 0),
 * opens the backend and starts the keeper thread. QUEUE_LOCK_OK and *out,
 * QUEUE_LOCK_ERR_INVALID or QUEUE_LOCK_ERR_NOMEM.
 */
int queue_lock__open(const queue_lock__backend *ops, const queue_lock_options *opts,
                     queue_lock **out);

/* Runs the keeper's next round now. Takes only a mutex of its own, which is never held
 * while anything else is taken: callable from any thread, with the backend's mutex held. */
void queue_lock__wake(queue_lock *q);

/* The backend of q if q was created with ops, else NULL (for the backends' own calls). */
void *queue_lock__backend_of(queue_lock *q, const queue_lock__backend *ops);

#endif
