/*
 * test_migrations.c - db_migrate and db_schema_check against a real PostgreSQL: every file
 * applied once, then nothing; two migrators at once apply each file once; a pending file
 * found by the schema check; a failing migration changes nothing.
 *
 * The environment and the fixtures: tests/db/db_support.h.
 */
#include "tests/db/db_support.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/support/files.h"

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

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_migrate_applies_then_does_nothing,
                                        setup_fresh, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_migrators_apply_once,
                                        setup_fresh, teardown),
        cmocka_unit_test_setup_teardown(test_schema_check_finds_a_pending_file,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_a_failing_migration_changes_nothing,
                                        setup_migrated, teardown),
    };

    return db_test_main("test_migrations", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
