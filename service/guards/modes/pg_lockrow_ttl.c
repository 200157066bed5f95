/*
 * modes/pg_lockrow_ttl.c - the "pg-lockrow-ttl" mode: the lock row of pg-lockrow
 * (guards_lockrow.c) with an expiry.
 *
 * The row carries an expiry (now + LOCKROW_TTL_MS, on PostgreSQL's clock),
 * and a taker may delete a row past it. The wedge is gone; what comes back is the lease
 * problem: a section that outlasts the expiry (a long pause, a slow statement) is still
 * running when the next taker deletes its row and enters, and two holders read the same
 * stock. Nothing renews the row, nothing checks it before the commit, and the goods row
 * carries no fencing token for it: unsafe.
 */
#include "service/guards/guards.h"

int guard_pg_lockrow_ttl_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                               size_t detail_len)
{
    /* At least 1 ms: 0 would mean "no expiry" to db_lockrow_take. */
    return guards__lockrow_enter(env, goods_id, env->row_lease_ms > 0 ? env->row_lease_ms : 1, hold,
                                 detail, detail_len);
}
