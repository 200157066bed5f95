/*
 * rung_pg_for_update.c - the "pg-for-update" rung: no guard; the read is SELECT ... FOR
 * UPDATE. The row's lock is taken by the read and held until the transaction ends, so a
 * second request's read waits for the first one's commit and then reads the stock it left.
 * Safe with any number of replicas; the price is that every sale of one goods queues on one
 * row lock inside PostgreSQL, each holding a database connection while it waits.
 */
#include "service/guards.h"

static int read_for_update(db_conn *conn, int64_t goods_id, int64_t count, tx_seen *seen)
{
    (void)count;
    return db_stock_read_for_update(conn, goods_id, &seen->stock);
}

static int write_computed(db_conn *conn, int64_t goods_id, int64_t count, const tx_seen *seen)
{
    return db_stock_write(conn, goods_id, seen->stock - count);
}

const mode_tx rung_pg_for_update__tx = {read_for_update, write_computed, NULL};
