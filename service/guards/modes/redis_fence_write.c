/*
 * modes/redis_fence_write.c - the "redis-fence-write" rung: `redis`'s lock and token, the
 * token checked only where the sale writes (db_stock_write_fenced: UPDATE ... WHERE the row
 * has seen no newer token), after a plain read. It refuses a stale holder that writes after
 * a newer one has written, but not a newer holder whose read came before an older holder's
 * write: A reads 100 and is stopped past its lease, B takes the lock and reads 100, A goes on,
 * writes 99 and commits (no newer token has written yet), B writes 99 with its newer token:
 * one unit sold twice. `redis` checks the token at the read instead, as a claim that takes
 * the row's lock (db_stock_claim), and B's read then waits for A's commit.
 */
#include "service/guards/guards.h"

int guard_redis_fence_write_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                                  size_t detail_len)
{
    return guards__redis_enter(env, goods_id, env->lease_ms, true, hold, detail, detail_len);
}
