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
 */
#include "service/sharded.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "service/clock.h"
#include "service/guards.h"
#include "service/log.h"
#include "service/response.h"

/* ---- the pure parts ------------------------------------------------------------------ */

void sharded_split(int64_t total, int k, int64_t *shares)
{
    for (int i = 0; i < k; i++)
        shares[i] = total / k + (i < total % k ? 1 : 0);
}

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

typedef struct sale {
    const deduct_env *env;
    const mode *m;
    int64_t goods_id;
    int64_t count;
    const char *key;        /* Idempotency-Key or NULL */
    const char *request_id; /* the client's, written with the order, or NULL */
    int k;                  /* segments */
    db_conn *conn;
    deduct_result *out;
} sale;

/* What an attempt on one segment came to. */
enum {
    TRY_DONE = 10, /* the answer is set (not 0, DB_OK: "answered" must never read as
                      "go on" where a DB_* code is tested) */
    TRY_SHORT = 1, /* the segment does not cover the count: rolled back, lock given back */
    TRY_BUSY = 2,  /* the segment's lock was not had within the wait */
};

static int answer_503(sale *s, const char *error, const char *detail)
{
    s->out->status = 503;
    s->out->outcome = error;
    snprintf(s->out->detail, sizeof(s->out->detail), "%s", detail);
    s->out->body = response_deduct_503(error, detail);
    return s->out->body != NULL ? TRY_DONE : -1;
}

static int answer_db(sale *s, const char *what, int rc)
{
    char why[200], detail[256];

    snprintf(detail, sizeof(detail), "postgresql: %s: %s", what,
             db_describe_error(rc, s->conn, why, sizeof(why)));
    return answer_503(s, rc == DB_ERR_COMMIT_UNKNOWN ? "commit_unknown" : "unavailable", detail);
}

/* Inside the open transaction: rolls back and answers 503 for a failed statement. */
static int rollback_db(sale *s, const char *what, int rc)
{
    char why[200], detail[256];

    /* The statement's error first: the rollback would replace the connection's text. */
    snprintf(detail, sizeof(detail), "postgresql: %s: %s", what,
             db_describe_error(rc, s->conn, why, sizeof(why)));
    db_rollback(s->conn);
    return answer_503(s, "unavailable", detail);
}

static int answer_lock_failure(sale *s, const char *name, int rc)
{
    char detail[256];

    if (rc == LOCK_ERR_TIMEOUT) {
        snprintf(detail, sizeof(detail), "%s not had within %" PRId64 " ms", name,
                 s->env->guards->wait_ms);
        return answer_503(s, "lock_timeout", detail);
    }
    if (rc == LOCK_ERR_BUSY)
        snprintf(detail, sizeof(detail), "redis: no connection free within the wait bound");
    else
        snprintf(detail, sizeof(detail), "redis: %s%s%s", lock_strerror(rc),
                 lock_last_error()[0] ? ": " : "", lock_last_error());
    return answer_503(s, "unavailable", detail);
}

/* The lock of segment seg of a goods: "lock:goods:N:seg:K", or on a Redis Cluster
 * "lock:goods:{N:seg:K}": each segment a hash tag of its own, so that the segments of one hot
 * goods spread over the cluster's masters (a lock's own keys still share its tag's slot). */
static void segment_name(const sale *s, char *buf, size_t len, int seg)
{
    if (lock_client_is_cluster(s->env->guards->lock))
        snprintf(buf, len, "lock:goods:{%" PRId64 ":seg:%d}", s->goods_id, seg);
    else
        snprintf(buf, len, "lock:goods:%" PRId64 ":seg:%d", s->goods_id, seg);
}

/* Takes a segment's lock, waiting at most wait_ms (0: one try); the wait is added to the
 * request's. A LOCK_* code. */
static int segment_lock(sale *s, const char *name, int64_t wait_ms, int64_t *token)
{
    struct timespec start;
    int rc;

    clock_gettime(CLOCK_MONOTONIC, &start);
    rc = lock_try_lock(s->env->guards->lock, name, wait_ms, s->env->guards->lease_ms, token);
    s->out->waited = true;
    s->out->wait_seconds += clock_seconds_since(&start);
    return rc;
}

static void segment_unlock(sale *s, const char *name)
{
    int rc = lock_unlock(s->env->guards->lock, name);

    /* As guard_redis__leave: a failed unlock leaves the key to its lease. */
    if (rc != LOCK_OK) {
        char quoted[160];
        log_event(LOG_WARN, "unlock_failed", "lock=%s error=%s", name,
                  log_quote(quoted, sizeof(quoted), lock_strerror(rc)));
    }
}

/* Opens a step's transaction and, first thing in it, claims the key as the single path does,
 * so that a twin waits for this transaction and then replays its answer. KEY_CLAIMED to go on
 * in the transaction; TRY_DONE when there is none and the answer is set (a replay, or a 503);
 * -1 when out of memory. */
#define KEY_CLAIMED 20 /* apart from the TRY_* codes a step returns */
static int begin_with_key(sale *s)
{
    char *body = NULL;
    int status = 0, rc;

    rc = db_begin(s->conn);
    if (rc != DB_OK)
        return answer_db(s, "begin", rc);
    if (s->key == NULL)
        return KEY_CLAIMED;
    rc = db_idempotency_claim(s->conn, s->goods_id, s->key);
    if (rc == DB_OK)
        return KEY_CLAIMED;
    if (rc != DB_ERR_CONFLICT)
        rc = rollback_db(s, "claim idempotency key", rc);
    else {
        db_rollback(s->conn);
        rc = db_idempotency_fetch(s->conn, s->goods_id, s->key, &status, &body);
        if (rc != DB_OK) {
            rc = answer_db(s, "fetch idempotent answer", rc);
        } else {
            s->out->status = status;
            s->out->body = body;
            s->out->outcome = "replayed";
            rc = TRY_DONE;
        }
    }
    return rc == TRY_DONE ? TRY_DONE : -1;
}

/* The answer (200, 404 or 409) is set in the open transaction: stores it with the key, asks
 * each lock whether it still holds, commits. TRY_DONE, or -1 when out of memory. */
static int finish(sale *s, char (*names)[64], int n)
{
    int rc;

    if (s->out->body == NULL) {
        db_rollback(s->conn);
        return -1;
    }
    if (s->key != NULL) {
        rc = db_idempotency_store(s->conn, s->goods_id, s->key, s->out->status, s->out->body);
        if (rc != DB_OK)
            goto failed;
    }
    /* As in the single path: a lease lost while we worked may have a new holder already. */
    for (int i = 0; i < n; i++)
        if (lock_is_held(s->env->guards->lock, names[i]) != LOCK_OK) {
            db_rollback(s->conn);
            free(s->out->body);
            s->out->body = NULL;
            return answer_503(s, "lock_lost", "the lock's lease was lost before the commit");
        }
    rc = db_commit(s->conn);
    if (rc != DB_OK) {
        free(s->out->body);
        s->out->body = NULL;
        return answer_db(s, "commit", rc);
    }
    return TRY_DONE;

failed:
    free(s->out->body);
    s->out->body = NULL;
    return rollback_db(s, "store idempotent answer", rc);
}

static int answer_fenced(sale *s, int seg, int64_t token)
{
    char detail[160];

    db_rollback(s->conn);
    snprintf(detail, sizeof(detail),
             "fencing token %" PRId64 " of segment %d is older than the stored one", token, seg);
    return answer_503(s, "lock_lost", detail);
}

/* The fast path's transaction, under segment `seg`'s lock (token): sells from that
 * segment alone, or finds it short. */
static int sell_segment(sale *s, int seg, int64_t token, char (*name)[64])
{
    int64_t stock = 0, left = 0, order_id = 0;
    int rc;

    rc = begin_with_key(s);
    if (rc != KEY_CLAIMED)
        return rc;
    rc = db_segment_claim(s->conn, s->goods_id, seg, token, &stock);
    if (rc == DB_ERR_NOT_FOUND || (rc == DB_OK && stock < s->count)) {
        db_rollback(s->conn); /* the hint was stale: the next segment */
        return TRY_SHORT;
    }
    if (rc == DB_ERR_FENCED)
        return answer_fenced(s, seg, token);
    if (rc != DB_OK)
        return rollback_db(s, "claim segment", rc);

    if (s->env->business_delay_ms > 0)
        clock_sleep_ms(s->env->business_delay_ms); /* the race window, as in the single path */
    rc = db_segment_write(s->conn, s->goods_id, seg, stock - s->count, &left);
    if (rc != DB_OK)
        return rollback_db(s, "write segment", rc);
    rc = db_order_insert(s->conn, s->goods_id, s->count, s->m->name, s->env->instance, &token,
                         "redis", s->request_id, &order_id);
    if (rc != DB_OK)
        return rollback_db(s, "record order", rc);
    s->out->status = 200;
    s->out->outcome = "deducted";
    s->out->body =
        response_deducted(s->goods_id, s->count, left, order_id, s->m->name, s->env->instance);
    return finish(s, name, 1);
}

/* Borrows a pooled connection for one step of the sale. BORROWED; otherwise the answer
 * (503) is set and the result is TRY_DONE, or -1 when out of memory. */
#define BORROWED 4
static int borrow(sale *s)
{
    int rc = db_pool_acquire(s->env->db, (int)s->env->db_wait_ms, &s->conn);

    if (rc == DB_OK)
        return BORROWED;
    s->conn = NULL;
    return answer_db(s, "connect", rc) == TRY_DONE ? TRY_DONE : -1;
}

static void give_back(sale *s)
{
    db_pool_release(s->env->db, s->conn);
    s->conn = NULL;
}

/* One fast attempt: segment `seg`'s lock within wait_ms, then its transaction. */
static int try_segment(sale *s, int seg, int64_t wait_ms)
{
    char name[1][64];
    int64_t token = 0;
    int rc;

    segment_name(s, name[0], sizeof(name[0]), seg);
    rc = segment_lock(s, name[0], wait_ms, &token);
    /* A short try that found no free Redis connection (LOCK_ERR_BUSY: the pool is bounded
     * and a short try does not wait for it) is busy too: the full wait comes later. */
    if (rc == LOCK_ERR_TIMEOUT || (rc == LOCK_ERR_BUSY && wait_ms < s->env->guards->wait_ms))
        return TRY_BUSY;
    if (rc != LOCK_OK)
        return answer_lock_failure(s, name[0], rc);
    /* The connection after the lock, as deduct.c takes it after the guard: a sale waiting
     * for a segment must not keep one of the pool's few connections idle. */
    rc = borrow(s);
    if (rc == BORROWED) {
        rc = sell_segment(s, seg, token, name);
        give_back(s);
    }
    segment_unlock(s, name[0]);
    return rc;
}

/* The slow path's transaction, with every segment's lock held (tokens[i] for segment i). */
static int sell_gathered(sale *s, const int64_t *tokens, char (*names)[64])
{
    int64_t goods_stock = 0, rest = 0, total, order_id = 0;
    int64_t stocks[DB_SEGMENTS_MAX], fences[DB_SEGMENTS_MAX], shares[DB_SEGMENTS_MAX];
    int rc;

    rc = begin_with_key(s);
    if (rc != KEY_CLAIMED)
        return rc;
    rc = db_segments_gather(s->conn, s->goods_id, s->k, &goods_stock, stocks, fences, &rest);
    if (rc == DB_ERR_NOT_FOUND) {
        s->out->status = 404;
        s->out->outcome = "unknown_goods";
        s->out->body = response_unknown_goods(s->goods_id);
        return finish(s, names, s->k);
    }
    if (rc != DB_OK)
        return rollback_db(s, "gather segments", rc);
    /* Each segment's fence, as a claim checks it: a newer token on any segment means one of
     * our locks was superseded, and this sale must sell nothing. */
    for (int i = 0; i < s->k; i++)
        if (fences[i] > tokens[i])
            return answer_fenced(s, i, tokens[i]);

    total = goods_stock + rest;
    for (int i = 0; i < s->k; i++)
        total += stocks[i];
    if (total < s->count) {
        s->out->status = 409;
        s->out->outcome = "insufficient_stock";
        s->out->body = response_insufficient(s->goods_id, total);
        return finish(s, names, s->k);
    }

    if (s->env->business_delay_ms > 0)
        clock_sleep_ms(s->env->business_delay_ms);
    /* What is left, spread evenly: the goods row's stock and any segment beyond k join the
     * K segments; the next sales find every segment able to sell again. */
    sharded_split(total - s->count, s->k, shares);
    rc = db_segments_spread(s->conn, s->goods_id, 0, s->k, shares, tokens);
    if (rc != DB_OK)
        return rollback_db(s, "spread segments", rc);
    /* An order has one fence column: the first segment's token stands for the holding. */
    rc = db_order_insert(s->conn, s->goods_id, s->count, s->m->name, s->env->instance, &tokens[0],
                         "redis", s->request_id, &order_id);
    if (rc != DB_OK)
        return rollback_db(s, "record order", rc);
    s->out->status = 200;
    s->out->outcome = "deducted";
    s->out->body = response_deducted(s->goods_id, s->count, total - s->count, order_id, s->m->name,
                                     s->env->instance);
    return finish(s, names, s->k);
}

/* The slow path: every segment's lock in ascending order, within one wait bound in all. */
static int slow_path(sale *s)
{
    char names[DB_SEGMENTS_MAX][64];
    int64_t tokens[DB_SEGMENTS_MAX];
    struct timespec start;
    int taken = 0, rc = LOCK_OK, result;

    clock_gettime(CLOCK_MONOTONIC, &start);
    for (taken = 0; taken < s->k; taken++) {
        int64_t spent = (int64_t)(clock_seconds_since(&start) * 1000.0);
        int64_t wait = s->env->guards->wait_ms > spent ? s->env->guards->wait_ms - spent : 0;
        segment_name(s, names[taken], sizeof(names[taken]), taken);
        rc = segment_lock(s, names[taken], wait, &tokens[taken]);
        if (rc != LOCK_OK)
            break;
    }
    if (rc != LOCK_OK) {
        result = answer_lock_failure(s, names[taken], rc);
    } else {
        result = borrow(s);
        if (result == BORROWED) {
            result = sell_gathered(s, tokens, names);
            give_back(s);
        }
    }
    while (taken-- > 0)
        segment_unlock(s, names[taken]);
    return result;
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
static int cut_goods_row(sale *s, int64_t *hints)
{
    int64_t goods_stock = 0, rest = 0, fences[DB_SEGMENTS_MAX], shares[DB_SEGMENTS_MAX];
    int rc;

    rc = db_begin(s->conn);
    if (rc != DB_OK)
        return rc;
    rc = db_segments_gather(s->conn, s->goods_id, s->k, &goods_stock, hints, fences, &rest);
    if (rc == DB_OK && goods_stock + rest > 0) {
        sharded_split(goods_stock + rest, s->k, shares);
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
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        seed = (unsigned)now.tv_nsec ^ (unsigned)(uintptr_t)&seed;
        seeded = 1;
    }
    return (unsigned)rand_r(&seed);
}

/* look()'s answer when the sale goes on to the segments. */
#define LOOK_GO 3

/*
 * A refusal (404 or 409) for a request with an Idempotency-Key, stored with it: in a
 * transaction that claims the key and reads the hint again; no segment lock is needed, as
 * a refusal sells nothing and the hint's one snapshot is a moment the goods was unknown or
 * short. TRY_DONE with the answer set (the refusal, a replay or a 503); TRY_SHORT, rolled
 * back, when the stock now covers the count after all (a reset came between); -1 when out of
 * memory.
 */
static int refuse_stored(sale *s)
{
    int64_t goods_stock = 0, total = 0, hints[DB_SEGMENTS_MAX];
    int rc;

    rc = begin_with_key(s);
    if (rc != KEY_CLAIMED)
        return rc;
    rc = db_segments_read(s->conn, s->goods_id, s->k, &goods_stock, hints, &total);
    if (rc == DB_ERR_NOT_FOUND) {
        s->out->status = 404;
        s->out->outcome = "unknown_goods";
        s->out->body = response_unknown_goods(s->goods_id);
    } else if (rc != DB_OK) {
        return rollback_db(s, "read segments", rc);
    } else if (total < s->count) {
        s->out->status = 409;
        s->out->outcome = "insufficient_stock";
        s->out->body = response_insufficient(s->goods_id, total);
    } else {
        db_rollback(s->conn);
        return TRY_SHORT;
    }
    return finish(s, NULL, 0);
}

/* The first step of each round, on a borrowed connection: the replay, the hint (and the 404
 * or 409 it answers), the cut of the goods row. LOOK_GO with hints[] set; TRY_DONE with the
 * answer set; -1 when out of memory. */
static int look(sale *s, int64_t *hints)
{
    int64_t goods_stock = 0, total = 0;
    int rc;

    if (s->key != NULL) {
        char *body = NULL;
        int status = 0;
        if (db_idempotency_fetch(s->conn, s->goods_id, s->key, &status, &body) == DB_OK) {
            s->out->status = status;
            s->out->body = body;
            s->out->outcome = "replayed";
            return TRY_DONE;
        }
    }

    rc = db_segments_read(s->conn, s->goods_id, s->k, &goods_stock, hints, &total);
    if (rc != DB_OK && rc != DB_ERR_NOT_FOUND)
        return answer_db(s, "read segments", rc);
    /* The hint's snapshot answers a 404 or a 409 by itself: at that moment the goods did not
     * exist, or its whole stock was below the count. With a key the refusal is stored. */
    if (rc == DB_ERR_NOT_FOUND || total < s->count) {
        if (s->key != NULL) {
            rc = refuse_stored(s);
            if (rc != TRY_SHORT)
                return rc;
            rc = db_segments_read(s->conn, s->goods_id, s->k, &goods_stock, hints, &total);
            if (rc != DB_OK)
                return answer_db(s, "read segments", rc);
        } else if (rc == DB_ERR_NOT_FOUND) {
            s->out->status = 404;
            s->out->outcome = "unknown_goods";
            s->out->body = response_unknown_goods(s->goods_id);
            return s->out->body != NULL ? TRY_DONE : -1;
        } else {
            s->out->status = 409;
            s->out->outcome = "insufficient_stock";
            s->out->body = response_insufficient(s->goods_id, total);
            return s->out->body != NULL ? TRY_DONE : -1;
        }
    }

    if (goods_stock > 0 && cut_goods_row(s, hints) != DB_OK) {
        /* Not cut: the slow path gathers the row all the same, under every lock. */
        for (int i = 0; i < s->k; i++)
            hints[i] = 0;
    }
    return LOOK_GO;
}

/* One look at the hint on a connection of its own: LOOK_GO, or the answer (TRY_DONE, -1). */
static int look_once(sale *s, int64_t *hints)
{
    int rc = borrow(s);

    if (rc != BORROWED)
        return rc;
    rc = look(s, hints);
    give_back(s);
    return rc;
}

/* The fast path over the candidates order[0..n): each tried with the short wait; then the
 * first busy one with `wait_ms`. TRY_SHORT when none could sell (no answer set), else the
 * attempt's result (a timeout of the wait: 503 lock_timeout). */
static int fast_path(sale *s, const int *order, int n, int64_t wait_ms)
{
    int busy = -1, rc;

    for (int i = 0; i < n; i++) {
        rc = try_segment(s, order[i], s->env->shard_try_ms);
        if (rc == TRY_BUSY && busy < 0)
            busy = order[i];
        else if (rc != TRY_SHORT && rc != TRY_BUSY)
            return rc;
    }
    if (busy < 0)
        return TRY_SHORT;
    /* Every candidate was busy or short: wait for the first busy one. */
    rc = try_segment(s, busy, wait_ms);
    if (rc == TRY_BUSY) {
        char name[64];
        segment_name(s, name, sizeof(name), busy);
        return answer_lock_failure(s, name, LOCK_ERR_TIMEOUT);
    }
    return rc;
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
static int run(sale *s)
{
    int64_t hints[DB_SEGMENTS_MAX];
    int order[DB_SEGMENTS_MAX], n, rc;
    struct timespec start;

    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int round = 0; round < FAST_ROUNDS_MAX; round++) {
        int64_t spent = (int64_t)(clock_seconds_since(&start) * 1000.0);
        int64_t left = s->env->guards->wait_ms > spent ? s->env->guards->wait_ms - spent : 0;

        if (round > 0 && left == 0) {
            char detail[160];
            snprintf(detail, sizeof(detail),
                     "no segment of goods %" PRId64 " could sell within %" PRId64 " ms",
                     s->goods_id, s->env->guards->wait_ms);
            return answer_503(s, "lock_timeout", detail);
        }
        rc = look_once(s, hints);
        if (rc != LOOK_GO)
            return rc;
        n = sharded_candidates(hints, s->k, s->count, draw(), order);
        if (n == 0)
            break;
        rc = fast_path(s, order, n, left);
        if (rc != TRY_SHORT)
            return rc;
    }
    return slow_path(s);
}

int sharded_execute(const deduct_env *env, const mode *m, int64_t goods_id, int64_t count,
                    const char *idempotency_key, const char *request_id, deduct_result *out)
{
    sale s = {.env = env,
              .m = m,
              .goods_id = goods_id,
              .count = count,
              .key = idempotency_key,
              .request_id = request_id,
              .k = sharded_segments(env->shard_segments),
              .out = out};
    int rc;

    memset(out, 0, sizeof(*out));
    if (env->guards->lock == NULL)
        return answer_503(&s, "unavailable", "redis lock client not configured");
    rc = run(&s);
    return rc < 0 ? -1 : 0;
}
