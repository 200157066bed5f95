/*
 * test_records.c - what a sale leaves behind, against a real PostgreSQL: idempotency records
 * (claim, store, fetch; a concurrent claim that waits, then conflicts or claims after a
 * rollback), the reset that deletes orders and records, the stock report's figures, and the
 * counters of sold and orders (exact, under concurrent inserts too, with no hot row).
 *
 * The environment and the fixtures: tests/db/db_support.h.
 */
#include "tests/db/db_support.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- idempotency ------------------------------------------------------------------ */

static void test_idempotency_claim_store_fetch(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const char *body = "{\"ok\":true,\"note\":\"quote ' backslash \\\\ caf\xc3\xa9\"}";
    char *got = NULL;
    int status = 0;

    assert_int_equal(db_idempotency_fetch(c, 1, "k1", &status, &got), DB_ERR_NOT_FOUND);
    assert_null(got);

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_idempotency_claim(c, 1, "k1"), DB_OK);
    /* a claim without its answer is not an outcome */
    assert_int_equal(db_idempotency_fetch(c, 1, "k1", &status, &got), DB_ERR_NOT_FOUND);
    assert_int_equal(db_idempotency_store(c, 1, "k1", 200, body), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);

    assert_int_equal(db_idempotency_fetch(c, 1, "k1", &status, &got), DB_OK);
    assert_int_equal(status, 200);
    assert_string_equal(got, body);
    free(got);
    got = NULL;

    /* the key is taken now */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_idempotency_claim(c, 1, "k1"), DB_ERR_CONFLICT);
    assert_int_equal(db_rollback(c), DB_OK);

    /* the same key on other goods is another request; a 404 for unknown goods is stored */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_idempotency_claim(c, 424242, "k1"), DB_OK);
    assert_int_equal(db_idempotency_store(c, 424242, "k1", 404, "{\"ok\":false}"), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);
    assert_int_equal(db_idempotency_fetch(c, 424242, "k1", &status, &got), DB_OK);
    assert_int_equal(status, 404);
    free(got);
    got = NULL;

    /* a rolled-back claim leaves nothing: the key can be claimed again */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_idempotency_claim(c, 1, "k2"), DB_OK);
    assert_int_equal(db_rollback(c), DB_OK);
    assert_int_equal(db_idempotency_fetch(c, 1, "k2", &status, &got), DB_ERR_NOT_FOUND);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_idempotency_claim(c, 1, "k2"), DB_OK);
    assert_int_equal(db_rollback(c), DB_OK);

    /* nothing to store into without a claim */
    assert_int_equal(db_idempotency_store(c, 1, "k3", 200, "{}"), DB_ERR_NOT_FOUND);
    db_pool_release(f->pool, c);
}

typedef struct claimer {
    db_pool *pool;
    atomic_int done;
    int rc;
    int store_rc;
    int commit_rc;
} claimer;

/* Claims "same" for goods 1 in a transaction; if it gets it, stores and commits. */
static void *claimer_run(void *arg)
{
    claimer *cl = arg;
    db_conn *c = NULL;

    cl->rc = db_pool_acquire(cl->pool, 2000, &c);
    if (cl->rc == DB_OK)
        cl->rc = db_begin(c);
    if (cl->rc == DB_OK)
        cl->rc = db_idempotency_claim(c, 1, "same");
    atomic_store(&cl->done, 1);
    if (cl->rc == DB_OK) {
        cl->store_rc = db_idempotency_store(c, 1, "same", 409, "{\"second\":true}");
        cl->commit_rc = db_commit(c);
    }
    if (c)
        db_pool_release(cl->pool, c);
    return NULL;
}

/* A claims; B's claim waits for A; A ends with `commit`; B's claim returns. */
static void concurrent_claim(fixture *f, bool commit, claimer *cl)
{
    db_conn *c = acquire(f->pool);
    pthread_t th;

    memset(cl, 0, sizeof(*cl));
    cl->pool = f->pool;
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_idempotency_claim(c, 1, "same"), DB_OK);
    assert_int_equal(pthread_create(&th, NULL, claimer_run, cl), 0);
    sleep_ms(300);
    assert_int_equal(atomic_load(&cl->done), 0); /* blocked behind our claim */
    if (commit) {
        assert_int_equal(db_idempotency_store(c, 1, "same", 200, "{\"first\":true}"), DB_OK);
        assert_int_equal(db_commit(c), DB_OK);
    } else {
        assert_int_equal(db_rollback(c), DB_OK);
    }
    pthread_join(th, NULL);
    db_pool_release(f->pool, c);
}

static void test_a_concurrent_claim_waits_then_conflicts(void **state)
{
    fixture *f = *state;
    claimer cl;
    db_conn *c;
    char *got = NULL;
    int status = 0;

    concurrent_claim(f, true, &cl);
    assert_int_equal(cl.rc, DB_ERR_CONFLICT);
    c = acquire(f->pool);
    assert_int_equal(db_idempotency_fetch(c, 1, "same", &status, &got), DB_OK);
    assert_int_equal(status, 200);
    assert_string_equal(got, "{\"first\":true}");
    free(got);
    db_pool_release(f->pool, c);
}

static void test_a_concurrent_claim_waits_then_claims_after_rollback(void **state)
{
    fixture *f = *state;
    claimer cl;
    db_conn *c;
    char *got = NULL;
    int status = 0;

    concurrent_claim(f, false, &cl);
    assert_int_equal(cl.rc, DB_OK);
    assert_int_equal(cl.store_rc, DB_OK);
    assert_int_equal(cl.commit_rc, DB_OK);
    c = acquire(f->pool);
    assert_int_equal(db_idempotency_fetch(c, 1, "same", &status, &got), DB_OK);
    assert_int_equal(status, 409);
    assert_string_equal(got, "{\"second\":true}");
    free(got);
    db_pool_release(f->pool, c);
}

/* ---- reset and report ------------------------------------------------------------- */

static void test_reset_deletes_orders_and_idempotency_records(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    db_stock_report r;
    int64_t id;
    char *got = NULL;
    int status;

    reset_ok(c, 1, 100);
    reset_ok(c, 2, 100);
    assert_int_equal(db_order_insert(c, 1, 1, "none", "svc-1", NULL, NULL, NULL, &id), DB_OK);
    assert_int_equal(db_order_insert(c, 1, 2, "none", "svc-1", NULL, NULL, NULL, &id), DB_OK);
    assert_int_equal(db_order_insert(c, 2, 5, "none", "svc-1", NULL, NULL, NULL, &id), DB_OK);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_idempotency_claim(c, 1, "k"), DB_OK);
    assert_int_equal(db_idempotency_store(c, 1, "k", 200, "{}"), DB_OK);
    assert_int_equal(db_idempotency_claim(c, 2, "k"), DB_OK);
    assert_int_equal(db_idempotency_store(c, 2, "k", 200, "{}"), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);

    reset_ok(c, 1, 50);
    assert_int_equal(db_stock_report_read(c, 1, &r), DB_OK);
    assert_int_equal(r.initial, 50);
    assert_int_equal(r.stock, 50);
    assert_int_equal(r.sold, 0);
    assert_int_equal(r.orders, 0);
    assert_int_equal(db_idempotency_fetch(c, 1, "k", &status, &got), DB_ERR_NOT_FOUND);

    /* the other goods keep theirs */
    assert_int_equal(db_stock_report_read(c, 2, &r), DB_OK);
    assert_int_equal(r.orders, 1);
    assert_int_equal(db_idempotency_fetch(c, 2, "k", &status, &got), DB_OK);
    free(got);

    /* the reset is its own transaction: refused inside one */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_goods_reset(c, 1, 10), DB_ERR_INVALID);
    assert_int_equal(db_rollback(c), DB_OK);
    db_pool_release(f->pool, c);
}

static void test_stock_report_figures(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    db_stock_report r;
    int64_t id;

    assert_int_equal(db_stock_report_read(c, 1, &r), DB_ERR_NOT_FOUND);
    reset_ok(c, 1, 100);
    assert_int_equal(db_stock_report_read(c, 1, &r), DB_OK);
    assert_int_equal(r.initial, 100);
    assert_int_equal(r.stock, 100);
    assert_int_equal(r.sold, 0);
    assert_int_equal(r.orders, 0);

    /* two sales, then a lost update: a third sale whose write is based on a stale read */
    assert_int_equal(db_stock_write(c, 1, 97), DB_OK);
    assert_int_equal(db_order_insert(c, 1, 3, "none", "svc-1", NULL, NULL, NULL, &id), DB_OK);
    assert_int_equal(db_stock_write(c, 1, 95), DB_OK);
    assert_int_equal(db_order_insert(c, 1, 2, "none", "svc-2", NULL, NULL, NULL, &id), DB_OK);
    assert_int_equal(db_stock_write(c, 1, 96), DB_OK); /* read 97, sold 1 */
    assert_int_equal(db_order_insert(c, 1, 1, "none", "svc-3", NULL, NULL, NULL, &id), DB_OK);

    assert_int_equal(db_stock_report_read(c, 1, &r), DB_OK);
    assert_int_equal(r.initial, 100);
    assert_int_equal(r.stock, 96);
    assert_int_equal(r.sold, 6);
    assert_int_equal(r.orders, 3);
    assert_int_equal(r.sold - (r.initial - r.stock), 2); /* oversold */
    db_pool_release(f->pool, c);
}

/* ---- the counters of sold and orders (migrations/008_goods_sales.sql) --------------- */

static void audit_ok(db_conn *c, int64_t goods, db_stock_report *r, db_stock_ledger *l)
{
    int rc = db_stock_audit_read(c, goods, r, l);

    if (rc != DB_OK)
        fail_msg("audit: %s: %s", db_strerror(rc), db_conn_error(c));
}

/* The counters follow every insert path, a rollback and the reset; the audit reads the
 * ledger beside them and shows a change made behind the counters' back. */
static void test_counters_follow_the_orders(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    db_stock_report r;
    db_stock_ledger l;
    const int64_t counts[3] = {1, 2, 4};
    int64_t id, ids[3];

    reset_ok(c, 1, 100);
    reset_ok(c, 2, 100);
    assert_int_equal(db_order_insert(c, 1, 3, "none", "svc-1", NULL, NULL, NULL, &id), DB_OK);
    assert_int_equal(db_orders_insert_many(c, 1, counts, 3, "redis-batch", "svc-1", NULL, NULL, NULL, ids),
                     DB_OK);
    assert_int_equal(db_order_insert(c, 2, 5, "none", "svc-1", NULL, NULL, NULL, &id), DB_OK);
    /* a rolled-back sale counts nothing */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_order_insert(c, 1, 10, "none", "svc-1", NULL, NULL, NULL, &id), DB_OK);
    assert_int_equal(db_rollback(c), DB_OK);

    assert_int_equal(db_stock_report_read(c, 1, &r), DB_OK);
    assert_int_equal(r.sold, 10);
    assert_int_equal(r.orders, 4);
    audit_ok(c, 1, &r, &l);
    assert_int_equal(r.initial, 100);
    assert_int_equal(r.stock, 100);
    assert_int_equal(r.sold, 10);
    assert_int_equal(r.orders, 4);
    assert_int_equal(l.sold, 10);
    assert_int_equal(l.orders, 4);
    assert_int_equal(db_stock_audit_read(c, 1, &r, NULL), DB_ERR_INVALID);
    assert_int_equal(db_stock_audit_read(c, 999, &r, &l), DB_ERR_NOT_FOUND);

    /* an order deleted by hand: the counters do not follow, the audit sees it */
    PQclear(raw_exec(f->admin, "DELETE FROM orders WHERE goods = 1 AND count = 3", 0, NULL));
    audit_ok(c, 1, &r, &l);
    assert_int_equal(r.sold, 10);
    assert_int_equal(l.sold, 7);
    assert_int_equal(l.orders, 3);

    /* the reset empties goods 1's counters with its orders, and leaves goods 2's */
    reset_ok(c, 1, 50);
    audit_ok(c, 1, &r, &l);
    assert_int_equal(r.sold, 0);
    assert_int_equal(r.orders, 0);
    assert_int_equal(l.orders, 0);
    audit_ok(c, 2, &r, &l);
    assert_int_equal(r.sold, 5);
    assert_int_equal(r.orders, 1);
    assert_int_equal(l.sold, 5);

    /* TRUNCATE empties them all */
    PQclear(raw_exec(f->admin, "TRUNCATE orders", 0, NULL));
    assert_int_equal(db_stock_report_read(c, 2, &r), DB_OK);
    assert_int_equal(r.sold, 0);
    assert_int_equal(r.orders, 0);
    db_pool_release(f->pool, c);
}

#define COUNTER_THREADS 4
#define COUNTER_ORDERS 50

typedef struct counter_worker {
    fixture *f;
    int failures;
} counter_worker;

static void *insert_orders(void *arg)
{
    counter_worker *w = arg;
    db_conn *c = NULL;
    int64_t id;

    if (db_pool_acquire(w->f->pool, 5000, &c) != DB_OK) {
        w->failures = COUNTER_ORDERS;
        return NULL;
    }
    for (int i = 0; i < COUNTER_ORDERS; i++)
        if (db_order_insert(c, 1, 1 + i % 3, "none", "svc-1", NULL, NULL, NULL, &id) != DB_OK)
            w->failures++;
    db_pool_release(w->f->pool, c);
    return NULL;
}

/* Orders inserted at once from several sessions: the counters lose no update. */
static void test_counters_are_exact_under_concurrent_inserts(void **state)
{
    fixture *f = *state;
    counter_worker w[COUNTER_THREADS];
    pthread_t t[COUNTER_THREADS];
    db_stock_report r;
    db_stock_ledger l;
    db_conn *c = acquire(f->pool);
    int64_t sold = 0;

    reset_ok(c, 1, 100);
    db_pool_release(f->pool, c);
    for (int i = 0; i < COUNTER_THREADS; i++) {
        w[i] = (counter_worker){.f = f};
        assert_int_equal(pthread_create(&t[i], NULL, insert_orders, &w[i]), 0);
    }
    for (int i = 0; i < COUNTER_THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    for (int i = 0; i < COUNTER_ORDERS; i++)
        sold += 1 + i % 3;
    c = acquire(f->pool);
    audit_ok(c, 1, &r, &l);
    assert_int_equal(r.orders, COUNTER_THREADS * COUNTER_ORDERS);
    assert_int_equal(r.sold, COUNTER_THREADS * sold);
    assert_int_equal(l.orders, r.orders);
    assert_int_equal(l.sold, r.sold);
    assert_true(raw_int(f->admin, "SELECT count(*) FROM goods_sales WHERE goods = 1", 0, NULL) <=
                16);
    db_pool_release(f->pool, c);
}

/* The stripes are not one hot row: a session whose transaction has added an order of goods 1
 * and not ended does not hold up another session's order of goods 1 (sessions of two
 * stripes; PostgreSQL picks the backends' pids, so sessions are opened until two differ). */
static void test_counters_add_no_hot_row(void **state)
{
    fixture *f = *state;
    PGconn *a = raw_connect(f->conninfo), *b = NULL;
    const char *insert = "INSERT INTO orders (goods, count, mode, instance)"
                         " VALUES (1, 1, 'none', 'svc-1')";
    db_conn *c = acquire(f->pool);
    PGresult *res;
    int64_t t0;

    reset_ok(c, 1, 100);
    for (int i = 0; i < 64 && b == NULL; i++) {
        b = raw_connect(f->conninfo);
        if (PQbackendPID(b) % 16 == PQbackendPID(a) % 16) {
            PQfinish(b);
            b = NULL;
        }
    }
    assert_non_null(b);
    PQclear(raw_exec(a, "BEGIN", 0, NULL));
    PQclear(raw_exec(a, insert, 0, NULL));
    PQclear(raw_exec(b, "SET statement_timeout = 2000", 0, NULL));
    t0 = now_ms();
    res = PQexec(b, insert); /* a hot row would wait here for a's commit, and time out */
    assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
    PQclear(res);
    assert_true(now_ms() - t0 < 2000);
    PQclear(raw_exec(a, "COMMIT", 0, NULL));
    assert_int_equal(
        raw_int(f->admin, "SELECT sum(orders) FROM goods_sales WHERE goods = 1", 0, NULL), 2);
    assert_int_equal(raw_int(f->admin, "SELECT count(*) FROM goods_sales WHERE goods = 1", 0, NULL),
                     2);
    PQfinish(a);
    PQfinish(b);
    db_pool_release(f->pool, c);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_idempotency_claim_store_fetch,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_a_concurrent_claim_waits_then_conflicts,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_a_concurrent_claim_waits_then_claims_after_rollback,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_reset_deletes_orders_and_idempotency_records,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_stock_report_figures, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_counters_follow_the_orders, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_counters_are_exact_under_concurrent_inserts,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_counters_add_no_hot_row, setup_migrated, teardown),
    };

    return db_test_main("test_records", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
