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

struct guard_env {
    lock_client *lock;
    int64_t wait_ms;
    int64_t lease_ms;
    db_pool *db;          /* the pg-lockrow guards' connections; may be NULL */
    int64_t db_wait_ms;   /* their bound on waiting for one */
    int64_t row_lease_ms; /* pg-lockrow-ttl's row lease */
    local_stripe stripes[LOCAL_STRIPES];
};

/* Seconds elapsed on the monotonic clock since *start. */
double guards__seconds_since(const struct timespec *start);

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

/* redis (guard_redis.c): the lock of lock/ on "lock:goods:<id>", fenced. */
int guard_redis__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                       size_t detail_len);
int guard_redis__still_held(guard_env *env, const guard_hold *hold);
void guard_redis__leave(guard_env *env, guard_hold *hold);

/* pg-lockrow (guard_pg_lockrow.c): a row of goods_locks, inserted to take the lock and
 * deleted to release it, each in a transaction of its own; waiters poll. The plain one has
 * no expiry (a dead holder wedges the goods); -ttl's row expires after row_lease_ms. */
int guard_pg_lockrow__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                            size_t detail_len);
int guard_pg_lockrow_ttl__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                                size_t detail_len);
void guard_pg_lockrow__leave(guard_env *env, guard_hold *hold);

/* The PostgreSQL rungs: no guard (guard_none's), a transaction shape each. */
extern const mode_tx rung_pg_for_update__tx; /* rung_pg_for_update.c */
extern const mode_tx rung_pg_atomic__tx;     /* rung_pg_atomic.c */
extern const mode_tx rung_pg_advisory__tx;   /* rung_pg_advisory.c */
extern const mode_tx rung_pg_optimistic__tx; /* rung_pg_optimistic.c */

#endif
