/*
 * modes/pg_optimistic.c - the "pg-optimistic" rung: no lock at the read. The transaction reads
 * the stock and the row's version, checks in C, and writes
 *   UPDATE goods SET stock = <computed>, version = version + 1 WHERE id = $1 AND version = $v
 * If another sale committed since the read, the version has moved on, the UPDATE changes no
 * row, and this write reports DB_ERR_RETRY: sale.c rolls the transaction back (the order
 * and the idempotency claim with it) and runs it again from BEGIN, up to OPTIMISTIC_RETRIES
 * times with a short random pause, then answers 503 conflict.
 *
 * Safe with any number of replicas: a sale only commits a stock computed from the version it
 * replaces. Its price is contention: of N requests that read the same version, one commits
 * and N-1 start over, so the work per sale grows with the number of concurrent buyers of the
 * same goods, and past some point requests run out of retries. It shines where conflicts are
 * rare (many goods, few buyers each), which is not the flash sale this project simulates.
 * (It is not lock-free either: under READ COMMITTED the UPDATE waits for a concurrent
 * writer's uncommitted change of the row before it checks the version; the wait is short,
 * that writer is already past its read, and lock_timeout bounds it.)
 */
#include "service/guards/guards.h"

static int read_versioned(db_conn *conn, int64_t goods_id, int64_t count, tx_seen *seen)
{
    (void)count;
    return db_stock_read_versioned(conn, goods_id, &seen->stock, &seen->version);
}

static int write_if_unchanged(db_conn *conn, int64_t goods_id, int64_t count, const tx_seen *seen)
{
    return db_stock_write_versioned(conn, goods_id, seen->stock - count, seen->version);
}

const mode_tx pg_optimistic_tx = {
    .read = read_versioned,
    .write = write_if_unchanged,
};
