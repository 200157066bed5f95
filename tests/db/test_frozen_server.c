/*
 * test_frozen_server.c - a PostgreSQL backend that stops answering (SIGSTOP on it, SIGCONT
 * in the teardown whatever happens): a statement fails in time, a lost commit answer is
 * "unknown", and the same for the sale in two round trips (pipeline mode), a claim behind a
 * held row bounded too.
 *
 * The environment and the fixtures: tests/db/db_support.h.
 */
#include "tests/db/db_support.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a server that stops answering ---------------------------------------------------- */

/* The pid of the backend serving the newest session of a pool (application "stockd"):
 * the test's own pool, opened after the fixture's. */
static pid_t pool_backend_pid(fixture *f)
{
    return (pid_t)raw_int(f->admin,
                          "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                          " AND application_name = 'stockd' ORDER BY backend_start DESC LIMIT 1",
                          0, NULL);
}

typedef struct timed_call {
    db_conn *conn;
    int what; /* 0: db_stock_read, 1: db_commit, 2: db_claim_begin, 3: db_sale_commit */
    int rc;
    int64_t ms;
    atomic_int done;
} timed_call;

static void *timed_call_run(void *arg)
{
    timed_call *t = arg;
    int64_t start = now_ms(), s = 0;

    int64_t id = 0;

    if (t->what == 2)
        t->rc = db_claim_begin(t->conn, 1, "redis", 9, 0, &s);
    else if (t->what == 3)
        t->rc = db_sale_commit(t->conn, 1, 7, 3, "redis", "svc-1", 9, "redis", NULL, NULL, &id);
    else
        t->rc = t->what == 0 ? db_stock_read(t->conn, 1, &s) : db_commit(t->conn);
    t->ms = now_ms() - start;
    atomic_store(&t->done, 1);
    return NULL;
}

/* Runs the call against a frozen backend and waits up to limit_ms for it to return. Fails
 * the case (after thawing the backend, so that the call ends and its thread is joined) when
 * it did not: the round trip would have waited for TCP to give up, minutes later. */
static void call_against_frozen(timed_call *t, int64_t limit_ms)
{
    pthread_t th;
    int64_t start = now_ms();

    atomic_init(&t->done, 0);
    assert_int_equal(pthread_create(&th, NULL, timed_call_run, t), 0);
    while (!atomic_load(&t->done) && now_ms() - start < limit_ms)
        sleep_ms(10);
    if (!atomic_load(&t->done)) {
        kill(g_frozen_backend, SIGCONT);
        g_frozen_backend = 0;
        pthread_join(th, NULL);
        fail_msg("no answer within %lld ms from a call to a frozen server: the round trip is "
                 "not bounded on the client side",
                 (long long)limit_ms);
    }
    pthread_join(th, NULL);
}

static db_pool *pool_with_reply_timeout(fixture *f, int reply_ms)
{
    db_pool_options o;
    db_pool *pool = NULL;

    db_pool_options_init(&o);
    o.conninfo = f->conninfo;
    o.size = 1;
    o.statement_timeout_ms = 0;
    o.reply_timeout_ms = reply_ms;
    assert_int_equal(db_pool_create(&o, &pool), DB_OK);
    return pool;
}

/* A statement to a server that stopped answering (its backend frozen with SIGSTOP, as a
 * partition or a frozen host would) fails within the reply bound; the connection is not
 * reused, and the pool opens a new one once the server answers again. */
static void test_a_frozen_server_fails_a_statement_in_time(void **state)
{
    fixture *f = *state;
    db_pool *pool = pool_with_reply_timeout(f, 500);
    db_conn *c = acquire(pool);
    timed_call t = {.conn = c, .what = 0};

    reset_ok(c, 1, 10);
    g_frozen_backend = pool_backend_pid(f);
    assert_true(g_frozen_backend > 0);
    assert_int_equal(kill(g_frozen_backend, SIGSTOP), 0);
    call_against_frozen(&t, 3000);
    print_message("frozen server: db_stock_read answered %s after %lld ms\n", db_strerror(t.rc),
                  (long long)t.ms);
    assert_int_equal(t.rc, DB_ERR_UNAVAILABLE);
    assert_true(t.ms >= 450 && t.ms < 1500);
    assert_non_null(strstr(db_conn_error(c), "no answer from PostgreSQL within 500 ms"));
    assert_int_equal(db_conn_no_answer_ms(c), 500);
    db_pool_release(pool, c); /* broken: closed, not rolled back */
    kill(g_frozen_backend, SIGCONT);
    g_frozen_backend = 0;

    c = acquire(pool);
    assert_int_equal(db_conn_no_answer_ms(c), 0); /* a new borrow: no error of its own */
    assert_int_equal(stock_of(c, 1), 10);
    db_pool_release(pool, c);
    db_pool_destroy(pool);
}

/* COMMIT sent, answer lost: the caller is told the outcome is unknown, not that nothing
 * happened. Here the server, thawed, does commit: "unknown" means exactly that. */
static void test_a_lost_commit_answer_is_unknown(void **state)
{
    fixture *f = *state;
    db_pool *pool = pool_with_reply_timeout(f, 400);
    db_conn *c = acquire(pool);
    timed_call t = {.conn = c, .what = 1};
    const char *params[1] = {"1"};

    reset_ok(c, 1, 10);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_write(c, 1, 7), DB_OK);
    g_frozen_backend = pool_backend_pid(f);
    assert_true(g_frozen_backend > 0);
    assert_int_equal(kill(g_frozen_backend, SIGSTOP), 0);
    call_against_frozen(&t, 3000);
    assert_int_equal(t.rc, DB_ERR_COMMIT_UNKNOWN);
    db_pool_release(pool, c);
    kill(g_frozen_backend, SIGCONT);
    g_frozen_backend = 0;
    /* The COMMIT was in the server's socket before the close: it is read and run. */
    for (int i = 0;
         i < 100 && raw_int(f->admin, "SELECT stock FROM goods WHERE id = $1", 1, params) != 7; i++)
        sleep_ms(20);
    assert_int_equal(raw_int(f->admin, "SELECT stock FROM goods WHERE id = $1", 1, params), 7);
    /* A connection that was unusable before COMMIT could be sent knows nothing committed. */
    db_pool_destroy(pool);
}

/* The first batch waits on a row lock another session holds (no statement_timeout here):
 * the batch is one round trip and is bounded as one, by reply_timeout_ms. */
static void test_pipelined_claim_behind_a_held_row_is_bounded(void **state)
{
    fixture *f = *state;
    db_pool *pool = pool_with_reply_timeout(f, 500);
    db_conn *c = acquire(pool);
    timed_call t = {.conn = c, .what = 2};
    PGresult *r;

    reset_ok(c, 1, 10);
    r = PQexec(f->admin, "BEGIN");
    PQclear(r);
    r = PQexec(f->admin, "SELECT stock FROM goods WHERE id = 1 FOR UPDATE");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    PQclear(r);
    call_against_frozen(&t, 3000);
    r = PQexec(f->admin, "ROLLBACK");
    PQclear(r);
    print_message("held row: db_claim_begin answered %s after %lld ms\n", db_strerror(t.rc),
                  (long long)t.ms);
    assert_int_equal(t.rc, DB_ERR_UNAVAILABLE);
    assert_true(t.ms >= 450 && t.ms < 1500);
    assert_non_null(strstr(db_conn_error(c), "no answer from PostgreSQL within 500 ms"));
    assert_int_equal(db_conn_no_answer_ms(c), 500);
    db_pool_release(pool, c); /* broken: closed, and its transaction with it */

    c = acquire(pool);
    assert_int_equal(stock_of(c, 1), 10);
    assert_int_equal(fence_of(f, 1), 0);
    db_pool_release(pool, c);
    db_pool_destroy(pool);
}

/* The second batch to a frozen server: its answer is lost after COMMIT was sent, so the
 * outcome is unknown, within the bound; thawed, the server does commit. */
static void test_pipelined_lost_commit_answer_is_unknown(void **state)
{
    fixture *f = *state;
    db_pool *pool = pool_with_reply_timeout(f, 400);
    db_conn *c = acquire(pool);
    timed_call t = {.conn = c, .what = 3};
    int64_t s = 0, id = 0;
    int i;

    reset_ok(c, 1, 10);
    /* one sale first, so that the statements are prepared on this session: a prepare is a
     * round trip of its own, before anything of the batch is sent */
    assert_int_equal(db_claim_begin(c, 1, "redis", 8, 0, &s), DB_OK);
    assert_int_equal(db_sale_commit(c, 1, 10, 1, "redis", "svc-1", 8, "redis", NULL, NULL, &id),
                     DB_OK);
    assert_int_equal(db_claim_begin(c, 1, "redis", 9, 0, &s), DB_OK);
    g_frozen_backend = pool_backend_pid(f);
    assert_true(g_frozen_backend > 0);
    assert_int_equal(kill(g_frozen_backend, SIGSTOP), 0);
    call_against_frozen(&t, 3000);
    assert_int_equal(t.rc, DB_ERR_COMMIT_UNKNOWN);
    assert_true(t.ms >= 350 && t.ms < 1500);
    db_pool_release(pool, c);
    kill(g_frozen_backend, SIGCONT);
    g_frozen_backend = 0;
    for (i = 0; i < 100 && raw_int(f->admin, "SELECT stock FROM goods WHERE id = 1", 0, NULL) != 7;
         i++)
        sleep_ms(20);
    assert_int_equal(raw_int(f->admin, "SELECT stock FROM goods WHERE id = 1", 0, NULL), 7);
    assert_int_equal(orders_of(f, 1), 2);
    db_pool_destroy(pool);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_frozen_server_fails_a_statement_in_time,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_a_lost_commit_answer_is_unknown, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_claim_behind_a_held_row_is_bounded,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_lost_commit_answer_is_unknown,
                                        setup_migrated, teardown),
    };

    return db_test_main("test_frozen_server", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
