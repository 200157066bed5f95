/*
 * batch.c - the redis-batch mode (batch.h): the queue per goods, the leader hand-off, and
 * the one transaction a batch runs in.
 *
 * The queue is striped by goods id, as the local guard's mutexes are (guards.h): a map that
 * grew with every id a client names would be an allocation driven by requests. Two goods
 * that share a stripe share its queue, but a batch only ever takes requests of one goods:
 * the other goods' requests stay queued, in order, for the next leader.
 *
 * Every request waits on a condition variable of its own, so that the leader wakes exactly
 * the requests it answered, and the one it hands the queue to.
 *
 * Every follower's wait ends by its own deadline (arrival + BATCH_WAIT_MS), in the queue and
 * in a running batch alike: a leader stuck in PostgreSQL (a frozen server, a row lock held
 * by another session: each statement bounded, but one per key claim) must not keep the
 * requests it took past their deadline. A follower whose deadline passes while its batch
 * runs answers 503 lock_timeout and leaves the batch (`withdrawn`); the leader, before it
 * commits, looks for such requests under the stripe's mutex and rolls the whole batch back
 * when it finds one (every request then 503), else it seals the batch: from then on a
 * follower waits for the outcome, one COMMIT's reply bound at most. That way a 503 never
 * sold anything: a withdrawn request's order is in a transaction that is never committed.
 * (The other choice, waiting for the outcome whenever the batch holds the request, keeps
 * the 503-sold-nothing rule too, but its bound is the lock's wait plus one database reply
 * bound per statement of the batch, 64 key claims included: not the request's own.)
 * A follower that withdraws cannot free its item, which the leader still reaches: items
 * live on the heap, and whichever of the two lets go last frees it (`withdrawn` tells).
 */
#include "service/batch.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "service/clock.h"
#include "service/response.h"

#define BATCH_STRIPES 64

/* One request, from its arrival in the queue to its answer. Lives on the request thread's
 * stack; the leader reaches it only while the request waits. */
typedef struct batch_item {
    /* the request */
    int64_t goods_id;
    int64_t count;
    const char *key;                            /* Idempotency-Key or NULL */
    char request_id[DEDUCT_REQUEST_ID_MAX + 1]; /* the client's (a copy), "" for none */
    struct timespec arrived;
    deduct_result *out; /* &res: the caller's result is filled from it when done */
    deduct_result res;
    int rc; /* -1: out of memory building the answer */

    /* its place in the queue; guarded by the stripe's mutex */
    struct batch_item *next;
    pthread_cond_t wake; /* signalled when done or lead is set */
    bool taken;          /* in a batch that is running: it answers or withdraws at its deadline */
    bool done;           /* the answer is set */
    bool lead;           /* handed the queue: this thread runs the next batch */
    bool sealed;         /* the batch is committing: only its outcome is awaited now */
    bool withdrawn;      /* answered 503 at its deadline and gone: the leader frees it */

    /* the leader's working state, while the batch runs */
    bool answered;           /* the answer is final already (replayed from the store) */
    struct batch_item *twin; /* an earlier request of the batch with the same key */
} batch_item;

typedef struct batch_stripe {
    pthread_mutex_t mu;
    batch_item *head, *tail; /* waiting, in arrival order */
    int queued;
    bool running; /* a leader exists: a newcomer queues and waits */
} batch_stripe;

struct batch_queue {
    batch_options opts;
    batch_stripe stripes[BATCH_STRIPES];
};

int64_t batch_allocate(int64_t stock, const int64_t *counts, size_t n, bool *sold, int64_t *left)
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

int batch_queue_create(const batch_options *opts, batch_queue **out)
{
    batch_queue *q;
    int i;

    *out = NULL;
    if (opts->max_batch < 1 || opts->max_queued < 1 || opts->wait_ms < 1)
        return -1;
    q = calloc(1, sizeof(*q));
    if (q == NULL)
        return -1;
    q->opts = *opts;
    for (i = 0; i < BATCH_STRIPES; i++)
        pthread_mutex_init(&q->stripes[i].mu, NULL);
    *out = q;
    return 0;
}

void batch_queue_destroy(batch_queue *q)
{
    int i;

    if (q == NULL)
        return;
    for (i = 0; i < BATCH_STRIPES; i++)
        pthread_mutex_destroy(&q->stripes[i].mu);
    free(q);
}

/* ---- answers ------------------------------------------------------------------------- */

static void set_answer(batch_item *it, int status, const char *outcome, char *body)
{
    free(it->out->body);
    it->out->status = status;
    it->out->outcome = outcome;
    it->out->body = body;
    if (body == NULL)
        it->rc = -1;
}

/* A 503 as deduct.c answers it: `error` is the body's error and the metrics outcome; the
 * detail goes to the log, and to the body for "unavailable" only (API.md). */
static void set_503(batch_item *it, const char *error, const char *detail)
{
    snprintf(it->out->detail, sizeof(it->out->detail), "%s", detail);
    set_answer(it, 503, error, response_deduct_503(error, detail));
}

/* Something of the batch's transaction failed: it sells nothing, so every request not
 * answered from the store gets the same 503. */
static void fail_batch(batch_item **items, size_t n, const char *error, const char *detail)
{
    size_t i;

    for (i = 0; i < n; i++)
        if (!items[i]->answered && items[i]->twin == NULL)
            set_503(items[i], error, detail);
}

static void fail_db(batch_item **items, size_t n, const char *what, int rc, const db_conn *conn)
{
    char why[200], detail[256];

    snprintf(detail, sizeof(detail), "postgresql: %s: %s", what,
             db_describe_error(rc, conn, why, sizeof(why)));
    fail_batch(items, n, rc == DB_ERR_COMMIT_UNKNOWN ? "commit_unknown" : "unavailable", detail);
}

/* ---- the transaction ----------------------------------------------------------------- */

/* Claims the key of every keyed request (the first of twins only), as the single path does
 * before it reads the stock; a key a committed request already holds is answered from the
 * store. DB_OK, or the failing call's code with the batch failed. */
static int claim_keys(db_conn *conn, batch_item **items, size_t n)
{
    size_t i, j;
    int rc;

    for (i = 0; i < n; i++) {
        batch_item *it = items[i];
        char *body = NULL;
        int status = 0;

        if (it->key == NULL)
            continue;
        for (j = 0; j < i && it->twin == NULL; j++)
            if (items[j]->key != NULL && strcmp(items[j]->key, it->key) == 0)
                it->twin = items[j]->twin != NULL ? items[j]->twin : items[j];
        if (it->twin != NULL)
            continue; /* answered as its twin is, below */
        rc = db_idempotency_claim(conn, it->goods_id, it->key);
        if (rc == DB_OK)
            continue;
        if (rc == DB_ERR_CONFLICT) {
            /* The claim inserted nothing and the transaction goes on; under READ COMMITTED
             * the fetch sees the committed answer. */
            rc = db_idempotency_fetch(conn, it->goods_id, it->key, &status, &body);
            if (rc == DB_OK) {
                set_answer(it, status, "replayed", body);
                it->answered = true;
                continue;
            }
            fail_db(items, n, "fetch idempotent answer", rc, conn);
            return rc;
        }
        fail_db(items, n, "claim idempotency key", rc, conn);
        return rc;
    }
    return DB_OK;
}

/* The arrays of one batch's allocation, in one allocation: n is at most BATCH_MAX. */
typedef struct batch_scratch {
    batch_item **pending;
    int64_t *counts;
    int64_t *left;
    int64_t *sold_counts;  /* the counts of the sold requests, in order */
    int64_t *order_ids;    /* their orders' ids */
    const char **sold_ids; /* their request ids (NULL: none) */
    bool *sold;
} batch_scratch;

static batch_scratch *scratch_new(size_t k)
{
    size_t bytes = sizeof(batch_scratch) +
                   k * (sizeof(batch_item *) + 4 * sizeof(int64_t) + sizeof(char *)) + k;
    batch_scratch *sc = malloc(bytes);
    char *p;

    if (sc == NULL)
        return NULL;
    p = (char *)(sc + 1);
    sc->pending = (batch_item **)(void *)p;
    p += k * sizeof(batch_item *);
    sc->counts = (int64_t *)(void *)p;
    p += k * sizeof(int64_t);
    sc->left = (int64_t *)(void *)p;
    p += k * sizeof(int64_t);
    sc->sold_counts = (int64_t *)(void *)p;
    p += k * sizeof(int64_t);
    sc->order_ids = (int64_t *)(void *)p;
    p += k * sizeof(int64_t);
    sc->sold_ids = (const char **)(void *)p;
    p += k * sizeof(char *);
    sc->sold = (bool *)(void *)p;
    return sc;
}

static int sell_pending(const deduct_env *env, const mode *m, db_conn *conn, const guard_hold *hold,
                        batch_item **items, size_t n, batch_scratch *sc, size_t k,
                        int64_t *stock_out);

/* Inside the open transaction: the fenced read, the allocation, the orders and the stored
 * answers, the stock write. DB_OK when the transaction should commit (answers set); else
 * the batch is failed and the caller rolls back. */
static int sell(const deduct_env *env, const mode *m, db_conn *conn, const guard_hold *hold,
                batch_item **items, size_t n)
{
    int64_t stock = 0;
    batch_scratch *sc;
    size_t i, k = 0;
    int rc;

    for (i = 0; i < n; i++)
        if (!items[i]->answered && items[i]->twin == NULL)
            k++;
    if (k == 0)
        return DB_OK; /* every request was a replay: nothing to read or write */
    sc = scratch_new(k);
    if (sc == NULL) {
        fail_batch(items, n, "unavailable", "out of memory");
        return DB_ERR_NOMEM;
    }
    k = 0;
    for (i = 0; i < n; i++)
        if (!items[i]->answered && items[i]->twin == NULL)
            sc->pending[k++] = items[i];
    rc = sell_pending(env, m, conn, hold, items, n, sc, k, &stock);
    free(sc);
    return rc;
}

/* sell()'s body, with its scratch arrays: the k requests still to answer. */
static int sell_pending(const deduct_env *env, const mode *m, db_conn *conn, const guard_hold *hold,
                        batch_item **items, size_t n, batch_scratch *sc, size_t k,
                        int64_t *stock_out)
{
    int64_t goods_id = items[0]->goods_id, stock = 0;
    batch_item **pending = sc->pending;
    int64_t *counts = sc->counts, *left = sc->left;
    bool *sold = sc->sold;
    size_t i, n_sold = 0;
    int rc;

    rc = hold->fenced ? db_stock_claim(conn, goods_id, hold->fence_source, hold->fence, &stock)
                      : db_stock_read(conn, goods_id, &stock);
    if (rc == DB_ERR_FENCED) {
        char detail[128];
        int64_t stored = 0;

        /* As the single path: the counter past what the database has seen (deduct.c). */
        if (db_fence_of(conn, goods_id, hold->fence_source, &stored) == DB_OK)
            guard_fence_refused(env->guards, hold, stored);
        snprintf(detail, sizeof(detail), "fencing token %lld is older than the stored one",
                 (long long)hold->fence);
        fail_batch(items, n, "lock_lost", detail);
        return rc;
    }
    if (rc != DB_OK && rc != DB_ERR_NOT_FOUND) {
        fail_db(items, n, "read stock", rc, conn);
        return rc;
    }
    if (rc == DB_OK && env->business_delay_ms > 0)
        clock_sleep_ms(env->business_delay_ms); /* the race window, once for the batch */

    for (i = 0; i < k; i++)
        counts[i] = pending[i]->count;
    if (rc == DB_OK)
        stock = batch_allocate(stock, counts, k, sold, left);

    /* Every sold request's order in one statement: one round trip for the batch. */
    for (i = 0; rc == DB_OK && i < k; i++)
        if (sold[i]) {
            sc->sold_ids[n_sold] =
                pending[i]->request_id[0] != '\0' ? pending[i]->request_id : NULL;
            sc->sold_counts[n_sold++] = counts[i];
        }
    if (n_sold > 0) {
        int irc = db_orders_insert_many(conn, goods_id, sc->sold_counts, n_sold, m->name,
                                        env->instance, hold->fenced ? &hold->fence : NULL,
                                        hold->fence_source, sc->sold_ids, sc->order_ids);
        if (irc != DB_OK) {
            fail_db(items, n, "record orders", irc, conn);
            return irc;
        }
    }

    for (i = 0, n_sold = 0; i < k; i++) {
        batch_item *it = pending[i];

        if (rc == DB_ERR_NOT_FOUND) {
            set_answer(it, 404, "unknown_goods", response_unknown_goods(goods_id));
        } else if (!sold[i]) {
            set_answer(it, 409, "insufficient_stock", response_insufficient(goods_id, left[i]));
        } else {
            int64_t order_id = sc->order_ids[n_sold++];
            set_answer(
                it, 200, "deducted",
                response_deducted(goods_id, it->count, left[i], order_id, m->name, env->instance));
        }
        if (it->out->body == NULL) {
            fail_batch(items, n, "unavailable", "out of memory");
            return DB_ERR_NOMEM;
        }
        if (it->key != NULL) {
            int src = db_idempotency_store(conn, goods_id, it->key, it->out->status, it->out->body);
            if (src != DB_OK) {
                fail_db(items, n, "store idempotent answer", src, conn);
                return src;
            }
        }
    }

    if (n_sold > 0) {
        rc = db_stock_write(conn, goods_id, stock);
        if (rc != DB_OK) {
            fail_db(items, n, "write stock", rc, conn);
            return rc;
        }
    }
    *stock_out = stock;
    return DB_OK;
}

/* Whether a request of the batch was refused for want of stock. */
static bool any_refused(batch_item **items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!items[i]->answered && items[i]->twin == NULL && items[i]->out->status == 409)
            return true;
    return false;
}

/* Whether segments of the goods hold stock (redis-sharded left it there): one plain read. */
static bool segments_hold_stock(db_conn *conn, int64_t goods_id)
{
    int64_t goods_stock = 0, seg[1], total = 0;

    return db_segments_read(conn, goods_id, 1, &goods_stock, seg, &total) == DB_OK &&
           total > goods_stock;
}

/* Forgets the answers of a batch whose transaction was rolled back, to run it again. */
static void forget_answers(batch_item **items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(items[i]->out->body);
        items[i]->out->body = NULL;
        items[i]->out->status = 0;
        items[i]->out->outcome = NULL;
        items[i]->answered = false;
        items[i]->twin = NULL;
    }
}

/* Seals the batch for the commit unless one of its followers withdrew: true when sealed. */
static bool seal_batch(batch_stripe *s, batch_item **items, size_t n)
{
    bool any_withdrawn = false;
    size_t i;

    pthread_mutex_lock(&s->mu);
    for (i = 0; i < n; i++)
        any_withdrawn = any_withdrawn || items[i]->withdrawn;
    for (i = 0; i < n && !any_withdrawn; i++)
        items[i]->sealed = true;
    pthread_mutex_unlock(&s->mu);
    return !any_withdrawn;
}

/*
 * The batch in two round trips (DB_PIPELINE, db_claim_begin and db_batch_commit), for the
 * common batch: a fenced holder, no Idempotency-Key, and every request sold. BEGIN with the
 * fenced claim; the allocation in C; the last look at the guard and the seal; then the
 * orders, the write and COMMIT together. Anything else (a key, a request refused, which may
 * call for the segments' fold) takes the statement-by-statement path: pipelined_batch then
 * returns false with the transaction rolled back and no answer set. true: the batch is
 * over, every answer set (committed, or failed with a 503).
 */
static bool pipelined_batch(const deduct_env *env, const mode *m, db_conn *conn, guard_hold *hold,
                            batch_stripe *s, batch_item **items, size_t n)
{
    int64_t goods_id = items[0]->goods_id, stock = 0;
    batch_scratch *sc;
    size_t i;
    bool done = true;
    int rc;

    if (!env->pipeline || !hold->fenced)
        return false;
    for (i = 0; i < n; i++)
        if (items[i]->key != NULL)
            return false;
    sc = scratch_new(n);
    if (sc == NULL)
        return false;
    rc = db_claim_begin(conn, goods_id, hold->fence_source, hold->fence, &stock);
    if (rc == DB_ERR_FENCED) {
        char detail[128];
        int64_t stored = 0;

        if (db_fence_of(conn, goods_id, hold->fence_source, &stored) == DB_OK)
            guard_fence_refused(env->guards, hold, stored);
        db_rollback(conn);
        snprintf(detail, sizeof(detail), "fencing token %lld is older than the stored one",
                 (long long)hold->fence);
        fail_batch(items, n, "lock_lost", detail);
        goto out;
    }
    if (rc != DB_OK) {
        db_rollback(conn);
        if (rc == DB_ERR_NOT_FOUND)
            done = false; /* the statement path answers 404 */
        else
            fail_db(items, n, "begin and read stock", rc, conn);
        goto out;
    }
    if (env->business_delay_ms > 0)
        clock_sleep_ms(env->business_delay_ms); /* the race window, once for the batch */
    for (i = 0; i < n; i++) {
        sc->counts[i] = items[i]->count;
        sc->sold_ids[i] = items[i]->request_id[0] != '\0' ? items[i]->request_id : NULL;
    }
    stock = batch_allocate(stock, sc->counts, n, sc->sold, sc->left);
    for (i = 0; i < n; i++)
        if (!sc->sold[i]) {
            db_rollback(conn);
            done = false;
            goto out;
        }
    if (m->still_held(env->guards, hold) != GUARD_OK) {
        db_rollback(conn);
        fail_batch(items, n, "lock_lost", "the lock's lease was lost before the commit");
        goto out;
    }
    if (!seal_batch(s, items, n)) {
        db_rollback(conn);
        fail_batch(items, n, "lock_timeout",
                   "redis-batch: a request of the batch passed BATCH_WAIT_MS before the "
                   "commit; the batch was rolled back and sold nothing");
        goto out;
    }
    rc = db_batch_commit(conn, goods_id, stock, sc->counts, n, m->name, env->instance, hold->fence,
                         hold->fence_source, sc->sold_ids, sc->order_ids);
    if (rc != DB_OK) {
        fail_db(items, n, "write, record orders, commit", rc, conn);
        goto out;
    }
    for (i = 0; i < n; i++) {
        batch_item *it = items[i];
        set_answer(it, 200, "deducted",
                   response_deducted(goods_id, it->count, sc->left[i], sc->order_ids[i], m->name,
                                     env->instance));
    }
out:
    free(sc);
    return done;
}

/* The leader's work once it entered the guard (rc, GUARD_OK or the failure, with detail):
 * one transaction for the n requests, the guard left. Sets every request's answer. */
static void run_batch(const deduct_env *env, const mode *m, int rc, guard_hold *hold_in,
                      const char *detail, batch_stripe *s, batch_item **items, size_t n)
{
    guard_hold hold = *hold_in;
    db_conn *conn = NULL;
    size_t i;

    for (i = 0; i < n; i++) {
        /* The wait a request measures is from its arrival to the lock: queue and lock. */
        items[i]->out->waited = hold.waited;
        items[i]->out->wait_seconds = clock_seconds_since(&items[i]->arrived);
    }
    if (rc != GUARD_OK) {
        fail_batch(items, n, rc == GUARD_ERR_TIMEOUT ? "lock_timeout" : "unavailable", detail);
        goto twins;
    }

    rc = db_pool_acquire(env->db, (int)env->db_wait_ms, &conn);
    if (rc != DB_OK) {
        fail_db(items, n, "connect", rc, NULL);
        goto leave;
    }
    if (pipelined_batch(env, m, conn, &hold, s, items, n))
        goto release;
    for (bool folded = false;;) {
        rc = db_begin(conn);
        if (rc != DB_OK) {
            fail_db(items, n, "begin", rc, conn);
            goto release;
        }
        rc = claim_keys(conn, items, n);
        if (rc == DB_OK)
            rc = sell(env, m, conn, &hold, items, n);
        if (rc != DB_OK) {
            db_rollback(conn);
            goto release;
        }
        /* As the single path (deduct.h): no 409 while redis-sharded's segments hold stock;
         * they are folded back into the goods row, once, and the batch runs again. */
        if (folded || !any_refused(items, n) || !segments_hold_stock(conn, items[0]->goods_id))
            break;
        int64_t moved = 0;
        db_rollback(conn);
        forget_answers(items, n);
        folded = true;
        rc = db_segments_fold(conn, items[0]->goods_id, &moved);
        if (rc != DB_OK) {
            fail_db(items, n, "fold segments", rc, conn);
            goto release;
        }
    }
    /* As in the single path: a lease lost while we worked may have a new holder already. */
    if (m->still_held(env->guards, &hold) != GUARD_OK) {
        db_rollback(conn);
        fail_batch(items, n, "lock_lost", "the lock's lease was lost before the commit");
        goto release;
    }
    /* A follower that passed its deadline has answered 503 already: its order must not
     * be committed, so neither is the batch. Otherwise the batch is sealed: its followers
     * wait for the commit's outcome (one reply bound) rather than leave. */
    if (!seal_batch(s, items, n)) {
        db_rollback(conn);
        fail_batch(items, n, "lock_timeout",
                   "redis-batch: a request of the batch passed BATCH_WAIT_MS before the "
                   "commit; the batch was rolled back and sold nothing");
        goto release;
    }
    rc = db_commit(conn);
    if (rc != DB_OK)
        fail_db(items, n, "commit", rc, conn);

release:
    db_pool_release(env->db, conn);
leave:
    m->leave(env->guards, &hold);
twins:
    /* A request whose key an earlier one of the batch carries gets that one's answer, as a
     * replay would give it after the commit (or its 503 when the batch failed). */
    for (i = 0; i < n; i++) {
        batch_item *it = items[i], *first = it->twin;
        if (first == NULL)
            continue;
        snprintf(it->out->detail, sizeof(it->out->detail), "%s", first->out->detail);
        set_answer(it, first->out->status,
                   first->out->status < 500 ? "replayed" : first->out->outcome,
                   first->out->body != NULL ? strdup(first->out->body) : NULL);
    }
}

/* ---- the queue ----------------------------------------------------------------------- */

static void unlink_item(batch_stripe *s, batch_item *it)
{
    batch_item **p = &s->head, *prev = NULL;

    while (*p != NULL && *p != it) {
        prev = *p;
        p = &(*p)->next;
    }
    if (*p == NULL)
        return;
    *p = it->next;
    if (s->tail == it)
        s->tail = prev;
    it->next = NULL;
    s->queued--;
}

/* Takes up to max requests of `goods_id` from the queue, in arrival order (the leader, the
 * head, first). Called with the stripe's mutex held. */
static size_t take_batch(batch_stripe *s, int64_t goods_id, int max, batch_item **items)
{
    batch_item *it = s->head, *next;
    size_t n = 0;

    while (it != NULL && n < (size_t)max) {
        next = it->next;
        if (it->goods_id == goods_id) {
            unlink_item(s, it);
            it->taken = true;
            items[n++] = it;
        }
        it = next;
    }
    return n;
}

/* Frees an item whose thread has let go of it (its answer copied out, or withdrawn). */
static void item_free(batch_item *it)
{
    pthread_cond_destroy(&it->wake);
    free(it);
}

/* A follower's deadline passed: 503 lock_timeout into the caller's result, nothing sold (in
 * the queue nothing was begun; in an unsealed batch the leader will roll back). */
static void answer_timeout(deduct_result *out, const struct timespec *arrived, bool in_batch)
{
    batch_item tmp = {.out = out};

    set_503(&tmp, "lock_timeout",
            in_batch ? "redis-batch: the batch did not reach its commit within BATCH_WAIT_MS"
                     : "redis-batch: not taken into a batch within BATCH_WAIT_MS");
    out->waited = true;
    out->wait_seconds = clock_seconds_since(arrived);
}

int batch_execute(batch_queue *q, const deduct_env *env, const mode *m, int64_t goods_id,
                  int64_t count, const char *idempotency_key, const char *request_id,
                  deduct_result *out)
{
    batch_stripe *s = &q->stripes[(uint64_t)goods_id % BATCH_STRIPES];
    batch_item *self;
    pthread_condattr_t attr;
    struct timespec deadline;
    int rc, ret;

    memset(out, 0, sizeof(*out));
    self = calloc(1, sizeof(*self));
    if (self == NULL)
        return -1;
    self->goods_id = goods_id;
    self->count = count;
    self->key = idempotency_key;
    if (request_id != NULL)
        snprintf(self->request_id, sizeof(self->request_id), "%s", request_id);
    self->out = &self->res;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&self->wake, &attr);
    pthread_condattr_destroy(&attr);
    clock_gettime(CLOCK_MONOTONIC, &self->arrived);
    deadline = self->arrived;
    deadline.tv_sec += q->opts.wait_ms / 1000;
    deadline.tv_nsec += (q->opts.wait_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }

    pthread_mutex_lock(&s->mu);
    if (s->queued >= q->opts.max_queued) {
        char detail[128];
        pthread_mutex_unlock(&s->mu);
        snprintf(detail, sizeof(detail), "redis-batch: %d requests already queued on this replica",
                 q->opts.max_queued);
        set_503(self, "unavailable", detail);
        goto out;
    }
    if (s->tail != NULL)
        s->tail->next = self;
    else
        s->head = self;
    s->tail = self;
    s->queued++;
    if (!s->running) {
        s->running = true; /* the queue was empty: this request leads */
        self->lead = true;
    }

    while (!self->done && !self->lead) {
        if (self->sealed) {
            /* The batch is committing: its outcome is one COMMIT's reply bound away, and a
             * request may not leave before the commit that may contain it. */
            pthread_cond_wait(&self->wake, &s->mu);
            continue;
        }
        rc = pthread_cond_timedwait(&self->wake, &s->mu, &deadline);
        if (rc != ETIMEDOUT || self->done || self->lead || self->sealed)
            continue;
        if (self->taken) {
            /* Taken into a batch that has not sealed: leave it; the leader will see it and
             * roll back, and frees the item. */
            self->withdrawn = true;
            pthread_mutex_unlock(&s->mu);
            answer_timeout(out, &self->arrived, true);
            return out->body == NULL ? -1 : 0;
        }
        unlink_item(s, self);
        pthread_mutex_unlock(&s->mu);
        set_503(self, "lock_timeout", "redis-batch: not taken into a batch within BATCH_WAIT_MS");
        self->res.waited = true;
        self->res.wait_seconds = clock_seconds_since(&self->arrived);
        goto out;
    }

    if (self->lead && !self->done) {
        batch_item *one[1], **items = malloc((size_t)q->opts.max_batch * sizeof(*items));
        int max = q->opts.max_batch, grc;
        guard_hold hold;
        char detail[256] = "";
        size_t n, i;

        if (items == NULL) { /* out of memory: a batch of this request alone still works */
            items = one;
            max = 1;
        }
        /* The lock first, then the queue: every request that came while the lock was awaited
         * (other replicas' batches held it) joins this batch. The leader stays at the head of
         * the queue meanwhile: nothing but a leader takes from it, and a leader does not
         * time out, so it is still there to be taken first. */
        pthread_mutex_unlock(&s->mu);
        grc = m->enter(env->guards, goods_id, &hold, detail, sizeof(detail));
        pthread_mutex_lock(&s->mu);
        n = take_batch(s, goods_id, max, items);
        pthread_mutex_unlock(&s->mu);
        run_batch(env, m, grc, &hold, detail, s, items, n);
        pthread_mutex_lock(&s->mu);
        for (i = 0; i < n; i++) {
            items[i]->done = true;
            if (items[i] == self)
                continue;
            if (items[i]->withdrawn) {
                free(items[i]->res.body); /* answered by its own thread; gone */
                item_free(items[i]);
            } else {
                pthread_cond_signal(&items[i]->wake);
            }
        }
        /* Hand the queue on: the next waiting request's thread runs the next batch. */
        if (s->head != NULL) {
            s->head->lead = true;
            pthread_cond_signal(&s->head->wake);
        } else {
            s->running = false;
        }
        if (items != one)
            free(items);
    }
    pthread_mutex_unlock(&s->mu);

out:
    *out = self->res;
    ret = self->rc;
    item_free(self);
    return ret;
}
