/*
 * test_statements.c - the statements of the read-check-write against a real PostgreSQL: read,
 * write and the order inserted (one and many), the cart's statements, the PostgreSQL rungs'
 * (FOR UPDATE, atomic, advisory, versioned, the lock row), lock waits ended by lock_timeout,
 * the lost update at each isolation (40001 at the two stricter), and a failed transaction that
 * commits nothing.
 *
 * The environment and the fixtures: tests/db/db_support.h.
 */
#include "tests/db/db_support.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the read-check-write --------------------------------------------------------- */

static void test_read_write_and_insert(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = 0, id1 = 0, id2 = 0, fence = 3;

    reset_ok(c, 1, 10);
    assert_int_equal(stock_of(c, 1), 10);
    assert_int_equal(db_stock_write(c, 1, 7), DB_OK);
    assert_int_equal(stock_of(c, 1), 7);

    assert_int_equal(db_order_insert(c, 1, 3, "none", "svc-1", NULL, NULL, NULL, &id1), DB_OK);
    assert_int_equal(db_order_insert(c, 1, 2, "redis", "svc-2", &fence, "redis", NULL, &id2),
                     DB_OK);
    assert_true(id1 > 0 && id2 > id1);
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM orders WHERE goods = 1"
                             " AND ((mode = 'none' AND instance = 'svc-1'"
                             " AND fence IS NULL AND count = 3) OR (mode = 'redis'"
                             " AND instance = 'svc-2' AND fence = 3 AND count = 2))",
                             0, NULL),
                     2);

    assert_int_equal(db_stock_read(c, 999, &s), DB_ERR_NOT_FOUND);
    assert_int_equal(db_stock_write(c, 999, 1), DB_ERR_NOT_FOUND);

    /* refused statements: DB_ERR_QUERY with the reason; the session stays usable */
    assert_int_equal(db_order_insert(c, 999, 1, "none", "svc-1", NULL, NULL, NULL, &id1),
                     DB_ERR_QUERY);
    assert_non_null(strstr(db_conn_error(c), "23503")); /* foreign key */
    assert_int_equal(db_stock_write(c, 1, -1), DB_ERR_QUERY);
    assert_non_null(strstr(db_conn_error(c), "23514")); /* check constraint */
    assert_int_equal(db_ping(c), DB_OK);
    assert_int_equal(stock_of(c, 1), 7);

    db_pool_release(f->pool, c);
}

/* A batch's orders in one statement: one row per count, each caller's entry given the id of
 * a row of its own with its count; bad arguments change nothing. */
static void test_orders_insert_many(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const int64_t counts[] = {2, 1, 2, 5};
    int64_t ids[4] = {0}, fence = 9, bad[] = {1, 0};

    reset_ok(c, 1, 10);
    assert_int_equal(
        db_orders_insert_many(c, 1, counts, 4, "redis-batch", "svc-1", &fence, "redis", NULL, ids),
        DB_OK);
    for (int i = 0; i < 4; i++) {
        char id_buf[24], count_buf[24];
        const char *params[2] = {id_buf, count_buf};
        snprintf(id_buf, sizeof(id_buf), "%lld", (long long)ids[i]);
        snprintf(count_buf, sizeof(count_buf), "%lld", (long long)counts[i]);
        assert_true(ids[i] > 0);
        for (int j = 0; j < i; j++)
            assert_true(ids[i] != ids[j]);
        assert_int_equal(raw_int(f->admin,
                                 "SELECT count(*) FROM orders WHERE id = $1::bigint AND goods = 1"
                                 " AND count = $2::integer AND mode = 'redis-batch'"
                                 " AND instance = 'svc-1' AND fence = 9",
                                 2, params),
                         1);
    }
    assert_int_equal(raw_int(f->admin, "SELECT count(*) FROM orders WHERE goods = 1", 0, NULL), 4);

    assert_int_equal(db_orders_insert_many(c, 1, counts, 0, "m", "i", NULL, NULL, NULL, ids),
                     DB_ERR_INVALID);
    assert_int_equal(db_orders_insert_many(c, 1, bad, 2, "m", "i", NULL, NULL, NULL, ids),
                     DB_ERR_INVALID);
    assert_int_equal(db_orders_insert_many(c, 999, counts, 1, "m", "i", NULL, NULL, NULL, ids),
                     DB_ERR_QUERY);
    assert_int_equal(raw_int(f->admin, "SELECT count(*) FROM orders WHERE goods = 1", 0, NULL), 4);
    db_pool_release(f->pool, c);
}

/* The client's request id rides in the order's own INSERT, single or batched (a NULL for a
 * request without one), and comes back out of the orders table as it went in, quotes and
 * backslashes included: what a recorded load settles its unknown outcomes by. */
static void test_orders_request_id(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const int64_t counts[] = {1, 2, 3};
    const char *rids[] = {"h-1-7", NULL, "q\"b\\s"};
    int64_t id = 0, ids[3] = {0}, fence = 4, stock = 0;
    char id_buf[24];
    const char *params[1] = {id_buf};

    reset_ok(c, 1, 10);
    assert_int_equal(db_order_insert(c, 1, 1, "none", "svc-1", NULL, NULL, "r-1", &id), DB_OK);
    snprintf(id_buf, sizeof(id_buf), "%lld", (long long)id);
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM orders WHERE id = $1::bigint"
                             " AND request_id = 'r-1'",
                             1, params),
                     1);
    assert_int_equal(db_claim_begin(c, 1, "redis", 5, 0, &stock), DB_OK);
    assert_int_equal(
        db_sale_commit(c, 1, stock - 1, 1, "redis", "svc-1", 5, "redis", "p-2", NULL, &id), DB_OK);
    snprintf(id_buf, sizeof(id_buf), "%lld", (long long)id);
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM orders WHERE id = $1::bigint"
                             " AND request_id = 'p-2'",
                             1, params),
                     1);
    assert_int_equal(
        db_orders_insert_many(c, 1, counts, 3, "redis-batch", "svc-1", &fence, "redis", rids, ids),
        DB_OK);
    for (int i = 0; i < 3; i++) {
        snprintf(id_buf, sizeof(id_buf), "%lld", (long long)ids[i]);
        assert_int_equal(raw_int(f->admin,
                                 i == 0   ? "SELECT count(*) FROM orders WHERE id = $1::bigint"
                                            " AND request_id = 'h-1-7'"
                                 : i == 1 ? "SELECT count(*) FROM orders WHERE id = $1::bigint"
                                            " AND request_id IS NULL"
                                          : "SELECT count(*) FROM orders WHERE id = $1::bigint"
                                            " AND request_id = E'q\"b\\\\s'",
                                 1, params),
                         1);
    }
    db_pool_release(f->pool, c);
}

/* A cart's statements: pg-atomic's one-statement sale writes every row or none, and says
 * which item stopped it; the cart's orders share one number; its Idempotency-Key records are
 * keyed by the cart's text, and a reset of any of its goods deletes them. */
static void test_cart_statements(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const int64_t short_ids[] = {1, 2}, short_counts[] = {4, 5};
    const int64_t unknown_ids[] = {1, 999, 2}, unknown_counts[] = {1, 1, 9};
    const int64_t ids[] = {3, 1}, counts[] = {2, 4}, fences[] = {7, 0};
    const bool fenced[] = {true, false};
    int64_t left[3] = {0}, cart = 0;
    size_t failed = 99;
    char cart_buf[24], *body = NULL;
    const char *params[1] = {cart_buf};
    int status = 0;

    reset_ok(c, 1, 10);
    reset_ok(c, 2, 3);
    reset_ok(c, 3, 5);

    /* Item 1 (goods 2) is short: nothing written, even to goods 1, which had enough. */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_take_cart(c, short_ids, short_counts, 2, left, &failed),
                     DB_ERR_INSUFFICIENT);
    assert_int_equal(failed, 1);
    assert_int_equal(left[1], 3);
    assert_int_equal(stock_of(c, 1), 10);
    assert_int_equal(db_rollback(c), DB_OK);

    /* An unknown goods wins over a short one (goods 2 is short too). */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_take_cart(c, unknown_ids, unknown_counts, 3, left, &failed),
                     DB_ERR_NOT_FOUND);
    assert_int_equal(failed, 1);
    assert_int_equal(db_rollback(c), DB_OK);

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_take_cart(c, ids, counts, 2, left, &failed), DB_OK);
    assert_int_equal(left[0], 3);
    assert_int_equal(left[1], 6);
    assert_int_equal(db_orders_insert_cart(c, ids, counts, fences, fenced, "redis", 2, "pg-atomic",
                                           "svc-1", "cart-r1", &cart),
                     DB_OK);
    assert_int_equal(db_commit(c), DB_OK);
    assert_int_equal(stock_of(c, 1), 6);
    assert_int_equal(stock_of(c, 2), 3);
    assert_int_equal(stock_of(c, 3), 3);
    snprintf(cart_buf, sizeof(cart_buf), "%lld", (long long)cart);
    assert_int_equal(
        raw_int(f->admin,
                "SELECT count(*) FROM orders WHERE cart = $1::bigint AND cart_items = 2"
                " AND mode = 'pg-atomic'",
                1, params),
        2);
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM orders WHERE cart = $1::bigint AND goods = 3"
                             " AND count = 2 AND fence = 7 AND fence_source = 'redis'",
                             1, params),
                     1);
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM orders WHERE cart = $1::bigint AND goods = 1"
                             " AND count = 4 AND fence IS NULL AND fence_source IS NULL",
                             1, params),
                     1);
    /* Every row of the cart keeps the client's request id, what settles a lost answer. */
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM orders WHERE cart = $1::bigint"
                             " AND request_id = 'cart-r1'",
                             1, params),
                     2);
    /* The cart number is no order's id. */
    assert_int_equal(
        raw_int(f->admin, "SELECT count(*) FROM orders WHERE id = $1::bigint", 1, params), 0);
    assert_int_equal(
        db_orders_insert_cart(c, ids, counts, NULL, NULL, NULL, 0, "m", "i", NULL, &cart),
        DB_ERR_INVALID);

    /* The key of a cart: claim, store, fetch; a second claim conflicts. */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_order_idempotency_claim(c, "1x4,3x2", ids, 2, "k1"), DB_OK);
    assert_int_equal(db_order_idempotency_store(c, "1x4,3x2", "k1", 200, "{\"ok\":true}"), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_order_idempotency_claim(c, "1x4,3x2", ids, 2, "k1"), DB_ERR_CONFLICT);
    assert_int_equal(db_rollback(c), DB_OK);
    assert_int_equal(db_order_idempotency_fetch(c, "1x4,3x2", "k1", &status, &body), DB_OK);
    assert_int_equal(status, 200);
    assert_string_equal(body, "{\"ok\":true}");
    free(body);
    body = NULL;
    /* Another cart with the same key is another record. */
    assert_int_equal(db_order_idempotency_fetch(c, "1x4,3x1", "k1", &status, &body),
                     DB_ERR_NOT_FOUND);
    /* A reset of one of the cart's goods deletes its record. */
    reset_ok(c, 3, 5);
    assert_int_equal(db_order_idempotency_fetch(c, "1x4,3x2", "k1", &status, &body),
                     DB_ERR_NOT_FOUND);
    db_pool_release(f->pool, c);
}

/* The statements of the PostgreSQL rungs, and that each lock is held by the transaction:
 * another session sees the row lock (FOR UPDATE NOWAIT fails) and the advisory lock
 * (pg_try_advisory_xact_lock answers false) until the commit. */
static void test_pg_rung_statements(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = 0;
    PGresult *res;

    reset_ok(c, 1, 5);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_goods_lock(c, 1), DB_OK);
    assert_int_equal(raw_int(f->admin, "SELECT pg_try_advisory_xact_lock(1)::int", 0, NULL), 0);
    assert_int_equal(db_stock_read_for_update(c, 1, &s), DB_OK);
    assert_int_equal(s, 5);
    res = PQexec(f->admin, "SELECT stock FROM goods WHERE id = 1 FOR UPDATE NOWAIT");
    assert_int_equal(PQresultStatus(res), PGRES_FATAL_ERROR);
    assert_string_equal(PQresultErrorField(res, PG_DIAG_SQLSTATE),
                        "55P03"); /* lock_not_available */
    PQclear(res);

    assert_int_equal(db_stock_take(c, 1, 3, &s), DB_OK);
    assert_int_equal(s, 2);
    s = -1;
    assert_int_equal(db_stock_take(c, 1, 3, &s), DB_ERR_INSUFFICIENT); /* short: nothing taken */
    assert_int_equal(s, 2);
    assert_int_equal(db_stock_take(c, 1, 2, &s), DB_OK);
    assert_int_equal(s, 0);
    assert_int_equal(db_stock_take(c, 1, 0, &s), DB_ERR_INVALID);
    assert_int_equal(db_stock_take(c, 999, 1, &s), DB_ERR_NOT_FOUND);
    assert_int_equal(db_stock_read_for_update(c, 999, &s), DB_ERR_NOT_FOUND);
    assert_int_equal(db_goods_lock(c, 999), DB_OK); /* a number, no row needed */
    assert_int_equal(db_commit(c), DB_OK);

    /* the commit released both locks */
    assert_int_equal(raw_int(f->admin, "SELECT pg_try_advisory_lock(1)::int", 0, NULL), 1);
    assert_int_equal(raw_int(f->admin, "SELECT pg_advisory_unlock(1)::int", 0, NULL), 1);
    assert_int_equal(
        raw_int(f->admin, "SELECT stock FROM goods WHERE id = 1 FOR UPDATE NOWAIT", 0, NULL), 0);
    assert_int_equal(stock_of(c, 1), 0);
    db_pool_release(f->pool, c);
}

/* The row's version: the versioned write succeeds only at the version read, and every
 * change of the stock moves the version on, whichever statement makes it (the trigger of
 * 003_goods_version.sql): the other rungs' writes, the reset, SQL typed by hand. */
static int64_t version_of(fixture *f, int64_t goods)
{
    char buf[32];
    const char *p[1] = {buf};

    snprintf(buf, sizeof(buf), "%lld", (long long)goods);
    return raw_int(f->admin, "SELECT version FROM goods WHERE id = $1", 1, p);
}

static void test_versioned_read_and_write(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = -1, v = -1, v0, left = 0;

    reset_ok(c, 1, 10);
    assert_int_equal(db_stock_read_versioned(c, 1, &s, &v), DB_OK);
    assert_int_equal(s, 10);
    assert_int_equal(v, version_of(f, 1));
    v0 = v;

    assert_int_equal(db_stock_write_versioned(c, 1, 9, v0), DB_OK);
    assert_int_equal(db_stock_read_versioned(c, 1, &s, &v), DB_OK);
    assert_int_equal(s, 9);
    assert_int_equal(v, v0 + 1);
    /* a write at the old version: the race was lost, nothing is written */
    assert_int_equal(db_stock_write_versioned(c, 1, 5, v0), DB_ERR_RETRY);
    assert_non_null(strstr(db_conn_error(c), "version"));
    assert_int_equal(stock_of(c, 1), 9);

    /* every other writer of the stock moves the version on too */
    assert_int_equal(db_stock_write(c, 1, 8), DB_OK);
    assert_int_equal(version_of(f, 1), v0 + 2);
    assert_int_equal(db_stock_take(c, 1, 1, &left), DB_OK);
    assert_int_equal(version_of(f, 1), v0 + 3);
    reset_ok(c, 1, 10);
    assert_int_equal(version_of(f, 1), v0 + 4);
    PQclear(raw_exec(f->admin, "UPDATE goods SET stock = 3 WHERE id = 1", 0, NULL));
    assert_int_equal(version_of(f, 1), v0 + 5);
    /* a claim writes the fence, not the stock: the version stays */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_claim(c, 1, "test", 7, &s), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);
    assert_int_equal(version_of(f, 1), v0 + 5);
    assert_int_equal(db_stock_write_versioned(c, 1, 2, v0 + 4), DB_ERR_RETRY);
    assert_int_equal(db_stock_write_versioned(c, 1, 2, v0 + 5), DB_OK);
    assert_int_equal(stock_of(c, 1), 2);

    assert_int_equal(db_stock_read_versioned(c, 999, &s, &v), DB_ERR_NOT_FOUND);
    assert_int_equal(db_stock_read_versioned(c, 1, NULL, &v), DB_ERR_INVALID);
    db_pool_release(f->pool, c);
}

/* The lock row: one owner at a time; a row without expiry is never taken over; an expired
 * one is; a release deletes only the owner's own row; each call is its own transaction. */
static void test_lockrow_take_and_release(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    bool over = true;

    assert_int_equal(db_lockrow_take(c, 1, "a", 0, &over), DB_OK);
    assert_false(over);
    assert_int_equal(db_lockrow_take(c, 1, "b", 0, &over), DB_ERR_HELD);
    assert_non_null(strstr(db_conn_error(c), "held"));
    assert_int_equal(db_lockrow_take(c, 2, "b", 0, NULL), DB_OK); /* another goods is free */
    /* a row with no expiry stays, even for a taker that would take over an expired one */
    assert_int_equal(db_lockrow_take(c, 1, "b", 50, &over), DB_ERR_HELD);
    assert_false(over);
    /* not b's row: b's release deletes nothing */
    assert_int_equal(db_lockrow_release(c, 1, "b"), DB_ERR_NOT_FOUND);
    assert_int_equal(raw_int(f->admin, "SELECT count(*) FROM goods_locks WHERE goods = 1", 0, NULL),
                     1);
    assert_int_equal(db_lockrow_release(c, 1, "a"), DB_OK);
    assert_int_equal(db_lockrow_release(c, 1, "a"), DB_ERR_NOT_FOUND);

    /* with an expiry: held until it passes, then taken over */
    assert_int_equal(db_lockrow_take(c, 1, "b", 200, &over), DB_OK);
    assert_int_equal(db_lockrow_take(c, 1, "c", 200, &over), DB_ERR_HELD);
    assert_false(over);
    sleep_ms(250);
    assert_int_equal(db_lockrow_take(c, 1, "c", 200, &over), DB_OK);
    assert_true(over);
    /* b's late release must not delete c's lock */
    assert_int_equal(db_lockrow_release(c, 1, "b"), DB_ERR_NOT_FOUND);
    assert_int_equal(db_lockrow_take(c, 1, "d", 200, &over), DB_ERR_HELD);
    assert_int_equal(db_lockrow_release(c, 1, "c"), DB_OK);

    /* its own transaction: not inside the caller's */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_lockrow_take(c, 1, "a", 0, NULL), DB_ERR_INVALID);
    assert_int_equal(db_lockrow_release(c, 1, "a"), DB_ERR_INVALID);
    assert_int_equal(db_rollback(c), DB_OK);
    assert_int_equal(db_lockrow_take(c, 1, "a", -1, NULL), DB_ERR_INVALID);
    assert_int_equal(db_lockrow_release(c, 2, "b"), DB_OK);
    db_pool_release(f->pool, c);
}

/* Runs `what` (a statement that must wait for the lock f->admin holds) after SET LOCAL
 * lock_timeout = 200 ms: it fails with DB_ERR_LOCK_TIMEOUT after about that long, the
 * session stays usable, and the setting ends with the transaction. */
static void expect_lock_timeout(fixture *f, db_conn *c, const char *what, int rc_of_call,
                                int64_t started)
{
    int64_t took = now_ms() - started;

    printf("    %s behind a held lock, lock_timeout 200 ms: %s after %lld ms\n", what,
           db_strerror(rc_of_call), (long long)took);
    assert_int_equal(rc_of_call, DB_ERR_LOCK_TIMEOUT);
    assert_non_null(strstr(db_conn_error(c), "55P03"));
    assert_true(took >= 190 && took < 2000);
    assert_int_equal(db_rollback(c), DB_OK);
    assert_int_equal(db_ping(c), DB_OK);
    (void)f;
}

static void test_lock_waits_end_at_lock_timeout(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = 0, v = 0, start;

    reset_ok(c, 1, 10);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_set_lock_timeout(c, 0), DB_ERR_INVALID); /* 0 would be "for ever" */
    assert_int_equal(db_set_lock_timeout(c, 200), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);

    /* another transaction holds the row and the goods' advisory lock */
    PQclear(raw_exec(f->admin, "BEGIN", 0, NULL));
    PQclear(raw_exec(f->admin, "UPDATE goods SET updated = now() WHERE id = 1", 0, NULL));
    PQclear(raw_exec(f->admin, "SELECT pg_advisory_xact_lock(1)", 0, NULL));

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_set_lock_timeout(c, 200), DB_OK);
    start = now_ms();
    expect_lock_timeout(f, c, "SELECT ... FOR UPDATE", db_stock_read_for_update(c, 1, &s), start);

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_set_lock_timeout(c, 200), DB_OK);
    start = now_ms();
    expect_lock_timeout(f, c, "pg_advisory_xact_lock", db_goods_lock(c, 1), start);

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_set_lock_timeout(c, 200), DB_OK);
    start = now_ms();
    expect_lock_timeout(f, c, "the conditional UPDATE", db_stock_take(c, 1, 1, &s), start);

    /* BEGIN and the bound in one round trip: the same bound holds */
    assert_int_equal(db_begin_lock_timeout(c, DB_READ_COMMITTED, 0), DB_ERR_INVALID);
    assert_int_equal(db_begin_lock_timeout(c, DB_READ_COMMITTED, 200), DB_OK);
    start = now_ms();
    expect_lock_timeout(f, c, "the conditional UPDATE (pipelined BEGIN)",
                        db_stock_take(c, 1, 1, &s), start);

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_set_lock_timeout(c, 200), DB_OK);
    assert_int_equal(db_stock_read_versioned(c, 1, &s, &v), DB_OK); /* no lock to wait for */
    start = now_ms();
    expect_lock_timeout(f, c, "the versioned UPDATE", db_stock_write_versioned(c, 1, 9, v), start);

    /* the holder ends: the row is free again */
    PQclear(raw_exec(f->admin, "COMMIT", 0, NULL));
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_read_for_update(c, 1, &s), DB_OK);
    assert_int_equal(s, 10);
    assert_int_equal(db_rollback(c), DB_OK);
    db_pool_release(f->pool, c);
}

/*
 * Two sales of one row that both read before either writes (the lost update), at each
 * isolation. READ COMMITTED lets the second UPDATE write the value it computed from its stale
 * read: two sales, one unit taken. REPEATABLE READ and SERIALIZABLE refuse that UPDATE with
 * 40001 (DB_ERR_SERIALIZATION), the session usable; run again, the second sale reads what the
 * first committed. (B opens its SERIALIZABLE transaction with db_begin_lock_timeout: the
 * pipelined BEGIN sets the level too.)
 */
static void test_isolation_and_the_lost_update(void **state)
{
    static const db_isolation levels[] = {DB_READ_COMMITTED, DB_REPEATABLE_READ, DB_SERIALIZABLE};
    fixture *f = *state;
    db_conn *a = acquire(f->pool), *b = acquire(f->pool);

    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        int64_t sa = 0, sb = 0;
        int rc;

        reset_ok(a, 1, 10);
        assert_int_equal(db_begin_isolated(a, levels[i]), DB_OK);
        assert_int_equal(levels[i] == DB_SERIALIZABLE ? db_begin_lock_timeout(b, levels[i], 1000)
                                                      : db_begin_isolated(b, levels[i]),
                         DB_OK);
        assert_int_equal(db_stock_read(a, 1, &sa), DB_OK);
        assert_int_equal(db_stock_read(b, 1, &sb), DB_OK);
        assert_int_equal(sa, 10);
        assert_int_equal(sb, 10);
        assert_int_equal(db_stock_write(a, 1, sa - 1), DB_OK);
        assert_int_equal(db_commit(a), DB_OK);
        rc = db_stock_write(b, 1, sb - 1);
        if (levels[i] == DB_READ_COMMITTED) {
            assert_int_equal(rc, DB_OK);
            assert_int_equal(db_commit(b), DB_OK);
            assert_int_equal(stock_of(a, 1), 9); /* the lost update */
            continue;
        }
        assert_int_equal(rc, DB_ERR_SERIALIZATION);
        assert_non_null(strstr(db_conn_error(b), "40001"));
        assert_int_equal(db_rollback(b), DB_OK);
        assert_int_equal(db_begin_isolated(b, levels[i]), DB_OK);
        assert_int_equal(db_stock_read(b, 1, &sb), DB_OK);
        assert_int_equal(sb, 9);
        assert_int_equal(db_stock_write(b, 1, sb - 1), DB_OK);
        assert_int_equal(db_commit(b), DB_OK);
        assert_int_equal(stock_of(a, 1), 8);
    }
    assert_int_equal(db_begin_isolated(a, (db_isolation)7), DB_ERR_INVALID);
    assert_int_equal(db_begin_lock_timeout(a, (db_isolation)7, 1000), DB_ERR_INVALID);
    db_pool_release(f->pool, a);
    db_pool_release(f->pool, b);
}

static void test_a_failed_transaction_does_not_commit(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);

    reset_ok(c, 1, 10);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_write(c, 1, 4), DB_OK);
    assert_int_equal(db_stock_write(c, 1, -1), DB_ERR_QUERY);
    assert_int_equal(db_commit(c), DB_ERR_QUERY);
    assert_non_null(strstr(db_conn_error(c), "rolled back"));
    assert_int_equal(stock_of(c, 1), 10);

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_write(c, 1, 4), DB_OK);
    assert_int_equal(db_rollback(c), DB_OK);
    assert_int_equal(stock_of(c, 1), 10);
    db_pool_release(f->pool, c);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_read_write_and_insert, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_orders_insert_many, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_orders_request_id, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_cart_statements, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_pg_rung_statements, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_versioned_read_and_write, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_lockrow_take_and_release, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_lock_waits_end_at_lock_timeout, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_isolation_and_the_lost_update, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_failed_transaction_does_not_commit, setup_migrated,
                                        teardown),
    };

    return db_test_main("test_statements", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
