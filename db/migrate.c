/*
 * migrate.c - schema migrations: numbered SQL files applied once each, in order.
 *
 * A migration is a file "NNN_name.sql" in the migrations directory; NNN (any number of
 * digits) orders them, numerically. Other files are ignored. The table
 * schema_migrations(version, name, applied_at) records the ones applied.
 *
 * db_migrate:
 *   1. takes a session-level advisory lock: several replicas may start at once, and each
 *      runs its migrations; the lock makes them run one after another, and each sees
 *      what the one before applied (so each file is applied once). A migrator that dies
 *      releases the lock with its session.
 *   2. creates schema_migrations if needed (under the lock: two concurrent
 *      CREATE TABLE IF NOT EXISTS can both try to create it),
 *   3. applies each pending file in its own transaction, together with its record: a
 *      file is applied entirely and recorded, or not at all,
 *   4. unlocks.
 * statement_timeout is lifted for the duration: waiting for another migrator, or building
 * an index, may take longer than any request should.
 *
 * A file's text is sent as it is (PQexec runs several statements in one round trip); it
 * must not contain BEGIN/COMMIT, nor what refuses a transaction (CREATE INDEX
 * CONCURRENTLY). A file that ends the transaction itself is reported as an error.
 *
 * db_schema_check only reads: it is what a replica runs at start-up to refuse an old
 * schema. A database that has versions the directory does not know is not an error
 * (a newer replica migrated it; an older one may still run).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "db/internal.h"

/* A migration file is refused above this size: it is a schema change, not a data load. */
#define MIGRATION_MAX_BYTES (4 * 1024 * 1024)

typedef struct migration {
    int64_t version;
    char *file; /* "NNN_name.sql" */
} migration;

typedef struct migration_list {
    migration *items;
    size_t count;
} migration_list;

static void say(char *msg, size_t msglen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes one line into msg (which may be NULL). */
static void say(char *msg, size_t msglen, const char *fmt, ...)
{
    va_list ap;

    if (!msg || msglen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
}

static void list_free(migration_list *list)
{
    size_t i;

    for (i = 0; i < list->count; i++)
        free(list->items[i].file);
    free(list->items);
    list->items = NULL;
    list->count = 0;
}

/* The version of a migration file name, or -1 if the name is not "NNN_name.sql". */
static int64_t version_of(const char *name)
{
    size_t len = strlen(name), digits = strspn(name, "0123456789");
    int64_t v = 0;
    size_t i;

    if (digits == 0 || digits > 18 || name[digits] != '_')
        return -1;
    if (len < digits + 1 + 1 + 4 || strcmp(name + len - 4, ".sql") != 0)
        return -1; /* at least one character of name between '_' and ".sql" */
    for (i = 0; i < digits; i++)
        v = v * 10 + (name[i] - '0');
    return v;
}

static int by_version(const void *a, const void *b)
{
    const migration *x = a, *y = b;

    return (x->version > y->version) - (x->version < y->version);
}

static int list_add(migration_list *list, size_t *cap, int64_t version, const char *file)
{
    migration *grown;

    if (list->count == *cap) {
        *cap = *cap ? *cap * 2 : 8;
        grown = realloc(list->items, *cap * sizeof(*grown));
        if (!grown)
            return DB_ERR_NOMEM;
        list->items = grown;
    }
    list->items[list->count].file = strdup(file);
    if (!list->items[list->count].file)
        return DB_ERR_NOMEM;
    list->items[list->count].version = version;
    list->count++;
    return DB_OK;
}

/* Reads the migration files of dir, sorted by version. Two files with one number, or no
 * file at all (most likely the wrong directory), are errors. */
static int list_read(const char *dir, migration_list *list, char *msg, size_t msglen)
{
    DIR *d = NULL;
    struct dirent *e;
    size_t cap = 0, i;
    int64_t v;
    int rc = DB_OK;

    d = opendir(dir);
    if (!d) {
        say(msg, msglen, "cannot read migrations directory %s: %s", dir, strerror(errno));
        return DB_ERR_SCHEMA;
    }
    while (rc == DB_OK && (e = readdir(d)) != NULL) {
        v = version_of(e->d_name);
        if (v >= 0)
            rc = list_add(list, &cap, v, e->d_name);
    }
    closedir(d);
    if (rc != DB_OK) {
        say(msg, msglen, "out of memory reading %s", dir);
        goto fail;
    }
    if (list->count == 0) {
        say(msg, msglen, "no NNN_name.sql file in migrations directory %s", dir);
        rc = DB_ERR_SCHEMA;
        goto fail;
    }
    qsort(list->items, list->count, sizeof(*list->items), by_version);
    for (i = 1; i < list->count; i++) {
        if (list->items[i].version == list->items[i - 1].version) {
            say(msg, msglen, "two migrations numbered %" PRId64 ": %s and %s",
                list->items[i].version, list->items[i - 1].file, list->items[i].file);
            rc = DB_ERR_SCHEMA;
            goto fail;
        }
    }
    return DB_OK;

fail:
    list_free(list);
    return rc;
}

/* Reads a whole file into a malloc'd, NUL-terminated string. */
static int file_read(const char *dir, const char *name, char **out, char *msg, size_t msglen)
{
    char path[4096];
    struct stat st;
    FILE *f = NULL;
    char *text = NULL;
    int rc = DB_ERR_SCHEMA;

    *out = NULL;
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path)) {
        say(msg, msglen, "%s/%s: path too long", dir, name);
        return DB_ERR_SCHEMA;
    }
    f = fopen(path, "rb");
    if (!f || fstat(fileno(f), &st) != 0) {
        say(msg, msglen, "cannot read %s: %s", path, strerror(errno));
        goto out;
    }
    if (st.st_size > MIGRATION_MAX_BYTES) {
        say(msg, msglen, "%s: larger than %d bytes", path, MIGRATION_MAX_BYTES);
        goto out;
    }
    text = malloc((size_t)st.st_size + 1);
    if (!text) {
        rc = DB_ERR_NOMEM;
        say(msg, msglen, "out of memory reading %s", path);
        goto out;
    }
    if (fread(text, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        say(msg, msglen, "cannot read %s", path);
        free(text);
        goto out;
    }
    text[st.st_size] = '\0';
    *out = text;
    rc = DB_OK;
out:
    if (f)
        fclose(f);
    return rc;
}

/* The versions recorded in schema_migrations (sorted), as a malloc'd array. A database
 * without the table has none. */
static int applied_read(db_conn *c, int64_t **versions, size_t *count)
{
    PGresult *res = NULL;
    int64_t *v = NULL;
    int64_t exists = 0;
    int i, n, rc;

    *versions = NULL;
    *count = 0;
    rc = db__run(c, DB__MIGRATIONS_TABLE_EXISTS, NULL, &res);
    if (rc != DB_OK)
        return rc;
    exists = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (!exists)
        return DB_OK;

    rc = db__run(c, DB__MIGRATIONS_APPLIED, NULL, &res);
    if (rc != DB_OK)
        return rc;
    n = PQntuples(res);
    v = calloc((size_t)n + 1, sizeof(*v));
    if (!v) {
        rc = DB_ERR_NOMEM;
        goto out;
    }
    for (i = 0; i < n && rc == DB_OK; i++)
        rc = db__get_i64(c, res, i, 0, &v[i]);
    if (rc != DB_OK)
        goto out;
    *versions = v;
    *count = (size_t)n;
    v = NULL;
out:
    free(v);
    PQclear(res);
    return rc;
}

static bool is_applied(int64_t version, const int64_t *applied, size_t count)
{
    size_t lo = 0, hi = count;

    while (lo < hi) { /* the list is sorted: binary search */
        size_t mid = lo + (hi - lo) / 2;
        if (applied[mid] == version)
            return true;
        if (applied[mid] < version)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

/* Runs one file's text and records it, both in the transaction the caller opened. */
static int apply_in_transaction(db_conn *c, const migration *m, const char *text)
{
    char version_buf[DB__I64_LEN];
    const char *params[2];
    PGresult *res;
    ExecStatusType st;

    res = PQexec(c->pg, text);
    st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    /* The file's last statement gives the status: rows, no rows, or no statement at all. */
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && st != PGRES_EMPTY_QUERY)
        return db__check(c, res, PGRES_COMMAND_OK); /* keeps and maps the error */
    PQclear(res);
    if (PQtransactionStatus(c->pg) != PQTRANS_INTRANS) {
        db__set_error(c, "the file ended the transaction itself (no BEGIN/COMMIT in a migration)");
        return DB_ERR_SCHEMA;
    }
    params[0] = db__i64(version_buf, m->version);
    params[1] = m->file;
    return db__run(c, DB__MIGRATION_RECORD, params, NULL);
}

/* Applies one migration in its own transaction. */
static int apply_one(db_conn *c, const char *dir, const migration *m, char *msg, size_t msglen)
{
    char *text = NULL;
    int rc;

    rc = file_read(dir, m->file, &text, msg, msglen);
    if (rc != DB_OK)
        return rc;
    rc = db_begin(c);
    if (rc == DB_OK)
        rc = apply_in_transaction(c, m, text);
    if (rc == DB_OK)
        rc = db_commit(c);
    if (rc != DB_OK) {
        say(msg, msglen, "%s: %s", m->file, c->err);
        if (PQtransactionStatus(c->pg) != PQTRANS_IDLE)
            (void)db_rollback(c);
    }
    free(text);
    return rc;
}

/* Steps 2 and 3 of db_migrate, with the advisory lock held. */
static int migrate_locked(db_conn *c, const char *dir, const migration_list *files, int *applied,
                          char *msg, size_t msglen)
{
    int64_t *done = NULL;
    size_t ndone = 0, i;
    int rc;

    rc = db__run(c, DB__MIGRATIONS_TABLE_CREATE, NULL, NULL);
    if (rc != DB_OK) {
        say(msg, msglen, "creating schema_migrations: %s", c->err);
        return rc;
    }
    rc = applied_read(c, &done, &ndone);
    if (rc != DB_OK) {
        say(msg, msglen, "reading schema_migrations: %s", c->err);
        return rc;
    }
    for (i = 0; i < files->count && rc == DB_OK; i++) {
        if (is_applied(files->items[i].version, done, ndone))
            continue;
        rc = apply_one(c, dir, &files->items[i], msg, msglen);
        if (rc == DB_OK)
            (*applied)++;
    }
    free(done);
    return rc;
}

int db_migrate(db_conn *conn, const char *dir, int *applied, char *msg, size_t msglen)
{
    migration_list files = {NULL, 0};
    int count = 0;
    int rc, rc2;

    say(msg, msglen, "%s", "");
    if (applied)
        *applied = 0;
    if (!conn || !conn->pg || !dir)
        return DB_ERR_INVALID;
    if (PQtransactionStatus(conn->pg) != PQTRANS_IDLE) {
        say(msg, msglen, "db_migrate must run outside a transaction");
        return DB_ERR_INVALID;
    }
    rc = list_read(dir, &files, msg, msglen);
    if (rc != DB_OK)
        return rc;

    rc = db__set_statement_timeout(conn, 0);
    if (rc != DB_OK)
        goto fail;
    rc = db__run(conn, DB__MIGRATION_LOCK, NULL, NULL);
    if (rc != DB_OK)
        goto fail_timeout;

    rc = migrate_locked(conn, dir, &files, &count, msg, msglen);

    /* A broken session has lost the lock with it; otherwise give it back. */
    rc2 = db__run(conn, DB__MIGRATION_UNLOCK, NULL, NULL);
    if (rc == DB_OK)
        rc = rc2;
fail_timeout:
    rc2 = db__set_statement_timeout(conn, conn->pool->statement_timeout_ms);
    if (rc == DB_OK)
        rc = rc2;
fail:
    if (rc != DB_OK && msg && msglen > 0 && msg[0] == '\0')
        say(msg, msglen, "migrating: %s", conn->err);
    if (applied)
        *applied = count;
    list_free(&files);
    return rc;
}

int db_schema_check(db_conn *conn, const char *dir, char *msg, size_t msglen)
{
    migration_list files = {NULL, 0};
    int64_t *done = NULL;
    size_t ndone = 0, i;
    int rc;

    say(msg, msglen, "%s", "");
    if (!conn || !dir)
        return DB_ERR_INVALID;
    rc = list_read(dir, &files, msg, msglen);
    if (rc != DB_OK)
        return rc;
    rc = applied_read(conn, &done, &ndone);
    if (rc != DB_OK) {
        say(msg, msglen, "reading schema_migrations: %s", conn->err);
        goto out;
    }
    for (i = 0; i < files.count; i++) {
        if (!is_applied(files.items[i].version, done, ndone)) {
            say(msg, msglen, "migration %s is not applied: run the migrate command first",
                files.items[i].file);
            rc = DB_ERR_SCHEMA;
            break;
        }
    }
out:
    free(done);
    list_free(&files);
    return rc;
}
