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
 *   pg-optimistic  rung_pg_optimistic.c  a version column: write only if unchanged, else retry.
 *
 * and a guard whose lock is a row of PostgreSQL's:
 *
 *   pg-lockrow      guard_pg_lockrow.c  a goods_locks row, no expiry: a dead holder wedges.
 *   pg-lockrow-ttl  guard_pg_lockrow.c  the row with an expiry: a long section has two holders.
 *
 * Adding a mode means adding a row here and one file for it; nothing else changes.
 */
#include "service/modes.h"

#include <stdio.h>
#include <string.h>

#include "service/guards.h"

/* ---- the table ----------------------------------------------------------------------- */

static const mode mode_table[] = {
    {"none", false, "read, check and write with no lock at all: oversells under load",
     guard_none__enter, guards__always_held, guard_none__leave, NULL},
    {"local", false,
     "the same under a mutex of the process: right with one replica, oversells with several",
     guard_local__enter, guards__always_held, guard_local__leave, NULL},
    {"redis", true,
     "the same under the Redis reentrant lock (owner, watchdog, bounded wait, fencing): "
     "right with any number of replicas",
     guard_redis__enter, guard_redis__still_held, guard_redis__leave, NULL},
    {"pg-for-update", true,
     "no guard: the read is SELECT ... FOR UPDATE, so PostgreSQL's row lock keeps the "
     "read-check-write apart: right with any number of replicas",
     guard_none__enter, guards__always_held, guard_none__leave, &rung_pg_for_update__tx},
    {"pg-atomic", true,
     "no guard and no read: one conditional UPDATE ... WHERE stock >= n checks and writes at "
     "once: right with any number of replicas",
     guard_none__enter, guards__always_held, guard_none__leave, &rung_pg_atomic__tx},
    {"pg-advisory", true,
     "no guard: pg_advisory_xact_lock on the goods id inside the transaction, then the same "
     "read-check-write: right with any number of replicas",
     guard_none__enter, guards__always_held, guard_none__leave, &rung_pg_advisory__tx},
    {"pg-optimistic", true,
     "no lock: read the stock and its version, write only if the version is unchanged, and "
     "run the transaction again after a lost race (up to OPTIMISTIC_RETRIES, then 503 "
     "conflict): right with any number of replicas",
     guard_none__enter, guards__always_held, guard_none__leave, &rung_pg_optimistic__tx},
    {"pg-lockrow", false,
     "a row of goods_locks as the lock (insert to take, delete to release, waiters poll): "
     "excludes across replicas, but a holder that dies leaves its row and the goods answers "
     "lock_timeout for ever",
     guard_pg_lockrow__enter, guards__always_held, guard_pg_lockrow__leave, NULL},
    {"pg-lockrow-ttl", false,
     "the lock row with an expiry that a taker may delete: no more wedge, but a section longer "
     "than LOCKROW_TTL_MS lets a second holder in, with no fence to stop it: oversells",
     guard_pg_lockrow_ttl__enter, guards__always_held, guard_pg_lockrow__leave, NULL},
};

const mode *modes_all(size_t *count)
{
    *count = sizeof(mode_table) / sizeof(mode_table[0]);
    return mode_table;
}

const mode *modes_find(const char *name)
{
    size_t i;

    if (name == NULL)
        return NULL;
    for (i = 0; i < sizeof(mode_table) / sizeof(mode_table[0]); i++)
        if (strcmp(mode_table[i].name, name) == 0)
            return &mode_table[i];
    return NULL;
}

const char *modes_list(char *buf, size_t len)
{
    size_t i, used = 0;

    if (len == 0)
        return buf;
    buf[0] = '\0';
    for (i = 0; i < sizeof(mode_table) / sizeof(mode_table[0]); i++) {
        int n = snprintf(buf + used, len - used, "%s%s", i > 0 ? ", " : "", mode_table[i].name);
        if (n < 0 || (size_t)n >= len - used) {
            buf[used] = '\0'; /* drop the name that did not fit whole */
            break;
        }
        used += (size_t)n;
    }
    return buf;
}
