/*
 * modes/tx_inside.c - the "tx-inside" mode: an application pitfall with a right lock. The
 * guard is redis-nofence's (the lock of lock/ with its watchdog, no fencing token), and the
 * deduction gives it back inside the transaction, just before COMMIT (mode.leaves_inside_tx,
 * service/sale/sale.c), instead of after it.
 *
 * Between that release and the commit, the next holder takes the lock and reads the stock
 * this transaction has written but not yet committed: it reads the old value, and both
 * sell the same unit. The window is one COMMIT's round trip, small but real under load; a
 * pause there (fault injection's pause-before-commit) makes it as wide as the pause.
 */
#include "service/guards/guards.h"

int guard_tx_inside_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                          size_t detail_len)
{
    return guards__redis_enter(env, goods_id, env->lease_ms, false, hold, detail, detail_len);
}
