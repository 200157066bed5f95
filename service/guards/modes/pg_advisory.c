/*
 * modes/pg_advisory.c - the "pg-advisory" rung: no guard in the service; the transaction
 * first takes pg_advisory_xact_lock on the goods id, then runs the plain read-check-write.
 * The lock is PostgreSQL's, so every replica meets it, and it is released by the commit or
 * the rollback, never forgotten. Safe with any number of replicas. It locks a number, not a
 * row: every path that writes the stock must take the same lock, or it is not kept apart.
 */
#include "service/guards/guards.h"

static int lock_then_read(db_conn *conn, int64_t goods_id, int64_t count, tx_seen *seen)
{
    int rc = db_goods_lock(conn, goods_id);

    (void)count;
    if (rc != DB_OK)
        return rc;
    return db_stock_read(conn, goods_id, &seen->stock);
}

static int write_computed(db_conn *conn, int64_t goods_id, int64_t count, const tx_seen *seen)
{
    return db_stock_write(conn, goods_id, seen->stock - count);
}

const mode_tx pg_advisory_tx = {
    .read = lock_then_read,
    .write = write_computed,
};
