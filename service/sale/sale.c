/*
 * sale.c - the read-check-write every mode runs (sale.h): the transaction, its steps, the
 * hook's points, the retries; the answers of its lines and the answers stored with the keys.
 *
 * The order of the steps is the lesson: each of sale.h's steps 4 to 8 has its own function
 * below, in that order (begin, claim_keys, read_check_write: read, check, write, record,
 * store; commit). A fenced holder's plain sale of the goods row sends the same steps in two
 * round trips (in_two_round_trips) and gives the guard back as soon as its COMMIT is sent
 * (leave_once_sent), unless its caller asks otherwise (leave_after_commit). Every failure
 * after BEGIN rolls back, so a line that does not answer 200 sold nothing: this file alone
 * begins, rolls back and commits. Where the stock is read from and written to, and how the
 * check shares it, is stock.c's (internal.h).
 */
#include "service/sale/sale.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/clock.h"
#include "service/guards/outage.h"
#include "service/sale/internal.h"
#include "service/sale/stock.h"

/* What one run of the transaction came to. */
typedef enum step {
    STEP_ANSWERED, /* every line answered; the transaction committed or rolled back */
    STEP_SHORT,    /* sale.h's SALE_SHORT: rolled back, no answer set */
    STEP_RETRY,    /* lost an optimistic race, or refused 40001: rolled back, no answer set */
    STEP_FOLD,     /* the goods row is short but segments hold stock: rolled back, no answer */
    STEP_COMMIT,   /* read_check_write: every answer set, the transaction to be committed */
} step;

/* The answers of the lines and those stored with the keys (defined at the end, after the
 * steps they serve). */
static bool answer_lines(sale *s, const sale_tally *t, bool unknown, int64_t offset);
static int claim_each_key(sale *s, const char **what);
static int store_answers(sale *s, const sale_tally *t);
static void forget_answers(sale *s);
static void answer_twins(sale *s);

/* Inside the transaction: a statement failed; answers it, then rolls back. A transaction
 * PostgreSQL could not serialize beside a concurrent one (a stricter isolation's 40001) is
 * not answered: it rolls back and runs again (sale_run), as after a lost optimistic race. */
static step failed(sale *s, const char *what, int rc)
{
    if (rc == DB_ERR_SERIALIZATION) {
        db_rollback(s->conn);
        return STEP_RETRY;
    }
    sale_fail_db(s, what, rc);
    db_rollback(s->conn);
    return STEP_ANSWERED;
}

/* Inside the transaction: rolls back, then answers every line the same 503. */
static step give_up(sale *s, deduct_outcome error, const char *detail)
{
    db_rollback(s->conn);
    sale_fail(s, error, detail);
    return STEP_ANSWERED;
}

/* Calls the hook at `point` with the holding (one line). GUARD_OK to go on; otherwise the
 * hook stopped the sale, its reason in why. */
static int reached(sale *s, deduct_point point, char *why, size_t why_len)
{
    if (s->hook == NULL || s->hook->at == NULL)
        return GUARD_OK;
    return s->hook->at(s->hook->arg, point, &s->holds[0], why, why_len);
}

/* The hook stopped the sale (rc, a GUARD_* code): rolls back and answers as the guard
 * would have. */
static step hook_stopped(sale *s, int rc, const char *why)
{
    return give_up(s, guard_outcome(rc), why);
}

/* Tells the hook, if it asked (deduct_hook.seen_stock), the stock of the point it is about to
 * see. */
static void saw_stock(sale *s, int64_t stock)
{
    if (s->hook != NULL && s->hook->seen_stock != NULL)
        *s->hook->seen_stock = stock;
}

/* A stage boundary (deduct.h's deduct_stage): the time since the last one is the stage's.
 * One read of the monotonic clock, no lock: cheap enough for every sale. */
static void lap(sale *s, deduct_stage stage)
{
    int64_t now = clock_now_ns();

    s->stage_ns[stage] += now - s->lap_ns;
    s->lap_ns = now;
}

/* ---- the steps ----------------------------------------------------------------------- */

/*
 * Whether the sale bounds its waits for locks inside PostgreSQL by its lock wait bound
 * (lock_timeout), so that such a wait ends in 503 lock_timeout as a guard's does. A
 * PostgreSQL rung's lock is the database's own (a row lock, an advisory lock). A fenced
 * holder waits for the goods' row only behind a holder its guard no longer excludes: one that
 * lost its lock inside its section and still holds the row in its transaction (or, for an
 * instant, the one whose COMMIT is on its way after it gave the guard back early). Both are a
 * lock not had within the bound, not PostgreSQL failing; without the bound the wait would end
 * at statement_timeout, later, as "unavailable". The other modes' waits for the row (none,
 * local across replicas) are their lesson, and end at statement_timeout.
 */
static int64_t row_wait_bound(const sale *s)
{
    bool fenced = false;

    for (size_t i = 0; i < s->n_holds; i++)
        fenced = fenced || s->holds[i].fenced;
    return s->env->lock_wait_ms > 0 && (s->mode->tx != NULL || fenced) ? s->env->lock_wait_ms : 0;
}

/* BEGIN, the DEDUCT_AT_BEGUN point, and the bound on its lock waits (row_wait_bound).
 * true when open; false with every line answered (the transaction rolled back). */
static bool begin(sale *s)
{
    const db_isolation isolation = s->mode->tx != NULL ? s->mode->tx->isolation : DB_READ_COMMITTED;
    const int64_t bound = row_wait_bound(s);
    char why[256] = "";
    int rc;

    /* The first two statements are fixed: with nobody to stop between them (no hook), they
     * travel together, one round trip. */
    if (s->env->pipeline && bound > 0 && s->hook == NULL) {
        rc = db_begin_lock_timeout(s->conn, isolation, bound);
        if (rc != DB_OK)
            failed(s, "begin and set lock_timeout", rc);
        return rc == DB_OK;
    }
    rc = db_begin_isolated(s->conn, isolation);
    if (rc != DB_OK) {
        sale_fail_db(s, "begin", rc);
        return false;
    }
    rc = reached(s, DEDUCT_AT_BEGUN, why, sizeof(why));
    if (rc != GUARD_OK) {
        hook_stopped(s, rc, why);
        return false;
    }
    /* Before anything in the transaction can wait (the key's claim can, too). */
    if (bound > 0) {
        rc = db_set_lock_timeout(s->conn, bound);
        if (rc != DB_OK) {
            failed(s, "set lock_timeout", rc);
            return false;
        }
    }
    return true;
}

/* The keys' claims (claim_each_key). true to go on; false with the transaction rolled back
 * and *next saying why (every line answered, or STEP_RETRY: see failed). */
static bool claim_keys(sale *s, step *next)
{
    const char *what = "";
    int rc = claim_each_key(s, &what);

    if (rc != DB_OK)
        *next = failed(s, what, rc);
    return rc == DB_OK;
}

/* The check, in C, against the stock read: each pending line in arrival order. A step when
 * the sale stops here (rolled back), else STEP_COMMIT to go on. */
static step check(sale *s, sale_tally *t, bool refused_in_sql, bool *folded)
{
    t->after = sale_allocate(t->stock, t->counts, t->pending, t->sold, t->left);
    if (refused_in_sql) { /* a PostgreSQL rung found too little itself: nothing sells */
        for (size_t j = 0; j < t->pending; j++) {
            t->sold[j] = false;
            t->left[j] = t->stock;
        }
        t->after = t->stock;
    }
    for (size_t j = 0; j < t->pending; j++)
        if (t->sold[j]) {
            t->sold_counts[t->n_sold] = t->counts[j];
            t->sold_ids[t->n_sold++] = s->lines[t->line[j]].request_id;
        }
    if (s->source == SALE_FROM_HINT && t->n_sold > 0)
        return STEP_SHORT;
    if (t->n_sold == t->pending)
        return STEP_COMMIT;
    if (s->source == SALE_FROM_SEGMENT)
        return STEP_SHORT; /* the hint was stale: the next segment */
    /* No mode refuses a sale while the goods' stock covers it: the segments redis-sharded
     * left are folded back into the row, once, and the sale runs again. */
    if (s->source == SALE_FROM_GOODS && !*folded &&
        sale__segments_hold_stock(s->conn, s->goods_id)) {
        *folded = true;
        return STEP_FOLD;
    }
    return STEP_COMMIT;
}

/*
 * Inside the open transaction: read, check, write, record, store the answers. STEP_COMMIT
 * with every pending line's answer set; otherwise the transaction is rolled back and the
 * step says why (every line answered, or none: SHORT, RETRY, FOLD).
 */
static step read_check_write(sale *s, sale_tally *t, bool *folded)
{
    char detail[256] = "";
    int64_t total_left = 0;
    step next;
    int rc;

    rc = sale__read_stock(s, t, detail, sizeof(detail));
    if (rc == DB_ERR_NOT_FOUND && s->source == SALE_FROM_SEGMENT) {
        db_rollback(s->conn); /* no such segment: the next one */
        return STEP_SHORT;
    }
    if (rc == DB_ERR_FENCED)
        return give_up(s, DEDUCT_LOCK_LOST, detail);
    if (rc == DB_ERR_NOT_FOUND) {
        if (!answer_lines(s, t, true, 0))
            return give_up(s, DEDUCT_UNAVAILABLE, "out of memory");
        goto store;
    }
    if (rc != DB_OK && rc != DB_ERR_INSUFFICIENT)
        return failed(s, sale__read_what(s->source), rc);

    next = check(s, t, rc == DB_ERR_INSUFFICIENT, folded);
    if (next != STEP_COMMIT) {
        db_rollback(s->conn);
        return next;
    }
    lap(s, DEDUCT_STAGE_CLAIM);
    if (t->n_sold > 0) {
        /* The race window: everything another request does between our read and our write
         * is lost when we write our computed value. BUSINESS_DELAY_MS widens it on purpose. */
        if (s->env->business_delay_ms > 0)
            clock_sleep_ms(s->env->business_delay_ms);
        saw_stock(s, t->stock);
        rc = reached(s, DEDUCT_AT_READ, detail, sizeof(detail));
        if (rc != GUARD_OK)
            return hook_stopped(s, rc, detail);

        rc = sale__write_stock(s, t, &total_left);
        if (rc == DB_ERR_FENCED) { /* redis-fence-write: a newer token wrote first */
            sale__fence_refused(s, detail, sizeof(detail));
            return give_up(s, DEDUCT_LOCK_LOST, detail);
        }
        if (rc == DB_ERR_RETRY) {
            db_rollback(s->conn); /* lost the race: nothing written, no answer (sale_run) */
            return STEP_RETRY;
        }
        if (rc != DB_OK)
            return failed(s, sale__write_what(s->source), rc);

        /* An order has one fence column: the first holding's token stands for the sale. */
        const guard_hold *h = &s->holds[0];
        const int64_t *fence = h->fenced ? &h->fence : NULL;
        if (t->n_sold == 1)
            rc = db_order_insert(s->conn, s->goods_id, t->sold_counts[0], s->mode->name,
                                 s->env->instance, fence, h->fence_source, t->sold_ids[0],
                                 &t->order_ids[0]);
        else
            rc = db_orders_insert_many(s->conn, s->goods_id, t->sold_counts, t->n_sold,
                                       s->mode->name, s->env->instance, fence, h->fence_source,
                                       t->sold_ids, t->order_ids);
        if (rc != DB_OK)
            return failed(s, t->n_sold == 1 ? "record order" : "record orders", rc);

        saw_stock(s, t->after);
        rc = reached(s, DEDUCT_AT_WRITTEN, detail, sizeof(detail));
        if (rc != GUARD_OK)
            return hook_stopped(s, rc, detail);
    }
    if (!answer_lines(s, t, false, total_left - t->after))
        return give_up(s, DEDUCT_UNAVAILABLE, "out of memory");

store:
    rc = store_answers(s, t);
    if (rc != DB_OK)
        return failed(s, "store idempotent answer", rc);
    return STEP_COMMIT;
}

/* The answers are set in the open transaction: the last look at the guards, then COMMIT. */
static step commit(sale *s, const sale_tally *t)
{
    char why[256] = "";
    int rc;

    /* Last look before the commit: a lock whose lease ran out while we worked may already
     * belong to someone else, whose write we must not follow with ours. */
    for (size_t i = 0; i < s->n_holds; i++)
        if (s->mode->still_held(s->env->guards, &s->holds[i]) != GUARD_OK)
            return give_up(s, DEDUCT_LOCK_LOST, "the lock's lease was lost before the commit");

    /* The tx-inside pitfall, on purpose: the guard is given back before the commit, so the
     * next holder reads the stock while this transaction's write is not yet visible. */
    if (s->mode->leaves_inside_tx) {
        s->mode->leave(s->env->guards, &s->holds[0]);
        s->left = true;
    }

    /* Between the check and the commit: a holder paused here (a GC-like stop of the whole
     * process) commits after its lease ran out, whatever it checked; only a fencing token
     * that the database itself checks can refuse that write. */
    rc = reached(s, DEDUCT_AT_CHECKED, why, sizeof(why));
    if (rc != GUARD_OK)
        return hook_stopped(s, rc, why);
    if (s->may_commit != NULL && !s->may_commit(s->may_commit_arg))
        return give_up(s, DEDUCT_LOCK_TIMEOUT, s->commit_refused);

    rc = db_commit(s->conn);
    if (rc == DB_ERR_SERIALIZATION)
        return STEP_RETRY; /* refused at COMMIT, rolled back: run again (sale_run) */
    if (rc != DB_OK) {
        sale_fail_db(s, "commit", rc);
        return STEP_ANSWERED;
    }
    if (t->n_sold > 0)
        (void)reached(s, DEDUCT_AT_COMMITTED, why, sizeof(why)); /* sold: too late to stop */
    return STEP_ANSWERED;
}

/*
 * Whether the sale takes two round trips (db_claim_begin, db_sale_commit or
 * db_batch_commit): a fenced holder's plain sale of the goods row. The steps stay those of
 * the statement path (the claim, the check in C, the write, the orders, the last look at the
 * guard, the commit); only the statements before and after the check travel together. A
 * hook (the lab, the interleaving tests) needs each statement at its own point, a key adds
 * its own statements, tx-inside leaves the guard between the write and the commit, and a
 * PostgreSQL rung reads in its own shape: those run statement by statement.
 */
static bool pipelined(const sale *s)
{
    if (!s->env->pipeline || s->source != SALE_FROM_GOODS || s->mode->tx != NULL ||
        s->hook != NULL || s->mode->leaves_inside_tx || s->mode->fence_at_write ||
        s->n_holds != 1 || !s->holds[0].fenced)
        return false;
    for (size_t i = 0; i < s->n; i++)
        if (s->lines[i].key != NULL)
            return false;
    return true;
}

/*
 * db_on_sent's work in a sale in two round trips: the guard is given back while the write,
 * the orders and COMMIT are on their way, instead of one round trip later.
 *
 * Why that is safe here, and is the tx-inside pitfall elsewhere: this sale's claim
 * (DB__STOCK_CLAIM, an UPDATE) holds the goods row's lock until the transaction ends. The
 * next holder's claim waits for that row lock, and under READ COMMITTED then reads the row as
 * this transaction left it: committed, or rolled back if the COMMIT failed. Its read cannot
 * come before our write is visible, so the race tx-inside opens (a next holder whose plain
 * SELECT reads the old stock) cannot happen. What the early give-back buys: the next
 * holder's hand-off (the release, its message, the wake-up, its BEGIN and claim on the way)
 * overlaps this COMMIT's round trip and its flush to disk, instead of following them.
 */
static void leave_once_sent(void *arg)
{
    sale *s = arg;
    int64_t began = clock_now_ns(), took;

    s->mode->leave(s->env->guards, &s->holds[0]);
    s->left = true;
    /* Its time is the RELEASE stage's, not the commit's it interrupts (deduct.h). */
    took = clock_now_ns() - began;
    s->stage_ns[DEDUCT_STAGE_RELEASE] += took;
    s->lap_ns += took;
}

/* The sale in two round trips (pipelined()): same answers, same order of steps. */
static step in_two_round_trips(sale *s, sale_tally *t, bool *folded)
{
    const db_on_sent leave = {leave_once_sent, s};
    const db_on_sent *on_sent = s->leave_after_commit ? NULL : &leave;
    const guard_hold *h = &s->holds[0];
    char detail[256];
    step next;
    int rc;

    /* BEGIN and the claim: one round trip. */
    rc = db_claim_begin(s->conn, s->goods_id, h->fence_source, h->fence, row_wait_bound(s),
                        &t->stock);
    if (rc == DB_ERR_FENCED) {
        sale__fence_refused(s, detail, sizeof(detail));
        return give_up(s, DEDUCT_LOCK_LOST, detail);
    }
    if (rc == DB_ERR_NOT_FOUND) {
        db_rollback(s->conn);
        if (!answer_lines(s, t, true, 0))
            sale_fail(s, DEDUCT_UNAVAILABLE, "out of memory");
        return STEP_ANSWERED;
    }
    if (rc != DB_OK)
        return failed(s, "begin and read stock", rc);

    /* The check, in C, between the two round trips. */
    next = check(s, t, false, folded);
    if (next != STEP_COMMIT) {
        db_rollback(s->conn);
        return next;
    }
    lap(s, DEDUCT_STAGE_CLAIM);
    if (t->n_sold == 0) {
        db_rollback(s->conn); /* nothing to write: every line 409 */
        if (!answer_lines(s, t, false, 0))
            sale_fail(s, DEDUCT_UNAVAILABLE, "out of memory");
        return STEP_ANSWERED;
    }
    if (s->env->business_delay_ms > 0)
        clock_sleep_ms(s->env->business_delay_ms);

    /* Last look before the commit, which now travels with the write. */
    if (s->mode->still_held(s->env->guards, h) != GUARD_OK)
        return give_up(s, DEDUCT_LOCK_LOST, "the lock's lease was lost before the commit");
    if (s->may_commit != NULL && !s->may_commit(s->may_commit_arg))
        return give_up(s, DEDUCT_LOCK_TIMEOUT, s->commit_refused);

    /* The write, the orders and COMMIT: one round trip, the guard given back while it
     * travels (leave_once_sent). A refusal rolls back inside. */
    if (t->n_sold == 1)
        rc = db_sale_commit(s->conn, s->goods_id, t->after, t->sold_counts[0], s->mode->name,
                            s->env->instance, h->fence, h->fence_source, t->sold_ids[0], on_sent,
                            &t->order_ids[0]);
    else
        rc = db_batch_commit(s->conn, s->goods_id, t->after, t->sold_counts, t->n_sold,
                             s->mode->name, s->env->instance, h->fence, h->fence_source,
                             t->sold_ids, on_sent, t->order_ids);
    if (rc != DB_OK) {
        sale_fail_db(
            s, t->n_sold == 1 ? "write, record order, commit" : "write, record orders, commit", rc);
        return STEP_ANSWERED;
    }
    /* Committed: a NULL body is out of memory (sale_run). */
    (void)answer_lines(s, t, false, 0);
    return STEP_ANSWERED;
}

/* Runs the transaction once on s->conn. */
static step run_once(sale *s, bool *folded)
{
    sale_tally t = {0};
    step next;

    forget_answers(s);
    s->lap_ns = clock_now_ns();
    if (pipelined(s)) {
        if (sale__tally_init(&t, s)) {
            next = in_two_round_trips(s, &t, folded);
        } else {
            sale_fail(s, DEDUCT_UNAVAILABLE, "out of memory");
            next = STEP_ANSWERED;
        }
    } else if (!begin(s)) {
        next = STEP_ANSWERED;
    } else if (!claim_keys(s, &next)) {
        /* next says it */
    } else if (!sale__tally_init(&t, s)) { /* after the keys: a replayed line is not pending */
        next = give_up(s, DEDUCT_UNAVAILABLE, "out of memory");
    } else if (t.pending == 0) {
        db_rollback(s->conn); /* every line a replay: nothing to read or write */
        next = STEP_ANSWERED;
    } else {
        next = read_check_write(s, &t, folded);
        if (next == STEP_COMMIT)
            next = commit(s, &t);
    }
    lap(s, DEDUCT_STAGE_COMMIT); /* from the check to the commit's answer (or the rollback) */
    sale__tally_free(&t);
    return next;
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

int sale_run(sale *s)
{
    unsigned seed = (unsigned)clock_now_ns() ^ (unsigned)(uintptr_t)s;
    bool folded = false;
    step next;

    for (int attempt = 0;; attempt++) {
        next = run_once(s, &folded);
        if (next == STEP_FOLD) {
            /* Its own transaction, outside ours; then this one runs again, once. */
            char why[256];
            int64_t moved = 0;
            if (sale_fold(s->conn, s->goods_id, &moved, why, sizeof(why)) != DB_OK) {
                sale_fail(s, DEDUCT_UNAVAILABLE, why);
                break;
            }
            attempt--;
            continue;
        }
        if (next != STEP_RETRY)
            break;
        if (attempt >= s->env->optimistic_retries) {
            const bool refused = s->mode->tx != NULL && s->mode->tx->isolation != DB_READ_COMMITTED;
            char detail[200];
            snprintf(detail, sizeof(detail),
                     refused ? "gave up after %d attempts: each time PostgreSQL could not "
                               "serialize it beside another sale of goods %lld (SQLSTATE 40001)"
                             : "gave up after %d attempts: each time another sale of goods %lld "
                               "committed between the read and the write",
                     attempt + 1, (long long)s->goods_id);
            sale_fail(s, DEDUCT_CONFLICT, detail);
            break;
        }
        for (size_t i = 0; i < s->n; i++)
            s->lines[i].out->retries++;
        clock_sleep_us(retry_pause_us(attempt, &seed));
    }
    answer_twins(s);
    if (next == STEP_SHORT)
        return SALE_SHORT;
    for (size_t i = 0; i < s->n; i++)
        if (s->lines[i].out->body == NULL)
            return -1;
    return SALE_DONE;
}

/* ---- the answers ----------------------------------------------------------------------- */

int sale_answer_503(const deduct_env *env, deduct_result *out, deduct_outcome error,
                    const char *detail)
{
    free(out->body);
    out->status = 503;
    out->outcome = error;
    snprintf(out->detail, sizeof(out->detail), "%s", detail);
    out->body = env->bodies->refused(deduct_outcome_name(error), detail);
    return out->body != NULL ? 0 : -1;
}

int sale_answer_db(const deduct_env *env, deduct_result *out, const db_conn *conn, const char *what,
                   int rc)
{
    char detail[160];

    outage_postgresql(rc, conn, what, detail, sizeof(detail));
    return sale_answer_503(
        env, out, rc == DB_ERR_COMMIT_UNKNOWN ? DEDUCT_COMMIT_UNKNOWN : DEDUCT_UNAVAILABLE, detail);
}

void sale_fail(sale *s, deduct_outcome error, const char *detail)
{
    for (size_t i = 0; i < s->n; i++)
        if (sale__pending(&s->lines[i]))
            (void)sale_answer_503(s->env, s->lines[i].out, error, detail);
}

/*
 * A failed statement `what`: 503 lock_timeout when it waited for a lock inside PostgreSQL
 * past the bound (lock_timeout, deduct_env.lock_wait_ms), as a guard's wait would;
 * commit_unknown when COMMIT was sent and its answer lost (the sale may have happened: a
 * retry with the same Idempotency-Key waits for that transaction and replays its answer);
 * unavailable otherwise. Called before any rollback, which would replace the error's text.
 */
void sale_fail_db(sale *s, const char *what, int rc)
{
    char detail[160];

    if (rc == DB_ERR_LOCK_TIMEOUT) {
        snprintf(detail, sizeof(detail), "postgresql: %s: no lock within lock_timeout (%lld ms)",
                 what, (long long)s->env->lock_wait_ms);
        sale_fail(s, DEDUCT_LOCK_TIMEOUT, detail);
        return;
    }
    outage_postgresql(rc, s->conn, what, detail, sizeof(detail));
    sale_fail(s, rc == DB_ERR_COMMIT_UNKNOWN ? DEDUCT_COMMIT_UNKNOWN : DEDUCT_UNAVAILABLE, detail);
}

/* Sets each pending line's answer from the check in t: 404 for an unknown goods, else 200 or
 * 409. `offset` turns what the check left into the goods' whole stock (a segment's sale:
 * the other segments' and the row's). false when a body could not be built (out of memory). */
static bool answer_lines(sale *s, const sale_tally *t, bool unknown, int64_t offset)
{
    bool ok = true;

    for (size_t j = 0, sold = 0; j < t->pending; j++) {
        deduct_result *out = s->lines[t->line[j]].out;
        free(out->body);
        if (unknown) {
            out->status = 404;
            out->outcome = DEDUCT_UNKNOWN_GOODS;
            out->body = s->env->bodies->unknown_goods(s->goods_id);
        } else if (!t->sold[j]) {
            out->status = 409;
            out->outcome = DEDUCT_INSUFFICIENT_STOCK;
            out->body = s->env->bodies->insufficient(s->goods_id, t->left[j]);
        } else {
            out->status = 200;
            out->outcome = DEDUCT_DEDUCTED;
            out->body =
                s->env->bodies->deducted(s->goods_id, t->counts[j], t->left[j] + offset,
                                         t->order_ids[sold++], s->mode->name, s->env->instance);
        }
        ok = ok && out->body != NULL;
    }
    return ok;
}

/* ---- the answers stored with the keys ---------------------------------------------------
 *
 * A keyed line's key is claimed before the stock is read and its answer stored with it
 * before COMMIT, in the sale's transaction: a concurrent twin request waits for that
 * transaction at the claim and then finds the answer instead of selling a second time. */

/* Sets out to the stored answer (status, body: taken over) as a replay. */
static void replayed(deduct_result *out, int status, char *body)
{
    free(out->body);
    out->status = status;
    out->body = body;
    out->outcome = DEDUCT_REPLAYED;
}

/*
 * Claims the key of every keyed line (the first of twins only; a later line with the same
 * key gets sale_line.twin). A key that a committed sale holds already is answered from the
 * store (under READ COMMITTED the fetch sees that commit; the claim inserted nothing and
 * the transaction goes on): that line is `answered`. DB_OK to go on; otherwise the failed
 * statement's DB_* code, with *what naming it.
 */
static int claim_each_key(sale *s, const char **what)
{
    for (size_t i = 0; i < s->n; i++) {
        sale_line *l = &s->lines[i];
        int status = 0, rc;
        char *body = NULL;

        if (l->key == NULL)
            continue;
        for (size_t j = 0; j < i && l->twin == NULL; j++)
            if (s->lines[j].key != NULL && strcmp(s->lines[j].key, l->key) == 0)
                l->twin = s->lines[j].twin != NULL ? s->lines[j].twin : &s->lines[j];
        if (l->twin != NULL)
            continue; /* answered as its twin is, at the end (sale_run) */
        rc = db_idempotency_claim(s->conn, s->goods_id, l->key);
        if (rc == DB_OK)
            continue;
        if (rc != DB_ERR_CONFLICT) {
            *what = "claim idempotency key";
            return rc;
        }
        rc = db_idempotency_fetch(s->conn, s->goods_id, l->key, &status, &body);
        if (rc != DB_OK) {
            *what = "fetch idempotent answer";
            return rc;
        }
        replayed(l->out, status, body);
        l->answered = true;
    }
    return DB_OK;
}

/* Stores each pending keyed line's answer (set by then) under its key: DB_OK, or the failed
 * statement's DB_* code ("store idempotent answer"). */
static int store_answers(sale *s, const sale_tally *t)
{
    for (size_t j = 0; j < t->pending; j++) {
        sale_line *l = &s->lines[t->line[j]];
        int rc;

        if (l->key == NULL)
            continue;
        rc = db_idempotency_store(s->conn, s->goods_id, l->key, l->out->status, l->out->body);
        if (rc != DB_OK)
            return rc;
    }
    return DB_OK;
}

/* Forgets what an earlier run of the transaction answered (replays, twins): it was rolled
 * back, and the next run claims the keys again. */
static void forget_answers(sale *s)
{
    for (size_t i = 0; i < s->n; i++) {
        deduct_result *out = s->lines[i].out;
        free(out->body);
        out->body = NULL;
        out->status = 0;
        out->outcome = DEDUCT_NO_OUTCOME;
        s->lines[i].answered = false;
        s->lines[i].twin = NULL;
    }
}

/* A line whose key an earlier line of the sale carries gets that one's answer, as a replay
 * would give it after the commit (or its 503 when the sale failed). */
static void answer_twins(sale *s)
{
    for (size_t i = 0; i < s->n; i++) {
        deduct_result *out = s->lines[i].out;
        const deduct_result *first;

        if (s->lines[i].twin == NULL)
            continue;
        first = s->lines[i].twin->out;
        free(out->body);
        snprintf(out->detail, sizeof(out->detail), "%s", first->detail);
        out->status = first->status;
        out->outcome = first->status < 500 ? DEDUCT_REPLAYED : first->outcome;
        out->body = first->body != NULL ? strdup(first->body) : NULL;
    }
}

int sale_borrow(const deduct_env *env, int64_t budget, db_conn **out)
{
    int rc = db_pool_acquire(env->db, (int)env->db_wait_ms, out);

    if (rc == DB_OK && env->db_deadline_ms > 0)
        db_conn_set_budget(*out, budget);
    return rc;
}

void sale_give_back(const deduct_env *env, int64_t *budget, db_conn *conn)
{
    if (env->db_deadline_ms > 0)
        *budget = db_conn_budget_left(conn);
    db_pool_release(env->db, conn);
}

bool sale_replay(db_conn *conn, int64_t goods_id, const char *key, deduct_result *out)
{
    char *body = NULL;
    int status = 0;

    if (db_idempotency_fetch(conn, goods_id, key, &status, &body) != DB_OK)
        return false;
    replayed(out, status, body);
    return true;
}
