/*
 * exchange.c - a request to PostgreSQL and its reply: the one file of db/ that sends a
 * statement on a session and reads what comes back (pipeline.c, which sends several before
 * reading, builds on its pieces).
 *
 * A statement is sent without blocking (PQsend...) and its answer read as it arrives, under
 * poll() with the pool's reply_timeout_ms (db__await_result): a server that stops answering
 * (a partition, a frozen host) cannot hold the caller until TCP gives up. What came back is
 * then sorted (db__check): the server refused this statement (the session is fine), or the
 * session itself is gone (the connection is marked broken, and the pool replaces it).
 *
 * Each statement is prepared on a session the first time the session runs it, then run by
 * name with its values as separate text parameters (statements.c says why); BEGIN, COMMIT
 * and ROLLBACK are sent as plain queries.
 *
 * Below it: statements.c (the texts). Above it: conn.c (a session), the pool, and every file
 * that runs a statement.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/internal.h"

/* Copies a libpq message into buf on one line: libpq may put one line per address tried. */
void db__copy_line(char *buf, size_t len, const char *msg)
{
    size_t i, j = 0;

    if (len == 0)
        return;
    for (i = 0; msg && msg[i] != '\0' && j + 1 < len; i++) {
        if (msg[i] == '\n') {
            if (msg[i + 1] == '\0')
                break;
            if (j + 2 >= len)
                break;
            buf[j++] = ';';
            buf[j++] = ' ';
        } else {
            buf[j++] = msg[i];
        }
    }
    buf[j] = '\0';
}

void db__set_error(db_conn *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    c->no_answer_ms = 0;
    c->cancelled = false;
}

int db__wait_socket(PGconn *pg, short events, int64_t deadline)
{
    struct pollfd pfd;
    int64_t left;
    int n;

    pfd.fd = PQsocket(pg); /* may change between connect steps: one socket per address tried */
    pfd.events = events;
    pfd.revents = 0;
    for (;;) {
        left = deadline - db__now_ms();
        if (left <= 0)
            return 0;
        n = poll(&pfd, 1, (int)left);
        if (n >= 0)
            return n;
        if (errno != EINTR)
            return -1;
    }
}

/* Marks c broken after a failed exchange, with the reason (NULL: libpq's), and the bound
 * that ran out when it was no answer in time (0 otherwise). Returns NULL (no result). */
static PGresult *exchange_failed(db_conn *c, const char *why, int no_answer_ms)
{
    if (why != NULL)
        db__set_error(c, "%s", why);
    else
        db__copy_line(c->err, sizeof(c->err), PQerrorMessage(c->pg));
    c->no_answer_ms = no_answer_ms;
    c->broken = true;
    return NULL;
}

int64_t db__reply_deadline(const db_conn *c)
{
    int64_t bound = c->pool != NULL ? c->pool->reply_timeout_ms : 0;

    if (c->budgeted && c->budget_ms < bound)
        bound = c->budget_ms > 1 ? c->budget_ms : 1;
    return db__now_ms() + bound;
}

void db__spend(db_conn *c, int64_t since_ms)
{
    if (c->budgeted)
        c->budget_ms -= db__now_ms() - since_ms;
}

/* db__await_result's wait, within db__reply_deadline. */
static PGresult *await_result(db_conn *c)
{
    int timeout_ms = c->pool != NULL ? c->pool->reply_timeout_ms : 0;
    int64_t deadline = db__reply_deadline(c);
    PGresult *last = NULL, *r;
    int flushed, ready;
    char why[96];

    snprintf(why, sizeof(why), "no answer from PostgreSQL within %d ms", timeout_ms);
    /* Send what is still queued (everything, for statements this small, but a full socket
     * buffer must not block us). */
    while ((flushed = PQflush(c->pg)) == 1) {
        ready = db__wait_socket(c->pg, POLLOUT, deadline);
        if (ready <= 0)
            return exchange_failed(c, ready == 0 ? why : "poll failed",
                                   ready == 0 ? timeout_ms : 0);
    }
    if (flushed < 0)
        return exchange_failed(c, NULL, 0);
    /* Read until libpq has the whole answer; then collect its results (one per statement:
     * keep the last, as PQexec does). */
    for (;;) {
        while (PQisBusy(c->pg)) {
            ready = db__wait_socket(c->pg, POLLIN, deadline);
            if (ready <= 0) {
                PQclear(last);
                return exchange_failed(c, ready == 0 ? why : "poll failed",
                                       ready == 0 ? timeout_ms : 0);
            }
            if (!PQconsumeInput(c->pg)) {
                PQclear(last);
                return exchange_failed(c, NULL, 0);
            }
        }
        r = PQgetResult(c->pg);
        if (r == NULL)
            return last;
        PQclear(last);
        last = r;
    }
}

PGresult *db__await_result(db_conn *c)
{
    int64_t since = db__now_ms();
    PGresult *r = await_result(c);

    db__spend(c, since);
    return r;
}

/*
 * Whether an SQLSTATE says the session, not the statement, failed. 25006
 * (read_only_sql_transaction: "cannot execute ... in a read-only transaction", or "during
 * recovery") is one: the service only writes through sessions that target_session_attrs
 * found writable, so a session that refuses a write is on a server that is no longer the
 * primary (demoted after a failover). It must be dropped, never reused: the next session
 * libpq opens goes to the new primary.
 */
static bool sqlstate_is_connection(const char *state)
{
    if (!state)
        return false;
    return strncmp(state, "08", 2) == 0    /* connection exception */
           || strcmp(state, "57P01") == 0  /* admin_shutdown */
           || strcmp(state, "57P02") == 0  /* crash_shutdown */
           || strcmp(state, "57P03") == 0  /* cannot_connect_now */
           || strcmp(state, "25006") == 0; /* read_only_sql_transaction */
}

int db__check(db_conn *c, PGresult *res, ExecStatusType want)
{
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    bool lost, lock_timeout, deadlock, serialization;

    if (res && st == want)
        return DB_OK;

    if (primary && state)
        db__set_error(c, "%s (SQLSTATE %s)", primary, state);
    else if (res && st != PGRES_FATAL_ERROR)
        db__set_error(c, "unexpected result %s, wanted %s", PQresStatus(st), PQresStatus(want));
    else
        db__copy_line(c->err, sizeof(c->err),
                      res ? PQresultErrorMessage(res) : PQerrorMessage(c->pg));

    /* A failure without an SQLSTATE comes from libpq itself (the server went away, out of
     * memory, a protocol error): the session cannot be trusted any more either. */
    lost = PQstatus(c->pg) != CONNECTION_OK || sqlstate_is_connection(state) ||
           (st == PGRES_FATAL_ERROR && !state) ||
           /* a COPY nobody will finish leaves the session unusable */
           st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH;
    /* lock_not_available: a wait for a lock outlasted lock_timeout (db_set_lock_timeout), or
     * a NOWAIT found it taken. The caller answers "not had within the bound", not "down".
     * (Read before PQclear: `state` points into res.) */
    lock_timeout = state != NULL && strcmp(state, "55P03") == 0;
    /* deadlock_detected: this transaction was chosen as the victim of a cycle of waits (two
     * transactions that took the same rows in opposite orders); the other goes on. */
    deadlock = state != NULL && strcmp(state, "40P01") == 0;
    /* serialization_failure: under REPEATABLE READ or SERIALIZABLE, PostgreSQL refused to let
     * this transaction go on beside a concurrent one it cannot be ordered with. */
    serialization = state != NULL && strcmp(state, "40001") == 0;
    /* query_canceled: here, only ever by statement_timeout (nothing else cancels). */
    c->cancelled = state != NULL && strcmp(state, "57014") == 0;
    PQclear(res);
    if (lost) {
        c->broken = true;
        return DB_ERR_UNAVAILABLE;
    }
    if (deadlock)
        return DB_ERR_DEADLOCK;
    if (serialization)
        return DB_ERR_SERIALIZATION;
    return lock_timeout ? DB_ERR_LOCK_TIMEOUT : DB_ERR_QUERY;
}

int db__send_prepared(db_conn *c, enum db__stmt_id id, const char *const *params)
{
    const struct db__statement *s = db__statement(id);

    /* Pipeline mode allows only the extended protocol: a plain statement goes as a query
     * with no parameters, still unprepared. */
    if (s->plain)
        return PQsendQueryParams(c->pg, s->sql, 0, NULL, NULL, NULL, NULL, 0);
    return PQsendQueryPrepared(c->pg, s->name, s->nparams, params, NULL, NULL, 0);
}

/* Prepares statement id on c's session unless that was done already. */
static int prepare_once(db_conn *c, enum db__stmt_id id)
{
    const struct db__statement *s = db__statement(id);
    uint64_t bit = UINT64_C(1) << id;
    PGresult *res;
    int rc;

    if (s->plain || (c->prepared & bit))
        return DB_OK;
    if (!PQsendPrepare(c->pg, s->name, s->sql, s->nparams, NULL))
        return db__check(c, NULL, PGRES_COMMAND_OK);
    res = db__await_result(c);
    if (res == NULL)
        return DB_ERR_UNAVAILABLE;
    rc = db__check(c, res, PGRES_COMMAND_OK);
    if (rc != DB_OK)
        return rc; /* db__check cleared res */
    PQclear(res);
    c->prepared |= bit;
    return DB_OK;
}

int db__prepare(db_conn *c, enum db__stmt_id id)
{
    return prepare_once(c, id);
}

int db__run(db_conn *c, enum db__stmt_id id, const char *const *params, PGresult **res)
{
    const struct db__statement *s = db__statement(id);
    PGresult *r = NULL;
    int rc;

    if (res)
        *res = NULL;
    if (!c->pg || c->broken) {
        db__set_error(c, "the connection is closed");
        return DB_ERR_UNAVAILABLE;
    }
    if (s->plain) {
        if (!PQsendQuery(c->pg, s->sql))
            return db__check(c, NULL, s->want);
    } else {
        rc = prepare_once(c, id);
        if (rc != DB_OK)
            return rc;
        if (!PQsendQueryPrepared(c->pg, s->name, s->nparams, params, NULL, NULL, 0))
            return db__check(c, NULL, s->want);
    }
    r = db__await_result(c);
    if (r == NULL)
        return DB_ERR_UNAVAILABLE;
    rc = db__check(c, r, s->want);
    if (rc != DB_OK)
        return rc;
    if (res)
        *res = r;
    else
        PQclear(r);
    return DB_OK;
}

int db__first_i64(db_conn *c, PGresult *res, int64_t *out)
{
    int rc = PQntuples(res) == 0 ? DB_ERR_NOT_FOUND : db__get_i64(c, res, 0, 0, out);

    PQclear(res);
    return rc;
}

int db__run_i64(db_conn *c, enum db__stmt_id id, const char *const *params, int64_t *out)
{
    PGresult *res = NULL;
    int rc = db__run(c, id, params, &res);

    return rc != DB_OK ? rc : db__first_i64(c, res, out);
}

int db__run_arrays(db_conn *c, enum db__stmt_id id, const char *const *params, char *const *arrays,
                   size_t n, PGresult **res)
{
    int rc = DB_OK;

    for (size_t i = 0; i < n; i++)
        if (arrays[i] == NULL)
            rc = DB_ERR_NOMEM;
    if (rc == DB_OK)
        rc = db__run(c, id, params, res);
    for (size_t i = 0; i < n; i++)
        free(arrays[i]);
    return rc;
}

int db__missing_or_fenced(db_conn *c, enum db__stmt_id id, const char *const *params)
{
    PGresult *res = NULL;
    int rc = db__run(c, id, params, &res);

    if (rc != DB_OK)
        return rc;
    rc = PQntuples(res) == 0 ? DB_ERR_NOT_FOUND : DB_ERR_FENCED;
    PQclear(res);
    return rc;
}

int db__get_i64(db_conn *c, const PGresult *res, int row, int col, int64_t *out)
{
    const char *s;
    char *end = NULL;
    long long v;

    if (row >= PQntuples(res) || col >= PQnfields(res) || PQgetisnull(res, row, col)) {
        db__set_error(c, "no integer at row %d, column %d", row, col);
        return DB_ERR_QUERY;
    }
    s = PQgetvalue(res, row, col);
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') {
        db__set_error(c, "not an integer: \"%.40s\"", s);
        return DB_ERR_QUERY;
    }
    *out = (int64_t)v;
    return DB_OK;
}
