/*
 * db_support.c - the database, the fixtures and the main of the db/ module's test programs.
 * See db_support.h.
 */
#include "tests/db/db_support.h"
#include "tests/support/cases.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *base_url;
const char *migrations_dir;
static int db_counter;

int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int ms)
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
char *conninfo_for(const char *dbname, const char *extra)
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

PGconn *raw_connect(const char *conninfo)
{
    PGconn *pg = PQconnectdb(conninfo);

    if (PQstatus(pg) != CONNECTION_OK)
        fail_msg("cannot connect to %s: %s", conninfo, PQerrorMessage(pg));
    return pg;
}

/* Runs SQL on a raw connection; fails the test if PostgreSQL refuses it. The result is
 * the caller's to PQclear. */
PGresult *raw_exec(PGconn *pg, const char *sql, int nparams, const char *const *params)
{
    PGresult *res = PQexecParams(pg, sql, nparams, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);

    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        fail_msg("%s: %s", sql, PQresultErrorMessage(res));
    return res;
}

/* The single integer a query returns. */
int64_t raw_int(PGconn *pg, const char *sql, int nparams, const char *const *params)
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

db_pool *pool_on(const char *conninfo, int size, int statement_timeout_ms)
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

db_conn *acquire(db_pool *pool)
{
    db_conn *c = NULL;
    int rc = db_pool_acquire(pool, 2000, &c);

    if (rc != DB_OK)
        fail_msg("acquire: %s: %s", db_strerror(rc), db_last_connect_error());
    return c;
}

void migrate_ok(db_conn *c, const char *dir, int *applied)
{
    char msg[512];
    int rc = db_migrate(c, dir, applied, msg, sizeof(msg));

    if (rc != DB_OK)
        fail_msg("db_migrate(%s): %s: %s", dir, db_strerror(rc), msg);
}

int setup_fresh(void **state)
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

int setup_migrated(void **state)
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

pid_t g_frozen_backend;

int teardown(void **state)
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

void reset_ok(db_conn *c, int64_t goods, int64_t stock)
{
    int rc = db_goods_reset(c, goods, stock);

    if (rc != DB_OK)
        fail_msg("reset: %s: %s", db_strerror(rc), db_conn_error(c));
}

int64_t stock_of(db_conn *c, int64_t goods)
{
    int64_t s = -1;

    assert_int_equal(db_stock_read(c, goods, &s), DB_OK);
    return s;
}

int64_t fence_of(fixture *f, int64_t goods)
{
    char buf[32];
    const char *p[1] = {buf};

    snprintf(buf, sizeof(buf), "%lld", (long long)goods);
    return raw_int(f->admin, "SELECT fence FROM goods WHERE id = $1", 1, p);
}

int64_t orders_of(fixture *f, int64_t goods)
{
    char id[24];
    const char *params[1] = {id};

    snprintf(id, sizeof(id), "%lld", (long long)goods);
    return raw_int(f->admin, "SELECT count(*) FROM orders WHERE goods = $1", 1, params);
}

int db_test_main(const char *name, const struct CMUnitTest *tests, size_t n, int argc,
                 char **argv)
{
    if (support_list_cases(tests, n, argc, argv))
        return 0;
    base_url = getenv("TEST_DATABASE_URL");
    migrations_dir = getenv("TEST_MIGRATIONS_DIR");
    if (!migrations_dir || !migrations_dir[0])
        migrations_dir = "migrations";
    if (!base_url || !base_url[0]) {
        fprintf(stderr, "%s: FAIL: TEST_DATABASE_URL is not set. These tests need a real "
                        "PostgreSQL on which they may create databases, e.g.\n"
                        "  TEST_DATABASE_URL='host=127.0.0.1 port=5432 user=postgres "
                        "dbname=postgres'\n",
                name);
        return 1;
    }
    return support_run_cases(name, tests, n, argc, argv, NULL, NULL);
}
