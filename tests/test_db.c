/*
 * test_db.c - the db/ module against a real PostgreSQL.
 *
 * TEST_DATABASE_URL names a server the test may create databases on (the test harness
 * starts a throwaway one). Each test gets a database of its own, created in its setup and
 * dropped in its teardown, so the tests do not depend on each other or on what the server
 * held before. Without TEST_DATABASE_URL the test fails: a database test that silently
 * skips would let a broken db/ pass.
 *
 * TEST_MIGRATIONS_DIR is the migrations directory (default "migrations": the tests run
 * from the project root).
 *
 * The tests look at the database with their own libpq connection ("admin"), so that what
 * they check does not go through the code under test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "db/db.h"
#include "tests/support/files.h"

static const char *base_url;       /* TEST_DATABASE_URL */
static const char *migrations_dir; /* TEST_MIGRATIONS_DIR or "migrations" */
static int db_counter;

/* What each test works on: a database of its own, a pool on it, and a raw connection. */
typedef struct fixture {
    char dbname[64];
    char *conninfo; /* the test database, as a key=value string */
    db_pool *pool;
    PGconn *admin; /* the test's own connection to the test database */
} fixture;

/* ---- helpers ---------------------------------------------------------------------- */

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Appends " key='value'" to buf, quoted as libpq wants (\ and ' escaped). */
static void append_kv(char *buf, size_t len, const char *key, const char *value)
{
    size_t n = strlen(buf);
    const char *p;

    n += (size_t)snprintf(buf + n, len - n, "%s%s='", n ? " " : "", key);
    for (p = value; *p && n + 3 < len; p++) {
        if (*p == '\\' || *p == '\'')
            buf[n++] = '\\';
        buf[n++] = *p;
    }
    snprintf(buf + n, len - n, "'");
}

/*
 * TEST_DATABASE_URL (a URI or key=value string) with the database replaced by dbname and
 * `extra` ("key=value ...", may be NULL) appended; malloc'd.
 */
static char *conninfo_for(const char *dbname, const char *extra)
{
    PQconninfoOption *opts, *o;
    char *err = NULL;
    char *buf = calloc(1, 4096);

    assert_non_null(buf);
    opts = PQconninfoParse(base_url, &err);
    if (!opts)
        fail_msg("TEST_DATABASE_URL cannot be parsed: %s", err ? err : "?");
    for (o = opts; o->keyword; o++) {
        if (o->val && o->val[0] && strcmp(o->keyword, "dbname") != 0)
            append_kv(buf, 4096, o->keyword, o->val);
    }
    PQconninfoFree(opts);
    append_kv(buf, 4096, "dbname", dbname);
    if (extra)
        snprintf(buf + strlen(buf), 4096 - strlen(buf), " %s", extra);
    return buf;
}

static PGconn *raw_connect(const char *conninfo)
{
    PGconn *pg = PQconnectdb(conninfo);

    if (PQstatus(pg) != CONNECTION_OK)
        fail_msg("cannot connect to %s: %s", conninfo, PQerrorMessage(pg));
    return pg;
}

/* Runs SQL on a raw connection; fails the test if PostgreSQL refuses it. The result is
 * the caller's to PQclear. */
static PGresult *raw_exec(PGconn *pg, const char *sql, int nparams, const char *const *params)
{
    PGresult *res = PQexecParams(pg, sql, nparams, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);

    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQresultErrorMessage(res));
    return res;
}

/* The single integer a query returns. */
static int64_t raw_int(PGconn *pg, const char *sql, int nparams, const char *const *params)
{
    PGresult *res = raw_exec(pg, sql, nparams, params);
    int64_t v;

    assert_int_equal(PQntuples(res), 1);
    v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return v;
}

/* CREATE/DROP DATABASE take an identifier, which cannot be a parameter: it is escaped. */
static void database_command(const char *verb, const char *dbname, const char *suffix)
{
    PGconn *pg = raw_connect(base_url);
    char *ident = PQescapeIdentifier(pg, dbname, strlen(dbname));
    char sql[256];

    assert_non_null(ident);
    snprintf(sql, sizeof(sql), "%s %s%s", verb, ident, suffix);
    PQclear(raw_exec(pg, sql, 0, NULL));
    PQfreemem(ident);
    PQfinish(pg);
}

static db_pool *pool_on(const char *conninfo, int size, int statement_timeout_ms)
{
    db_pool_options o;
    db_pool *pool = NULL;

    db_pool_options_init(&o);
    o.conninfo = conninfo;
    o.size = size;
    o.statement_timeout_ms = statement_timeout_ms;
    assert_int_equal(db_pool_create(&o, &pool), DB_OK);
    return pool;
}

static db_conn *acquire(db_pool *pool)
{
    db_conn *c = NULL;
    int rc = db_pool_acquire(pool, 2000, &c);

    if (rc != DB_OK)
        fail_msg("acquire: %s: %s", db_strerror(rc), db_last_connect_error());
    return c;
}

static void migrate_ok(db_conn *c, const char *dir, int *applied)
{
    char msg[512];
    int rc = db_migrate(c, dir, applied, msg, sizeof(msg));

    if (rc != DB_OK)
        fail_msg("db_migrate(%s): %s: %s", dir, db_strerror(rc), msg);
}

static int setup_fresh(void **state)
{
    fixture *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    snprintf(f->dbname, sizeof(f->dbname), "test_db_%d_%d", (int)getpid(), ++db_counter);
    database_command("CREATE DATABASE", f->dbname, "");
    f->conninfo = conninfo_for(f->dbname, NULL);
    f->pool = pool_on(f->conninfo, 4, 5000);
    f->admin = raw_connect(f->conninfo);
    *state = f;
    return 0;
}

static int setup_migrated(void **state)
{
    fixture *f;
    db_conn *c;

    setup_fresh(state);
    f = *state;
    c = acquire(f->pool);
    migrate_ok(c, migrations_dir, NULL);
    db_pool_release(f->pool, c);
    return 0;
}

/* A backend this test stopped with SIGSTOP; the teardown lets it go on, whatever happened. */
static pid_t g_frozen_backend;

static int teardown(void **state)
{
    fixture *f = *state;

    if (g_frozen_backend > 0) {
        kill(g_frozen_backend, SIGCONT);
        g_frozen_backend = 0;
    }
    if (!f)
        return 0;
    PQfinish(f->admin);
    db_pool_destroy(f->pool);
    database_command("DROP DATABASE IF EXISTS", f->dbname, " WITH (FORCE)");
    free(f->conninfo);
    free(f);
    return 0;
}

static void reset_ok(db_conn *c, int64_t goods, int64_t stock)
{
    int rc = db_goods_reset(c, goods, stock);

    if (rc != DB_OK)
        fail_msg("reset: %s: %s", db_strerror(rc), db_conn_error(c));
}

static int64_t stock_of(db_conn *c, int64_t goods)
{
    int64_t s = -1;

    assert_int_equal(db_stock_read(c, goods, &s), DB_OK);
    return s;
}

static int64_t fence_of(fixture *f, int64_t goods)
{
    char buf[32];
    const char *p[1] = {buf};

    snprintf(buf, sizeof(buf), "%lld", (long long)goods);
    return raw_int(f->admin, "SELECT fence FROM goods WHERE id = $1", 1, p);
}

static int count_migration_files(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    size_t len;

    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        len = strlen(e->d_name);
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && strchr(e->d_name, '_') && len > 4 &&
            strcmp(e->d_name + len - 4, ".sql") == 0)
            n++;
    }
    closedir(d);
    return n;
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    FILE *fp;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void copy_migrations(const char *to)
{
    DIR *d = opendir(migrations_dir);
    struct dirent *e;
    char path[512], *text;
    FILE *fp;
    long len;

    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", migrations_dir, e->d_name);
        fp = fopen(path, "rb");
        assert_non_null(fp);
        fseek(fp, 0, SEEK_END);
        len = ftell(fp);
        rewind(fp);
        text = calloc(1, (size_t)len + 1);
        assert_non_null(text);
        assert_int_equal(fread(text, 1, (size_t)len, fp), (size_t)len);
        fclose(fp);
        write_file(to, e->d_name, text);
        free(text);
    }
    closedir(d);
}

/* ---- migrations ------------------------------------------------------------------- */

static void test_migrate_applies_then_does_nothing(void **state)
{
    fixture *f = *state;
    int files = count_migration_files(migrations_dir);
    db_conn *c = acquire(f->pool);
    char msg[512];
    int applied = -1;

    assert_true(files >= 1);
    assert_int_equal(db_schema_check(c, migrations_dir, msg, sizeof(msg)), DB_ERR_SCHEMA);
    assert_non_null(strstr(msg, "001_schema.sql"));

    migrate_ok(c, migrations_dir, &applied);
    assert_int_equal(applied, files);
    assert_int_equal(raw_int(f->admin, "SELECT count(*) FROM schema_migrations", 0, NULL), files);
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                             " AND tablename IN ('goods', 'orders', 'idempotency')",
                             0, NULL),
                     3);

    migrate_ok(c, migrations_dir, &applied);
    assert_int_equal(applied, 0);
    assert_int_equal(raw_int(f->admin, "SELECT count(*) FROM schema_migrations", 0, NULL), files);
    assert_int_equal(db_schema_check(c, migrations_dir, msg, sizeof(msg)), DB_OK);

    /* migrate lifted statement_timeout while it ran: the session has its own back */
    {
        db_pool_release(f->pool, c);
        c = acquire(f->pool);
        assert_int_equal(db_ping(c), DB_OK);
    }
    db_pool_release(f->pool, c);
}

typedef struct migrator {
    const char *conninfo;
    pthread_barrier_t *start;
    int rc;
    int applied;
    char msg[512];
} migrator;

static void *migrator_run(void *arg)
{
    migrator *m = arg;
    db_pool_options o;
    db_pool *pool = NULL;
    db_conn *c = NULL;

    db_pool_options_init(&o);
    o.conninfo = m->conninfo;
    o.size = 1;
    m->rc = db_pool_create(&o, &pool);
    if (m->rc == DB_OK)
        m->rc = db_pool_acquire(pool, 5000, &c);
    pthread_barrier_wait(m->start); /* connected: now all at once */
    if (m->rc == DB_OK)
        m->rc = db_migrate(c, migrations_dir, &m->applied, m->msg, sizeof(m->msg));
    db_pool_release(pool, c);
    db_pool_destroy(pool);
    return NULL;
}

static void test_concurrent_migrators_apply_once(void **state)
{
    enum { N = 4 };
    fixture *f = *state;
    int files = count_migration_files(migrations_dir);
    pthread_barrier_t start;
    pthread_t threads[N];
    migrator m[N];
    int i, total = 0;

    pthread_barrier_init(&start, NULL, N);
    for (i = 0; i < N; i++) {
        memset(&m[i], 0, sizeof(m[i]));
        m[i].conninfo = f->conninfo;
        m[i].start = &start;
        assert_int_equal(pthread_create(&threads[i], NULL, migrator_run, &m[i]), 0);
    }
    for (i = 0; i < N; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&start);

    for (i = 0; i < N; i++) {
        if (m[i].rc != DB_OK)
            fail_msg("migrator %d: %s: %s", i, db_strerror(m[i].rc), m[i].msg);
        total += m[i].applied;
    }
    assert_int_equal(total, files); /* each file applied by exactly one of them */
    assert_int_equal(raw_int(f->admin, "SELECT count(*) FROM schema_migrations", 0, NULL), files);
}

static void test_schema_check_finds_a_pending_file(void **state)
{
    fixture *f = *state;
    char dir[] = "/tmp/test_db_migrations.XXXXXX";
    db_conn *c = acquire(f->pool);
    char msg[512];
    int applied = -1;

    assert_non_null(mkdtemp(dir));
    copy_migrations(dir);
    write_file(dir, "999_extra.sql", "CREATE TABLE extra_test (x int);\n");
    write_file(dir, "README", "not a migration: ignored\n");

    assert_int_equal(db_schema_check(c, dir, msg, sizeof(msg)), DB_ERR_SCHEMA);
    assert_non_null(strstr(msg, "999_extra.sql"));

    migrate_ok(c, dir, &applied);
    assert_int_equal(applied, 1);
    assert_int_equal(db_schema_check(c, dir, msg, sizeof(msg)), DB_OK);
    assert_int_equal(
        raw_int(f->admin, "SELECT count(*) FROM schema_migrations WHERE version = 999", 0, NULL),
        1);
    /* the real directory, which lacks 999, is still up to date: extra versions are fine */
    assert_int_equal(db_schema_check(c, migrations_dir, msg, sizeof(msg)), DB_OK);

    db_pool_release(f->pool, c);
    support_remove_dir(dir);
}

static void test_a_failing_migration_changes_nothing(void **state)
{
    fixture *f = *state;
    char dir[] = "/tmp/test_db_migrations.XXXXXX";
    db_conn *c = acquire(f->pool);
    char msg[512];
    int applied = -1;

    assert_non_null(mkdtemp(dir));
    copy_migrations(dir);
    write_file(dir, "900_half.sql", "CREATE TABLE half_done (x int);\nSELEC broken;\n");

    assert_int_equal(db_migrate(c, dir, &applied, msg, sizeof(msg)), DB_ERR_QUERY);
    assert_int_equal(applied, 0);
    assert_non_null(strstr(msg, "900_half.sql"));
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM schema_migrations"
                             " WHERE version = 900",
                             0, NULL),
                     0);
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM pg_tables"
                             " WHERE tablename = 'half_done'",
                             0, NULL),
                     0);
    assert_int_equal(db_ping(c), DB_OK); /* the session is usable, the lock given back */
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM pg_locks"
                             " WHERE locktype = 'advisory'",
                             0, NULL),
                     0);

    /* migrate runs its own transactions: refused inside one */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_migrate(c, dir, &applied, msg, sizeof(msg)), DB_ERR_INVALID);
    assert_int_equal(db_rollback(c), DB_OK);

    /* a file that commits by itself is refused */
    write_file(dir, "900_half.sql", "COMMIT;\n");
    assert_int_equal(db_migrate(c, dir, &applied, msg, sizeof(msg)), DB_ERR_SCHEMA);
    assert_non_null(strstr(msg, "900_half.sql"));

    /* two files with one number, an empty directory, no directory */
    write_file(dir, "900_half.sql", "SELECT 1;\n");
    write_file(dir, "0900_again.sql", "SELECT 1;\n");
    assert_int_equal(db_migrate(c, dir, &applied, msg, sizeof(msg)), DB_ERR_SCHEMA);
    assert_non_null(strstr(msg, "two migrations numbered 900"));
    support_remove_dir(dir);
    strcpy(dir, "/tmp/test_db_migrations.XXXXXX"); /* mkdtemp wrote over the X's */
    assert_non_null(mkdtemp(dir));
    assert_int_equal(db_schema_check(c, dir, msg, sizeof(msg)), DB_ERR_SCHEMA);
    assert_non_null(strstr(msg, "no NNN_name.sql"));
    support_remove_dir(dir);
    assert_int_equal(db_schema_check(c, dir, msg, sizeof(msg)), DB_ERR_SCHEMA);
    assert_non_null(strstr(msg, "cannot read"));

    db_pool_release(f->pool, c);
}

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
    assert_int_equal(db_order_insert(c, 1, 2, "redis", "svc-2", &fence, "redis", NULL, &id2), DB_OK);
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
    assert_int_equal(db_order_insert(c, 999, 1, "none", "svc-1", NULL, NULL, NULL, &id1), DB_ERR_QUERY);
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
    assert_int_equal(db_claim_begin(c, 1, "redis", 5, &stock), DB_OK);
    assert_int_equal(db_sale_commit(c, 1, stock - 1, 1, "redis", "svc-1", 5, "redis", "p-2", &id),
                     DB_OK);
    snprintf(id_buf, sizeof(id_buf), "%lld", (long long)id);
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM orders WHERE id = $1::bigint"
                             " AND request_id = 'p-2'",
                             1, params),
                     1);
    assert_int_equal(db_orders_insert_many(c, 1, counts, 3, "redis-batch", "svc-1", &fence, "redis",
                                           rids, ids),
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
                                           "svc-1", &cart),
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
    /* The cart number is no order's id. */
    assert_int_equal(
        raw_int(f->admin, "SELECT count(*) FROM orders WHERE id = $1::bigint", 1, params), 0);
    assert_int_equal(db_orders_insert_cart(c, ids, counts, NULL, NULL, NULL, 0, "m", "i", &cart),
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
    assert_int_equal(db_begin_lock_timeout(c, 0), DB_ERR_INVALID);
    assert_int_equal(db_begin_lock_timeout(c, 200), DB_OK);
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

static void test_claim_refuses_an_older_token(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = 0;

    reset_ok(c, 1, 100);
    assert_int_equal(fence_of(f, 1), 0);

    assert_int_equal(db_stock_claim(c, 1, "redis", 5, &s), DB_OK);
    assert_int_equal(s, 100);
    assert_int_equal(fence_of(f, 1), 5);
    assert_int_equal(db_stock_write(c, 1, 90), DB_OK);
    /* older: refused, nothing changes */
    assert_int_equal(db_stock_claim(c, 1, "redis", 4, &s), DB_ERR_FENCED);
    assert_non_null(strstr(db_conn_error(c), "newer"));
    assert_int_equal(stock_of(c, 1), 90);
    assert_int_equal(fence_of(f, 1), 5);
    /* the same holding claiming again, then a newer one */
    assert_int_equal(db_stock_claim(c, 1, "redis", 5, &s), DB_OK);
    assert_int_equal(db_stock_claim(c, 1, "redis", 6, &s), DB_OK);
    assert_int_equal(s, 90);
    assert_int_equal(fence_of(f, 1), 6);
    /* the unfenced write leaves the token alone */
    assert_int_equal(db_stock_write(c, 1, 83), DB_OK);
    assert_int_equal(fence_of(f, 1), 6);
    /* unknown goods is not a fencing refusal */
    assert_int_equal(db_stock_claim(c, 2, "redis", 7, &s), DB_ERR_NOT_FOUND);
    /* a reset keeps the token: an old holder stays out */
    reset_ok(c, 1, 100);
    assert_int_equal(fence_of(f, 1), 6);
    assert_int_equal(db_stock_claim(c, 1, "redis", 5, &s), DB_ERR_FENCED);
    /* another source's numbers are not comparable: its token takes the row over, and
     * then the first source's next token is not compared with it either */
    assert_int_equal(db_stock_claim(c, 1, "other", 1, &s), DB_OK);
    assert_int_equal(fence_of(f, 1), 1);
    assert_int_equal(db_stock_claim(c, 1, "other", 0, &s), DB_ERR_FENCED);
    assert_int_equal(db_stock_claim(c, 1, "redis", 7, &s), DB_OK);
    assert_int_equal(fence_of(f, 1), 7);
    db_pool_release(f->pool, c);
}

/*
 * Fences across lock services: a redis holder with token 10 writes, an etcd holder (its own
 * counter) writes, then a stale redis holder with token 9 comes: it must be refused. Before,
 * the row kept only the last claim's source, the etcd claim replaced it, and the stale redis
 * token was compared with nothing: it passed, and lowered the stored redis fence. Each
 * order records its token's source.
 */
static void test_claim_fences_per_source(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = 0, id = 0, redis10 = 10, etcd3 = 3;

    reset_ok(c, 3, 100);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_claim(c, 3, "redis", 10, &s), DB_OK);
    assert_int_equal(db_stock_write(c, 3, 99), DB_OK);
    assert_int_equal(db_order_insert(c, 3, 1, "redis", "svc-1", &redis10, "redis", NULL, &id), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_claim(c, 3, "etcd", 3, &s), DB_OK);
    assert_int_equal(db_stock_write(c, 3, 98), DB_OK);
    assert_int_equal(db_order_insert(c, 3, 1, "etcd", "svc-2", &etcd3, "etcd", NULL, &id), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);

    /* the stale redis holder: refused, nothing changes */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_claim(c, 3, "redis", 9, &s), DB_ERR_FENCED);
    assert_int_equal(db_rollback(c), DB_OK);
    assert_int_equal(stock_of(c, 3), 98);
    /* each source still compares with its own: etcd's next token and redis' next pass */
    assert_int_equal(db_stock_claim(c, 3, "etcd", 2, &s), DB_ERR_FENCED);
    assert_int_equal(db_stock_claim(c, 3, "etcd", 4, &s), DB_OK);
    assert_int_equal(db_stock_claim(c, 3, "redis", 11, &s), DB_OK);
    assert_int_equal(
        raw_int(f->admin, "SELECT count(*) FROM orders WHERE goods = 3 AND fence_source = 'etcd'",
                0, NULL),
        1);
    db_pool_release(f->pool, c);
}

typedef struct claimant {
    db_pool *pool;
    int64_t token;
    atomic_int done;
    int rc;
    int64_t stock; /* what the claim read */
} claimant;

static void *claim_run(void *arg)
{
    claimant *w = arg;
    db_conn *c = NULL;

    w->rc = db_pool_acquire(w->pool, 2000, &c);
    if (w->rc == DB_OK)
        w->rc = db_begin(c);
    if (w->rc == DB_OK)
        w->rc = db_stock_claim(c, 1, "redis", w->token, &w->stock);
    atomic_store(&w->done, 1);
    if (c)
        db_pool_release(w->pool, c); /* rolls back */
    return NULL;
}

/* A claim whose row another holder has claimed and not committed waits for it, and then,
 * by the token order: reads what the older holder committed, or is refused when the holder
 * it waited for is newer. The check is made against the committed row, not a snapshot. */
static void claim_behind(fixture *f, int64_t first, int64_t second, int want_rc, int64_t want_stock)
{
    db_conn *c = acquire(f->pool);
    claimant w = {f->pool, second, 0, -100, -1};
    pthread_t th;
    int64_t s = 0;

    reset_ok(c, 1, 100);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_claim(c, 1, "redis", first, &s), DB_OK);
    assert_int_equal(db_stock_write(c, 1, 99), DB_OK);

    assert_int_equal(pthread_create(&th, NULL, claim_run, &w), 0);
    sleep_ms(300);
    assert_int_equal(atomic_load(&w.done), 0); /* waiting for our row lock */
    assert_int_equal(db_commit(c), DB_OK);
    pthread_join(th, NULL);
    assert_int_equal(w.rc, want_rc);
    if (want_rc == DB_OK)
        assert_int_equal(w.stock, want_stock);
    assert_int_equal(stock_of(c, 1), 99);
    assert_int_equal(fence_of(f, 1), first);
    db_pool_release(f->pool, c);
}

static void test_claim_behind_an_older_holder_reads_its_write(void **state)
{
    claim_behind(*state, 7, 8, DB_OK, 99);
}

static void test_claim_behind_a_newer_holder_is_refused(void **state)
{
    claim_behind(*state, 8, 7, DB_ERR_FENCED, 0);
}

/* ---- the sale in two round trips (pipeline mode) ------------------------------------ */

static int64_t orders_of(fixture *f, int64_t goods)
{
    char id[24];
    const char *params[1] = {id};

    snprintf(id, sizeof(id), "%lld", (long long)goods);
    return raw_int(f->admin, "SELECT count(*) FROM orders WHERE goods = $1", 1, params);
}

/* BEGIN + claim, then write + order + COMMIT: the sale is committed, with its order, its
 * token and its source, and the session is left out of pipeline mode and idle (plain
 * statements run on it after). */
static void test_pipelined_sale_commits(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = 0, id = 0;

    reset_ok(c, 1, 10);
    assert_int_equal(db_claim_begin(c, 1, "redis", 5, &s), DB_OK);
    assert_int_equal(s, 10);
    assert_int_equal(db_sale_commit(c, 1, 7, 3, "redis", "svc-1", 5, "redis", NULL, &id), DB_OK);
    assert_true(id > 0);
    assert_int_equal(stock_of(c, 1), 7); /* committed: seen outside the transaction */
    assert_int_equal(fence_of(f, 1), 5);
    assert_int_equal(orders_of(f, 1), 1);
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM orders WHERE goods = 1 AND count = 3"
                             " AND fence = 5 AND fence_source = 'redis' AND mode = 'redis'",
                             0, NULL),
                     1);
    /* a second sale on the same session, then the plain statements still work */
    assert_int_equal(db_claim_begin(c, 1, "redis", 6, &s), DB_OK);
    assert_int_equal(s, 7);
    assert_int_equal(db_sale_commit(c, 1, 6, 1, "redis", "svc-1", 6, "redis", NULL, &id), DB_OK);
    assert_int_equal(db_ping(c), DB_OK);
    assert_int_equal(stock_of(c, 1), 6);
    /* unknown goods: the claim says so; nothing to commit */
    assert_int_equal(db_claim_begin(c, 2, "redis", 7, &s), DB_ERR_NOT_FOUND);
    assert_int_equal(db_rollback(c), DB_OK);
    db_pool_release(f->pool, c);
}

/* An older token than the row's: refused (lock_lost for the caller), nothing changes. */
static void test_pipelined_claim_refuses_an_older_token(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = 0, id = 0;

    reset_ok(c, 1, 10);
    assert_int_equal(db_claim_begin(c, 1, "redis", 5, &s), DB_OK);
    assert_int_equal(db_sale_commit(c, 1, 9, 1, "redis", "svc-1", 5, "redis", NULL, &id), DB_OK);
    assert_int_equal(db_claim_begin(c, 1, "redis", 4, &s), DB_ERR_FENCED);
    assert_non_null(strstr(db_conn_error(c), "newer"));
    assert_int_equal(db_rollback(c), DB_OK);
    assert_int_equal(stock_of(c, 1), 9);
    assert_int_equal(fence_of(f, 1), 5);
    assert_int_equal(orders_of(f, 1), 1);
    db_pool_release(f->pool, c);
}

/* A statement refused inside the second batch (the write below zero; the order's count 0):
 * what follows it in the batch, COMMIT too, is skipped, the transaction is rolled back, and
 * the session is usable at once. Nothing of the sale remains, the claim's token neither. */
static void test_pipelined_error_leaves_nothing(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = 0, id = 0;

    reset_ok(c, 1, 10);
    assert_int_equal(db_claim_begin(c, 1, "redis", 5, &s), DB_OK);
    assert_int_equal(db_sale_commit(c, 1, -1, 11, "redis", "svc-1", 5, "redis", NULL, &id),
                     DB_ERR_QUERY);
    assert_non_null(strstr(db_conn_error(c), "write stock"));
    assert_int_equal(stock_of(c, 1), 10);
    assert_int_equal(orders_of(f, 1), 0);
    assert_int_equal(fence_of(f, 1), 0);

    assert_int_equal(db_claim_begin(c, 1, "redis", 6, &s), DB_OK);
    assert_int_equal(db_sale_commit(c, 1, 10, 0, "redis", "svc-1", 6, "redis", NULL, &id),
                     DB_ERR_QUERY);
    assert_non_null(strstr(db_conn_error(c), "record order"));
    assert_int_equal(stock_of(c, 1), 10);
    assert_int_equal(orders_of(f, 1), 0);
    assert_int_equal(fence_of(f, 1), 0);

    /* the session is idle and out of pipeline mode: a whole sale goes through */
    assert_int_equal(db_claim_begin(c, 1, "redis", 7, &s), DB_OK);
    assert_int_equal(db_sale_commit(c, 1, 8, 2, "redis", "svc-1", 7, "redis", NULL, &id), DB_OK);
    assert_int_equal(stock_of(c, 1), 8);
    assert_int_equal(orders_of(f, 1), 1);
    db_pool_release(f->pool, c);
}

/* The batched sale's second round trip: the write, n orders in one statement and COMMIT.
 * Each count gets an order of its own with that count, token and source; a refused write
 * leaves nothing; bad arguments send nothing. */
static void test_pipelined_batch_commits(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const int64_t counts[3] = {2, 1, 2};
    int64_t s = 0, ids[3] = {0, 0, 0};

    reset_ok(c, 1, 10);
    assert_int_equal(db_claim_begin(c, 1, "redis", 5, &s), DB_OK);
    const char *rids[3] = {"b-1", NULL, "b-3"};
    assert_int_equal(db_batch_commit(c, 1, 5, counts, 3, "redis-batch", "svc-1", 5, "redis",
                                     rids, ids),
                     DB_OK);
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM orders WHERE goods = 1"
                             " AND request_id IN ('b-1', 'b-3')",
                             0, NULL),
                     2);
    assert_true(ids[0] > 0 && ids[1] > 0 && ids[2] > 0);
    assert_true(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
    assert_int_equal(stock_of(c, 1), 5);
    assert_int_equal(fence_of(f, 1), 5);
    assert_int_equal(orders_of(f, 1), 3);
    for (int i = 0; i < 3; i++) {
        char id[24], count[24];
        const char *params[2] = {id, count};
        snprintf(id, sizeof(id), "%lld", (long long)ids[i]);
        snprintf(count, sizeof(count), "%lld", (long long)counts[i]);
        assert_int_equal(raw_int(f->admin,
                                 "SELECT count(*) FROM orders WHERE id = $1 AND count = $2"
                                 " AND goods = 1 AND fence = 5 AND fence_source = 'redis'"
                                 " AND mode = 'redis-batch'",
                                 2, params),
                         1);
    }

    /* the write refused (below zero): the orders and COMMIT skipped, rolled back */
    assert_int_equal(db_claim_begin(c, 1, "redis", 6, &s), DB_OK);
    assert_int_equal(db_batch_commit(c, 1, -1, counts, 3, "redis-batch", "svc-1", 6, "redis",
                                     NULL, ids),
                     DB_ERR_QUERY);
    assert_non_null(strstr(db_conn_error(c), "write stock"));
    assert_int_equal(stock_of(c, 1), 5);
    assert_int_equal(orders_of(f, 1), 3);
    assert_int_equal(fence_of(f, 1), 5);

    /* nothing to send: no orders, or a count below one */
    assert_int_equal(db_batch_commit(c, 1, 5, counts, 0, "redis-batch", "svc-1", 6, "redis",
                                     NULL, ids),
                     DB_ERR_INVALID);
    assert_int_equal(db_batch_commit(c, 1, 5, (const int64_t[]){1, 0}, 2, "redis-batch",
                                     "svc-1", 6, "redis", NULL, ids),
                     DB_ERR_INVALID);
    assert_int_equal(db_ping(c), DB_OK);
    db_pool_release(f->pool, c);
}

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

/* ---- redis-sharded's segments --------------------------------------------------------- */

static int64_t segment_fence_of(fixture *f, int64_t goods, int seg)
{
    char g[32], k[32];
    const char *p[2] = {g, k};

    snprintf(g, sizeof(g), "%lld", (long long)goods);
    snprintf(k, sizeof(k), "%d", seg);
    return raw_int(f->admin, "SELECT fence FROM goods_segments WHERE goods = $1 AND seg = $2", 2,
                   p);
}

/* Cuts goods 1's stock into k segments with gather + spread, in one transaction. */
static void spread_ok(db_conn *c, int k, const int64_t *shares, const int64_t *tokens)
{
    int64_t goods_stock = -1, stocks[DB_SEGMENTS_MAX], fences[DB_SEGMENTS_MAX], rest = -1;

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segments_gather(c, 1, k, &goods_stock, stocks, fences, &rest), DB_OK);
    assert_int_equal(db_segments_spread(c, 1, 0, k, shares, tokens), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);
}

/* The hint, the spread, a segment's fenced claim and its write, the report's total. */
static void test_segments_spread_claim_write(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const int64_t shares[4] = {25, 25, 25, 25}, tokens[4] = {11, 12, 13, 14};
    int64_t goods_stock = -1, stocks[4], total = -1, s = -1, left = -1, id = 0;
    db_stock_report r;

    reset_ok(c, 1, 100);
    assert_int_equal(db_segments_read(c, 1, 4, &goods_stock, stocks, &total), DB_OK);
    assert_int_equal(goods_stock, 100);
    assert_int_equal(total, 100);
    for (int i = 0; i < 4; i++)
        assert_int_equal(stocks[i], 0); /* no rows yet */
    assert_int_equal(db_segments_read(c, 999, 4, &goods_stock, stocks, &total), DB_ERR_NOT_FOUND);

    spread_ok(c, 4, shares, tokens);
    assert_int_equal(db_segments_read(c, 1, 4, &goods_stock, stocks, &total), DB_OK);
    assert_int_equal(goods_stock, 0);
    assert_int_equal(total, 100);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(stocks[i], 25);
        assert_int_equal(segment_fence_of(f, 1, i), tokens[i]);
    }
    assert_int_equal(db_stock_report_read(c, 1, &r), DB_OK);
    assert_int_equal(r.stock, 100); /* the goods row's 0 plus the segments' 100 */

    /* A sale from segment 2 under its token: claim, write, order, commit. */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segment_claim(c, 1, 2, 13, &s), DB_OK);
    assert_int_equal(s, 25);
    assert_int_equal(db_segment_write(c, 1, 2, 20, &left), DB_OK);
    assert_int_equal(left, 95); /* this segment's 20, the others' 75 */
    assert_int_equal(db_order_insert(c, 1, 5, "redis-sharded", "svc-1", &tokens[2], "redis", NULL, &id),
                     DB_OK);
    assert_int_equal(db_commit(c), DB_OK);
    assert_int_equal(db_stock_report_read(c, 1, &r), DB_OK);
    assert_int_equal(r.stock, 95);
    assert_int_equal(r.sold, 5);
    assert_int_equal(r.sold - (r.initial - r.stock), 0);

    /* An older token is refused and changes nothing; a newer one takes the segment. */
    assert_int_equal(db_segment_claim(c, 1, 2, 12, &s), DB_ERR_FENCED);
    assert_non_null(strstr(db_conn_error(c), "newer"));
    assert_int_equal(segment_fence_of(f, 1, 2), 13);
    assert_int_equal(db_segment_claim(c, 1, 2, 20, &s), DB_OK);
    assert_int_equal(s, 20);
    assert_int_equal(segment_fence_of(f, 1, 2), 20);
    /* A segment with no row holds nothing: not found, not fenced. */
    assert_int_equal(db_segment_claim(c, 1, 7, 1, &s), DB_ERR_NOT_FOUND);
    assert_int_equal(db_segment_write(c, 1, 7, 1, &left), DB_ERR_NOT_FOUND);
    /* Bad arguments and the row's check: nothing written. */
    assert_int_equal(db_segment_claim(c, 1, DB_SEGMENTS_MAX, 1, &s), DB_ERR_INVALID);
    assert_int_equal(db_segment_write(c, 1, 2, -1, &left), DB_ERR_INVALID);
    assert_int_equal(db_segments_read(c, 1, 0, &goods_stock, stocks, &total), DB_ERR_INVALID);
    assert_int_equal(db_segments_read(c, 1, 4, &goods_stock, stocks, &total), DB_OK);
    assert_int_equal(stocks[2], 20);
    db_pool_release(f->pool, c);
}

/* A gather over fewer segments than there are rows counts the others as `rest`, and the
 * spread empties them; a spread never lowers a stored token. */
static void test_segments_gather_rest_and_tokens(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const int64_t four[4] = {10, 10, 10, 10}, tokens4[4] = {5, 5, 5, 5};
    const int64_t two[2] = {21, 19}, tokens2[2] = {3, 9};
    int64_t goods_stock = -1, stocks[4], fences[4], rest = -1, total = -1;

    reset_ok(c, 1, 40);
    spread_ok(c, 4, four, tokens4);

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segments_gather(c, 1, 2, &goods_stock, stocks, fences, &rest), DB_OK);
    assert_int_equal(goods_stock, 0);
    assert_int_equal(stocks[0] + stocks[1], 20);
    assert_int_equal(fences[1], 5);
    assert_int_equal(rest, 20); /* segments 2 and 3 */
    assert_int_equal(db_segments_spread(c, 1, 0, 2, two, tokens2), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);

    assert_int_equal(db_segments_read(c, 1, 4, &goods_stock, stocks, &total), DB_OK);
    assert_int_equal(total, 40);
    assert_int_equal(stocks[0], 21);
    assert_int_equal(stocks[1], 19);
    assert_int_equal(stocks[2], 0);
    assert_int_equal(stocks[3], 0);
    assert_int_equal(segment_fence_of(f, 1, 0), 5); /* 3 < 5: kept */
    assert_int_equal(segment_fence_of(f, 1, 1), 9);

    /* unknown goods */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segments_gather(c, 999, 2, &goods_stock, stocks, fences, &rest),
                     DB_ERR_NOT_FOUND);
    assert_int_equal(db_rollback(c), DB_OK);
    db_pool_release(f->pool, c);
}

/* The fold moves every segment's stock back to the goods row, inside the caller's
 * transaction; a reset empties the segments and keeps their tokens. The total never
 * changes. */
static void test_segments_fold_and_reset(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const int64_t shares[3] = {4, 3, 3}, tokens[3] = {7, 8, 9};
    int64_t moved = -1, goods_stock = -1, stocks[3], total = -1;
    db_stock_report r;

    reset_ok(c, 1, 10);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segments_fold(c, 1, &moved), DB_OK); /* nothing to fold */
    assert_int_equal(db_commit(c), DB_OK);
    assert_int_equal(moved, 0);
    spread_ok(c, 3, shares, tokens);
    assert_int_equal(db_stock_write(c, 1, 2), DB_OK); /* and 2 units in the row (by hand) */

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segments_fold(c, 1, &moved), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);
    assert_int_equal(moved, 10);
    assert_int_equal(db_segments_read(c, 1, 3, &goods_stock, stocks, &total), DB_OK);
    assert_int_equal(goods_stock, 12);
    assert_int_equal(total, 12);
    for (int i = 0; i < 3; i++)
        assert_int_equal(stocks[i], 0);
    assert_int_equal(segment_fence_of(f, 1, 2), 9);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segments_fold(c, 999, &moved), DB_ERR_NOT_FOUND); /* unknown goods */
    assert_int_equal(db_rollback(c), DB_OK);
    assert_int_equal(moved, 0);

    /* the fold runs inside the caller's transaction: refused outside one */
    assert_int_equal(db_segments_fold(c, 1, &moved), DB_ERR_INVALID);

    spread_ok(c, 3, shares, tokens);
    reset_ok(c, 1, 50);
    assert_int_equal(db_segments_read(c, 1, 3, &goods_stock, stocks, &total), DB_OK);
    assert_int_equal(goods_stock, 50);
    assert_int_equal(total, 50);
    assert_int_equal(db_stock_report_read(c, 1, &r), DB_OK);
    assert_int_equal(r.stock, 50);
    assert_int_equal(segment_fence_of(f, 1, 0), 7); /* an old holder stays out */
    db_pool_release(f->pool, c);
}

typedef struct gatherer {
    db_pool *pool;
    atomic_int done;
    int rc;
    int64_t seg1; /* segment 1's stock as the gather read it */
} gatherer;

static void *gather_run(void *arg)
{
    gatherer *w = arg;
    int64_t goods_stock, stocks[2], fences[2], rest;
    db_conn *c = NULL;

    w->rc = db_pool_acquire(w->pool, 2000, &c);
    if (w->rc == DB_OK)
        w->rc = db_begin(c);
    if (w->rc == DB_OK)
        w->rc = db_segments_gather(c, 1, 2, &goods_stock, stocks, fences, &rest);
    if (w->rc == DB_OK)
        w->seg1 = stocks[1];
    atomic_store(&w->done, 1);
    if (c)
        db_pool_release(w->pool, c); /* rolls back */
    return NULL;
}

/* A gather waits for a sale holding a segment it needs, then reads what that sale
 * committed: a move of units never works from a stale segment. While it holds its locks,
 * the advisory lock of the goods is taken (pg-advisory's writers wait for it). */
static void test_segments_gather_waits_for_a_sale(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const int64_t shares[2] = {5, 5}, tokens[2] = {1, 1};
    gatherer w = {f->pool, 0, -100, -1};
    int64_t s = 0, left = 0;
    pthread_t th;

    reset_ok(c, 1, 10);
    spread_ok(c, 2, shares, tokens);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segment_claim(c, 1, 1, 2, &s), DB_OK);
    assert_int_equal(db_segment_write(c, 1, 1, 2, &left), DB_OK);

    assert_int_equal(pthread_create(&th, NULL, gather_run, &w), 0);
    sleep_ms(300);
    assert_int_equal(atomic_load(&w.done), 0); /* waiting for segment 1's row */
    assert_int_equal(raw_int(f->admin, "SELECT pg_try_advisory_xact_lock(1)::int", 0, NULL), 0);
    assert_int_equal(db_commit(c), DB_OK);
    pthread_join(th, NULL);
    assert_int_equal(w.rc, DB_OK);
    assert_int_equal(w.seg1, 2);
    db_pool_release(f->pool, c);
}

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

/* A port with nothing listening: bound, read, closed. */
static int free_port(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

static void test_unreachable_server_fails_fast(void **state)
{
    char conninfo[128];
    db_pool_options o;
    db_pool *pool = NULL;
    db_conn *c = NULL;
    db_pool_stats st;
    int64_t t0, took;

    (void)state;
    snprintf(conninfo, sizeof(conninfo), "host=127.0.0.1 port=%d user=nobody dbname=none",
             free_port());
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
        t->rc = db_claim_begin(t->conn, 1, "redis", 9, &s);
    else if (t->what == 3)
        t->rc = db_sale_commit(t->conn, 1, 7, 3, "redis", "svc-1", 9, "redis", NULL, &id);
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
    db_pool_release(pool, c); /* broken: closed, not rolled back */
    kill(g_frozen_backend, SIGCONT);
    g_frozen_backend = 0;

    c = acquire(pool);
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
    assert_int_equal(db_claim_begin(c, 1, "redis", 8, &s), DB_OK);
    assert_int_equal(db_sale_commit(c, 1, 10, 1, "redis", "svc-1", 8, "redis", NULL, &id), DB_OK);
    assert_int_equal(db_claim_begin(c, 1, "redis", 9, &s), DB_OK);
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
        cmocka_unit_test_setup_teardown(test_migrate_applies_then_does_nothing, setup_fresh,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_migrators_apply_once, setup_fresh,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_schema_check_finds_a_pending_file, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_failing_migration_changes_nothing, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_read_write_and_insert, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_orders_insert_many, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_orders_request_id, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_cart_statements, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_pg_rung_statements, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_versioned_read_and_write, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_lockrow_take_and_release, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_lock_waits_end_at_lock_timeout, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_failed_transaction_does_not_commit, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_claim_fences_per_source, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_claim_refuses_an_older_token, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_claim_behind_an_older_holder_reads_its_write,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_claim_behind_a_newer_holder_is_refused, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_sale_commits, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_batch_commits, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_claim_refuses_an_older_token,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_error_leaves_nothing, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_idempotency_claim_store_fetch, setup_migrated,
                                        teardown),
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
        cmocka_unit_test_setup_teardown(test_segments_spread_claim_write, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_segments_gather_rest_and_tokens, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_segments_fold_and_reset, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_segments_gather_waits_for_a_sale, setup_migrated,
                                        teardown),
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
        cmocka_unit_test_setup_teardown(test_a_frozen_server_fails_a_statement_in_time,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_a_lost_commit_answer_is_unknown, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_claim_behind_a_held_row_is_bounded,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_lost_commit_answer_is_unknown,
                                        setup_migrated, teardown),
        cmocka_unit_test(test_strerror_names_every_code),
    };

    base_url = getenv("TEST_DATABASE_URL");
    migrations_dir = getenv("TEST_MIGRATIONS_DIR");
    if (!migrations_dir || !migrations_dir[0])
        migrations_dir = "migrations";
    if (!base_url || !base_url[0]) {
        fprintf(stderr, "test_db: FAIL: TEST_DATABASE_URL is not set. These tests need a real "
                        "PostgreSQL on which they may create databases, e.g.\n"
                        "  TEST_DATABASE_URL='host=127.0.0.1 port=5432 user=postgres "
                        "dbname=postgres'\n");
        return 1;
    }
    if (argc == 2) /* a pattern: run only the cases whose names match it */
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
