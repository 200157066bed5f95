/*
 * segments.c - the segments of a goods' stock (redis-sharded): the hint, a segment's fenced
 * claim and write, and the moves of units between the goods row and its segments.
 *
 * A sale of the sharded mode touches one segment row, not the goods row: that is what lets
 * sales of one goods run side by side. The moves (gather and spread, fold) are the rare,
 * slow part; they lock the goods row and every segment, always in one order (db.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/internal.h"

int db_segments_read(db_conn *conn, int64_t goods_id, int k, int64_t *goods_stock, int64_t *stocks,
                     int64_t *total)
{
    char id_buf[DB__I64_LEN];
    const char *params[1];
    PGresult *res = NULL;
    bool found = false;
    int rc = DB_OK;

    if (!conn || !goods_stock || !stocks || !total || k < 1 || k > DB_SEGMENTS_MAX)
        return DB_ERR_INVALID;
    params[0] = db__i64(id_buf, goods_id);
    rc = db__run(conn, DB__SEGMENTS_READ, params, &res);
    if (rc != DB_OK)
        return rc;
    *goods_stock = 0;
    *total = 0;
    for (int i = 0; i < k; i++)
        stocks[i] = 0;
    for (int row = 0; row < PQntuples(res) && rc == DB_OK; row++) {
        int64_t seg = 0, stock = 0;
        rc = db__get_i64(conn, res, row, 0, &seg);
        if (rc == DB_OK)
            rc = db__get_i64(conn, res, row, 1, &stock);
        if (rc != DB_OK)
            break;
        *total += stock;
        if (seg < 0) {
            found = true;
            *goods_stock = stock;
        } else if (seg < k) {
            stocks[seg] = stock;
        }
    }
    PQclear(res);
    if (rc == DB_OK && !found)
        rc = DB_ERR_NOT_FOUND;
    return rc;
}

int db_segment_claim(db_conn *conn, int64_t goods_id, int seg, int64_t token, int64_t *stock)
{
    db__nums p;
    int rc;

    if (!conn || !stock || seg < 0 || seg >= DB_SEGMENTS_MAX)
        return DB_ERR_INVALID;
    db__nums_of(&p, 3, (const int64_t[]){goods_id, seg, token});
    rc = db__run_i64(conn, DB__SEGMENT_CLAIM, p.params, stock);
    if (rc != DB_ERR_NOT_FOUND)
        return rc;
    /* No row changed: no such segment, or a newer token. Off the path of a sale. */
    rc = db__missing_or_fenced(conn, DB__SEGMENT_EXISTS, p.params);
    if (rc == DB_ERR_FENCED)
        db__set_error(conn,
                      "segment %s of goods %s carries a fencing token newer than the holder's",
                      p.text[1], p.text[0]);
    return rc;
}

int db_segment_write(db_conn *conn, int64_t goods_id, int seg, int64_t new_stock,
                     int64_t *total_left)
{
    db__nums p;
    int rc;

    if (!conn || !total_left || seg < 0 || seg >= DB_SEGMENTS_MAX || new_stock < 0)
        return DB_ERR_INVALID;
    db__nums_of(&p, 3, (const int64_t[]){goods_id, seg, new_stock});
    rc = db__run_i64(conn, DB__SEGMENT_WRITE, p.params, total_left);
    if (rc == DB_ERR_NOT_FOUND)
        db__set_error(conn, "segment %s of goods %s has no row", p.text[1], p.text[0]);
    return rc;
}

int db_segments_gather(db_conn *conn, int64_t goods_id, int k, int64_t *goods_stock,
                       int64_t *stocks, int64_t *fences, int64_t *rest)
{
    char id_buf[DB__I64_LEN];
    const char *params[1];
    PGresult *res = NULL;
    int rc;

    if (!conn || !goods_stock || !stocks || !fences || !rest || k < 1 || k > DB_SEGMENTS_MAX)
        return DB_ERR_INVALID;
    params[0] = db__i64(id_buf, goods_id);
    rc = db_goods_lock(conn, goods_id);
    if (rc != DB_OK)
        return rc;
    rc = db__run_i64(conn, DB__GOODS_LOCK_NOKEY, params, goods_stock);
    if (rc != DB_OK)
        return rc;

    rc = db__run(conn, DB__SEGMENTS_LOCK_ALL, params, &res);
    if (rc != DB_OK)
        return rc;
    *rest = 0;
    for (int i = 0; i < k; i++)
        stocks[i] = fences[i] = 0;
    for (int row = 0; row < PQntuples(res) && rc == DB_OK; row++) {
        int64_t seg = 0, stock = 0, fence = 0;
        rc = db__get_i64(conn, res, row, 0, &seg);
        if (rc == DB_OK)
            rc = db__get_i64(conn, res, row, 1, &stock);
        if (rc == DB_OK)
            rc = db__get_i64(conn, res, row, 2, &fence);
        if (rc != DB_OK)
            break;
        if (seg >= 0 && seg < k) {
            stocks[seg] = stock;
            fences[seg] = fence;
        } else {
            *rest += stock;
        }
    }
    PQclear(res);
    return rc;
}

int db_segments_spread(db_conn *conn, int64_t goods_id, int64_t goods_stock, int k,
                       const int64_t *stocks, const int64_t *fences)
{
    char id_buf[DB__I64_LEN], k_buf[DB__I64_LEN];
    const char *params[3];
    char *arrays[2];
    int rc;

    if (!conn || !stocks || !fences || k < 1 || k > DB_SEGMENTS_MAX || goods_stock < 0)
        return DB_ERR_INVALID;
    for (int i = 0; i < k; i++)
        if (stocks[i] < 0)
            return DB_ERR_INVALID;
    rc = db_stock_write(conn, goods_id, goods_stock);
    if (rc != DB_OK)
        return rc;
    params[0] = db__i64(id_buf, goods_id);
    params[1] = db__i64(k_buf, k);
    rc = db__run(conn, DB__SEGMENTS_EMPTY, params, NULL);
    if (rc != DB_OK)
        return rc;
    arrays[0] = db__i64_array(stocks, NULL, (size_t)k);
    arrays[1] = db__i64_array(fences, NULL, (size_t)k);
    params[1] = arrays[0];
    params[2] = arrays[1];
    return db__run_arrays(conn, DB__SEGMENTS_SPREAD, params, arrays, 2, NULL);
}

int db_segments_fold(db_conn *conn, int64_t goods_id, int64_t *moved)
{
    int64_t goods_stock = 0, fences[DB_SEGMENTS_MAX], all[DB_SEGMENTS_MAX];
    int64_t rest = 0, sum = 0;
    int rc;

    if (!conn || !conn->pg || !moved)
        return DB_ERR_INVALID;
    *moved = 0;
    if (PQtransactionStatus(conn->pg) != PQTRANS_INTRANS) {
        db__set_error(conn, "db_segments_fold runs inside the caller's transaction: begin one");
        return DB_ERR_INVALID;
    }
    rc = db_segments_gather(conn, goods_id, DB_SEGMENTS_MAX, &goods_stock, all, fences, &rest);
    for (int i = 0; rc == DB_OK && i < DB_SEGMENTS_MAX; i++)
        sum += all[i];
    sum += rest;
    if (rc == DB_OK && sum > 0) {
        char id_buf[DB__I64_LEN];
        const char *params[2] = {db__i64(id_buf, goods_id), "0"};
        rc = db__run(conn, DB__SEGMENTS_EMPTY, params, NULL);
        if (rc == DB_OK)
            rc = db_stock_write(conn, goods_id, goods_stock + sum);
    }
    if (rc == DB_OK)
        *moved = sum;
    return rc;
}
