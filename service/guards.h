/*
 * guards.h - the guards of the mode table, one file each (internal to service/).
 *
 * A rung of the ladder is one file that the mode table (modes.c) lists. The guards share one
 * environment, built once at start-up: this header shows its layout to the guard files, and
 * nothing outside service/ includes it.
 */
#ifndef SERVICE_GUARDS_H
#define SERVICE_GUARDS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "service/modes.h"

/*
 * The local guard keeps one lock per stripe, not per goods: goods ids range up to 2^63,
 * and a map that grew with every id a client names would be an unbounded allocation driven
 * by requests. Two goods that share a stripe merely take turns; correctness is unchanged.
 *
 * A stripe is a flag guarded by a mutex, with a condition variable to wait on, rather than a
 * bare mutex: the wait is bounded on the monotonic clock (a change of the wall clock must
 * neither cut it short nor stretch it), and pthread_cond_timedwait takes its clock from the
 * condition variable's attributes, where pthread_mutex_timedlock only knows the wall clock.
 */
#define LOCAL_STRIPES 256

typedef struct local_stripe {
    pthread_mutex_t mu;
    pthread_cond_t freed; /* signalled when `held` goes false */
    bool held;
} local_stripe;

/* How long the polling rungs (setnx ... owner-lua) sleep between two tries. */
#define RUNG_POLL_MS 20

struct guard_env {
    lock_client *lock;
    etcd_lock_client *etcd;
    zk_lock_client *zk;
    int64_t wait_ms;
    int64_t lease_ms;
    int64_t fixed_lease_ms;
    db_pool *db;          /* the pg-lockrow guards' connections; may be NULL */
    int64_t db_wait_ms;   /* their bound on waiting for one */
    int64_t row_lease_ms; /* pg-lockrow-ttl's row lease */
    redlock *redlock;     /* NULL unless REDLOCK_NODES is set */
    unsigned has;         /* MODE_NEEDS_* bits this environment can serve */
    local_stripe stripes[LOCAL_STRIPES];
};

/* still_held of a guard that cannot be lost (none, local): always GUARD_OK. */
int guards__always_held(guard_env *env, const guard_hold *hold);

/* none (guard_none.c): no guard at all. */
int guard_none__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                      size_t detail_len);
void guard_none__leave(guard_env *env, guard_hold *hold);

/* local (guard_local.c): a stripe of this process's mutexes. */
void guard_local__init(guard_env *env);
void guard_local__destroy(guard_env *env);
int guard_local__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                       size_t detail_len);
void guard_local__leave(guard_env *env, guard_hold *hold);
/* The stripe goods_id's local lock is (its index): a cart takes each stripe once. */
int64_t guard_local__stripe_of(int64_t goods_id);

/* One try of a polling rung: LOCK_OK with *acquired, or a LOCK_ERR_* code. */
typedef int (*guards__try_fn)(guard_env *env, guard_hold *hold, bool *acquired);

/* guard_poll.c: the enter of a polling rung. Empties *hold, names its key
 * "lock:<rung>:goods:<goods_id>", gives it the calling thread's owner token when
 * `with_token`, then tries it with try_once every RUNG_POLL_MS until it is had or
 * env->wait_ms has passed. GUARD_OK, GUARD_ERR_TIMEOUT or GUARD_ERR_UNAVAILABLE (detail filled). */
int guards__poll(guard_env *env, const char *rung, int64_t goods_id, bool with_token,
                 guards__try_fn try_once, guard_hold *hold, char *detail, size_t detail_len);

/* guard_poll.c: calls hold->before_release (the lab's hold point), then sleeps
 * hold->release_pause_ms (fault injection; 0: at once). A guard calls it right before the
 * command that deletes its lock. */
void guards__pause_before_release(const guard_hold *hold);

/* The ladder's Redis rungs before the lock of lock/, one file each: */
int guard_setnx__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                       size_t detail_len);
void guard_setnx__leave(guard_env *env, guard_hold *hold);
int guard_setnx_ttl__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                           size_t detail_len);
void guard_setnx_ttl__leave(guard_env *env, guard_hold *hold);
int guard_owner_get_del__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                               size_t detail_len);
void guard_owner_get_del__leave(guard_env *env, guard_hold *hold);
/* guard_owner_get_del.c: SET name token NX PX fixed lease (owner-get-del and owner-lua). */
int guards__try_owned_set(guard_env *env, guard_hold *hold, bool *acquired);
int guard_owner_lua__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                           size_t detail_len);
void guard_owner_lua__leave(guard_env *env, guard_hold *hold);

/* guard_redis.c: takes the lock of lock/ on "lock:goods:<id>" with lease_ms
 * (LOCK_LEASE_WATCHDOG: renewed by the watchdog), handing out its fencing token when
 * `fenced`. The redis rungs (redis, redis-nowatchdog, redis-nofence) differ only in these
 * two arguments, and share still_held and leave. */
int guards__redis_enter(guard_env *env, int64_t goods_id, int64_t lease_ms, bool fenced,
                        guard_hold *hold, char *detail, size_t detail_len);

/* redis (guard_redis.c): the lock of lock/ on "lock:goods:<id>", fenced. */
int guard_redis__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                       size_t detail_len);
int guard_redis__still_held(guard_env *env, const guard_hold *hold);
void guard_redis__leave(guard_env *env, guard_hold *hold);
int guard_redis_nowatchdog__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                                  size_t detail_len);
int guard_redis_nofence__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                               size_t detail_len);

/* pg-lockrow (guard_pg_lockrow.c): a row of goods_locks, inserted to take the lock and
 * deleted to release it, each in a transaction of its own; waiters poll. The plain one has
 * no expiry (a dead holder wedges the goods); -ttl's row expires after row_lease_ms. */
int guard_pg_lockrow__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                            size_t detail_len);
int guard_pg_lockrow_ttl__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                                size_t detail_len);
void guard_pg_lockrow__leave(guard_env *env, guard_hold *hold);
/* redlock (guard_redlock.c): Redlock (lock/redlock.h) on "lock:redlock:goods:<id>" with the
 * fixed lease; still_held checks the validity on this process's clock. */
int guard_redlock__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                         size_t detail_len);
int guard_redlock__still_held(guard_env *env, const guard_hold *hold);
void guard_redlock__leave(guard_env *env, guard_hold *hold);

/* etcd and zookeeper (modes/queue_lock.c): one guard over the queue lock of lock/queue/ on
 * "goods-<id>", fenced by the node's order number (etcd's create revision, ZooKeeper's
 * czxid); enter picks the client by mode, still_held and leave use the one enter took.
 * Offered only by a replica with that client (ETCD_ENDPOINT, ZOOKEEPER_HOSTS set). */
int guard_etcd__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                      size_t detail_len);
int guard_zookeeper__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                           size_t detail_len);
int guard_queue_lock__still_held(guard_env *env, const guard_hold *hold);
void guard_queue_lock__leave(guard_env *env, guard_hold *hold);

/* The PostgreSQL rungs: no guard (guard_none's), a transaction shape each. */
extern const mode_tx rung_pg_for_update__tx; /* rung_pg_for_update.c */
extern const mode_tx rung_pg_atomic__tx;     /* rung_pg_atomic.c */
extern const mode_tx rung_pg_advisory__tx;   /* rung_pg_advisory.c */
extern const mode_tx rung_pg_optimistic__tx; /* rung_pg_optimistic.c */

#endif
