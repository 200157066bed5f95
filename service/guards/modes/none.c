/*
 * modes/none.c - the "none" mode: no guard at all. Two requests can both read stock 10, both
 * write 9, and both record an order: one unit sold twice (a lost update). The PostgreSQL
 * modes use this guard too: their race is closed inside the database, by their transaction
 * shape (modes/pg_*.c).
 */
#include <string.h>

#include "service/guards/guards.h"

int guard_none_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                     size_t detail_len)
{
    (void)env;
    (void)goods_id;
    (void)detail;
    (void)detail_len;
    memset(hold, 0, sizeof(*hold));
    return GUARD_OK;
}

void guard_none_leave(guard_env *env, guard_hold *hold)
{
    (void)env;
    (void)hold;
}
