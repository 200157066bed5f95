/*
 * modes/pg_lockrow.c - the "pg-lockrow" mode: a row of goods_locks as the lock
 * (guards_lockrow.c), with no expiry.
 *
 * Its flaw is the crash: a holder that dies between the
 * insert and the delete (the process killed, the release's connection lost) leaves the row
 * for ever, and every later request for that goods waits out its bound and answers 503
 * lock_timeout, until someone deletes the row by hand. Safe from overselling, but a wedge:
 * marked unsafe.
 */
#include "service/guards/guards.h"

int guard_pg_lockrow_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                           size_t detail_len)
{
    return guards__lockrow_enter(env, goods_id, 0, hold, detail, detail_len);
}
