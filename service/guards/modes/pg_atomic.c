/*
 * modes/pg_atomic.c - the "pg-atomic" rung: no lock of ours at all. The check and the write
 * are one statement, UPDATE goods SET stock = stock - n WHERE id = $1 AND stock >= n: no
 * value is read into the service to go stale, and PostgreSQL re-checks the condition against
 * the committed row when two updates meet. Safe with any number of replicas, and the
 * shortest transaction of the ladder. Its limit: the whole rule must fit in one statement.
 *
 * In this shape the "read" is the write: it hands back the stock as it was before the sale,
 * so the rest of the deduction reads as for any other rung, and the write has nothing left
 * to do. A cart is one statement too: every row's check and write at once.
 */
#include "service/guards/guards.h"

static int take(db_conn *conn, int64_t goods_id, int64_t count, tx_seen *seen)
{
    int64_t left = 0;
    int rc = db_stock_take(conn, goods_id, count, &left);

    seen->stock = rc == DB_OK ? left + count : left;
    return rc;
}

static int already_written(db_conn *conn, int64_t goods_id, int64_t count, const tx_seen *seen)
{
    (void)conn;
    (void)goods_id;
    (void)count;
    (void)seen;
    return DB_OK;
}

/* A cart: every item's check and write in one statement (db_stock_take_cart). */
const mode_tx pg_atomic_tx = {
    .read = take, .write = already_written, .take_cart = db_stock_take_cart};
