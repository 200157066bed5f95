/*
 * idempotency.c - the Idempotency-Key records: one per (goods, key), holding the first
 * answer given for that key.
 *
 * A request with a key claims it inside its own transaction, before it reads the stock,
 * by inserting an empty record (status 0). The primary key does the rest:
 *   - nobody has the key: the insert succeeds; the request goes on, stores its answer in
 *     the record (db_idempotency_store) and commits the answer with the sale;
 *   - a committed request has it: ON CONFLICT DO NOTHING inserts nothing; the caller rolls
 *     back and answers with the stored record (db_idempotency_fetch);
 *   - a request still in flight has it: the insert waits for that transaction to end, then
 *     behaves as one of the two cases above. A rolled-back request (a 503) leaves no
 *     record, so the waiting one carries on as the first.
 * So the same key sent twenty times at once sells once, with no lock but the index's.
 *
 * A record is finished (status != 0) in the same transaction that claimed it, so no one
 * else ever sees an empty one; fetch skips them all the same.
 *
 * A cart's records (order_idempotency) work the same way, keyed by the cart's canonical
 * text instead of a goods id: the three steps below are written once, for both tables, with
 * the statement and the record's scope (the first parameter) as arguments.
 */
#include <stdlib.h>
#include <string.h>

#include "db/internal.h"

/* Runs a claim statement (params: scope, key, ...). DB_OK when one row was inserted,
 * DB_ERR_CONFLICT when the key was already recorded. */
static int claim_with(db_conn *conn, enum db__stmt_id stmt, const char *const *params)
{
    PGresult *res = NULL;
    int rc = db__run(conn, stmt, params, &res);

    if (rc != DB_OK)
        return rc;
    if (strcmp(PQcmdTuples(res), "1") != 0) {
        db__set_error(conn, "idempotency key already used for %s", params[0]);
        rc = DB_ERR_CONFLICT;
    }
    PQclear(res);
    return rc;
}

/* Fills the claimed record of (scope, key) with the answer. */
static int store_with(db_conn *conn, enum db__stmt_id stmt, const char *scope, const char *key,
                      int status, const char *body)
{
    char status_buf[DB__I64_LEN];
    const char *params[4];
    PGresult *res = NULL;
    int rc;

    if (!conn || !key || !body || status < 100 || status > 599)
        return DB_ERR_INVALID;
    params[0] = scope;
    params[1] = key;
    params[2] = db__i64(status_buf, status);
    params[3] = body;
    rc = db__run(conn, stmt, params, &res);
    if (rc != DB_OK)
        return rc;
    if (strcmp(PQcmdTuples(res), "1") != 0) {
        db__set_error(conn, "no claimed idempotency record to store into");
        rc = DB_ERR_NOT_FOUND;
    }
    PQclear(res);
    return rc;
}

/* The stored answer of (scope, key); *body malloc'd. */
static int fetch_with(db_conn *conn, enum db__stmt_id stmt, const char *scope, const char *key,
                      int *status, char **body)
{
    const char *params[2];
    PGresult *res = NULL;
    int64_t st = 0;
    char *copy = NULL;
    int rc;

    if (!conn || !key || !status || !body)
        return DB_ERR_INVALID;
    *body = NULL;
    params[0] = scope;
    params[1] = key;
    rc = db__run(conn, stmt, params, &res);
    if (rc != DB_OK)
        return rc;
    if (PQntuples(res) == 0) {
        rc = DB_ERR_NOT_FOUND;
        goto out;
    }
    rc = db__get_i64(conn, res, 0, 0, &st);
    if (rc != DB_OK)
        goto out;
    copy = strdup(PQgetisnull(res, 0, 1) ? "" : PQgetvalue(res, 0, 1));
    if (!copy) {
        rc = DB_ERR_NOMEM;
        goto out;
    }
    *status = (int)st;
    *body = copy;
out:
    PQclear(res);
    return rc;
}

int db_idempotency_claim(db_conn *conn, int64_t goods_id, const char *key)
{
    char id_buf[DB__I64_LEN];
    const char *params[2];

    if (!conn || !key)
        return DB_ERR_INVALID;
    params[0] = db__i64(id_buf, goods_id);
    params[1] = key;
    return claim_with(conn, DB__IDEM_CLAIM, params);
}

int db_idempotency_store(db_conn *conn, int64_t goods_id, const char *key, int status,
                         const char *body)
{
    char id_buf[DB__I64_LEN];

    return store_with(conn, DB__IDEM_STORE, db__i64(id_buf, goods_id), key, status, body);
}

int db_idempotency_fetch(db_conn *conn, int64_t goods_id, const char *key, int *status, char **body)
{
    char id_buf[DB__I64_LEN];

    return fetch_with(conn, DB__IDEM_FETCH, db__i64(id_buf, goods_id), key, status, body);
}

int db_order_idempotency_claim(db_conn *conn, const char *cart, const int64_t *goods_ids, size_t n,
                               const char *key)
{
    const char *params[3];
    char *goods;
    int rc;

    if (!conn || !cart || !goods_ids || !key || n < 1 || n > DB_CART_MAX)
        return DB_ERR_INVALID;
    goods = db__i64_array(goods_ids, NULL, n);
    if (!goods)
        return DB_ERR_NOMEM;
    params[0] = cart;
    params[1] = key;
    params[2] = goods;
    rc = claim_with(conn, DB__ORDER_IDEM_CLAIM, params);
    free(goods);
    return rc;
}

int db_order_idempotency_store(db_conn *conn, const char *cart, const char *key, int status,
                               const char *body)
{
    if (!cart)
        return DB_ERR_INVALID;
    return store_with(conn, DB__ORDER_IDEM_STORE, cart, key, status, body);
}

int db_order_idempotency_fetch(db_conn *conn, const char *cart, const char *key, int *status,
                               char **body)
{
    if (!cart)
        return DB_ERR_INVALID;
    return fetch_with(conn, DB__ORDER_IDEM_FETCH, cart, key, status, body);
}
