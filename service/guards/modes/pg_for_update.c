/*
 * modes/pg_for_update.c - the "pg-for-update" rung: no guard; the read is SELECT ... FOR
 * UPDATE. The row's lock is taken by the read and held until the transaction ends, so a
 * second request's read waits for the first one's commit and then reads the stock it left.
 * Safe with any number of replicas; the price is that every sale of one goods queues on one
 * row lock inside PostgreSQL, each holding a database connection while it waits.
 */
#include "service/guards/guards.h"

/* The read: SELECT ... FOR UPDATE, the row locked until the transaction ends. */
int pg_for_update_read(db_conn *conn, int64_t goods_id, int64_t count, tx_seen *seen)
{
    (void)count;
    return db_stock_read_for_update(conn, goods_id, &seen->stock);
}

/* The write: the stock computed in C from what the locked read saw. */
int pg_for_update_write(db_conn *conn, int64_t goods_id, int64_t count, const tx_seen *seen)
{
    return db_stock_write(conn, goods_id, seen->stock - count);
}

const mode_tx pg_for_update_tx = {
    .read = pg_for_update_read,
    .write = pg_for_update_write,
};
