/*
 * modes/pg_serializable.c - the "pg-serializable" rung: no lock of ours and none asked of the
 * database. The read-check-write of `none` (a plain SELECT, the check in C, the UPDATE of the
 * computed stock), only inside a SERIALIZABLE transaction. PostgreSQL's serializable snapshot
 * isolation (SSI) lets the transactions run side by side and refuses, with SQLSTATE 40001,
 * one whose reads and writes could not be put in one order with a concurrent one's. Here that
 * is the plain lost update: two sales read the same stock; the first to write commits, and
 * the second's UPDATE of the row the first changed after its snapshot fails at once (or, if
 * it waited for the first's uncommitted write, as soon as that one commits). sale.c then
 * rolls the transaction back and runs it again from BEGIN with a short random pause, up to
 * OPTIMISTIC_RETRIES times, then answers 503 conflict: pg-optimistic's retry, with the
 * database keeping the version.
 *
 * REPEATABLE READ would do as much for this one row (PostgreSQL refuses the concurrent update
 * at that level too); SERIALIZABLE also catches what touches different rows (a check of one
 * row, a write of another). Safe with any number of replicas; its price is pg-optimistic's:
 * under contention for one goods most transactions run more than once.
 */
#include "service/guards/guards.h"

static int read_plain(db_conn *conn, int64_t goods_id, int64_t count, tx_seen *seen)
{
    (void)count;
    return db_stock_read(conn, goods_id, &seen->stock);
}

const mode_tx pg_serializable_tx = {
    .read = read_plain, .write = pg_for_update_write, .isolation = DB_SERIALIZABLE};
