/*
 * etcd_lock.h - a reentrant distributed lock on etcd v3, spoken over etcd's JSON gRPC
 * gateway (POST /v3/...) with libcurl and jansson.
 *
 * The recipe (etcd's own concurrency.Mutex, done by hand):
 *   - the client holds one lease (its "session"), granted on first use with a TTL of
 *     lease_ms, kept alive by a thread of the client every lease/3: the keep-alive is the
 *     watchdog. A lease etcd no longer knows (revoked, or expired while this process was
 *     paused or cut off) is the lock lost: every holding taken under it is reported lost.
 *   - a waiter for lock N puts its own key "N/<lease id>/<n>" with the lease attached. Its
 *     create revision (the cluster-wide revision of that put) is its place in the queue.
 *   - it holds the lock when no key under "N/" has a smaller create revision; otherwise it
 *     watches only its predecessor (the key with the greatest smaller create revision) for
 *     deletion, so a release wakes one waiter, not the herd.
 *   - release deletes the key; a crashed holder's key goes with its lease.
 *   - the fencing token is the key's create revision: etcd's revision only grows, for every
 *     key of the cluster, so a later holder always has a greater token.
 *
 * Reentrancy is per thread of the process, as with the Redis lock: a thread that holds N
 * takes it again without a round trip and gets the same token.
 *
 * The module knows etcd and nothing else: it does not log; it returns ETCD_LOCK_* codes and
 * keeps the last error text per thread (etcd_lock_last_error()).
 */
#ifndef LOCK_ETCD_ETCD_LOCK_H
#define LOCK_ETCD_ETCD_LOCK_H

#include <stdint.h>

enum {
    ETCD_LOCK_OK = 0,
    ETCD_LOCK_ERR_TIMEOUT = -1,  /* held by another for the whole wait */
    ETCD_LOCK_ERR_SERVER = -2,   /* etcd unreachable, timed out or answered an error */
    ETCD_LOCK_ERR_NOT_HELD = -3, /* the calling thread does not hold this lock */
    ETCD_LOCK_ERR_INVALID = -4,
    ETCD_LOCK_ERR_NOMEM = -5,
    ETCD_LOCK_ERR_LOST = -6, /* the lease this holding was taken under is gone */
};

typedef struct etcd_lock_client etcd_lock_client;

typedef struct etcd_lock_options {
    const char *endpoint;   /* "http://127.0.0.1:2379"; copied */
    int64_t lease_ms;       /* the lease's TTL (rounded up to whole seconds, >= 1 s);
                               default 10000; kept alive every lease/3 */
    int request_timeout_ms; /* bounds every request but the watch; default 1000 */
} etcd_lock_options;

void etcd_lock_options_init(etcd_lock_options *opts);

/* Creates the client and starts its keep-alive thread. Connects lazily: succeeds while
 * etcd is down. Free with etcd_lock_client_destroy(). */
int etcd_lock_client_create(const etcd_lock_options *opts, etcd_lock_client **out);

/* Stops the keep-alive thread and frees the client. Holdings are not released: their keys
 * go with the lease. NULL is a no-op. */
void etcd_lock_client_destroy(etcd_lock_client *c);

/*
 * Takes lock `name` (1 to 200 bytes, no '/') for the calling thread, waiting at most
 * wait_ms (0: try once) plus two request timeouts (the last look at the queue, and the
 * delete of the waiter's key on giving up) while etcd answers. Every request is cut at the
 * request timeout, so a hung etcd costs at most six of them before the queue (the lease,
 * which may wait for another thread's grant, and the put, each once more on a lease etcd
 * dropped), plus one for the revoke after an unclear answer (below): never more than
 * wait_ms + 9 request timeouts. Returns ETCD_LOCK_OK with *token set to
 * the holding's fencing token; ETCD_LOCK_ERR_TIMEOUT (the waiter's key is deleted again);
 * ETCD_LOCK_ERR_SERVER; ETCD_LOCK_ERR_INVALID; ETCD_LOCK_ERR_NOMEM.
 * A put or a delete whose answer is unclear (it may land late) ends the client's lease: it
 * is revoked at once and no longer renewed, so nothing it left stays longer than the revoke's
 * answer, or the lease's TTL if etcd answers that neither; this client's other holdings are
 * lost with it (is_held says so), and the next acquire grants a new lease.
 */
int etcd_lock_acquire(etcd_lock_client *c, const char *name, int64_t wait_ms, int64_t *token);

/* Releases one hold; at zero the key is deleted. ETCD_LOCK_ERR_NOT_HELD when the thread
 * does not hold it; ETCD_LOCK_ERR_SERVER when the delete failed (the holding is forgotten
 * all the same, and the lease is given up as above: the key goes with it, by the revoke or
 * by the TTL at the latest). */
int etcd_lock_release(etcd_lock_client *c, const char *name);

/* ETCD_LOCK_OK while the calling thread holds `name` under a live lease (as far as the
 * keep-alive knows: its last answer plus the TTL it granted); ETCD_LOCK_ERR_LOST when the
 * lease is gone or ran out unrenewed; ETCD_LOCK_ERR_NOT_HELD. No round trip. */
int etcd_lock_is_held(etcd_lock_client *c, const char *name);

/* The lease id in use (0: none yet or lost), for tests that revoke it. */
int64_t etcd_lock_lease_id(etcd_lock_client *c);

const char *etcd_lock_strerror(int code);
const char *etcd_lock_last_error(void);

#endif
