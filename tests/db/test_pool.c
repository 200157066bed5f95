/*
 * test_pool.c - the connection pool against a real PostgreSQL: bounded, a release that rolls
 * back, an unreachable or silent server failing within its bound, a broken connection
 * reopened, a read-only session dropped, a statement timeout as a query error, a process
 * frozen inside a transaction losing its row lock to the session's lease (and keeping it
 * without one); and every error code with a name.
 *
 * The environment and the fixtures: tests/db/db_support.h.
 */
#include "tests/db/db_support.h"
#include "tests/support/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the pool --------------------------------------------------------------------- */

typedef struct waiter {
    db_pool *pool;
    int timeout_ms;
    int rc;
    int64_t waited_ms;
} waiter;

static void *waiter_run(void *arg)
{
    waiter *w = arg;
    db_conn *c = NULL;
    int64_t t0 = now_ms();

    w->rc = db_pool_acquire(w->pool, w->timeout_ms, &c);
    w->waited_ms = now_ms() - t0;
    if (c)
        db_pool_release(w->pool, c);
    return NULL;
}

static void test_pool_is_bounded(void **state)
{
    fixture *f = *state;
    db_pool *pool = pool_on(f->conninfo, 2, 5000);
    db_conn *a = NULL, *b = NULL, *c = NULL;
    db_pool_stats st;
    waiter w = {pool, 5000, -100, 0};
    pthread_t th;
    int64_t t0, took;

    db_pool_get_stats(pool, &st);
    assert_int_equal(st.size, 2);
    assert_int_equal(st.open, 0); /* lazy */
    assert_int_equal(st.in_use, 0);

    a = acquire(pool);
    b = acquire(pool);
    assert_ptr_not_equal(a, b);
    db_pool_get_stats(pool, &st);
    assert_int_equal(st.open, 2);
    assert_int_equal(st.in_use, 2);

    t0 = now_ms();
    assert_int_equal(db_pool_acquire(pool, 200, &c), DB_ERR_BUSY);
    took = now_ms() - t0;
    assert_null(c);
    assert_true(took >= 190 && took < 1000);
    assert_non_null(strstr(db_last_connect_error(), "no database connection free"));
    t0 = now_ms();
    assert_int_equal(db_pool_acquire(pool, 0, &c), DB_ERR_BUSY);
    assert_true(now_ms() - t0 < 100);

    /* a waiter gets the connection as soon as one is returned */
    assert_int_equal(pthread_create(&th, NULL, waiter_run, &w), 0);
    sleep_ms(200);
    db_pool_release(pool, a);
    pthread_join(th, NULL);
    assert_int_equal(w.rc, DB_OK);
    assert_true(w.waited_ms >= 150 && w.waited_ms < 2000);

    db_pool_release(pool, b);
    db_pool_get_stats(pool, &st);
    assert_int_equal(st.open, 2);
    assert_int_equal(st.in_use, 0);
    db_pool_destroy(pool);
}

static void test_pool_release_rolls_back(void **state)
{
    fixture *f = *state;
    db_pool *pool = pool_on(f->conninfo, 1, 5000);
    db_conn *c = acquire(pool);

    reset_ok(c, 1, 10);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_write(c, 1, 3), DB_OK);
    db_pool_release(pool, c); /* inside the transaction */

    /* the row is not left locked, and the write is gone */
    PQclear(raw_exec(f->admin, "SET statement_timeout = 1000", 0, NULL));
    PQclear(raw_exec(f->admin, "UPDATE goods SET updated = now() WHERE id = 1", 0, NULL));
    c = acquire(pool);
    assert_int_equal(stock_of(c, 1), 10);
    db_pool_release(pool, c);
    db_pool_destroy(pool);
}

static void test_unreachable_server_fails_fast(void **state)
{
    char conninfo[128];
    db_pool_options o;
    db_pool *pool = NULL;
    db_conn *c = NULL;
    db_pool_stats st;
    int64_t t0, took;
    int port;

    (void)state;
    port = support_free_port(); /* nothing listens there */
    assert_true(port > 0);
    snprintf(conninfo, sizeof(conninfo), "host=127.0.0.1 port=%d user=nobody dbname=none", port);
    db_pool_options_init(&o);
    o.conninfo = conninfo;
    o.size = 2;
    assert_int_equal(db_pool_create(&o, &pool), DB_OK); /* lazy: works while it is down */

    t0 = now_ms();
    assert_int_equal(db_pool_acquire(pool, 1000, &c), DB_ERR_UNAVAILABLE);
    took = now_ms() - t0;
    assert_null(c);
    assert_true(took < 1000);
    assert_true(strlen(db_last_connect_error()) > 0);
    db_pool_get_stats(pool, &st);
    assert_int_equal(st.open, 0);
    assert_int_equal(st.in_use, 0); /* the slot went back */
    db_pool_destroy(pool);

    /* and a conninfo libpq cannot parse is refused at once */
    o.conninfo = "host=127.0.0.1 port";
    assert_int_equal(db_pool_create(&o, &pool), DB_ERR_INVALID);
    assert_null(pool);
}

/* A server that accepts the TCP connection and never answers: the bound is the pool's
 * connect_timeout_ms, not libpq's whole seconds. */
static void test_silent_server_times_out_within_the_bound(void **state)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    char conninfo[128];
    db_pool_options o;
    db_pool *pool = NULL;
    db_conn *c = NULL;
    int64_t t0, took;

    (void)state;
    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 8), 0); /* the kernel completes handshakes; no one reads */
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    snprintf(conninfo, sizeof(conninfo),
             "host=127.0.0.1 port=%d user=nobody dbname=none sslmode=disable", ntohs(sa.sin_port));

    db_pool_options_init(&o);
    o.conninfo = conninfo;
    o.size = 1;
    o.connect_timeout_ms = 300;
    assert_int_equal(db_pool_create(&o, &pool), DB_OK);
    t0 = now_ms();
    assert_int_equal(db_pool_acquire(pool, 1000, &c), DB_ERR_UNAVAILABLE);
    took = now_ms() - t0;
    assert_true(took >= 280 && took < 1500);
    assert_non_null(strstr(db_last_connect_error(), "within 300 ms"));
    db_pool_destroy(pool);
    close(fd);
}

/* Terminates the pooled sessions of the test database whose application_name is `name`. */
static void terminate_sessions(fixture *f, const char *name)
{
    const char *p[1] = {name};
    int64_t n, i;

    n = raw_int(f->admin,
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = $1",
                1, p);
    assert_true(n >= 1);
    for (i = 0; i < 50; i++) { /* gone from pg_stat_activity once the backend exited */
        if (raw_int(f->admin, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                    1, p) == 0)
            return;
        sleep_ms(20);
    }
    fail_msg("the terminated sessions did not go away");
}

static void test_broken_connection_is_reopened(void **state)
{
    fixture *f = *state;
    char app[64], extra[96], *conninfo;
    db_pool *pool;
    db_conn *c;
    db_pool_stats st;
    int64_t s = 0;

    snprintf(app, sizeof(app), "test_db_kill_%d", (int)getpid());
    snprintf(extra, sizeof(extra), "application_name=%s", app);
    conninfo = conninfo_for(f->dbname, extra);
    pool = pool_on(conninfo, 1, 5000);

    c = acquire(pool);
    reset_ok(c, 1, 10);
    db_pool_release(pool, c);

    /* killed while idle in the pool: noticed when borrowed, replaced at once */
    terminate_sessions(f, app);
    c = acquire(pool);
    assert_int_equal(db_ping(c), DB_OK);
    assert_int_equal(stock_of(c, 1), 10);

    /* killed while borrowed: the statement says UNAVAILABLE, the next borrow reconnects */
    terminate_sessions(f, app);
    assert_int_equal(db_stock_read(c, 1, &s), DB_ERR_UNAVAILABLE);
    assert_true(strlen(db_conn_error(c)) > 0);
    db_pool_release(pool, c);
    db_pool_get_stats(pool, &st);
    assert_int_equal(st.open, 0);
    c = acquire(pool);
    assert_int_equal(stock_of(c, 1), 10); /* statements are prepared again on the new session */
    db_pool_release(pool, c);
    db_pool_get_stats(pool, &st);
    assert_int_equal(st.open, 1);

    db_pool_destroy(pool);
    free(conninfo);
}

/* A session that refuses a write as read-only (SQLSTATE 25006) is on a server that is no
 * longer the primary: the statement says UNAVAILABLE and the session is closed on release,
 * never handed out again. (default_transaction_read_only makes any server answer as a
 * demoted primary does.) */
static void test_a_read_only_session_is_dropped(void **state)
{
    fixture *f = *state;
    char *conninfo = conninfo_for(f->dbname, "options='-c default_transaction_read_only=on'");
    db_pool *pool = pool_on(conninfo, 1, 5000);
    db_pool_stats st;
    db_conn *c;
    const char *mode = NULL;

    c = acquire(f->pool);
    reset_ok(c, 1, 10);
    db_pool_release(f->pool, c);
    c = acquire(pool);
    assert_int_equal(stock_of(c, 1), 10); /* reads still work */
    assert_int_equal(db_stock_write(c, 1, 9), DB_ERR_UNAVAILABLE);
    assert_non_null(strstr(db_conn_error(c), "25006"));
    db_pool_release(pool, c);
    db_pool_get_stats(pool, &st);
    assert_int_equal(st.open, 0);

    /* the replication mode of a lone server: no standby streams from it */
    c = acquire(pool);
    assert_int_equal(db_replication_mode(c, &mode), DB_OK);
    assert_string_equal(mode, "single");
    db_pool_release(pool, c);
    db_pool_destroy(pool);
    assert_int_equal(raw_int(f->admin, "SELECT stock FROM goods WHERE id = 1", 0, NULL), 10);
    free(conninfo);
}

typedef struct timed_write {
    db_conn *conn;
    atomic_int done;
    int rc;
    int64_t took_ms;
} timed_write;

static void *timed_write_run(void *arg)
{
    timed_write *w = arg;
    int64_t t0 = now_ms();

    w->rc = db_stock_write(w->conn, 1, 8);
    w->took_ms = now_ms() - t0;
    atomic_store(&w->done, 1);
    return NULL;
}

static void test_statement_timeout_is_a_query_error(void **state)
{
    fixture *f = *state;
    db_pool *pool = pool_on(f->conninfo, 2, 200);
    db_conn *a = acquire(pool), *b = acquire(pool);
    timed_write w = {b, 0, -100, 0};
    pthread_t th;
    int applied = -1, i;

    reset_ok(a, 1, 10);
    /* db_migrate lifts the timeout while it runs, and must put it back */
    assert_int_equal(db_migrate(b, migrations_dir, &applied, NULL, 0), DB_OK);
    assert_int_equal(applied, 0);
    assert_int_equal(db_begin(a), DB_OK);
    assert_int_equal(db_stock_write(a, 1, 9), DB_OK); /* holds the row */

    /* b's write waits for the row. The wait is watched from here, so that a missing
     * timeout fails the test instead of hanging it: after 3 s, a lets go. */
    assert_int_equal(pthread_create(&th, NULL, timed_write_run, &w), 0);
    for (i = 0; i < 300 && !atomic_load(&w.done); i++)
        sleep_ms(10);
    assert_int_equal(db_rollback(a), DB_OK);
    pthread_join(th, NULL);

    assert_int_equal(w.rc, DB_ERR_QUERY);
    assert_true(w.took_ms >= 150 && w.took_ms < 2000);
    assert_non_null(strstr(db_conn_error(b), "57014")); /* query_canceled */
    assert_int_equal(db_ping(b), DB_OK);                /* still a good session */

    db_pool_release(pool, a);
    db_pool_release(pool, b);
    db_pool_destroy(pool);
}

/* ---- the session's lease: a holder frozen inside its transaction ------------------------ */

/* The child: a pool of its own with the given lease, a transaction that writes goods 1 (its
 * row lock held), a byte on `ready`, then nothing until it is killed. Never returns. */
static void frozen_holder(const char *conninfo, int idle_in_tx_ms, int ready)
{
    db_pool_options o;
    db_pool *pool = NULL;
    db_conn *c = NULL;
    char ok = 'n';

    db_pool_options_init(&o);
    o.conninfo = conninfo;
    o.size = 1;
    o.idle_in_tx_ms = idle_in_tx_ms;
    if (db_pool_create(&o, &pool) == DB_OK && db_pool_acquire(pool, 2000, &c) == DB_OK &&
        db_begin(c) == DB_OK && db_stock_write(c, 1, 9) == DB_OK)
        ok = 'y';
    if (write(ready, &ok, 1) != 1)
        _exit(1);
    for (;;)
        pause();
}

/* Forks frozen_holder with the given lease, waits until it holds goods 1's row (its write
 * made, not committed), and stops it (SIGSTOP: a long pause, a debugger, a host that
 * answers TCP and runs nothing). Returns the child, for the caller to kill. */
static pid_t start_frozen_holder(fixture *f, int idle_in_tx_ms)
{
    db_conn *c = acquire(f->pool);
    int pipefd[2];
    char ok = 0;
    pid_t child;

    reset_ok(c, 1, 10);
    db_pool_release(f->pool, c);
    assert_int_equal(pipe(pipefd), 0);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(pipefd[0]);
        frozen_holder(f->conninfo, idle_in_tx_ms, pipefd[1]);
    }
    close(pipefd[1]);
    assert_int_equal(read(pipefd[0], &ok, 1), 1);
    close(pipefd[0]);
    kill(child, SIGSTOP);
    assert_int_equal(ok, 'y');
    return child;
}

/* Another session asks for goods 1's row, waiting at most lock_timeout; *took: how long. The
 * caller ends the transaction. */
static PGresult *ask_for_the_row(fixture *f, const char *lock_timeout, int64_t *took)
{
    char set[64];
    int64_t start = now_ms();
    PGresult *r;

    snprintf(set, sizeof(set), "SET lock_timeout = '%s'", lock_timeout);
    PQclear(raw_exec(f->admin, set, 0, NULL));
    PQclear(raw_exec(f->admin, "BEGIN", 0, NULL));
    r = PQexec(f->admin, "SELECT stock FROM goods WHERE id = 1 FOR UPDATE");
    *took = now_ms() - start;
    return r;
}

static void end_frozen_holder(pid_t child)
{
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
}

/* A replica frozen inside its transaction, holding goods 1's row lock, with the lease (1 s):
 * the server ends the frozen session, and another session waiting up to 5 s has the row after
 * about 1 s, with the frozen write rolled back. */
static void test_a_frozen_holder_loses_its_row_lock(void **state)
{
    fixture *f = *state;
    pid_t child = start_frozen_holder(f, 1000);
    int64_t took;
    PGresult *r = ask_for_the_row(f, "5s", &took);

    end_frozen_holder(child);
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        fail_msg("the row stayed locked by the frozen holder for %lld ms: %s", (long long)took,
                 PQresultErrorMessage(r));
    assert_string_equal(PQgetvalue(r, 0, 0), "10"); /* its write rolled back with its session */
    PQclear(r);
    PQclear(raw_exec(f->admin, "COMMIT", 0, NULL));
    /* Within the lease (1 s) and a busy machine's slack, well before lock_timeout's 5 s. */
    assert_true(took < 4000);
}

/* The same holder without the lease (idle_in_tx_ms 0, PostgreSQL's default): nothing ends
 * the frozen session, and the waiter's whole lock_timeout (1.5 s) runs out: 55P03. What the
 * lease above is for. */
static void test_without_a_lease_a_frozen_holder_keeps_its_row_lock(void **state)
{
    fixture *f = *state;
    pid_t child = start_frozen_holder(f, 0);
    int64_t took;
    PGresult *r = ask_for_the_row(f, "1500ms", &took);
    const char *state_code = PQresultErrorField(r, PG_DIAG_SQLSTATE);

    if (PQresultStatus(r) == PGRES_TUPLES_OK)
        fail_msg("the row was had after %lld ms with no lease on the frozen holder",
                 (long long)took);
    assert_non_null(state_code);
    assert_string_equal(state_code, "55P03"); /* lock_not_available: it waited its bound */
    assert_true(took >= 1400);
    PQclear(r);
    PQclear(raw_exec(f->admin, "ROLLBACK", 0, NULL));
    end_frozen_holder(child);
}

static void test_strerror_names_every_code(void **state)
{
    int codes[] = {DB_OK,
                   DB_ERR_UNAVAILABLE,
                   DB_ERR_BUSY,
                   DB_ERR_NOT_FOUND,
                   DB_ERR_QUERY,
                   DB_ERR_CONFLICT,
                   DB_ERR_FENCED,
                   DB_ERR_SCHEMA,
                   DB_ERR_COMMIT_UNKNOWN,
                   DB_ERR_INSUFFICIENT,
                   DB_ERR_LOCK_TIMEOUT,
                   DB_ERR_RETRY,
                   DB_ERR_HELD,
                   DB_ERR_DEADLOCK,
                   DB_ERR_NOMEM,
                   DB_ERR_INVALID};
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        assert_string_not_equal(db_strerror(codes[i]), "unknown error");
    assert_string_equal(db_strerror(-1000), "unknown error");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pool_is_bounded, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_pool_release_rolls_back, setup_migrated, teardown),
        cmocka_unit_test(test_unreachable_server_fails_fast),
        cmocka_unit_test(test_silent_server_times_out_within_the_bound),
        cmocka_unit_test_setup_teardown(test_broken_connection_is_reopened, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_read_only_session_is_dropped, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_statement_timeout_is_a_query_error, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_without_a_lease_a_frozen_holder_keeps_its_row_lock,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_a_frozen_holder_loses_its_row_lock, setup_migrated,
                                        teardown),
        cmocka_unit_test(test_strerror_names_every_code),
    };

    return db_test_main("test_pool", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
