/*
 * cart.c - the statements of an order of several goods (a cart, POST /api/order): pg-atomic's
 * one-statement sale of every item, and the cart's orders, recorded in one statement.
 *
 * The other cart paths read and write each goods row with the single sale's statements
 * (stock.c), one item at a time inside one transaction; only what must be one statement
 * lives here. A cart's arrays travel as array literals ("{1,7}"), parameters like any other.
 */
#include <stdlib.h>
#include <string.h>

#include "db/internal.h"

/* After the cart's UPDATE sold nothing: which item stopped it? Reads each goods in the
 * request's order, in the same transaction (the statement left their rows locked): the first
 * that does not exist, else the first short of stock (with the stock it has). */
static int why_not_taken(db_conn *conn, const int64_t *goods_ids, const int64_t *counts, size_t n,
                         int64_t *left, size_t *failed)
{
    size_t first_short = n;
    int rc;

    for (size_t i = 0; i < n; i++) {
        int64_t stock = 0;
        rc = db_stock_read(conn, goods_ids[i], &stock);
        if (rc == DB_ERR_NOT_FOUND) {
            *failed = i;
            db__set_error(conn, "goods %lld does not exist", (long long)goods_ids[i]);
            return DB_ERR_NOT_FOUND;
        }
        if (rc != DB_OK)
            return rc;
        if (first_short == n && stock < counts[i]) {
            first_short = i;
            left[i] = stock;
        }
    }
    if (first_short == n) {
        db__set_error(conn, "stock_take_cart sold nothing, and every item has its stock");
        return DB_ERR_QUERY;
    }
    *failed = first_short;
    return DB_ERR_INSUFFICIENT;
}

int db_stock_take_cart(db_conn *conn, const int64_t *goods_ids, const int64_t *counts, size_t n,
                       int64_t *left, size_t *failed)
{
    char *arrays[2];
    PGresult *res = NULL;
    size_t sold;
    int rc;

    if (!conn || !goods_ids || !counts || !left || !failed || n < 1 || n > DB_CART_MAX)
        return DB_ERR_INVALID;
    arrays[0] = db__i64_array(goods_ids, NULL, n);
    arrays[1] = db__i64_array(counts, NULL, n);
    rc = db__run_arrays(conn, DB__STOCK_TAKE_CART, (const char *const *)arrays, arrays, 2, &res);
    if (rc != DB_OK)
        return rc;
    /* Each returned row is one goods sold: its id and the stock it keeps. The cart holds
     * each goods once, so an id names one item. */
    sold = (size_t)PQntuples(res);
    for (int row = 0; row < (int)sold && rc == DB_OK; row++) {
        int64_t id = 0, stock = 0;
        rc = db__get_i64(conn, res, row, 0, &id);
        if (rc == DB_OK)
            rc = db__get_i64(conn, res, row, 1, &stock);
        for (size_t i = 0; rc == DB_OK && i < n; i++)
            if (goods_ids[i] == id)
                left[i] = stock;
    }
    PQclear(res);
    if (rc == DB_OK && sold == 0)
        rc = why_not_taken(conn, goods_ids, counts, n, left, failed);
    else if (rc == DB_OK && sold != n) {
        db__set_error(conn, "stock_take_cart sold %zu of %zu items", sold, n);
        rc = DB_ERR_QUERY; /* cannot happen: the statement writes all rows or none */
    }
    return rc;
}

int db_orders_insert_cart(db_conn *conn, const int64_t *goods_ids, const int64_t *counts,
                          const int64_t *fences, const bool *has_fence, const char *fence_source,
                          size_t n, const char *mode, const char *instance, const char *request_id,
                          int64_t *cart_id)
{
    const char *params[7];
    bool no_fence[DB_CART_MAX];
    char *arrays[3];
    PGresult *res = NULL;
    int rc;

    if (!conn || !goods_ids || !counts || !mode || !instance || !cart_id || n < 1 ||
        n > DB_CART_MAX)
        return DB_ERR_INVALID;
    for (size_t i = 0; i < n; i++) {
        if (counts[i] < 1 || counts[i] > INT32_MAX)
            return DB_ERR_INVALID;
        no_fence[i] = fences == NULL || has_fence == NULL || !has_fence[i];
    }
    arrays[0] = db__i64_array(goods_ids, NULL, n);
    arrays[1] = db__i64_array(counts, NULL, n);
    arrays[2] = db__i64_array(fences != NULL ? fences : counts, no_fence, n);
    params[0] = arrays[0];
    params[1] = arrays[1];
    params[2] = mode;
    params[3] = instance;
    params[4] = arrays[2];
    params[5] = fence_source;
    params[6] = request_id;
    rc = db__run_arrays(conn, DB__ORDERS_INSERT_CART, params, arrays, 3, &res);
    return rc != DB_OK ? rc : db__first_i64(conn, res, cart_id);
}
