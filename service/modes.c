/*
 * modes.c - the strategy table and its lookups.
 *
 * Each row of `mode_table` is one way of guarding the read-check-write of deduct.c, and each
 * guard is one file (service/guard_*.c, declared in service/guards.h):
 *
 *   none   guard_none.c   no guard at all: a lost update under load.
 *   local  guard_local.c  a mutex of this process: right with one replica only.
 *   redis  guard_redis.c  the Redis lock of lock/, fenced: right with any number of replicas.
 *
 * and the PostgreSQL rungs, which need no guard: the database closes the race, each in its
 * own transaction shape (mode_tx):
 *
 *   pg-for-update  rung_pg_for_update.c  SELECT ... FOR UPDATE: the row's lock.
 *   pg-atomic      rung_pg_atomic.c      one conditional UPDATE: check and write at once.
 *   pg-advisory    rung_pg_advisory.c    pg_advisory_xact_lock on the goods id.
 *
 * and the other lock services of the course, after them:
 *
 *   etcd   guard_etcd.c   the etcd lock of lock/etcd/: a key per waiter under a lease kept
 *                         alive, its create revision as the fencing token.
 *
 * Adding a mode means adding a row here and one file for it; nothing else changes. A row's
 * last field says which replicas offer it: NULL for every replica; the etcd row only those
 * told where etcd is (its guard env has an etcd client).
 */
#include "service/modes.h"

#include <stdio.h>
#include <string.h>

#include "service/guards.h"

/* ---- the table ----------------------------------------------------------------------- */

static const mode mode_table[] = {
    {"none", false, "read, check and write with no lock at all: oversells under load",
     guard_none__enter, guards__always_held, guard_none__leave, NULL, NULL},
    {"local", false,
     "the same under a mutex of the process: right with one replica, oversells with several",
     guard_local__enter, guards__always_held, guard_local__leave, NULL, NULL},
    {"redis", true,
     "the same under the Redis reentrant lock (owner, watchdog, bounded wait, fencing): "
     "right with any number of replicas",
     guard_redis__enter, guard_redis__still_held, guard_redis__leave, NULL, NULL},
    {"pg-for-update", true,
     "no guard: the read is SELECT ... FOR UPDATE, so PostgreSQL's row lock keeps the "
     "read-check-write apart: right with any number of replicas",
     guard_none__enter, guards__always_held, guard_none__leave, &rung_pg_for_update__tx, NULL},
    {"pg-atomic", true,
     "no guard and no read: one conditional UPDATE ... WHERE stock >= n checks and writes at "
     "once: right with any number of replicas",
     guard_none__enter, guards__always_held, guard_none__leave, &rung_pg_atomic__tx, NULL},
    {"pg-advisory", true,
     "no guard: pg_advisory_xact_lock on the goods id inside the transaction, then the same "
     "read-check-write: right with any number of replicas",
     guard_none__enter, guards__always_held, guard_none__leave, &rung_pg_advisory__tx, NULL},
    {"etcd", true,
     "the same under an etcd lock (lease kept alive, key per waiter, watch on the "
     "predecessor, create revision as fencing token): right with any number of replicas",
     guard_etcd__enter, guard_etcd__still_held, guard_etcd__leave, NULL, guard_etcd__offered},
};

#define MODES_N (sizeof(mode_table) / sizeof(mode_table[0]))

const mode *modes_all(size_t *count)
{
    *count = MODES_N;
    return mode_table;
}

bool modes_offered(const mode *m, const guard_env *env)
{
    return env == NULL || m->offered == NULL || m->offered(env);
}

const mode *modes_find(const guard_env *env, const char *name)
{
    size_t i;

    if (name == NULL)
        return NULL;
    for (i = 0; i < MODES_N; i++)
        if (strcmp(mode_table[i].name, name) == 0)
            return modes_offered(&mode_table[i], env) ? &mode_table[i] : NULL;
    return NULL;
}

const char *modes_list(const guard_env *env, char *buf, size_t len)
{
    size_t i, used = 0;

    if (len == 0)
        return buf;
    buf[0] = '\0';
    for (i = 0; i < MODES_N; i++) {
        int n;

        if (!modes_offered(&mode_table[i], env))
            continue;
        n = snprintf(buf + used, len - used, "%s%s", used > 0 ? ", " : "", mode_table[i].name);
        if (n < 0 || (size_t)n >= len - used) {
            buf[used] = '\0'; /* drop the name that did not fit whole */
            break;
        }
        used += (size_t)n;
    }
    return buf;
}
