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
 * Adding a mode means adding a row here and one file for it; nothing else changes.
 */
#include "service/modes.h"

#include <stdio.h>
#include <string.h>

#include "service/guards.h"

/* ---- the table ----------------------------------------------------------------------- */

static const mode mode_table[] = {
    {"none", false, "read, check and write with no lock at all: oversells under load",
     guard_none__enter, guards__always_held, guard_none__leave},
    {"local", false,
     "the same under a mutex of the process: right with one replica, oversells with several",
     guard_local__enter, guards__always_held, guard_local__leave},
    {"redis", true,
     "the same under the Redis reentrant lock (owner, watchdog, bounded wait, fencing): "
     "right with any number of replicas",
     guard_redis__enter, guard_redis__still_held, guard_redis__leave},
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
