/*
 * guards.h - the guards and transaction shapes of the mode table (internal to
 * service/guards/: mode.h and modes.h are the room's interface).
 *
 * One convention names the files: every mode's guard or transaction shape lives in
 * service/guards/modes/<mode>.c, the mode's name with '-' as '_' (redis-nofence:
 * modes/redis_nofence.c). What several modes share is a helper named as one,
 * service/guards/guards*.c: guards_env.c (the environment, which builds and frees the state of the
 * guards that have their own), guards.c (the guard that cannot be lost, the pause before a
 * release), guards_poll.c (the polling modes' wait), guards_redis.c (the lock of
 * lock/ as a guard), guards_lockrow.c (a PostgreSQL row as the lock), guards_queue.c (the
 * queue lock of lock/queue/ as a guard, for etcd and zookeeper, and its clients). The guards
 * share one environment, built once at start-up: this header shows its layout to the guard
 * files, and only they and modes.c include it.
 */
#ifndef SERVICE_GUARDS_H
#define SERVICE_GUARDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "lock/queue/queue_lock.h"
#include "lock/redlock.h"
#include "service/guards/mode.h"

/* How long the polling rungs (setnx ... owner-lua) sleep between two tries. */
#define RUNG_POLL_MS 20

struct guard_env {
    lock_client *lock;
    queue_lock *etcd; /* the etcd mode's client, built and freed by guards_queue.c; NULL: none */
    queue_lock *zk;   /* the zookeeper mode's client, likewise */
    int64_t wait_ms;
    int64_t lease_ms;
    int64_t fixed_lease_ms;
    db_pool *db;                 /* the pg-lockrow guards' connections; may be NULL */
    int64_t db_wait_ms;          /* their bound on waiting for one */
    int64_t row_lease_ms;        /* pg-lockrow-ttl's row lease */
    redlock *redlock;            /* built and freed by modes/redlock.c; NULL: no REDLOCK_NODES */
    int64_t redlock_lease_ms;    /* redlock's fixed lease (set by modes/redlock.c's init) */
    unsigned has;                /* MODE_NEEDS_* bits this environment can serve */
    struct local_stripes *local; /* the local guard's mutexes: its own (modes/local.c) */
};

/*
 * A guard's own state in a holding: GUARD_STATE(struct x_state, hold) is hold->state seen as
 * the guard's struct x_state, which only its file defines (GUARD_CSTATE: of a const
 * holding); GUARD_STATE_FITS(struct x_state)
 * checks, at compile time, that it fits.
 */
#define GUARD_STATE(type, hold) ((type *)(void *)(hold)->state.bytes)
#define GUARD_CSTATE(type, hold) ((const type *)(const void *)(hold)->state.bytes)
#define GUARD_STATE_FITS(type)                                                                     \
    _Static_assert(sizeof(type) <= GUARD_STATE_BYTES, #type " does not fit guard_hold.state")

/* ---- helpers: guards.c (guards_env.c: mode.h's guard_env_*) ----------------------- */

/* still_held of a guard that cannot be lost (none, local, the polling modes): GUARD_OK. */
int guards__always_held(guard_env *env, const guard_hold *hold);

/* Calls hold->before_release (the lab's hold point), then sleeps hold->release_pause_ms
 * (fault injection; 0: at once). A guard calls it right before the command that deletes its
 * lock. */
void guards__pause_before_release(const guard_hold *hold);

/* ---- helpers: guards_poll.c -------------------------------------------------------- */

/* One try of a polling mode: LOCK_OK with *acquired, or a LOCK_ERR_* code. */
typedef int (*guards__try_fn)(guard_env *env, guard_hold *hold, bool *acquired);

/* The enter of a polling mode. Empties *hold, names its key "lock:<rung>:goods:<goods_id>",
 * gives it the calling thread's owner token when `with_token`, then tries it with try_once
 * every RUNG_POLL_MS until it is had or env->wait_ms has passed. GUARD_OK, GUARD_ERR_TIMEOUT
 * or GUARD_ERR_UNAVAILABLE (detail filled). */
int guards__poll(guard_env *env, const char *rung, int64_t goods_id, bool with_token,
                 guards__try_fn try_once, guard_hold *hold, char *detail, size_t detail_len);

/* SET name token NX PX fixed lease: the try of owner-get-del and owner-lua. */
int guards__try_owned_set(guard_env *env, guard_hold *hold, bool *acquired);

/* ---- helpers: guards_redis.c ------------------------------------------------------- */

/* Takes the lock of lock/ on "lock:goods:<id>" with lease_ms (LOCK_LEASE_WATCHDOG: renewed
 * by the watchdog), handing out its fencing token when `fenced`. The modes on this lock
 * differ only in these two arguments, and share still_held and leave. */
int guards__redis_enter(guard_env *env, int64_t goods_id, int64_t lease_ms, bool fenced,
                        guard_hold *hold, char *detail, size_t detail_len);
/* The same on the lock named `name`, waiting at most wait_ms; also GUARD_ERR_BUSY when no
 * connection to Redis was free within the wait (enter answers that as unavailable). */
int guards__redis_take(guard_env *env, const char *name, int64_t wait_ms, int64_t lease_ms,
                       bool fenced, guard_hold *hold, char *detail, size_t detail_len);
/* mode.fence_refused of these modes: raises the lock's counter past `stored`. */
void guards__redis_fence_refused(guard_env *env, const guard_hold *hold, int64_t stored);
int guards__redis_still_held(guard_env *env, const guard_hold *hold);
void guards__redis_leave(guard_env *env, guard_hold *hold);

/* ---- helpers: guards_lockrow.c ----------------------------------------------------- */

/* A row of goods_locks, inserted to take the lock and deleted to release it, each in a
 * transaction of its own; waiters poll. ttl_ms 0: the row has no expiry (pg-lockrow);
 * otherwise it expires ttl_ms after it was taken (pg-lockrow-ttl). */
int guards__lockrow_enter(guard_env *env, int64_t goods_id, int64_t ttl_ms, guard_hold *hold,
                          char *detail, size_t detail_len);
void guards__lockrow_leave(guard_env *env, guard_hold *hold);

/* ---- the modes' files: service/guards/modes/<mode>.c -------------------------------------- */

#define GUARD_DECL(prefix)                                                                         \
    int prefix##_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,           \
                       size_t detail_len)

GUARD_DECL(guard_none); /* none.c; also the PostgreSQL modes' */
void guard_none_leave(guard_env *env, guard_hold *hold);
GUARD_DECL(guard_local); /* local.c: a stripe of this process's mutexes */
void guard_local_leave(guard_env *env, guard_hold *hold);
/* Builds (0) or frees env->local; -1 when out of memory. */
int guard_local_init(guard_env *env);
void guard_local_destroy(guard_env *env);
/* The stripe goods_id's local lock is (its index): a cart takes each stripe once. */
int64_t guard_local_stripe_of(int64_t goods_id);
/* How many requests wait in line for goods_id's stripe now (tests/test_local.c watches its
 * line form). Thread-safe; takes the stripe's mutex for a moment. */
int64_t guard_local_waiting(guard_env *env, int64_t goods_id);

GUARD_DECL(guard_local_unshared); /* local_unshared.c: a mutex made per call, shared by none */
void guard_local_unshared_leave(guard_env *env, guard_hold *hold);

GUARD_DECL(guard_redis);             /* redis.c: watchdog, fenced */
GUARD_DECL(guard_redis_fence_write); /* redis_fence_write.c: redis's lock, fenced at the write */
GUARD_DECL(guard_redis_batch);       /* redis_batch.c: redis's, once per batch */
GUARD_DECL(guard_redis_sharded);     /* redis_sharded.c: redis's, for the hooked path */
extern const mode_parts guard_redis_sharded_parts; /* redis_sharded.c: a segment's lock */
GUARD_DECL(guard_setnx);                           /* setnx.c */
void guard_setnx_leave(guard_env *env, guard_hold *hold);
GUARD_DECL(guard_setnx_ttl); /* setnx_ttl.c */
void guard_setnx_ttl_leave(guard_env *env, guard_hold *hold);
GUARD_DECL(guard_owner_get_del); /* owner_get_del.c */
void guard_owner_get_del_leave(guard_env *env, guard_hold *hold);
GUARD_DECL(guard_owner_lua); /* owner_lua.c */
void guard_owner_lua_leave(guard_env *env, guard_hold *hold);
GUARD_DECL(guard_redis_nowatchdog); /* redis_nowatchdog.c: fixed lease, no token */
GUARD_DECL(guard_redis_nofence);    /* redis_nofence.c: watchdog, no token */
GUARD_DECL(guard_tx_inside);        /* tx_inside.c: redis-nofence's, left before COMMIT */
GUARD_DECL(guard_multi_naive);      /* multi_naive.c: redis's, a cart in listed order */
GUARD_DECL(guard_cache_aside);      /* cache_aside.c: redis's; the cache entry deleted after */
void guard_cache_aside_leave(guard_env *env, guard_hold *hold);
GUARD_DECL(guard_cache_rwlock); /* cache_rwlock.c: redis's and the write side around the sale */
void guard_cache_rwlock_leave(guard_env *env, guard_hold *hold);
int guard_cache_rwlock_still_held(guard_env *env, const guard_hold *hold);
GUARD_DECL(guard_pg_lockrow);     /* pg_lockrow.c: the lock row, no expiry */
GUARD_DECL(guard_pg_lockrow_ttl); /* pg_lockrow_ttl.c: the lock row with an expiry */

/* redlock.c: Redlock (lock/redlock.h) on "lock:redlock:goods:<id>" with the fixed lease;
 * still_held checks the validity on this process's clock. */
GUARD_DECL(guard_redlock);
int guard_redlock_still_held(guard_env *env, const guard_hold *hold);
void guard_redlock_leave(guard_env *env, guard_hold *hold);
/* Builds env->redlock when opts->redlock_nodes is set, and adds MODE_NEEDS_REDLOCK to
 * env->has: 0, or -1 when the clients cannot be made. Nothing connects yet. The destroy
 * frees them (safe when there are none). */
int guard_redlock_init(guard_env *env, const guard_env_options *opts);
void guard_redlock_destroy(guard_env *env);

/* etcd.c and zookeeper.c: the queue lock of lock/queue/ on "goods-<id>", through the helper
 * below, fenced by the node's order number (etcd's create revision, ZooKeeper's czxid).
 * Offered only by a replica with that client (ETCD_ENDPOINT, ZOOKEEPER_HOSTS set). */
GUARD_DECL(guard_etcd);
GUARD_DECL(guard_zookeeper);

/* ---- helper: guards_queue.c ------------------------------------------------------- */

/* What tells the two queue-lock modes apart. */
typedef struct guards_queue_rung {
    const char *service; /* for texts: "etcd", "ZooKeeper" */
    const char *source;  /* the fencing token's source, and the log's prefix */
} guards_queue_rung;
extern const guards_queue_rung guards__queue_etcd;
extern const guards_queue_rung guards__queue_zookeeper;

/* The two modes' clients, built into env at start-up: the etcd client (env->etcd) when
 * opts->etcd_endpoint is set, the ZooKeeper client (env->zk) when opts->zookeeper_hosts is,
 * each then adding its MODE_NEEDS_* bit to env->has. Nothing connects yet. 0, or -1 when a
 * client cannot be made. guards__queue_destroy frees them (safe when there are none). */
int guards__queue_init(guard_env *env, const guard_env_options *opts);
void guards__queue_destroy(guard_env *env);
/* Takes goods_id's queue lock on q (NULL: the mode's client is not configured, 503) within
 * env->wait_ms, for the calling thread: GUARD_OK with hold fenced by the node's order number
 * and fence_source r->source; GUARD_ERR_TIMEOUT, GUARD_ERR_UNAVAILABLE with detail set. */
int guards__queue_enter(queue_lock *q, const guards_queue_rung *r, guard_env *env, int64_t goods_id,
                        guard_hold *hold, char *detail, size_t detail_len);
/* Both modes' still_held and leave: the holding's fence_source names the client it took. */
int guards__queue_still_held(guard_env *env, const guard_hold *hold);
void guards__queue_leave(guard_env *env, guard_hold *hold);

#undef GUARD_DECL

/* The PostgreSQL modes: no guard (none's), a transaction shape each. */
extern const mode_tx pg_for_update_tx;   /* pg_for_update.c */
extern const mode_tx pg_atomic_tx;       /* pg_atomic.c */
extern const mode_tx pg_advisory_tx;     /* pg_advisory.c */
extern const mode_tx pg_optimistic_tx;   /* pg_optimistic.c */
extern const mode_tx pg_serializable_tx; /* pg_serializable.c */
extern const mode_tx pg_multi_naive_tx;  /* pg_multi_naive.c: pg-for-update's read and write */
/* pg_for_update.c's read (SELECT ... FOR UPDATE) and write (the stock computed in C). */
int pg_for_update_read(db_conn *conn, int64_t goods_id, int64_t count, tx_seen *seen);
int pg_for_update_write(db_conn *conn, int64_t goods_id, int64_t count, const tx_seen *seen);

#endif
