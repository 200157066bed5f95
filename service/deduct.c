/*
 * deduct.c - one deduction: the read-check-write under a mode's guard.
 *
 * The order of the steps is the lesson, so it is spelled out in deduct_execute():
 *   1. an idempotent retry is answered from the store before anything is locked;
 *   2. the guard is taken before the transaction begins;
 *   3. the stock is read (with a fencing token: the row claimed for it; a PostgreSQL rung
 *      reads in its own shape, mode_tx), checked and written back;
 *   4. the guard is asked whether it still holds, then the transaction commits;
 *   5. the guard is left only after the commit.
 * Every failure after BEGIN rolls back, so a request that does not answer 200 sold nothing.
 * A PostgreSQL rung's transaction bounds its lock waits (SET LOCAL lock_timeout), and an
 * optimistic one that lost its race is rolled back and run again, from BEGIN, a bounded
 * number of times (run_transaction).
 */
#include "service/deduct.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "service/batch.h"
#include "service/clock.h"
#include "service/response.h"
#include "service/sharded.h"

/* The pieces of one run, so that the steps below can share them. */
typedef struct deduction {
    const deduct_env *env;
    const mode *mode;
    int64_t goods_id;
    int64_t count;
    const char *key;         /* Idempotency-Key or NULL */
    const char *request_id;  /* the client's X-Request-Id, written with the order, or NULL */
    const deduct_hook *hook; /* or NULL */
    db_conn *conn;
    guard_hold hold;
    bool left;   /* the guard has been left already (tx-inside leaves it before COMMIT) */
    bool folded; /* the goods' segments were folded back into its row (FOLD, below) */
    deduct_result *out;
} deduction;

const char *deduct_point_name(deduct_point point)
{
    switch (point) {
    case DEDUCT_AT_ENTERED:
        return "entered";
    case DEDUCT_AT_BEGUN:
        return "begun";
    case DEDUCT_AT_READ:
        return "read";
    case DEDUCT_AT_WRITTEN:
        return "written";
    case DEDUCT_AT_CHECKED:
        return "checked";
    case DEDUCT_AT_COMMITTED:
        return "committed";
    }
    return "?";
}

/* Calls the hook at `point`. GUARD_OK to go on; otherwise the hook stopped the deduction
 * and its reason is in d->out->detail. */
static int reached(deduction *d, deduct_point point)
{
    if (d->hook == NULL || d->hook->at == NULL)
        return GUARD_OK;
    return d->hook->at(d->hook->arg, point, &d->hold, d->out->detail, sizeof(d->out->detail));
}

/* Tells the hook, if it asked (deduct_hook.seen_stock), the stock of the point it is about to
 * see. */
static void saw_stock(deduction *d, int64_t stock)
{
    if (d->hook != NULL && d->hook->seen_stock != NULL)
        *d->hook->seen_stock = stock;
}

/* Sets a 503 answer: `error` is both the body's error and the metrics outcome; `detail` goes
 * to the log, and to the body for "unavailable" only. */
static int answer_503(deduction *d, const char *error, const char *detail)
{
    d->out->status = 503;
    d->out->outcome = error;
    snprintf(d->out->detail, sizeof(d->out->detail), "%s", detail);
    d->out->body = response_deduct_503(error, detail);
    return d->out->body != NULL ? 0 : -1;
}

/* The hook stopped the deduction (rc, a GUARD_* code; its reason in out->detail): answers
 * as the guard would have. */
static int answer_hook_stop(deduction *d, int rc)
{
    char why[sizeof(d->out->detail)];

    snprintf(why, sizeof(why), "%s", d->out->detail);
    return answer_503(d, rc == GUARD_ERR_TIMEOUT ? "lock_timeout" : "unavailable", why);
}

static int answer_db_failure(deduction *d, const char *what, int rc)
{
    char why[200], detail[256];

    snprintf(detail, sizeof(detail), "postgresql: %s: %s", what,
             db_describe_error(rc, d->conn, why, sizeof(why)));
    return answer_503(d, "unavailable", detail);
}

/*
 * COMMIT was sent and its answer lost: the sale may have happened, and this request cannot
 * tell. Saying "unavailable" would break the contract's "a request that did not answer 200
 * sold nothing"; the answer says so instead, and how to find out: a retry with the same
 * Idempotency-Key waits for that transaction (its claim of the key does) and replays the
 * stored answer if it committed, or sells afresh if it did not.
 */
static int answer_commit_unknown(deduction *d)
{
    char why[200], detail[256];

    snprintf(detail, sizeof(detail), "postgresql: commit: %s",
             db_describe_error(DB_ERR_COMMIT_UNKNOWN, d->conn, why, sizeof(why)));
    return answer_503(d, "commit_unknown", detail);
}

/* Answers 503 for a failed statement: lock_timeout when it waited for a lock inside
 * PostgreSQL past the bound (lock_timeout, deduct_env.lock_wait_ms), as a guard's wait
 * would; unavailable otherwise. Returns 0, or -1 when out of memory. */
static int answer_statement_failure(deduction *d, const char *what, int rc)
{
    char detail[256];

    if (rc != DB_ERR_LOCK_TIMEOUT)
        return answer_db_failure(d, what, rc);
    snprintf(detail, sizeof(detail), "postgresql: %s: no lock within lock_timeout (%lld ms)", what,
             (long long)d->env->lock_wait_ms);
    return answer_503(d, "lock_timeout", detail);
}

/* Inside the transaction: answers 503 for a failed statement and hands back its code, so
 * that the caller rolls back. */
static int statement_failed(deduction *d, const char *what, int rc)
{
    if (answer_statement_failure(d, what, rc) != 0)
        return DB_ERR_NOMEM;
    return rc;
}

/* Answers with an outcome stored earlier under the idempotency key. Takes `body`. */
static int answer_replay(deduction *d, int status, char *body)
{
    d->out->status = status;
    d->out->body = body;
    d->out->outcome = "replayed";
    return 0;
}

/* Looks for a stored answer on a connection of its own, before any guard is taken, so that
 * a retry does not queue for the lock. Returns 1 when answered, 0 when not, -1 on OOM. */
static int try_replay(deduction *d)
{
    db_conn *conn = NULL;
    char *body = NULL;
    int status = 0, rc;

    if (db_pool_acquire(d->env->db, (int)d->env->db_wait_ms, &conn) != DB_OK)
        return 0; /* the main path will meet the same failure and answer it */
    rc = db_idempotency_fetch(conn, d->goods_id, d->key, &status, &body);
    db_pool_release(d->env->db, conn);
    if (rc != DB_OK)
        return 0;
    return answer_replay(d, status, body) == 0 ? 1 : -1;
}

/* Stores the answer with the idempotency key, in the transaction of the sale. */
static int store_answer(deduction *d, int status, const char *body)
{
    if (d->key == NULL)
        return DB_OK;
    return db_idempotency_store(d->conn, d->goods_id, d->key, status, body);
}

/* read_check_write's answer when a hook stopped it: roll back, the answer is set. */
#define STOPPED 1
/* read_check_write's answer when the goods row is short but redis-sharded's segments hold
 * stock: roll back, fold the segments back into the row (db_segments_fold), run again. */
#define FOLD 2

/* Whether segments of the goods hold stock: one plain read, on the way to a 409 only. */
static bool segments_hold_stock(deduction *d)
{
    int64_t goods_stock = 0, seg[1], total = 0;

    if (db_segments_read(d->conn, d->goods_id, 1, &goods_stock, seg, &total) != DB_OK)
        return false; /* the fold would meet the same failure: answer what was read */
    return total > goods_stock;
}

/*
 * Inside the open transaction: read, check, write, record. Sets the answer; returns DB_OK
 * when the transaction should commit, a DB_ERR_* or STOPPED (answer set) when it must roll
 * back, DB_ERR_RETRY (no answer set) when the shape lost an optimistic race and the
 * transaction is to be run again, or DB_ERR_NOMEM.
 */
static int read_check_write(deduction *d)
{
    const int64_t *fence = d->hold.fenced ? &d->hold.fence : NULL;
    tx_seen seen = {0, 0};
    int64_t stock = 0, order_id = 0;
    int rc;

    /* A PostgreSQL rung reads in its own shape (a row lock, an advisory lock, a conditional
     * update, a versioned read). Otherwise, with a token, the read claims the row for it:
     * see db_stock_claim for why this closes the gap a token checked only at the write
     * leaves open. */
    if (d->mode->tx != NULL) {
        rc = d->mode->tx->read(d->conn, d->goods_id, d->count, &seen);
        stock = seen.stock;
    } else if (fence != NULL)
        rc = db_stock_claim(d->conn, d->goods_id, d->hold.fence_source, *fence, &stock);
    else
        rc = db_stock_read(d->conn, d->goods_id, &stock);
    if (rc == DB_ERR_NOT_FOUND) {
        d->out->status = 404;
        d->out->outcome = "unknown_goods";
        d->out->body = response_unknown_goods(d->goods_id);
        goto store;
    }
    if (rc == DB_ERR_FENCED) {
        char detail[128];
        int64_t stored = 0;

        /* The counter may be behind the database (a failover): move it past what the
         * database has seen, so the next holding's token passes. */
        if (db_fence_of(d->conn, d->goods_id, d->hold.fence_source, &stored) == DB_OK)
            guard_fence_refused(d->env->guards, &d->hold, stored);
        snprintf(detail, sizeof(detail), "fencing token %lld is older than the stored one",
                 (long long)d->hold.fence);
        if (answer_503(d, "lock_lost", detail) != 0)
            return DB_ERR_NOMEM;
        return rc;
    }
    if (rc != DB_OK && rc != DB_ERR_INSUFFICIENT)
        return statement_failed(d, "read stock", rc);

    if (rc == DB_ERR_INSUFFICIENT || stock < d->count) {
        if (!d->folded && segments_hold_stock(d))
            return FOLD;
        d->out->status = 409;
        d->out->outcome = "insufficient_stock";
        d->out->body = response_insufficient(d->goods_id, stock);
        goto store;
    }

    /* The race window: everything another request does between our read and our write
     * is lost when we write our computed value. BUSINESS_DELAY_MS widens it on purpose. */
    if (d->env->business_delay_ms > 0)
        clock_sleep_ms(d->env->business_delay_ms);
    saw_stock(d, stock);
    rc = reached(d, DEDUCT_AT_READ);
    if (rc != GUARD_OK)
        return answer_hook_stop(d, rc) == 0 ? STOPPED : DB_ERR_NOMEM;

    if (d->mode->tx != NULL)
        rc = d->mode->tx->write(d->conn, d->goods_id, d->count, &seen);
    else
        rc = db_stock_write(d->conn, d->goods_id, stock - d->count);
    if (rc == DB_ERR_RETRY)
        return rc; /* lost the race: nothing written, no answer yet (run_transaction) */
    if (rc != DB_OK)
        return statement_failed(d, "write stock", rc);

    rc = db_order_insert(d->conn, d->goods_id, d->count, d->mode->name, d->env->instance, fence,
                         d->hold.fence_source, d->request_id, &order_id);
    if (rc != DB_OK)
        return statement_failed(d, "record order", rc);

    saw_stock(d, stock - d->count);
    rc = reached(d, DEDUCT_AT_WRITTEN);
    if (rc != GUARD_OK)
        return answer_hook_stop(d, rc) == 0 ? STOPPED : DB_ERR_NOMEM;
    d->out->status = 200;
    d->out->outcome = "deducted";
    d->out->body = response_deducted(d->goods_id, d->count, stock - d->count, order_id,
                                     d->mode->name, d->env->instance);

store:
    if (d->out->body == NULL)
        return DB_ERR_NOMEM;
    rc = store_answer(d, d->out->status, d->out->body);
    if (rc != DB_OK) {
        free(d->out->body);
        d->out->body = NULL;
        return statement_failed(d, "store idempotent answer", rc);
    }
    return DB_OK;
}

/*
 * Whether this deduction takes the two-round-trip path (db_claim_begin, db_sale_commit): a
 * fenced holder's plain read-check-write. The steps stay those of read_check_write (the
 * claim, the check in C, the write, the order, the last look at the guard, the commit);
 * only the statements before and after the check travel together. A hook (the lab, the
 * interleaving tests) needs each statement at its own point, a key adds its own statements,
 * tx-inside leaves the guard between the write and the commit, and a PostgreSQL rung reads
 * in its own shape: those run statement by statement.
 */
static bool pipelined(const deduction *d)
{
    return d->env->pipeline && d->mode->tx == NULL && d->hold.fenced && d->key == NULL &&
           d->hook == NULL && !d->mode->leaves_inside_tx;
}

/* run_attempt's two-round-trip path (pipelined()): same answers, same order of steps. */
static int run_attempt_pipelined(deduction *d)
{
    int64_t stock = 0, order_id = 0;
    int rc;

    /* BEGIN and the claim: one round trip. */
    rc = db_claim_begin(d->conn, d->goods_id, d->hold.fence_source, d->hold.fence, &stock);
    if (rc == DB_ERR_NOT_FOUND) {
        db_rollback(d->conn);
        d->out->status = 404;
        d->out->outcome = "unknown_goods";
        d->out->body = response_unknown_goods(d->goods_id);
        return d->out->body != NULL ? 0 : -1;
    }
    if (rc == DB_ERR_FENCED) {
        char detail[128];
        int64_t stored = 0;

        if (db_fence_of(d->conn, d->goods_id, d->hold.fence_source, &stored) == DB_OK)
            guard_fence_refused(d->env->guards, &d->hold, stored);
        db_rollback(d->conn);
        snprintf(detail, sizeof(detail), "fencing token %lld is older than the stored one",
                 (long long)d->hold.fence);
        return answer_503(d, "lock_lost", detail);
    }
    if (rc != DB_OK) {
        db_rollback(d->conn);
        return answer_statement_failure(d, "begin and read stock", rc);
    }

    /* The check, in C, between the two round trips. */
    if (stock < d->count) {
        bool fold = !d->folded && segments_hold_stock(d);
        db_rollback(d->conn);
        if (fold)
            return FOLD;
        d->out->status = 409;
        d->out->outcome = "insufficient_stock";
        d->out->body = response_insufficient(d->goods_id, stock);
        return d->out->body != NULL ? 0 : -1;
    }
    if (d->env->business_delay_ms > 0)
        clock_sleep_ms(d->env->business_delay_ms);

    /* Last look before the commit, which now travels with the write. */
    if (d->mode->still_held(d->env->guards, &d->hold) != GUARD_OK) {
        db_rollback(d->conn);
        return answer_503(d, "lock_lost", "the lock's lease was lost before the commit");
    }

    /* The write, the order and COMMIT: one round trip. A refusal rolls back inside. */
    rc = db_sale_commit(d->conn, d->goods_id, stock - d->count, d->count, d->mode->name,
                        d->env->instance, d->hold.fence, d->hold.fence_source, d->request_id,
                        &order_id);
    if (rc == DB_ERR_COMMIT_UNKNOWN)
        return answer_commit_unknown(d);
    if (rc != DB_OK)
        return answer_statement_failure(d, "write, record order, commit", rc);
    d->out->status = 200;
    d->out->outcome = "deducted";
    d->out->body = response_deducted(d->goods_id, d->count, stock - d->count, order_id,
                                     d->mode->name, d->env->instance);
    return d->out->body != NULL ? 0 : -1;
}

/* Opens run_attempt's transaction: BEGIN, the DEDUCT_AT_BEGUN point, and for a PostgreSQL
 * rung the bound on its lock waits. true when open; false with *answer what run_attempt
 * returns (the answer set, the transaction rolled back). */
static bool begin_transaction(deduction *d, int *answer)
{
    int rc;

    /* A PostgreSQL rung's first two statements are fixed: with nobody to stop between them
     * (no hook), they travel together, one round trip. */
    if (d->env->pipeline && d->mode->tx != NULL && d->env->lock_wait_ms > 0 && d->hook == NULL) {
        rc = db_begin_lock_timeout(d->conn, d->env->lock_wait_ms);
        if (rc != DB_OK) {
            db_rollback(d->conn);
            *answer = answer_db_failure(d, "begin and set lock_timeout", rc);
            return false;
        }
        return true;
    }
    rc = db_begin(d->conn);
    if (rc != DB_OK) {
        *answer = answer_db_failure(d, "begin", rc);
        return false;
    }
    rc = reached(d, DEDUCT_AT_BEGUN);
    if (rc != GUARD_OK) {
        db_rollback(d->conn);
        *answer = answer_hook_stop(d, rc);
        return false;
    }

    /* A PostgreSQL rung's lock is the database's own (a row lock, an advisory lock), and a
     * request waits for it inside a statement: bound that wait as a guard's wait is bound,
     * before anything in the transaction can wait (the key's claim can, too). */
    if (d->mode->tx != NULL && d->env->lock_wait_ms > 0) {
        rc = db_set_lock_timeout(d->conn, d->env->lock_wait_ms);
        if (rc != DB_OK) {
            db_rollback(d->conn);
            *answer = answer_db_failure(d, "set lock_timeout", rc);
            return false;
        }
    }
    return true;
}

/* Runs the transaction once on d->conn with the guard held. Sets the answer and returns 0
 * (-1 when out of memory), or returns DB_ERR_RETRY, rolled back and with no answer set, when
 * the transaction's shape lost an optimistic race, or FOLD, likewise, when the goods' stock
 * is in segments. */
static int run_attempt(deduction *d)
{
    int rc;

    if (pipelined(d))
        return run_attempt_pipelined(d);
    if (!begin_transaction(d, &rc))
        return rc;

    if (d->key != NULL) {
        /* Claiming the key first makes a concurrent twin wait here until we commit, and
         * then find our answer instead of selling a second time. */
        rc = db_idempotency_claim(d->conn, d->goods_id, d->key);
        if (rc == DB_ERR_CONFLICT) {
            char *body = NULL;
            int status = 0;
            db_rollback(d->conn);
            rc = db_idempotency_fetch(d->conn, d->goods_id, d->key, &status, &body);
            if (rc != DB_OK)
                return answer_db_failure(d, "fetch idempotent answer", rc);
            return answer_replay(d, status, body);
        }
        if (rc != DB_OK) {
            db_rollback(d->conn);
            return answer_statement_failure(d, "claim idempotency key", rc);
        }
    }

    rc = read_check_write(d);
    if (rc == DB_ERR_NOMEM) {
        db_rollback(d->conn);
        return -1;
    }
    if (rc == DB_ERR_RETRY || rc == FOLD) {
        db_rollback(d->conn); /* the claim of the key goes too: the next run claims again */
        return rc;
    }
    if (rc != DB_OK) {
        db_rollback(d->conn);
        return 0; /* the answer is set */
    }

    /* Last look before the commit: a lock whose lease ran out while we worked may already
     * belong to someone else, whose write we must not follow with ours. */
    if (d->mode->still_held(d->env->guards, &d->hold) != GUARD_OK) {
        db_rollback(d->conn);
        free(d->out->body);
        d->out->body = NULL;
        return answer_503(d, "lock_lost", "the lock's lease was lost before the commit");
    }

    /* The tx-inside pitfall, on purpose: the guard is given back before the commit, so the
     * next holder reads the stock while this transaction's write is not yet visible. */
    if (d->mode->leaves_inside_tx) {
        d->mode->leave(d->env->guards, &d->hold);
        d->left = true;
    }

    /* Between the check and the commit: a holder paused here (a GC-like stop of the whole
     * process) commits after its lease ran out, whatever it checked; only a fencing token
     * that the database itself checks can refuse that write. */
    rc = reached(d, DEDUCT_AT_CHECKED);
    if (rc != GUARD_OK) {
        db_rollback(d->conn);
        free(d->out->body);
        d->out->body = NULL;
        return answer_hook_stop(d, rc);
    }

    rc = db_commit(d->conn);
    if (rc != DB_OK) {
        free(d->out->body);
        d->out->body = NULL;
        if (rc == DB_ERR_COMMIT_UNKNOWN)
            return answer_commit_unknown(d);
        return answer_db_failure(d, "commit", rc);
    }
    if (d->out->status == 200)
        (void)reached(d, DEDUCT_AT_COMMITTED); /* sold: too late to stop anything */
    return 0;
}

/* The pause before running a transaction again after its `attempt`-th lost race (0 for the
 * first): random, so that the requests that lost together do not all come back together
 * and collide again, and growing (up to OPTIMISTIC_BACKOFF_CAP_US), so that under heavy
 * contention they spread out. */
#define OPTIMISTIC_BACKOFF_BASE_US 1000
#define OPTIMISTIC_BACKOFF_CAP_US 16000

static int64_t retry_pause_us(int attempt, unsigned *seed)
{
    int64_t cap = OPTIMISTIC_BACKOFF_BASE_US;

    for (int i = 0; i < attempt && cap < OPTIMISTIC_BACKOFF_CAP_US; i++)
        cap *= 2;
    if (cap > OPTIMISTIC_BACKOFF_CAP_US)
        cap = OPTIMISTIC_BACKOFF_CAP_US;
    return 1 + (int64_t)(rand_r(seed) % (unsigned)cap);
}

/* Runs the transaction, again after each lost optimistic race, up to the bound; then answers
 * 503 conflict. Sets the answer; returns 0, or -1 when out of memory. */
static int run_transaction(deduction *d)
{
    struct timespec now;
    unsigned seed;
    char detail[200];

    clock_gettime(CLOCK_MONOTONIC, &now);
    seed = (unsigned)now.tv_nsec ^ (unsigned)(uintptr_t)d;
    for (int attempt = 0;; attempt++) {
        int rc = run_attempt(d);
        if (rc == FOLD) {
            /* Its own transaction, outside ours; then this one runs again, once. */
            int64_t moved = 0;
            d->folded = true;
            rc = db_segments_fold(d->conn, d->goods_id, &moved);
            if (rc != DB_OK)
                return answer_db_failure(d, "fold segments", rc);
            attempt--;
            continue;
        }
        if (rc != DB_ERR_RETRY)
            return rc;
        if (attempt >= d->env->optimistic_retries)
            break;
        d->out->retries++;
        clock_sleep_us(retry_pause_us(attempt, &seed));
    }
    snprintf(detail, sizeof(detail),
             "gave up after %d attempts: each time another sale of goods %lld committed between "
             "the read and the write",
             d->out->retries + 1, (long long)d->goods_id);
    return answer_503(d, "conflict", detail);
}

int deduct_execute(const deduct_env *env, const mode *m, int64_t goods_id, int64_t count,
                   const char *idempotency_key, const deduct_hook *hook, deduct_result *out)
{
    return deduct_execute_as(env, m, goods_id, count, idempotency_key, NULL, hook, out);
}

int deduct_execute_as(const deduct_env *env, const mode *m, int64_t goods_id, int64_t count,
                      const char *idempotency_key, const char *request_id, const deduct_hook *hook,
                      deduct_result *out)
{
    deduction d = {.env = env,
                   .mode = m,
                   .goods_id = goods_id,
                   .count = count,
                   .key = idempotency_key,
                   .request_id = request_id,
                   .hook = hook,
                   .out = out};
    char detail[256] = "";
    int rc, result;

    memset(out, 0, sizeof(*out));

    if (m->batched && env->batch != NULL && hook == NULL)
        return batch_execute(env->batch, env, m, goods_id, count, idempotency_key, request_id, out);
    if (m->sharded && hook == NULL)
        return sharded_execute(env, m, goods_id, count, idempotency_key, request_id, out);

    if (idempotency_key != NULL) {
        rc = try_replay(&d);
        if (rc != 0)
            return rc > 0 ? 0 : -1;
    }

    rc = m->enter(env->guards, goods_id, &d.hold, detail, sizeof(detail));
    out->waited = d.hold.waited;
    out->wait_seconds = d.hold.wait_seconds;
    out->handed_off = d.hold.handed_off;
    out->handoff_seconds = d.hold.handoff_seconds;
    if (rc == GUARD_ERR_TIMEOUT)
        return answer_503(&d, "lock_timeout", detail);
    if (rc != GUARD_OK)
        return answer_503(&d, "unavailable", detail);

    rc = reached(&d, DEDUCT_AT_ENTERED);
    if (rc != GUARD_OK) {
        result = answer_hook_stop(&d, rc);
        m->leave(env->guards, &d.hold);
        return result;
    }

    /* The connection is taken after the guard: a request waiting for the lock should not
     * hold one of the pool's few connections idle while it waits. */
    rc = db_pool_acquire(env->db, (int)env->db_wait_ms, &d.conn);
    if (rc != DB_OK) {
        result = answer_db_failure(&d, "connect", rc);
    } else {
        result = run_transaction(&d);
        db_pool_release(env->db, d.conn);
    }

    if (!d.left)
        m->leave(env->guards, &d.hold);
    return result;
}
