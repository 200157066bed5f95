/*
 * sale.c - the read-check-write every mode runs (sale.h), and the steps around it that every
 * way of selling shares.
 *
 * The order of the steps is the lesson, so each has its own function below, in the order a
 * sale reaches them: begin, claim_keys, read_check_write (read, check, write, record, store),
 * commit. The guard was taken before the transaction begins and is left after it ends; a
 * fenced holder's plain sale of the goods row sends the same steps in two round trips
 * (in_two_round_trips). Every failure after BEGIN rolls back, so a line that does not answer
 * 200 sold nothing.
 */
#include "service/sale.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/clock.h"
#include "service/response.h"

/* What one run of the transaction came to. */
typedef enum step {
    STEP_ANSWERED, /* every line answered; the transaction committed or rolled back */
    STEP_SHORT,    /* sale.h's SALE_SHORT: rolled back, no answer set */
    STEP_RETRY,    /* lost an optimistic race: rolled back, no answer set (sale_run) */
    STEP_FOLD,     /* the goods row is short but segments hold stock: rolled back, no answer */
    STEP_COMMIT,   /* read_check_write: every answer set, the transaction to be committed */
} step;

/* The check's working state: the stock read, and each pending line's share of it. Lines with
 * a final answer (replays, twins) are not pending. Arrays of n, in one allocation; a sale of
 * one line (most) uses the room inside. */
typedef struct tally {
    int64_t stock; /* as read: the row's, the segment's, or the goods' whole stock */
    tx_seen seen;  /* a PostgreSQL rung's read, for its write */
    int64_t asked; /* the pending lines' counts together */
    int64_t after; /* what is left once the sold lines took theirs */
    size_t pending, n_sold;
    size_t *line;           /* pending line j is s->lines[line[j]] */
    int64_t *counts, *left; /* per pending line */
    bool *sold;
    int64_t *sold_counts, *order_ids; /* per sold line, in order */
    const char **sold_ids;
    void *heap;
    size_t one_line;
    int64_t one[5];
    const char *one_id;
    bool one_sold;
} tally;

static bool pending(const sale_line *l)
{
    return !l->answered && l->twin == NULL;
}

static bool tally_init(tally *t, const sale *s)
{
    size_t n = 0;

    memset(t, 0, sizeof(*t));
    for (size_t i = 0; i < s->n; i++)
        n += pending(&s->lines[i]);
    if (n <= 1) {
        t->line = &t->one_line;
        t->counts = &t->one[0];
        t->left = &t->one[1];
        t->sold_counts = &t->one[2];
        t->order_ids = &t->one[3];
        t->sold_ids = &t->one_id;
        t->sold = &t->one_sold;
    } else {
        char *p = malloc(n * (sizeof(size_t) + 4 * sizeof(int64_t) + sizeof(char *) + 1));
        if (p == NULL)
            return false;
        t->heap = p;
        t->line = (size_t *)(void *)p;
        p += n * sizeof(size_t);
        t->counts = (int64_t *)(void *)p;
        t->left = t->counts + n;
        t->sold_counts = t->left + n;
        t->order_ids = t->sold_counts + n;
        p += 4 * n * sizeof(int64_t);
        t->sold_ids = (const char **)(void *)p;
        p += n * sizeof(char *);
        t->sold = (bool *)(void *)p;
    }
    for (size_t i = 0; i < s->n; i++)
        if (pending(&s->lines[i])) {
            t->line[t->pending] = i;
            t->counts[t->pending++] = s->lines[i].count;
            t->asked += s->lines[i].count;
        }
    return true;
}

int64_t sale_allocate(int64_t stock, const int64_t *counts, size_t n, bool *sold, int64_t *left)
{
    size_t i;

    for (i = 0; i < n; i++) {
        sold[i] = counts[i] <= stock;
        if (sold[i])
            stock -= counts[i];
        left[i] = stock;
    }
    return stock;
}

void sale_split(int64_t total, int k, int64_t *shares)
{
    for (int i = 0; i < k; i++)
        shares[i] = total / k + (i < total % k ? 1 : 0);
}

/* ---- answers ------------------------------------------------------------------------- */

int sale_answer_503(deduct_result *out, const char *error, const char *detail)
{
    free(out->body);
    out->status = 503;
    out->outcome = error;
    snprintf(out->detail, sizeof(out->detail), "%s", detail);
    out->body = response_deduct_503(error, detail);
    return out->body != NULL ? 0 : -1;
}

int sale_answer_db(deduct_result *out, const db_conn *conn, const char *what, int rc)
{
    char why[200], detail[256];

    snprintf(detail, sizeof(detail), "postgresql: %s: %s", what,
             db_describe_error(rc, conn, why, sizeof(why)));
    return sale_answer_503(out, rc == DB_ERR_COMMIT_UNKNOWN ? "commit_unknown" : "unavailable",
                           detail);
}

void sale_fail(sale *s, const char *error, const char *detail)
{
    for (size_t i = 0; i < s->n; i++)
        if (pending(&s->lines[i]))
            (void)sale_answer_503(s->lines[i].out, error, detail);
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
    char why[200], detail[256];

    if (rc == DB_ERR_LOCK_TIMEOUT) {
        snprintf(detail, sizeof(detail), "postgresql: %s: no lock within lock_timeout (%lld ms)",
                 what, (long long)s->env->lock_wait_ms);
        sale_fail(s, "lock_timeout", detail);
        return;
    }
    snprintf(detail, sizeof(detail), "postgresql: %s: %s", what,
             db_describe_error(rc, s->conn, why, sizeof(why)));
    sale_fail(s, rc == DB_ERR_COMMIT_UNKNOWN ? "commit_unknown" : "unavailable", detail);
}

/* Inside the transaction: a statement failed; answers it, then rolls back. */
static step failed(sale *s, const char *what, int rc)
{
    sale_fail_db(s, what, rc);
    db_rollback(s->conn);
    return STEP_ANSWERED;
}

/* Inside the transaction: rolls back, then answers every line the same 503. */
static step give_up(sale *s, const char *error, const char *detail)
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
    return give_up(s, rc == GUARD_ERR_TIMEOUT ? "lock_timeout" : "unavailable", why);
}

/* Tells the hook, if it asked (deduct_hook.seen_stock), the stock of the point it is about to
 * see. */
static void saw_stock(sale *s, int64_t stock)
{
    if (s->hook != NULL && s->hook->seen_stock != NULL)
        *s->hook->seen_stock = stock;
}

/* Sets each pending line's answer from the check: 404 for an unknown goods, else 200 or
 * 409. `offset` turns what the check left into the goods' whole stock (a segment's sale:
 * the other segments' and the row's). A body that could not be built: out of memory. */
static bool answer_lines(sale *s, const tally *t, bool unknown, int64_t offset)
{
    bool ok = true;

    for (size_t j = 0, sold = 0; j < t->pending; j++) {
        deduct_result *out = s->lines[t->line[j]].out;
        free(out->body);
        if (unknown) {
            out->status = 404;
            out->outcome = "unknown_goods";
            out->body = response_unknown_goods(s->goods_id);
        } else if (!t->sold[j]) {
            out->status = 409;
            out->outcome = "insufficient_stock";
            out->body = response_insufficient(s->goods_id, t->left[j]);
        } else {
            out->status = 200;
            out->outcome = "deducted";
            out->body = response_deducted(s->goods_id, t->counts[j], t->left[j] + offset,
                                          t->order_ids[sold++], s->mode->name, s->env->instance);
        }
        ok = ok && out->body != NULL;
    }
    return ok;
}

/* ---- the steps ----------------------------------------------------------------------- */

/* BEGIN, the DEDUCT_AT_BEGUN point, and for a PostgreSQL rung the bound on its lock waits.
 * true when open; false with every line answered (the transaction rolled back). */
static bool begin(sale *s)
{
    char why[256] = "";
    int rc;

    /* A PostgreSQL rung's first two statements are fixed: with nobody to stop between them
     * (no hook), they travel together, one round trip. */
    if (s->env->pipeline && s->mode->tx != NULL && s->env->lock_wait_ms > 0 && s->hook == NULL) {
        rc = db_begin_lock_timeout(s->conn, s->env->lock_wait_ms);
        if (rc != DB_OK)
            failed(s, "begin and set lock_timeout", rc);
        return rc == DB_OK;
    }
    rc = db_begin(s->conn);
    if (rc != DB_OK) {
        sale_fail_db(s, "begin", rc);
        return false;
    }
    rc = reached(s, DEDUCT_AT_BEGUN, why, sizeof(why));
    if (rc != GUARD_OK) {
        hook_stopped(s, rc, why);
        return false;
    }
    /* A PostgreSQL rung's lock is the database's own (a row lock, an advisory lock), and a
     * request waits for it inside a statement: bound that wait as a guard's wait is bound,
     * before anything in the transaction can wait (the key's claim can, too). */
    if (s->mode->tx != NULL && s->env->lock_wait_ms > 0) {
        rc = db_set_lock_timeout(s->conn, s->env->lock_wait_ms);
        if (rc != DB_OK) {
            failed(s, "set lock_timeout", rc);
            return false;
        }
    }
    return true;
}

/*
 * Claims the key of every keyed line (the first of twins only) before the stock is read:
 * a concurrent twin request then waits here until this transaction ends, and finds its
 * answer instead of selling a second time. A key that a committed sale holds already is
 * answered from the store (under READ COMMITTED the fetch sees that commit; the claim
 * inserted nothing and the transaction goes on). true to go on; false with every line
 * answered (the transaction rolled back).
 */
static bool claim_keys(sale *s)
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
            failed(s, "claim idempotency key", rc);
            return false;
        }
        rc = db_idempotency_fetch(s->conn, s->goods_id, l->key, &status, &body);
        if (rc != DB_OK) {
            failed(s, "fetch idempotent answer", rc);
            return false;
        }
        free(l->out->body);
        l->out->status = status;
        l->out->body = body;
        l->out->outcome = "replayed";
        l->answered = true;
    }
    return true;
}

/* A fenced claim of the goods row was refused: moves the lock's counter past what the
 * database has seen (mode.fence_refused: the counter may be behind the database after a
 * failover, and would refuse every next holding too), and says why into detail. */
static void fence_refused(sale *s, char *detail, size_t detail_len)
{
    const guard_hold *hold = &s->holds[0];
    int64_t stored = 0;

    if (s->mode->fence_refused != NULL &&
        db_fence_of(s->conn, s->goods_id, hold->fence_source, &stored) == DB_OK)
        s->mode->fence_refused(s->env->guards, hold, stored);
    snprintf(detail, detail_len, "fencing token %lld is older than the stored one",
             (long long)hold->fence);
}

static void segment_fenced(int seg, int64_t token, char *detail, size_t detail_len)
{
    snprintf(detail, detail_len,
             "fencing token %" PRId64 " of segment %d is older than the stored one", token, seg);
}

/* SALE_FROM_GOODS's read, in one of three ways. */
static int read_goods(sale *s, tally *t, char *detail, size_t detail_len)
{
    const guard_hold *hold = &s->holds[0];
    int rc;

    /* A PostgreSQL rung reads in its own shape (a row lock, an advisory lock, a conditional
     * update, a versioned read). Otherwise, with a token, the read claims the row for it:
     * see db_stock_claim for why this closes the gap a token checked only at the write
     * leaves open. */
    if (s->mode->tx != NULL) {
        rc = s->mode->tx->read(s->conn, s->goods_id, t->asked, &t->seen);
        t->stock = t->seen.stock;
    } else if (hold->fenced)
        rc = db_stock_claim(s->conn, s->goods_id, hold->fence_source, hold->fence, &t->stock);
    else
        rc = db_stock_read(s->conn, s->goods_id, &t->stock);
    if (rc == DB_ERR_FENCED)
        fence_refused(s, detail, detail_len);
    return rc;
}

/* SALE_FROM_SEGMENTS's read: the goods row and every segment, locked (db_segments_gather),
 * each segment's fence checked as a claim checks it. */
static int read_gathered(sale *s, tally *t, char *detail, size_t detail_len)
{
    int64_t goods_stock = 0, rest = 0, stocks[DB_SEGMENTS_MAX], fences[DB_SEGMENTS_MAX];
    int rc;

    rc = db_segments_gather(s->conn, s->goods_id, s->segment, &goods_stock, stocks, fences, &rest);
    if (rc != DB_OK)
        return rc;
    t->stock = goods_stock + rest;
    for (int i = 0; i < s->segment; i++) {
        /* A newer token on any segment: one of our locks was superseded; sell nothing. */
        if (fences[i] > s->holds[i].fence) {
            segment_fenced(i, s->holds[i].fence, detail, detail_len);
            return DB_ERR_FENCED;
        }
        t->stock += stocks[i];
    }
    return DB_OK;
}

/* Reads the stock the sale sells from into t->stock. A DB_* code: DB_ERR_FENCED with
 * detail filled, DB_ERR_INSUFFICIENT for a rung's read that checked in SQL. */
static int read_stock(sale *s, tally *t, char *detail, size_t detail_len)
{
    int64_t goods_stock = 0, hints[DB_SEGMENTS_MAX];
    int rc;

    switch (s->source) {
    case SALE_FROM_GOODS:
        return read_goods(s, t, detail, detail_len);
    case SALE_FROM_SEGMENT:
        rc = db_segment_claim(s->conn, s->goods_id, s->segment, s->holds[0].fence, &t->stock);
        if (rc == DB_ERR_FENCED)
            segment_fenced(s->segment, s->holds[0].fence, detail, detail_len);
        return rc;
    case SALE_FROM_SEGMENTS:
        return read_gathered(s, t, detail, detail_len);
    case SALE_FROM_HINT:
        return db_segments_read(s->conn, s->goods_id, s->segment, &goods_stock, hints, &t->stock);
    }
    return DB_ERR_INVALID;
}

/* Writes what is left (t->after) back where it was read from. *total_left gets the goods'
 * whole stock after the write. A DB_* code (DB_ERR_RETRY: an optimistic rung lost). */
static int write_stock(sale *s, const tally *t, int64_t *total_left)
{
    int64_t shares[DB_SEGMENTS_MAX], tokens[DB_SEGMENTS_MAX];

    *total_left = t->after;
    switch (s->source) {
    case SALE_FROM_GOODS:
        if (s->mode->tx != NULL)
            return s->mode->tx->write(s->conn, s->goods_id, t->asked, &t->seen);
        return db_stock_write(s->conn, s->goods_id, t->after);
    case SALE_FROM_SEGMENT:
        return db_segment_write(s->conn, s->goods_id, s->segment, t->after, total_left);
    case SALE_FROM_SEGMENTS:
        /* What is left, spread evenly: the goods row's stock and any segment beyond k join
         * the K segments; the next sales find every segment able to sell again. */
        sale_split(t->after, s->segment, shares);
        for (int i = 0; i < s->segment; i++)
            tokens[i] = s->holds[i].fence;
        return db_segments_spread(s->conn, s->goods_id, 0, s->segment, shares, tokens);
    case SALE_FROM_HINT:
        break;
    }
    return DB_ERR_INVALID;
}

static const char *const read_what[] = {"read stock", "claim segment", "gather segments",
                                        "read segments"};
static const char *const write_what[] = {"write stock", "write segment", "spread segments", "?"};

/* Whether segments of goods_id hold stock (left there by redis-sharded): one plain read.
 * false on a failure too (the fold would meet the same failure: answer what was read). */
static bool segments_hold_stock(db_conn *conn, int64_t goods_id)
{
    int64_t goods_stock = 0, seg[1], total = 0;

    return db_segments_read(conn, goods_id, 1, &goods_stock, seg, &total) == DB_OK &&
           total > goods_stock;
}

/* The check, in C, against the stock read: each pending line in arrival order. A step when
 * the sale stops here (rolled back), else STEP_COMMIT to go on. */
static step check(sale *s, tally *t, bool refused_in_sql, bool *folded)
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
    if (s->source == SALE_FROM_GOODS && !*folded && segments_hold_stock(s->conn, s->goods_id)) {
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
static step read_check_write(sale *s, tally *t, bool *folded)
{
    char detail[256] = "";
    int64_t total_left = 0;
    step next;
    int rc;

    rc = read_stock(s, t, detail, sizeof(detail));
    if (rc == DB_ERR_NOT_FOUND && s->source == SALE_FROM_SEGMENT) {
        db_rollback(s->conn); /* no such segment: the next one */
        return STEP_SHORT;
    }
    if (rc == DB_ERR_FENCED)
        return give_up(s, "lock_lost", detail);
    if (rc == DB_ERR_NOT_FOUND) {
        if (!answer_lines(s, t, true, 0))
            return give_up(s, "unavailable", "out of memory");
        goto store;
    }
    if (rc != DB_OK && rc != DB_ERR_INSUFFICIENT)
        return failed(s, read_what[s->source], rc);

    next = check(s, t, rc == DB_ERR_INSUFFICIENT, folded);
    if (next != STEP_COMMIT) {
        db_rollback(s->conn);
        return next;
    }
    if (t->n_sold > 0) {
        /* The race window: everything another request does between our read and our write
         * is lost when we write our computed value. BUSINESS_DELAY_MS widens it on purpose. */
        if (s->env->business_delay_ms > 0)
            clock_sleep_ms(s->env->business_delay_ms);
        saw_stock(s, t->stock);
        rc = reached(s, DEDUCT_AT_READ, detail, sizeof(detail));
        if (rc != GUARD_OK)
            return hook_stopped(s, rc, detail);

        rc = write_stock(s, t, &total_left);
        if (rc == DB_ERR_RETRY) {
            db_rollback(s->conn); /* lost the race: nothing written, no answer (sale_run) */
            return STEP_RETRY;
        }
        if (rc != DB_OK)
            return failed(s, write_what[s->source], rc);

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
        return give_up(s, "unavailable", "out of memory");

store:
    for (size_t j = 0; j < t->pending; j++) {
        sale_line *l = &s->lines[t->line[j]];
        if (l->key == NULL)
            continue;
        rc = db_idempotency_store(s->conn, s->goods_id, l->key, l->out->status, l->out->body);
        if (rc != DB_OK)
            return failed(s, "store idempotent answer", rc);
    }
    return STEP_COMMIT;
}

/* The answers are set in the open transaction: the last look at the guards, then COMMIT. */
static step commit(sale *s, const tally *t)
{
    char why[256] = "";
    int rc;

    /* Last look before the commit: a lock whose lease ran out while we worked may already
     * belong to someone else, whose write we must not follow with ours. */
    for (size_t i = 0; i < s->n_holds; i++)
        if (s->mode->still_held(s->env->guards, &s->holds[i]) != GUARD_OK)
            return give_up(s, "lock_lost", "the lock's lease was lost before the commit");

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
        return give_up(s, "lock_timeout", s->commit_refused);

    rc = db_commit(s->conn);
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
        s->hook != NULL || s->mode->leaves_inside_tx || s->n_holds != 1 || !s->holds[0].fenced)
        return false;
    for (size_t i = 0; i < s->n; i++)
        if (s->lines[i].key != NULL)
            return false;
    return true;
}

/* The sale in two round trips (pipelined()): same answers, same order of steps. */
static step in_two_round_trips(sale *s, tally *t, bool *folded)
{
    const guard_hold *h = &s->holds[0];
    char detail[256];
    step next;
    int rc;

    /* BEGIN and the claim: one round trip. */
    rc = db_claim_begin(s->conn, s->goods_id, h->fence_source, h->fence, &t->stock);
    if (rc == DB_ERR_FENCED) {
        fence_refused(s, detail, sizeof(detail));
        return give_up(s, "lock_lost", detail);
    }
    if (rc == DB_ERR_NOT_FOUND) {
        db_rollback(s->conn);
        if (!answer_lines(s, t, true, 0))
            sale_fail(s, "unavailable", "out of memory");
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
    if (t->n_sold == 0) {
        db_rollback(s->conn); /* nothing to write: every line 409 */
        if (!answer_lines(s, t, false, 0))
            sale_fail(s, "unavailable", "out of memory");
        return STEP_ANSWERED;
    }
    if (s->env->business_delay_ms > 0)
        clock_sleep_ms(s->env->business_delay_ms);

    /* Last look before the commit, which now travels with the write. */
    if (s->mode->still_held(s->env->guards, h) != GUARD_OK)
        return give_up(s, "lock_lost", "the lock's lease was lost before the commit");
    if (s->may_commit != NULL && !s->may_commit(s->may_commit_arg))
        return give_up(s, "lock_timeout", s->commit_refused);

    /* The write, the orders and COMMIT: one round trip. A refusal rolls back inside. */
    if (t->n_sold == 1)
        rc = db_sale_commit(s->conn, s->goods_id, t->after, t->sold_counts[0], s->mode->name,
                            s->env->instance, h->fence, h->fence_source, t->sold_ids[0],
                            &t->order_ids[0]);
    else
        rc = db_batch_commit(s->conn, s->goods_id, t->after, t->sold_counts, t->n_sold,
                             s->mode->name, s->env->instance, h->fence, h->fence_source,
                             t->sold_ids, t->order_ids);
    if (rc != DB_OK) {
        sale_fail_db(
            s, t->n_sold == 1 ? "write, record order, commit" : "write, record orders, commit", rc);
        return STEP_ANSWERED;
    }
    (void)answer_lines(s, t, false, 0); /* committed: a NULL body is out of memory (sale_run) */
    return STEP_ANSWERED;
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
        out->outcome = NULL;
        s->lines[i].answered = false;
        s->lines[i].twin = NULL;
    }
}

/* Runs the transaction once on s->conn. */
static step run_once(sale *s, bool *folded)
{
    tally t = {0};
    step next;

    forget_answers(s);
    if (pipelined(s)) {
        if (tally_init(&t, s)) {
            next = in_two_round_trips(s, &t, folded);
        } else {
            sale_fail(s, "unavailable", "out of memory");
            next = STEP_ANSWERED;
        }
    } else if (!begin(s) || !claim_keys(s)) {
        next = STEP_ANSWERED;
    } else if (!tally_init(&t, s)) { /* after the keys: a replayed line is not pending */
        next = give_up(s, "unavailable", "out of memory");
    } else if (t.pending == 0) {
        db_rollback(s->conn); /* every line a replay: nothing to read or write */
        next = STEP_ANSWERED;
    } else {
        next = read_check_write(s, &t, folded);
        if (next == STEP_COMMIT)
            next = commit(s, &t);
    }
    free(t.heap);
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
        out->outcome = first->status < 500 ? "replayed" : first->outcome;
        out->body = first->body != NULL ? strdup(first->body) : NULL;
    }
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
                sale_fail(s, "unavailable", why);
                break;
            }
            attempt--;
            continue;
        }
        if (next != STEP_RETRY)
            break;
        if (attempt >= s->env->optimistic_retries) {
            char detail[200];
            snprintf(detail, sizeof(detail),
                     "gave up after %d attempts: each time another sale of goods %lld committed "
                     "between the read and the write",
                     attempt + 1, (long long)s->goods_id);
            sale_fail(s, "conflict", detail);
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

bool sale_replay(db_conn *conn, int64_t goods_id, const char *key, deduct_result *out)
{
    char *body = NULL;
    int status = 0;

    if (db_idempotency_fetch(conn, goods_id, key, &status, &body) != DB_OK)
        return false;
    free(out->body);
    out->status = status;
    out->body = body;
    out->outcome = "replayed";
    return true;
}

int sale_fold(db_conn *conn, int64_t goods_id, int64_t *moved, char *detail, size_t detail_len)
{
    int64_t goods_stock = 0, seg[1], total = 0;
    char why[200];
    int rc;

    *moved = 0;
    detail[0] = '\0';
    /* Most goods have no segment stock: one plain read says so, with no transaction. */
    rc = db_segments_read(conn, goods_id, 1, &goods_stock, seg, &total);
    if (rc != DB_OK || total == goods_stock)
        goto out;
    rc = db_begin(conn);
    if (rc != DB_OK)
        goto out;
    rc = db_segments_fold(conn, goods_id, moved);
    if (rc == DB_OK) {
        rc = db_commit(conn);
        goto out;
    }
    /* The statement's error, before the rollback replaces it. */
    snprintf(detail, detail_len, "postgresql: fold segments: %s",
             db_describe_error(rc, conn, why, sizeof(why)));
    (void)db_rollback(conn);
    *moved = 0;
    return rc == DB_ERR_NOT_FOUND ? DB_OK : rc;

out:
    if (rc == DB_ERR_NOT_FOUND)
        return DB_OK;
    if (rc != DB_OK) {
        *moved = 0;
        snprintf(detail, detail_len, "postgresql: fold segments: %s",
                 db_describe_error(rc, conn, why, sizeof(why)));
    }
    return rc;
}
