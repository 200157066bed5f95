/*
 * conn.c - one PostgreSQL session: opening it within a time bound, telling a broken
 * connection from a refused statement, and the transaction helpers.
 *
 * Connecting. PQconnectdb() blocks, and its connect_timeout counts whole seconds (at least
 * two) per address tried. The pool promises a bound in milliseconds, so the connection is
 * driven by hand instead: PQconnectStartParams() starts it without blocking, and each step
 * of the handshake (TCP, TLS, authentication, start-up) is a PQconnectPoll() after poll()
 * says the socket is ready, all under one deadline. A server that accepts the TCP
 * connection and then never answers cannot hold the caller longer than the bound.
 * (The host name is still resolved with a blocking getaddrinfo(): use an address, or a
 * name the resolver answers at once.)
 *
 * Every round trip after that is bounded too (db__await_result, exchange.c): a server that
 * stops answering (a partition, a frozen host) would otherwise hold the caller until TCP
 * gives up, minutes later, while the Redis lock's watchdog went on renewing the caller's
 * lock. TCP keepalives and tcp_user_timeout are set
 * as well, so that even a session nobody is waiting on finds out its peer is gone; and the
 * same keepalives are asked of the server, with idle_in_transaction_session_timeout, so that
 * the server ends a session whose process froze or whose host vanished inside a transaction,
 * and frees its row locks (set_session_lease): the database's own lease.
 *
 * Errors. PostgreSQL says what went wrong with an SQLSTATE. Two kinds matter to a caller:
 * the server refused this statement (a constraint, a timeout, a serialization failure: the
 * session is fine, the transaction is not), or the session itself is gone (the server
 * restarted, the network dropped, the backend was terminated). The second kind marks the
 * connection broken (db__check, exchange.c), so the pool closes it and opens a new one on
 * next use.
 *
 * libpq prints notices to stderr by default; this module does not log, so a receiver of
 * its own drops them, except the server's parting message on an idle session (see
 * on_notice).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "db/internal.h"

/* The last failure of db_pool_acquire, per thread: a failed acquire has no connection to
 * keep its error in. The pool writes it (db__connect_error), and so does db__conn_open
 * through the buffer the pool passes it. */
static _Thread_local char last_connect_error[DB__ERR_LEN];

char *db__connect_error(void)
{
    return last_connect_error;
}

const char *db_last_connect_error(void)
{
    return last_connect_error;
}

/*
 * libpq hands this what the server says outside a statement's result: notices and
 * warnings (dropped: this module does not log), and, on an idle session, the server's
 * parting FATAL message when it closes the session (a restart, pg_terminate_backend).
 * That one marks the connection broken and keeps the reason.
 */
static void on_notice(void *arg, const PGresult *res)
{
    db_conn *c = arg;
    const char *severity = PQresultErrorField(res, PG_DIAG_SEVERITY_NONLOCALIZED);
    const char *primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);

    if (severity && (strcmp(severity, "FATAL") == 0 || strcmp(severity, "PANIC") == 0)) {
        c->broken = true;
        db__set_error(c, "%s", primary ? primary : "the server closed the session");
    }
}

/* Runs libpq's connection state machine on pg until it connects, fails or runs out of time. */
static int drive_connect(PGconn *pg, int timeout_ms, char *err, size_t errlen)
{
    PostgresPollingStatusType st = PGRES_POLLING_WRITING; /* what libpq wants first */
    int64_t deadline = db__now_ms() + timeout_ms;
    int ready;

    for (;;) {
        if (st == PGRES_POLLING_OK)
            return DB_OK;
        if (st == PGRES_POLLING_FAILED) {
            db__copy_line(err, errlen, PQerrorMessage(pg));
            return DB_ERR_UNAVAILABLE;
        }
        ready = db__wait_socket(pg, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
        if (ready == 0) {
            snprintf(err, errlen, "no connection to PostgreSQL within %d ms", timeout_ms);
            return DB_ERR_UNAVAILABLE;
        }
        if (ready < 0) {
            snprintf(err, errlen, "poll: %s", strerror(errno));
            return DB_ERR_UNAVAILABLE;
        }
        st = PQconnectPoll(pg);
    }
}

/* TCP keepalives, at both ends of a session: probe one idle for 5 s, every 2 s, give up
 * after 3 misses (about 11 s after a host vanished). */
#define KEEPALIVE_IDLE_S "5"
#define KEEPALIVE_INTERVAL_S "2"
#define KEEPALIVE_COUNT "3"

/* The server's side of the session's lease: see DB__SET_SESSION_LEASE. */
static int set_session_lease(db_conn *c, int idle_in_tx_ms, int user_timeout_ms)
{
    char idle[DB__I64_LEN], user_timeout[DB__I64_LEN];
    const char *params[] = {db__i64(idle, idle_in_tx_ms), KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S,
                            KEEPALIVE_COUNT, db__i64(user_timeout, user_timeout_ms)};

    return db__run(c, DB__SET_SESSION_LEASE, params, NULL);
}

int db__conn_open(db_conn *c, const char *conninfo, int connect_timeout_ms,
                  int statement_timeout_ms, char *err, size_t errlen)
{
    /* Our defaults come first, so that the connection string (expanded from "dbname",
     * expand_dbname = 1) overrides them: libpq takes the last value given for a keyword.
     * keepalives_*: the KEEPALIVE_* values above;
     * tcp_user_timeout: data unacknowledged for as long as the reply bound fails the
     * connection in the kernel too. */
    char user_timeout[DB__I64_LEN];
    const char *const keys[] = {
        "keepalives",       "keepalives_idle", "keepalives_interval",       "keepalives_count",
        "tcp_user_timeout", "dbname",          "fallback_application_name", NULL};
    const char *const values[] = {"1",
                                  KEEPALIVE_IDLE_S,
                                  KEEPALIVE_INTERVAL_S,
                                  KEEPALIVE_COUNT,
                                  user_timeout,
                                  conninfo,
                                  "stockd",
                                  NULL};
    PGconn *pg = NULL;
    int rc;

    db__i64(user_timeout, c->pool != NULL ? c->pool->reply_timeout_ms : 0);
    snprintf(err, errlen, "%s", "");
    pg = PQconnectStartParams(keys, values, 1);
    if (!pg) {
        snprintf(err, errlen, "out of memory");
        rc = DB_ERR_NOMEM;
        goto fail;
    }
    if (PQstatus(pg) == CONNECTION_BAD) {
        db__copy_line(err, errlen, PQerrorMessage(pg));
        rc = DB_ERR_UNAVAILABLE;
        goto fail;
    }
    rc = drive_connect(pg, connect_timeout_ms, err, errlen);
    if (rc != DB_OK)
        goto fail;
    PQsetNoticeReceiver(pg, on_notice, c);
    /* Sending must not block either: db__await_result flushes under its deadline. */
    if (PQsetnonblocking(pg, 1) != 0) {
        db__copy_line(err, errlen, PQerrorMessage(pg));
        rc = DB_ERR_UNAVAILABLE;
        goto fail;
    }

    c->pg = pg;
    c->prepared = 0;
    c->broken = false;
    c->err[0] = '\0';
    c->no_answer_ms = 0;
    c->cancelled = false;
    rc = db__set_statement_timeout(c, statement_timeout_ms);
    if (rc != DB_OK) {
        snprintf(err, errlen, "setting statement_timeout: %s", c->err);
        db__conn_close(c);
        return rc;
    }
    rc = c->pool != NULL ? set_session_lease(c, c->pool->idle_in_tx_ms, c->pool->reply_timeout_ms)
                         : DB_OK;
    if (rc != DB_OK) {
        snprintf(err, errlen, "setting the session's lease: %s", c->err);
        db__conn_close(c);
        return rc;
    }
    return DB_OK;

fail:
    PQfinish(pg);
    return rc;
}

void db__conn_close(db_conn *c)
{
    PQfinish(c->pg); /* NULL is fine */
    c->pg = NULL;
    c->prepared = 0;
    c->broken = false;
}

bool db__conn_alive(db_conn *c)
{
    struct pollfd pfd;
    PGnotify *note;
    int i;

    if (!c->pg || c->broken || PQstatus(c->pg) != CONNECTION_OK)
        return false;
    /* An idle session receives nothing unless the server is closing it: first its parting
     * FATAL message, then the end of the stream. Reading the socket (PQconsumeInput) and
     * parsing what came (PQisBusy) lets on_notice see the message, or libpq the end. A
     * notification (we never LISTEN, but still) is read and dropped. */
    for (i = 0; i < 4; i++) {
        pfd.fd = PQsocket(c->pg);
        pfd.events = POLLIN;
        pfd.revents = 0;
        if (poll(&pfd, 1, 0) <= 0)
            return true; /* nothing to read: alive as far as can be told for free */
        if (!PQconsumeInput(c->pg))
            return false;
        (void)PQisBusy(c->pg);
        while ((note = PQnotifies(c->pg)) != NULL)
            PQfreemem(note);
        if (c->broken || PQstatus(c->pg) != CONNECTION_OK)
            return false;
    }
    return true;
}

int db__set_statement_timeout(db_conn *c, int ms)
{
    char buf[DB__I64_LEN];
    const char *params[1];

    params[0] = db__i64(buf, ms);
    return db__run(c, DB__SET_STATEMENT_TIMEOUT, params, NULL);
}

int db_set_lock_timeout(db_conn *conn, int64_t ms)
{
    char buf[DB__I64_LEN];
    const char *params[1];

    if (!conn || ms < 1)
        return DB_ERR_INVALID; /* 0 would mean "no bound" to PostgreSQL */
    params[0] = db__i64(buf, ms);
    return db__run(conn, DB__SET_LOCK_TIMEOUT, params, NULL);
}

const char *db_conn_error(const db_conn *conn)
{
    return conn ? conn->err : "";
}

int db_conn_no_answer_ms(const db_conn *conn)
{
    return conn != NULL ? conn->no_answer_ms : 0;
}

void db_conn_set_budget(db_conn *conn, int64_t ms)
{
    if (conn != NULL) {
        conn->budgeted = true;
        conn->budget_ms = ms;
    }
}

int64_t db_conn_budget_left(const db_conn *conn)
{
    return conn != NULL && conn->budgeted ? conn->budget_ms : 0;
}

int db_conn_cancelled_ms(const db_conn *conn)
{
    return conn != NULL && conn->cancelled && conn->pool != NULL ? conn->pool->statement_timeout_ms
                                                                 : 0;
}

const char *db_describe_error(int code, const db_conn *conn, char *buf, size_t len)
{
    const char *why = conn != NULL                 ? db_conn_error(conn)
                      : code == DB_ERR_UNAVAILABLE ? db_last_connect_error()
                                                   : "";

    snprintf(buf, len, "%s%s%s", db_strerror(code), why[0] ? ": " : "", why);
    return buf;
}

const char *db_strerror(int code)
{
    switch (code) {
    case DB_OK:
        return "ok";
    case DB_ERR_UNAVAILABLE:
        return "PostgreSQL unavailable";
    case DB_ERR_BUSY:
        return "no database connection free";
    case DB_ERR_NOT_FOUND:
        return "not found";
    case DB_ERR_QUERY:
        return "statement refused";
    case DB_ERR_CONFLICT:
        return "idempotency key already used";
    case DB_ERR_FENCED:
        return "refused by a newer fencing token";
    case DB_ERR_INSUFFICIENT:
        return "not enough stock";
    case DB_ERR_LOCK_TIMEOUT:
        return "a lock was not had within lock_timeout";
    case DB_ERR_RETRY:
        return "the row changed since it was read: run the transaction again";
    case DB_ERR_HELD:
        return "the lock row is held by another owner";
    case DB_ERR_DEADLOCK:
        return "chosen as the victim of a deadlock";
    case DB_ERR_SERIALIZATION:
        return "could not serialize beside a concurrent transaction";
    case DB_ERR_COMMIT_UNKNOWN:
        return "COMMIT sent, answer lost: the transaction may have committed";
    case DB_ERR_SCHEMA:
        return "schema not up to date";
    case DB_ERR_NOMEM:
        return "out of memory";
    case DB_ERR_INVALID:
        return "invalid argument";
    default:
        return "unknown error";
    }
}

int db_ping(db_conn *conn)
{
    int rc = db__run(conn, DB__PING, NULL, NULL);

    return rc == DB_OK ? DB_OK : DB_ERR_UNAVAILABLE;
}

int db_replication_mode(db_conn *conn, const char **out)
{
    static const char *const modes[] = {"sync", "async", "single"};
    PGresult *res = NULL;
    const char *v;
    size_t i;
    int rc = db__run(conn, DB__REPLICATION_MODE, NULL, &res);

    if (rc != DB_OK)
        return rc;
    v = PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "";
    rc = DB_ERR_QUERY;
    for (i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        if (strcmp(v, modes[i]) == 0) {
            *out = modes[i];
            rc = DB_OK;
        }
    }
    if (rc != DB_OK)
        db__set_error(conn, "unexpected replication mode '%s'", v);
    PQclear(res);
    return rc;
}

int db_begin(db_conn *conn)
{
    return db__run(conn, DB__BEGIN, NULL, NULL);
}

int db__begin_statement(db_isolation isolation)
{
    switch (isolation) {
    case DB_READ_COMMITTED:
        return DB__BEGIN;
    case DB_REPEATABLE_READ:
        return DB__BEGIN_REPEATABLE_READ;
    case DB_SERIALIZABLE:
        return DB__BEGIN_SERIALIZABLE;
    }
    return -1;
}

int db_begin_isolated(db_conn *conn, db_isolation isolation)
{
    int id = db__begin_statement(isolation);

    if (id < 0)
        return DB_ERR_INVALID;
    return db__run(conn, (enum db__stmt_id)id, NULL, NULL);
}

int db_commit(db_conn *conn)
{
    PGresult *res = NULL;
    bool usable = conn != NULL && conn->pg != NULL && !conn->broken;
    int rc = db__run(conn, DB__COMMIT, NULL, &res);

    /* COMMIT was sent and its answer never came: the server may have committed. */
    if (rc == DB_ERR_UNAVAILABLE && usable)
        return DB_ERR_COMMIT_UNKNOWN;
    if (rc != DB_OK)
        return rc;
    /* COMMIT of a transaction that had already failed succeeds as a statement, but it
     * rolls back: the server says so in the command tag. */
    if (strcmp(PQcmdStatus(res), "COMMIT") != 0) {
        db__set_error(conn, "COMMIT rolled back: the transaction had failed");
        rc = DB_ERR_QUERY;
    }
    PQclear(res);
    return rc;
}

int db_rollback(db_conn *conn)
{
    return db__run(conn, DB__ROLLBACK, NULL, NULL);
}
