/*
 * pool.c - a bounded pool of PostgreSQL connections.
 *
 * The pool has `size` slots, made when the pool is created; a slot's session is opened
 * the first time it is needed, so the pool can be created while PostgreSQL is down, and
 * a replica that serves little holds few connections. A thread borrows a slot (waiting
 * on a condition variable, at most as long as it said), uses it alone, and returns it.
 *
 * The mutex guards only the bookkeeping (which slot is borrowed, how many are open).
 * Connecting and closing happen outside it: the slot is already marked borrowed, so no
 * other thread touches it, and a slow connect does not stop others from borrowing and
 * returning the open slots meanwhile.
 *
 * Failures heal by themselves: a connection found broken (by a statement, or by the free
 * check in db__conn_alive when it is borrowed) is closed, and the slot opens a fresh
 * session the next time it is borrowed. A slot returned in the middle of a transaction is
 * rolled back first, so the next borrower starts clean and no row stays locked.
 *
 * Waiting uses the module's monotonic clock (db/clock.c) so that a change of the wall clock cannot
 * stretch a bound.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db/internal.h"

void db_pool_options_init(db_pool_options *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->size = 8;
    opts->connect_timeout_ms = 2000;
    opts->statement_timeout_ms = 5000;
    opts->reply_timeout_ms = 6000;
    opts->idle_in_tx_ms = 30000;
}

/* A connection string libpq cannot parse will never connect: say so at creation. */
static bool conninfo_valid(const char *conninfo)
{
    PQconninfoOption *parsed = PQconninfoParse(conninfo, NULL);

    if (!parsed)
        return false;
    PQconninfoFree(parsed);
    return true;
}

static int options_valid(const db_pool_options *opts)
{
    if (!opts || !opts->conninfo || !conninfo_valid(opts->conninfo))
        return 0;
    if (opts->size < 1 || opts->size > 1000)
        return 0;
    if (opts->connect_timeout_ms < 1 || opts->statement_timeout_ms < 0 || opts->idle_in_tx_ms < 0)
        return 0;
    if (opts->reply_timeout_ms < 1 || opts->reply_timeout_ms > 3600000)
        return 0;
    return 1;
}

int db_pool_create(const db_pool_options *opts, db_pool **out)
{
    db_pool *pool = NULL;
    int i;

    if (!out)
        return DB_ERR_INVALID;
    *out = NULL;
    if (!options_valid(opts))
        return DB_ERR_INVALID;

    pool = calloc(1, sizeof(*pool));
    if (!pool)
        return DB_ERR_NOMEM;
    pool->conninfo = strdup(opts->conninfo);
    pool->conns = calloc((size_t)opts->size, sizeof(*pool->conns));
    if (!pool->conninfo || !pool->conns)
        goto fail_alloc;
    pool->size = opts->size;
    pool->connect_timeout_ms = opts->connect_timeout_ms;
    pool->statement_timeout_ms = opts->statement_timeout_ms;
    pool->reply_timeout_ms = opts->reply_timeout_ms;
    pool->idle_in_tx_ms = opts->idle_in_tx_ms;
    for (i = 0; i < pool->size; i++)
        pool->conns[i].pool = pool;

    if (pthread_mutex_init(&pool->mu, NULL) != 0)
        goto fail_alloc;
    if (db__cond_init(&pool->freed) != 0)
        goto fail_mutex;
    *out = pool;
    return DB_OK;

fail_mutex:
    pthread_mutex_destroy(&pool->mu);
fail_alloc:
    free(pool->conns);
    free(pool->conninfo);
    free(pool);
    return DB_ERR_NOMEM;
}

void db_pool_destroy(db_pool *pool)
{
    int i;

    if (!pool)
        return;
    for (i = 0; i < pool->size; i++)
        db__conn_close(&pool->conns[i]);
    pthread_cond_destroy(&pool->freed);
    pthread_mutex_destroy(&pool->mu);
    free(pool->conns);
    free(pool->conninfo);
    free(pool);
}

/* A free slot, preferring one with an open session (so sessions are opened only when all
 * the open ones are busy). Called with the mutex held. */
static db_conn *pick_free(db_pool *pool)
{
    db_conn *closed = NULL;
    int i;

    for (i = 0; i < pool->size; i++) {
        db_conn *c = &pool->conns[i];
        if (c->in_use)
            continue;
        if (c->pg)
            return c;
        if (!closed)
            closed = c;
    }
    return closed;
}

/* Takes a free slot, waiting until the deadline. NULL when none came free in time. */
static db_conn *take_slot(db_pool *pool, int timeout_ms)
{
    struct timespec deadline = db__timespec_after(timeout_ms);
    db_conn *c;
    int rc = 0;

    pthread_mutex_lock(&pool->mu);
    while ((c = pick_free(pool)) == NULL && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&pool->freed, &pool->mu, &deadline);
    if (c) {
        c->in_use = true;
        pool->in_use++;
    }
    pthread_mutex_unlock(&pool->mu);
    return c;
}

/* Gives a slot back (its session open or closed, as the caller left it) and wakes one
 * waiter. open_delta: -1 if the caller closed the slot's session, else 0. */
static void give_slot(db_pool *pool, db_conn *c, int open_delta)
{
    pthread_mutex_lock(&pool->mu);
    pool->open += open_delta;
    c->in_use = false;
    pool->in_use--;
    pthread_cond_signal(&pool->freed);
    pthread_mutex_unlock(&pool->mu);
}

static void add_open(db_pool *pool, int delta)
{
    pthread_mutex_lock(&pool->mu);
    pool->open += delta;
    pthread_mutex_unlock(&pool->mu);
}

int db_pool_acquire(db_pool *pool, int timeout_ms, db_conn **out)
{
    db_conn *c;
    int rc;

    if (!out)
        return DB_ERR_INVALID;
    *out = NULL;
    if (!pool || timeout_ms < 0) {
        snprintf(db__connect_error(), DB__ERR_LEN, "invalid argument");
        return DB_ERR_INVALID;
    }

    c = take_slot(pool, timeout_ms);
    if (!c) {
        snprintf(db__connect_error(), DB__ERR_LEN,
                 "no database connection free within %d ms (pool of %d)", timeout_ms, pool->size);
        return DB_ERR_BUSY;
    }

    /* A session the server has closed since its last use is replaced now, rather than
     * failing the borrower's first statement. */
    if (c->pg && !db__conn_alive(c)) {
        db__conn_close(c);
        add_open(pool, -1);
    }
    if (!c->pg) {
        rc = db__conn_open(c, pool->conninfo, pool->connect_timeout_ms, pool->statement_timeout_ms,
                           db__connect_error(), DB__ERR_LEN);
        if (rc != DB_OK) {
            give_slot(pool, c, 0);
            return rc;
        }
        add_open(pool, +1);
    }
    c->err[0] = '\0'; /* the borrower sees its own errors only */
    c->no_answer_ms = 0;
    c->cancelled = false;
    c->budgeted = false; /* a borrow's budget is its own */
    *out = c;
    return DB_OK;
}

void db_pool_release(db_pool *pool, db_conn *c)
{
    PGTransactionStatusType ts;
    int open_delta = 0;

    if (!pool || !c)
        return;
    if (c->pg && !c->broken) {
        ts = PQtransactionStatus(c->pg);
        if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR)
            (void)db_rollback(c); /* on failure it marks c broken */
        /* Anything but idle now (a query still running, a lost connection): start over. */
        if (PQtransactionStatus(c->pg) != PQTRANS_IDLE)
            c->broken = true;
    }
    if (c->pg && (c->broken || PQstatus(c->pg) != CONNECTION_OK)) {
        db__conn_close(c);
        open_delta = -1;
    }
    give_slot(pool, c, open_delta);
}

void db_pool_get_stats(db_pool *pool, db_pool_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    out->size = pool->size;
    out->open = pool->open;
    out->in_use = pool->in_use;
    pthread_mutex_unlock(&pool->mu);
}
