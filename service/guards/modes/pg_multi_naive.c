/*
 * modes/pg_multi_naive.c - the "pg-multi-naive" mode: pg-for-update's transaction shape (the
 * read is SELECT ... FOR UPDATE), with a cart's rows locked in the order the cart lists them
 * (mode.cart, service/sale/order.c) instead of in ascending goods id.
 *
 * Two carts naming the same goods in opposite orders each lock one row and wait for the
 * other's. PostgreSQL finds the cycle (deadlock_timeout) and rolls one of them back: that
 * cart answers 503 conflict, the other sells. Liveness, not safety: nothing is oversold. A
 * single deduct is pg-for-update's.
 */
#include "service/guards/guards.h"

const mode_tx pg_multi_naive_tx = {
    .read = pg_for_update_read,
    .write = pg_for_update_write,
};
