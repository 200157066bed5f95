/*
 * sharded.c - the redis-sharded mode (sharded.h): the hint, the fast path over one segment
 * at a time, and the slow path over all of them.
 *
 * Deadlocks are kept out by one rule for every lock, Redis' and PostgreSQL's: a sale holds
 * either ONE segment (the fast path: one Redis lock, one segment row), or ALL of them taken
 * in ascending order (the slow path); a fast sale that finds its segment short gives it
 * back (rollback, unlock) before it tries the next. So no sale ever waits for a segment
 * while holding another out of order. (PostgreSQL's side of the rule: db/db.h.)
 *
 * A pooled connection is borrowed for each step (the look at the hint, each segment's
 * transaction, the slow path's) and only once the step's locks are held: a sale waiting for
 * a segment keeps no connection idle, as deduct.c takes its connection after the guard.
 *
 * A segment's lock is the mode's guard (mode_parts, service/guards/modes/redis_sharded.c), entered,
 * checked and left through the mode's row like any guard: this file knows no lock library.
 * Each transaction that sells (or refuses with a key) is the read-check-write every mode
 * runs (sale_run, service/sale/sale.h), from one segment, from all of them, or from the hint:
 * this file chooses the segments and takes their locks, in the order that keeps deadlocks
 * out.
 */
#include "service/sale/sharded.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/clock.h"
#include "service/sale/sale.h"
#include "service/sale/stock.h"

/* ---- the pure parts ------------------------------------------------------------------ */

int sharded_candidates(const int64_t *hints, int k, int64_t count, unsigned draw, int *order)
{
    int covering[DB_SEGMENTS_MAX], n = 0;

    for (int i = 0; i < k && i < DB_SEGMENTS_MAX; i++)
        if (hints[i] >= count)
            covering[n++] = i;
    for (int i = 0; i < n; i++)
        order[i] = covering[(draw % (unsigned)n + (unsigned)i) % (unsigned)n];
    return n;
}

int sharded_segments(int configured)
{
    return configured >= 1 && configured <= DB_SEGMENTS_MAX ? configured : SHARD_SEGMENTS_DEFAULT;
}

/* ---- one sale ------------------------------------------------------------------------ */

typedef struct shard_sale {
    const deduct_env *env;
    const mode *m;
    int64_t goods_id;
    sale_line line; /* the request (count, Idempotency-Key, request id) and its answer, as each
                       of its sales sells it: a fresh copy per sale_run */
    int k;          /* segments */
    db_conn *conn;
    char busy[64]; /* the lock of the last segment found busy */
} shard_sale;

/* What a step of the sale came to: this file's own answers, never mixed with a DB_* code. */
typedef enum shard_step {
    STEP_ANSWERED, /* the answer is set (out->body NULL: out of memory) */
    STEP_SHORT,    /* the segment, or the hint, does not cover the count: no answer set */
    STEP_BUSY,     /* the segment's lock was not had within the wait */
    STEP_GO,       /* look(): the hint is read, on to the segments */
} shard_step;

static shard_step answer_503(shard_sale *s, deduct_outcome error, const char *detail)
{
    (void)sale_answer_503(s->env, s->line.out, error, detail);
    return STEP_ANSWERED;
}

/* A segment's guard was not entered (rc, a GUARD_ERR_* code; detail from the guard). */
static shard_step answer_guard_failure(shard_sale *s, int rc, const char *detail)
{
    return answer_503(s, guard_outcome(rc), detail);
}

/* Enters the guard of segment seg (mode_parts.enter), waiting at most wait_ms (0: one try);
 * the wait is added to the request's. A GUARD_* code, detail filled on failure. */
static int segment_enter(shard_sale *s, int seg, int64_t wait_ms, guard_hold *hold, char *detail,
                         size_t detail_len)
{
    int rc =
        s->m->parts->enter(s->env->guards, s->goods_id, seg, wait_ms, hold, detail, detail_len);

    s->line.out->waited = true;
    s->line.out->wait_seconds += hold->wait_seconds;
    return rc;
}

/* Borrows a pooled connection for one step of the sale: true; false with the answer (503)
 * set. */
static bool borrow(shard_sale *s)
{
    int rc = db_pool_acquire(s->env->db, (int)s->env->db_wait_ms, &s->conn);

    if (rc == DB_OK)
        return true;
    s->conn = NULL;
    (void)sale_answer_db(s->env, s->line.out, NULL, "connect", rc);
    return false;
}

static void give_back(shard_sale *s)
{
    db_pool_release(s->env->db, s->conn);
    s->conn = NULL;
}

/* The read-check-write every mode runs (sale.c's read_check_write, through sale_run), once per
 * segment: this request from `source` on the borrowed connection, under holds[0..n_holds).
 * STEP_ANSWERED or STEP_SHORT. */
static shard_step sell_from(shard_sale *s, sale_source source, int segment, guard_hold *holds,
                            size_t n_holds)
{
    sale_line line = s->line;
    sale one = {.env = s->env,
                .mode = s->m,
                .goods_id = s->goods_id,
                .lines = &line,
                .n = 1,
                .source = source,
                .segment = segment,
                .holds = holds,
                .n_holds = n_holds,
                .conn = s->conn};

    return sale_run(&one) == SALE_SHORT ? STEP_SHORT : STEP_ANSWERED;
}

/* One fast attempt: segment `seg`'s lock within wait_ms, then its transaction. */
static shard_step try_segment(shard_sale *s, int seg, int64_t wait_ms)
{
    guard_hold hold;
    char detail[256];
    shard_step step = STEP_ANSWERED;
    int rc;

    rc = segment_enter(s, seg, wait_ms, &hold, detail, sizeof(detail));
    /* A short try that found no free Redis connection (GUARD_ERR_BUSY: the pool is bounded
     * and a short try does not wait for it) is busy too: the full wait comes later. */
    if (rc == GUARD_ERR_TIMEOUT ||
        (rc == GUARD_ERR_BUSY && wait_ms < guard_env_wait_ms(s->env->guards))) {
        snprintf(s->busy, sizeof(s->busy), "%s", hold.name);
        return STEP_BUSY;
    }
    if (rc != GUARD_OK)
        return answer_guard_failure(s, rc, detail);
    /* The connection after the lock, as deduct.c takes it after the guard: a sale waiting
     * for a segment must not keep one of the pool's few connections idle. */
    if (borrow(s)) {
        step = sell_from(s, SALE_FROM_SEGMENT, seg, &hold, 1);
        give_back(s);
    }
    s->m->leave(s->env->guards, &hold);
    return step;
}

/* The slow path: every segment's lock in ascending order, within one wait bound in all;
 * then the sale from all of them, gathered and spread again. */
static shard_step slow_path(shard_sale *s)
{
    guard_hold holds[DB_SEGMENTS_MAX];
    int64_t wait_ms = guard_env_wait_ms(s->env->guards), start = clock_now_ns();
    char detail[256];
    int taken = 0, rc = GUARD_OK;
    shard_step step = STEP_ANSWERED;

    for (taken = 0; taken < s->k; taken++) {
        int64_t spent = clock_ms_since(start);
        rc = segment_enter(s, taken, wait_ms > spent ? wait_ms - spent : 0, &holds[taken], detail,
                           sizeof(detail));
        if (rc != GUARD_OK)
            break;
    }
    if (rc != GUARD_OK) {
        step = answer_guard_failure(s, rc, detail);
    } else if (borrow(s)) {
        step = sell_from(s, SALE_FROM_SEGMENTS, s->k, holds, (size_t)s->k);
        give_back(s);
    }
    while (taken-- > 0)
        s->m->leave(s->env->guards, &holds[taken]);
    return step;
}

/*
 * The goods row holds stock (after a reset, or after another mode folded the segments back):
 * cut it into the segments, adding a share to each, in a transaction of its own under
 * PostgreSQL's locks only (the advisory lock and the rows', as every move takes them). No
 * Redis lock is needed: a sale holding a segment holds its row, and this waits for it. So
 * the first sales after a reset do not all queue on every segment's lock (the slow path);
 * the first of them cuts, the others find nothing left to cut. Sets hints[] to the segments'
 * stocks after it. DB_OK or a DB_ERR_* code (nothing moved).
 */
static int cut_goods_row(shard_sale *s, int64_t *hints)
{
    int64_t goods_stock = 0, rest = 0, fences[DB_SEGMENTS_MAX], shares[DB_SEGMENTS_MAX];
    int rc;

    rc = db_begin(s->conn);
    if (rc != DB_OK)
        return rc;
    rc = db_segments_gather(s->conn, s->goods_id, s->k, &goods_stock, hints, fences, &rest);
    if (rc == DB_OK && goods_stock + rest > 0) {
        sale_split(goods_stock + rest, s->k, shares);
        for (int i = 0; i < s->k; i++)
            hints[i] += shares[i];
        rc = db_segments_spread(s->conn, s->goods_id, 0, s->k, hints, fences);
    }
    if (rc == DB_OK)
        return db_commit(s->conn);
    db_rollback(s->conn);
    return rc;
}

/* A draw per sale for the starting segment: each thread its own seed. */
static unsigned draw(void)
{
    static _Thread_local unsigned seed;
    static _Thread_local int seeded;

    if (!seeded) {
        seed = (unsigned)clock_now_ns() ^ (unsigned)(uintptr_t)&seed;
        seeded = 1;
    }
    return (unsigned)rand_r(&seed);
}

/* The first step of each round, on a borrowed connection: the replay, the hint (and the 404
 * or 409 it answers), the cut of the goods row. STEP_GO with hints[] set, or STEP_ANSWERED. */
static shard_step look(shard_sale *s, int64_t *hints)
{
    int64_t goods_stock = 0, total = 0;
    int rc;

    if (s->line.key != NULL && sale_replay(s->conn, s->goods_id, s->line.key, s->line.out))
        return STEP_ANSWERED;

    rc = db_segments_read(s->conn, s->goods_id, s->k, &goods_stock, hints, &total);
    if (rc != DB_OK && rc != DB_ERR_NOT_FOUND) {
        (void)sale_answer_db(s->env, s->line.out, s->conn, "read segments", rc);
        return STEP_ANSWERED;
    }
    /* The hint's snapshot answers a 404 or a 409 by itself: at that moment the goods did not
     * exist, or its whole stock was below the count. With a key, the refusal is stored: in
     * a sale from the hint, which claims the key and reads the hint again (no segment lock
     * is needed: a refusal sells nothing); a stock that covers the count after all (a reset
     * came between) sends the sale on to the segments. */
    if (rc == DB_ERR_NOT_FOUND || total < s->line.count) {
        if (s->line.key != NULL) {
            if (sell_from(s, SALE_FROM_HINT, s->k, NULL, 0) != STEP_SHORT)
                return STEP_ANSWERED;
            rc = db_segments_read(s->conn, s->goods_id, s->k, &goods_stock, hints, &total);
            if (rc != DB_OK) {
                (void)sale_answer_db(s->env, s->line.out, s->conn, "read segments", rc);
                return STEP_ANSWERED;
            }
        } else if (rc == DB_ERR_NOT_FOUND) {
            s->line.out->status = 404;
            s->line.out->outcome = DEDUCT_UNKNOWN_GOODS;
            s->line.out->body = s->env->bodies->unknown_goods(s->goods_id);
            return STEP_ANSWERED;
        } else {
            s->line.out->status = 409;
            s->line.out->outcome = DEDUCT_INSUFFICIENT_STOCK;
            s->line.out->body = s->env->bodies->insufficient(s->goods_id, total);
            return STEP_ANSWERED;
        }
    }

    if (goods_stock > 0 && cut_goods_row(s, hints) != DB_OK) {
        /* Not cut: the slow path gathers the row all the same, under every lock. */
        for (int i = 0; i < s->k; i++)
            hints[i] = 0;
    }
    return STEP_GO;
}

/* One look at the hint on a connection of its own: STEP_GO, or STEP_ANSWERED. */
static shard_step look_once(shard_sale *s, int64_t *hints)
{
    shard_step step;

    if (!borrow(s))
        return STEP_ANSWERED;
    step = look(s, hints);
    give_back(s);
    return step;
}

/* The fast path over the candidates order[0..n): each tried with the short wait; then the
 * first busy one with `wait_ms`. STEP_SHORT when none could sell (no answer set), else
 * STEP_ANSWERED (a timeout of the wait: 503 lock_timeout). */
static shard_step fast_path(shard_sale *s, const int *order, int n, int64_t wait_ms)
{
    shard_step step;
    int busy = -1;

    for (int i = 0; i < n; i++) {
        step = try_segment(s, order[i], s->env->shard_try_ms);
        if (step == STEP_BUSY && busy < 0)
            busy = order[i];
        else if (step == STEP_ANSWERED)
            return step;
    }
    if (busy < 0)
        return STEP_SHORT;
    /* Every candidate was busy or short: wait for the first busy one. */
    step = try_segment(s, busy, wait_ms);
    if (step == STEP_BUSY) {
        char detail[160];
        snprintf(detail, sizeof(detail), "%s not had within %" PRId64 " ms", s->busy,
                 guard_env_wait_ms(s->env->guards));
        return answer_503(s, DEDUCT_LOCK_TIMEOUT, detail);
    }
    return step;
}
/* Rounds of the fast path at most before the slow path is taken all the same. */
#define FAST_ROUNDS_MAX 32

/*
 * The sale, in rounds: look at the hint; if no single segment covers the count (the stock
 * is fragmented, or a count larger than any segment), the slow path; else the fast path over
 * the candidates, waiting for a busy one with what is left of LOCK_WAIT_MS. A round that
 * found every candidate short (other sales emptied them meanwhile) looks again: the next
 * hint shows where stock is left, or that the goods is sold out (409 without a lock). So
 * the last units are fought over one segment lock at a time, as in `redis`, and only a
 * fragmented stock queues for all the locks.
 */
static shard_step run(shard_sale *s)
{
    int64_t hints[DB_SEGMENTS_MAX], wait_ms = guard_env_wait_ms(s->env->guards);
    int64_t start = clock_now_ns();
    int order[DB_SEGMENTS_MAX], n;
    shard_step step;

    for (int round = 0; round < FAST_ROUNDS_MAX; round++) {
        int64_t spent = clock_ms_since(start);
        int64_t left = wait_ms > spent ? wait_ms - spent : 0;

        if (round > 0 && left == 0) {
            char detail[160];
            snprintf(detail, sizeof(detail),
                     "no segment of goods %" PRId64 " could sell within %" PRId64 " ms",
                     s->goods_id, wait_ms);
            return answer_503(s, DEDUCT_LOCK_TIMEOUT, detail);
        }
        step = look_once(s, hints);
        if (step != STEP_GO)
            return step;
        n = sharded_candidates(hints, s->k, s->line.count, draw(), order);
        if (n == 0)
            break;
        step = fast_path(s, order, n, left);
        if (step != STEP_SHORT)
            return step;
    }
    return slow_path(s);
}

int sharded_execute(const deduct_env *env, const mode *m, int64_t goods_id, int64_t count,
                    const char *idempotency_key, const char *request_id, deduct_result *out)
{
    sale_line line = {.count = count, .key = idempotency_key, .request_id = request_id, .out = out};
    shard_sale s = {.env = env,
                    .m = m,
                    .goods_id = goods_id,
                    .line = line,
                    .k = sharded_segments(env->shard_segments)};
    char detail[256];

    memset(out, 0, sizeof(*out));
    if (m->parts->ready(env->guards, detail, sizeof(detail)) == GUARD_OK)
        (void)run(&s);
    else
        (void)answer_503(&s, DEDUCT_UNAVAILABLE, detail);
    return out->body != NULL ? 0 : -1;
}
