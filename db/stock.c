/*
 * stock.c - the statements of the read-check-write, the reset and the stock report.
 *
 * A deduction, as service/sale/deduct.c runs it, is five round trips to PostgreSQL:
 *   BEGIN; the read (db_stock_read, or db_stock_claim with a fencing token);
 *   UPDATE goods (db_stock_write); INSERT INTO orders (db_order_insert); COMMIT
 * (plus, with an Idempotency-Key, the claim and the store). Nothing here adds one on the
 * path of a sale: a second statement runs only when the first found nothing, to say why.
 * A fenced holder's sale sends the same statements in two batches instead (pipeline.c).
 *
 * Each function is one statement, run inside the caller's transaction if there is one;
 * db_goods_reset is the exception: it is its own transaction.
 */
#include <stdlib.h>
#include <string.h>

#include "db/internal.h"

/* Runs `stmt`, a one-parameter statement (the goods id) that returns the stock in one row or
 * no row, and, when `version` is not NULL, the row's version as a second column: the plain,
 * the FOR UPDATE and the versioned reads differ only in their SQL. */
static int read_stock_with(db_conn *conn, enum db__stmt_id stmt, int64_t goods_id, int64_t *stock,
                           int64_t *version)
{
    char id_buf[DB__I64_LEN];
    const char *params[1];
    PGresult *res = NULL;
    int rc;

    if (!conn || !stock)
        return DB_ERR_INVALID;
    params[0] = db__i64(id_buf, goods_id);
    rc = db__run(conn, stmt, params, &res);
    if (rc != DB_OK)
        return rc;
    if (PQntuples(res) == 0)
        rc = DB_ERR_NOT_FOUND;
    else
        rc = db__get_i64(conn, res, 0, 0, stock);
    if (rc == DB_OK && version != NULL)
        rc = db__get_i64(conn, res, 0, 1, version);
    PQclear(res);
    return rc;
}

int db_stock_read(db_conn *conn, int64_t goods_id, int64_t *stock)
{
    return read_stock_with(conn, DB__STOCK_READ, goods_id, stock, NULL);
}

/* After a claim or a write changed no row: was the goods missing, or the fence newer? */
static int why_not_written(db_conn *conn, const char *id_text, bool fenced)
{
    const char *params[1] = {id_text};
    int rc;

    if (!fenced)
        return DB_ERR_NOT_FOUND; /* without a fence, only a missing row stops the write */
    rc = db__missing_or_fenced(conn, DB__GOODS_EXISTS, params);
    if (rc == DB_ERR_FENCED)
        db__set_error(conn, "goods %s carries a fencing token newer than the holder's", id_text);
    return rc;
}

int db__why_not_claimed(db_conn *c, const char *id_text)
{
    return why_not_written(c, id_text, true);
}

void db__claim_params_make(db__claim_params *p, int64_t goods_id, int64_t token, const char *source)
{
    p->v[0] = db__i64(p->id, goods_id);
    p->v[1] = db__i64(p->token, token);
    p->v[2] = source;
}

int db_stock_claim(db_conn *conn, int64_t goods_id, const char *source, int64_t token,
                   int64_t *stock)
{
    db__claim_params p;
    int rc;

    if (!conn || !source || !stock)
        return DB_ERR_INVALID;
    db__claim_params_make(&p, goods_id, token, source);
    rc = db__run_i64(conn, DB__STOCK_CLAIM, p.v, stock);
    return rc == DB_ERR_NOT_FOUND ? why_not_written(conn, p.id, true) : rc;
}

int db_fence_of(db_conn *conn, int64_t goods_id, const char *source, int64_t *fence)
{
    char id_buf[DB__I64_LEN];
    const char *params[2];

    if (!conn || !source || !fence)
        return DB_ERR_INVALID;
    params[0] = db__i64(id_buf, goods_id);
    params[1] = source;
    return db__run_i64(conn, DB__FENCE_OF, params, fence);
}

/* Runs a change of the stock of goods_id to new_stock: with `version` NULL the plain write,
 * else the versioned one, which changes the row only while it is at *version. The two differ
 * in their SQL and in what a row left unchanged means: a missing goods, or a newer version. */
static int write_stock_with(db_conn *conn, int64_t goods_id, int64_t new_stock,
                            const int64_t *version)
{
    char id_buf[DB__I64_LEN], stock_buf[DB__I64_LEN], version_buf[DB__I64_LEN];
    const char *params[3];
    PGresult *res = NULL;
    int rc;

    if (!conn)
        return DB_ERR_INVALID;
    params[0] = db__i64(id_buf, goods_id);
    params[1] = db__i64(stock_buf, new_stock);
    params[2] = version ? db__i64(version_buf, *version) : NULL;
    rc = db__run(conn, version ? DB__STOCK_WRITE_VERSIONED : DB__STOCK_WRITE, params, &res);
    if (rc != DB_OK)
        return rc;
    if (strcmp(PQcmdTuples(res), "1") == 0)
        rc = DB_OK;
    else if (!version)
        rc = why_not_written(conn, id_buf, false);
    else {
        db__set_error(conn, "goods %s is no longer at version %s: another writer committed first",
                      id_buf, version_buf);
        rc = DB_ERR_RETRY;
    }
    PQclear(res);
    return rc;
}

int db_stock_write_fenced(db_conn *conn, int64_t goods_id, int64_t new_stock, const char *source,
                          int64_t token)
{
    db__claim_params p;
    char stock_buf[DB__I64_LEN];
    const char *params[4];
    PGresult *res = NULL;
    int rc;

    if (!conn || !source)
        return DB_ERR_INVALID;
    db__claim_params_make(&p, goods_id, token, source);
    params[0] = p.v[0];
    params[1] = p.v[1];
    params[2] = p.v[2];
    params[3] = db__i64(stock_buf, new_stock);
    rc = db__run(conn, DB__STOCK_WRITE_FENCED, params, &res);
    if (rc != DB_OK)
        return rc;
    rc = strcmp(PQcmdTuples(res), "1") == 0 ? DB_OK : why_not_written(conn, p.id, true);
    PQclear(res);
    return rc;
}

int db_stock_write(db_conn *conn, int64_t goods_id, int64_t new_stock)
{
    return write_stock_with(conn, goods_id, new_stock, NULL);
}

int db_order_insert(db_conn *conn, int64_t goods_id, int64_t count, const char *mode,
                    const char *instance, const int64_t *fence, const char *fence_source,
                    const char *request_id, int64_t *order_id)
{
    char id_buf[DB__I64_LEN], count_buf[DB__I64_LEN], fence_buf[DB__I64_LEN];
    const char *params[7];
    PGresult *res = NULL;
    int rc;

    if (!conn || !mode || !instance || !order_id)
        return DB_ERR_INVALID;
    params[0] = db__i64(id_buf, goods_id);
    params[1] = db__i64(count_buf, count);
    params[2] = mode;
    params[3] = instance;
    params[4] = fence ? db__i64(fence_buf, *fence) : NULL;
    params[5] = fence ? fence_source : NULL;
    params[6] = request_id;
    rc = db__run(conn, DB__ORDER_INSERT, params, &res);
    if (rc != DB_OK)
        return rc;
    rc = db__get_i64(conn, res, 0, 0, order_id);
    PQclear(res);
    return rc;
}

int db__orders_params_make(db__orders_params *p, int64_t goods_id, const int64_t *counts, size_t n,
                           const char *mode, const char *instance, const int64_t *fence,
                           const char *fence_source, const char *const *request_ids)
{
    size_t i;

    if (!counts || !mode || !instance || n < 1 || n > DB_ORDERS_MAX)
        return DB_ERR_INVALID;
    for (i = 0; i < n; i++)
        if (counts[i] < 1 || counts[i] > INT32_MAX)
            return DB_ERR_INVALID;
    p->counts = db__i64_array(counts, NULL, n);
    p->ids = db__text_array(request_ids, n);
    if (!p->counts || !p->ids) {
        db__orders_params_free(p);
        return DB_ERR_NOMEM;
    }
    p->v[0] = db__i64(p->id, goods_id);
    p->v[1] = p->counts;
    p->v[2] = mode;
    p->v[3] = instance;
    p->v[4] = fence ? db__i64(p->fence, *fence) : NULL;
    p->v[5] = fence ? fence_source : NULL;
    p->v[6] = p->ids;
    return DB_OK;
}

void db__orders_params_free(db__orders_params *p)
{
    free(p->counts);
    free(p->ids);
    p->counts = p->ids = NULL;
}

int db_orders_insert_many(db_conn *conn, int64_t goods_id, const int64_t *counts, size_t n,
                          const char *mode, const char *instance, const int64_t *fence,
                          const char *fence_source, const char *const *request_ids,
                          int64_t *order_ids)
{
    db__orders_params op;
    PGresult *res = NULL;
    int rc;

    if (!conn || !order_ids)
        return DB_ERR_INVALID;
    rc = db__orders_params_make(&op, goods_id, counts, n, mode, instance, fence, fence_source,
                                request_ids);
    if (rc != DB_OK)
        return rc;
    rc = db__run(conn, DB__ORDERS_INSERT_MANY, op.v, &res);
    return db__orders_done(conn, rc, &op, res, counts, n, order_ids);
}

int db__orders_done(db_conn *conn, int rc, db__orders_params *p, PGresult *res,
                    const int64_t *counts, size_t n, int64_t *order_ids)
{
    db__orders_params_free(p);
    if (rc != DB_OK)
        return rc;
    rc = db__order_ids(conn, res, counts, n, order_ids);
    PQclear(res);
    return rc;
}

int db__order_ids(db_conn *conn, const PGresult *res, const int64_t *counts, size_t n,
                  int64_t *order_ids)
{
    size_t i;
    int rc = DB_OK;

    if ((size_t)PQntuples(res) != n) {
        db__set_error(conn, "orders_insert_many returned %d rows for %zu orders", PQntuples(res),
                      n);
        return DB_ERR_QUERY;
    }
    /* Each caller's entry gets a row with its own count: the rows come back in the order
     * they were inserted, and matching on the count keeps the answer right whatever order
     * they came in. */
    for (i = 0; i < n; i++)
        order_ids[i] = 0;
    for (int row = 0; row < (int)n && rc == DB_OK; row++) {
        int64_t id = 0, count = 0;
        rc = db__get_i64(conn, res, row, 0, &id);
        if (rc == DB_OK)
            rc = db__get_i64(conn, res, row, 1, &count);
        for (i = 0; rc == DB_OK && i < n; i++)
            if (order_ids[i] == 0 && counts[i] == count) {
                order_ids[i] = id;
                break;
            }
        if (rc == DB_OK && i == n) {
            db__set_error(conn, "orders_insert_many returned a row of count %lld not asked for",
                          (long long)count);
            rc = DB_ERR_QUERY;
        }
    }
    return rc;
}

/* The statements of a reset, inside the transaction db_goods_reset opened. The goods row
 * is written first: that waits for any deduction holding the row, so the deletes that
 * follow (each with a fresh snapshot, READ COMMITTED) see its order too. Then the segments
 * (redis-sharded) are locked in ascending order, as every mover of units takes them, which
 * waits for the sales holding one, and emptied: the reset's stock is all in the goods row.
 * From there on no sale of the goods can commit before the reset does, so the orders and the
 * counters that count them (migrations/008_goods_sales.sql) are emptied together, exactly. */
static int reset_statements(db_conn *conn, const char *const *params)
{
    /* In their order; `seg`: run with (goods, 0), the stock a segment is emptied to. */
    static const struct {
        enum db__stmt_id id;
        bool seg;
    } steps[] = {
        {DB__GOODS_UPSERT, false},      {DB__SEGMENTS_LOCK_ALL, false}, {DB__SEGMENTS_EMPTY, true},
        {DB__ORDERS_DELETE, false},     {DB__SALES_DELETE, false},      {DB__IDEM_DELETE, false},
        {DB__ORDER_IDEM_DELETE, false},
    };
    const char *seg_params[2] = {params[0], "0"};
    int rc = DB_OK;

    for (size_t i = 0; rc == DB_OK && i < sizeof(steps) / sizeof(steps[0]); i++)
        rc = db__run(conn, steps[i].id, steps[i].seg ? seg_params : params, NULL);
    return rc;
}

int db_goods_reset(db_conn *conn, int64_t goods_id, int64_t stock)
{
    char saved[DB__ERR_LEN];
    db__nums p;
    int rc;

    if (!conn || !conn->pg)
        return DB_ERR_INVALID;
    if (PQtransactionStatus(conn->pg) != PQTRANS_IDLE) {
        db__set_error(conn, "db_goods_reset runs its own transaction: call it outside one");
        return DB_ERR_INVALID;
    }
    db__nums_of(&p, 2, (const int64_t[]){goods_id, stock});

    rc = db_begin(conn);
    if (rc != DB_OK)
        return rc;
    rc = reset_statements(conn, p.params);
    if (rc == DB_OK)
        return db_commit(conn);
    /* The first error is the one to report: keep its text over the rollback's. */
    memcpy(saved, conn->err, sizeof(saved));
    (void)db_rollback(conn);
    memcpy(conn->err, saved, sizeof(saved));
    return rc;
}

/* Runs the report (or, with ledger not NULL, the audit) and reads its columns in order. */
static int report_with(db_conn *conn, int64_t goods_id, db_stock_report *out,
                       db_stock_ledger *ledger)
{
    char id_buf[DB__I64_LEN];
    const char *params[1];
    int64_t *cols[6];
    int ncols = ledger ? 6 : 4;
    PGresult *res = NULL;
    int rc;

    if (!conn || !out)
        return DB_ERR_INVALID;
    cols[0] = &out->initial;
    cols[1] = &out->stock;
    cols[2] = &out->sold;
    cols[3] = &out->orders;
    if (ledger) {
        cols[4] = &ledger->sold;
        cols[5] = &ledger->orders;
    }
    params[0] = db__i64(id_buf, goods_id);
    rc = db__run(conn, ledger ? DB__STOCK_AUDIT : DB__STOCK_REPORT, params, &res);
    if (rc != DB_OK)
        return rc;
    if (PQntuples(res) == 0)
        rc = DB_ERR_NOT_FOUND;
    for (int i = 0; rc == DB_OK && i < ncols; i++)
        rc = db__get_i64(conn, res, 0, i, cols[i]);
    PQclear(res);
    return rc;
}

int db_stock_report_read(db_conn *conn, int64_t goods_id, db_stock_report *out)
{
    return report_with(conn, goods_id, out, NULL);
}

int db_stock_audit_read(db_conn *conn, int64_t goods_id, db_stock_report *out,
                        db_stock_ledger *ledger)
{
    if (!ledger)
        return DB_ERR_INVALID;
    return report_with(conn, goods_id, out, ledger);
}

/* ---- the PostgreSQL rungs ------------------------------------------------------------ */

int db_stock_read_for_update(db_conn *conn, int64_t goods_id, int64_t *stock)
{
    return read_stock_with(conn, DB__STOCK_READ_FOR_UPDATE, goods_id, stock, NULL);
}

int db_goods_lock(db_conn *conn, int64_t goods_id)
{
    char id_buf[DB__I64_LEN];
    const char *params[1];

    if (!conn)
        return DB_ERR_INVALID;
    params[0] = db__i64(id_buf, goods_id);
    return db__run(conn, DB__GOODS_ADVISORY_LOCK, params, NULL); /* the row says nothing */
}

int db_stock_take(db_conn *conn, int64_t goods_id, int64_t count, int64_t *stock)
{
    db__nums p;
    int rc;

    if (!conn || !stock || count < 1)
        return DB_ERR_INVALID;
    rc = db__run_i64(conn, DB__STOCK_TAKE, db__nums_of(&p, 2, (const int64_t[]){goods_id, count}),
                     stock);
    if (rc != DB_ERR_NOT_FOUND)
        return rc;
    /* No row changed: the goods is unknown, or short. A second statement, off the path of a
     * sale, says which and what stock there is to report. */
    rc = db_stock_read(conn, goods_id, stock);
    return rc == DB_OK ? DB_ERR_INSUFFICIENT : rc;
}

/* ---- pg-optimistic: the versioned read and write ------------------------------------- */

int db_stock_read_versioned(db_conn *conn, int64_t goods_id, int64_t *stock, int64_t *version)
{
    if (!version)
        return DB_ERR_INVALID;
    return read_stock_with(conn, DB__STOCK_READ_VERSIONED, goods_id, stock, version);
}

int db_stock_write_versioned(db_conn *conn, int64_t goods_id, int64_t new_stock, int64_t version)
{
    return write_stock_with(conn, goods_id, new_stock, &version);
}

/* ---- pg-lockrow: a row as the lock ----------------------------------------------------- */

/* Runs a one-statement change of goods_locks outside any transaction and sets *rows to the
 * number of rows it changed. */
static int lockrow_run(db_conn *conn, enum db__stmt_id stmt, const char *const *params, long *rows)
{
    PGresult *res = NULL;
    int rc;

    if (PQtransactionStatus(conn->pg) != PQTRANS_IDLE) {
        db__set_error(conn, "a lock row is taken and released in its own transaction: call it "
                            "outside one");
        return DB_ERR_INVALID;
    }
    rc = db__run(conn, stmt, params, &res);
    if (rc != DB_OK)
        return rc;
    *rows = strtol(PQcmdTuples(res), NULL, 10);
    PQclear(res);
    return DB_OK;
}

int db_lockrow_take(db_conn *conn, int64_t goods_id, const char *owner, int64_t ttl_ms,
                    bool *took_over)
{
    char id_buf[DB__I64_LEN], ttl_buf[DB__I64_LEN];
    const char *params[3];
    long rows = 0;
    int rc;

    if (took_over)
        *took_over = false;
    if (!conn || !conn->pg || !owner || ttl_ms < 0)
        return DB_ERR_INVALID;
    params[0] = db__i64(id_buf, goods_id);
    params[1] = owner;
    params[2] = ttl_ms > 0 ? db__i64(ttl_buf, ttl_ms) : NULL;
    rc = lockrow_run(conn, DB__LOCKROW_TAKE, params, &rows);
    if (rc != DB_OK || rows == 1)
        return rc;
    if (ttl_ms > 0) {
        /* Held, but perhaps by a holder whose lease has run out: then the row is free to
         * delete, and the insert is tried once more (another taker may win it first). */
        rc = lockrow_run(conn, DB__LOCKROW_EXPIRE, params, &rows);
        if (rc != DB_OK)
            return rc;
        if (rows == 1) {
            rc = lockrow_run(conn, DB__LOCKROW_TAKE, params, &rows);
            if (rc != DB_OK)
                return rc;
            if (rows == 1) {
                if (took_over)
                    *took_over = true;
                return DB_OK;
            }
        }
    }
    db__set_error(conn, "the lock row of goods %s is held by another owner", id_buf);
    return DB_ERR_HELD;
}

int db_lockrow_release(db_conn *conn, int64_t goods_id, const char *owner)
{
    char id_buf[DB__I64_LEN];
    const char *params[2];
    long rows = 0;
    int rc;

    if (!conn || !conn->pg || !owner)
        return DB_ERR_INVALID;
    params[0] = db__i64(id_buf, goods_id);
    params[1] = owner;
    rc = lockrow_run(conn, DB__LOCKROW_RELEASE, params, &rows);
    if (rc != DB_OK)
        return rc;
    if (rows != 1) {
        db__set_error(conn,
                      "goods %s has no lock row of this owner (expired and taken over, or "
                      "deleted)",
                      id_buf);
        return DB_ERR_NOT_FOUND;
    }
    return DB_OK;
}
