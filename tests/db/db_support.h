/*
 * db_support.h - what the db/ module's test programs (tests/db/test_*.c, one per concern)
 * share: a PostgreSQL to create databases on, a database of its own for each case, and the
 * test's own view of it.
 *
 *   TEST_DATABASE_URL    a server the tests may create databases on, as a URI or a key=value
 *                        string (tests/run-all.sh starts a throwaway one). Without it every
 *                        program fails: a database test that silently skips would let a
 *                        broken db/ pass.
 *   TEST_MIGRATIONS_DIR  the migrations directory (default "migrations": the programs run
 *                        from the project root).
 *
 * Each case gets a database of its own, created in its setup and dropped in its teardown, so
 * the cases do not depend on each other or on what the server held before. The cases look at
 * the database through their own libpq connection (`admin`), so that what they check does not
 * go through the code under test.
 *
 * Every program's main is db_test_main(): the environment read, a cmocka PATTERN of cases
 * (argv[1]) or --list, the run.
 */
#ifndef TESTS_DB_SUPPORT_H
#define TESTS_DB_SUPPORT_H

#include <setjmp.h> /* cmocka.h needs these four first */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <libpq-fe.h>
#include <stdbool.h>
#include <sys/types.h>

#include "db/db.h"

extern const char *base_url;       /* TEST_DATABASE_URL */
extern const char *migrations_dir; /* TEST_MIGRATIONS_DIR or "migrations" */

/* What each case works on: a database of its own, a pool on it, and a raw connection. */
typedef struct fixture {
    char dbname[64];
    char *conninfo; /* the test database, as a key=value string */
    db_pool *pool;
    PGconn *admin; /* the test's own connection to the test database */
} fixture;

/* A backend a case stopped with SIGSTOP; the teardown lets it go on, whatever happened. */
extern pid_t g_frozen_backend;

int64_t now_ms(void);
void sleep_ms(int ms);

/*
 * TEST_DATABASE_URL with the database replaced by dbname and `extra` ("key=value ...", may
 * be NULL) appended, as a key=value string; malloc'd, the caller frees it.
 */
char *conninfo_for(const char *dbname, const char *extra);
/* A libpq connection to conninfo; fails the case if it cannot be made. PQfinish it. */
PGconn *raw_connect(const char *conninfo);
/* Runs SQL on a raw connection; fails the case if PostgreSQL refuses it. The result is
 * the caller's to PQclear. */
PGresult *raw_exec(PGconn *pg, const char *sql, int nparams, const char *const *params);
/* The single integer a query returns. */
int64_t raw_int(PGconn *pg, const char *sql, int nparams, const char *const *params);

/* A pool of `size` connections on conninfo; fails the case if it cannot be made. */
db_pool *pool_on(const char *conninfo, int size, int statement_timeout_ms);
/* A connection of the pool within 2 s; fails the case otherwise. */
db_conn *acquire(db_pool *pool);
/* db_migrate(dir) that must succeed; *applied (may be NULL) as db_migrate sets it. */
void migrate_ok(db_conn *c, const char *dir, int *applied);

/* The setups: an empty database of the case's own, or one with every migration applied;
 * and the teardown of both (the database dropped, a frozen backend thawed first). */
int setup_fresh(void **state);
int setup_migrated(void **state);
int teardown(void **state);

/* db_goods_reset that must succeed. */
void reset_ok(db_conn *c, int64_t goods, int64_t stock);
/* The stock as db_stock_read reads it (which must succeed). */
int64_t stock_of(db_conn *c, int64_t goods);
/* The goods' fence and its order count, read over the admin connection. */
int64_t fence_of(fixture *f, int64_t goods);
int64_t orders_of(fixture *f, int64_t goods);

/* Every program's main: reads the environment (a missing TEST_DATABASE_URL fails the run),
 * takes a cmocka PATTERN of cases as argv[1], or --list to print the case names, and runs
 * tests[0..n). Returns the exit status. */
int db_test_main(const char *name, const struct CMUnitTest *tests, size_t n, int argc,
                 char **argv);

#endif
