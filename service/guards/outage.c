/*
 * outage.c - a dependency's failure said in the service's words, its own text logged (see
 * outage.h).
 */
#include "service/guards/outage.h"

#include "lock/lock.h"
#include "lock/queue/queue_lock.h"
#include "service/log.h"

#include <stdio.h>

/* The one log line of a failure: what the client was told, and what the library said. */
static void logged(const char *dependency, const char *step, const char *said, const char *error)
{
    char q_step[80], q_said[300], q_error[600];

    log_event(LOG_WARN, "dependency_failed", "dependency=%s step=%s said=%s error=%s", dependency,
              log_quote(q_step, sizeof(q_step), step), log_quote(q_said, sizeof(q_said), said),
              log_quote(q_error, sizeof(q_error), error));
}

/* The sentence for a PostgreSQL code. */
static void say_postgresql(int rc, const db_conn *conn, char *buf, size_t len)
{
    switch (rc) {
    case DB_ERR_UNAVAILABLE:
        if (db_conn_no_answer_ms(conn) > 0)
            snprintf(buf, len, "PostgreSQL did not answer within %d ms",
                     db_conn_no_answer_ms(conn));
        else
            snprintf(buf, len, "PostgreSQL is unreachable");
        return;
    case DB_ERR_BUSY:
        snprintf(buf, len, "no PostgreSQL connection was free within the wait bound");
        return;
    case DB_ERR_LOCK_TIMEOUT:
        snprintf(buf, len, "a lock in PostgreSQL was not had within the wait bound");
        return;
    case DB_ERR_DEADLOCK:
        snprintf(buf, len, "PostgreSQL ended this request's transaction to break a deadlock");
        return;
    case DB_ERR_SERIALIZATION:
        snprintf(buf, len, "PostgreSQL could not order this request's transaction beside another");
        return;
    case DB_ERR_COMMIT_UNKNOWN:
        snprintf(buf, len, "PostgreSQL's answer to the commit was lost");
        return;
    case DB_ERR_SCHEMA:
        snprintf(buf, len, "PostgreSQL's schema is not migrated");
        return;
    case DB_ERR_NOMEM:
        snprintf(buf, len, "out of memory on the way to PostgreSQL");
        return;
    default:
        if (db_conn_cancelled_ms(conn) > 0)
            snprintf(buf, len, "PostgreSQL did not finish a statement within %d ms",
                     db_conn_cancelled_ms(conn));
        else
            snprintf(buf, len, "PostgreSQL refused the request's statement");
        return;
    }
}

const char *outage_postgresql(int rc, const db_conn *conn, const char *step, char *buf, size_t len)
{
    char error[400];

    say_postgresql(rc, conn, buf, len);
    logged("postgresql", step, buf, db_describe_error(rc, conn, error, sizeof(error)));
    return buf;
}

const char *outage_redis(const char *service, int rc, const char *step, char *buf, size_t len)
{
    char error[400];
    int64_t timeout_ms = 0;
    lock_met met = lock_last_met(&timeout_ms);

    if (rc == LOCK_ERR_REDIS && met == LOCK_MET_NO_ANSWER)
        snprintf(buf, len, "%s did not answer within %lld ms", service, (long long)timeout_ms);
    else if (rc == LOCK_ERR_REDIS && met == LOCK_MET_UNREACHABLE)
        snprintf(buf, len, "%s is unreachable", service);
    else if (rc == LOCK_ERR_REDIS)
        snprintf(buf, len, "%s refused the lock's command", service);
    else if (rc == LOCK_ERR_BUSY)
        snprintf(buf, len, "no %s connection was free within the wait bound", service);
    else if (rc == LOCK_ERR_NOMEM)
        snprintf(buf, len, "out of memory on the way to %s", service);
    else
        snprintf(buf, len, "%s failed the lock's call", service);
    snprintf(error, sizeof(error), "%s%s%s", lock_strerror(rc), lock_last_error()[0] ? ": " : "",
             lock_last_error());
    logged("redis", step, buf, error);
    return buf;
}

const char *outage_redlock(int rc, int nodes, const char *step, char *buf, size_t len)
{
    char error[400];

    if (rc != LOCK_ERR_REDIS)
        return outage_redis("the Redlock servers", rc, step, buf, len);
    snprintf(buf, len, "fewer than %d of the %d Redlock servers answered", nodes / 2 + 1, nodes);
    snprintf(error, sizeof(error), "%s", lock_last_error());
    logged("redis", step, buf, error);
    return buf;
}

const char *outage_queue(const char *service, int rc, const char *step, char *buf, size_t len)
{
    char error[400];

    if (rc == QUEUE_LOCK_ERR_SERVER)
        snprintf(buf, len, "%s is unreachable or did not answer in time", service);
    else if (rc == QUEUE_LOCK_ERR_LOST)
        snprintf(buf, len, "the %s session this replica held locks under was lost", service);
    else if (rc == QUEUE_LOCK_ERR_NOMEM)
        snprintf(buf, len, "out of memory on the way to %s", service);
    else
        snprintf(buf, len, "%s failed the lock's call", service);
    snprintf(error, sizeof(error), "%s%s%s", queue_lock_strerror(rc),
             queue_lock_last_error()[0] ? ": " : "", queue_lock_last_error());
    logged(service, step, buf, error);
    return buf;
}
