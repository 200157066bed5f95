/*
 * batch.h - the redis-batch mode: a replica's concurrent requests for one goods, coalesced
 * into one transaction under one holding of the distributed lock.
 *
 * The serial ceiling of a lock-guarded sale is one lock round trip plus one commit per
 * sale, whatever the number of replicas. Here a request does not take the lock itself: it
 * joins its replica's queue for the goods. One thread at a time per goods (the leader, the
 * request at the head of the queue) takes the `redis` lock with its fencing token, and only
 * then takes up to `max_batch` queued requests, in arrival order (itself first), so that all
 * that came while the lock was awaited join; it runs ONE transaction for all of them, the
 * read-check-write every mode runs (service/sale/sale.h), with one line per request:
 *
 *   BEGIN -> claim each Idempotency-Key (a stored answer is replayed) -> one fenced row read
 *   (db_stock_claim) -> each request checked in arrival order against what is left (the
 *   pure sale_allocate) -> one stock write -> one order row per sold request, all in one
 *   statement (db_orders_insert_many) -> each answer stored with its key -> the lock still
 *   held? -> the batch sealed -> COMMIT -> the lock is left
 *
 * and only then are the answers given: 200 to the sold, 409 to those the stock could not
 * cover. A request is never answered before the commit that contains it; when anything of
 * the transaction fails (the lock, a statement, the fence, the commit) every request of the
 * batch gets the same 503 and nothing of the batch is sold. The leader then hands the queue
 * to a worker (batch_queue_set_runner) that runs the next batch; without one it runs the
 * next batch itself.
 *
 * A waiting request holds no thread: it is an entry in the queue with a function to call
 * with its answer (batch_submit). The leader calls it for every request of its batch, and
 * the queue's timer for a request whose wait bound passed.
 *
 * While one batch holds the lock, the next requests pile up in the queue: the busier the
 * goods, the bigger the batch, and the lock and the commit are paid once per batch instead
 * of once per sale.
 *
 * Bounds: at most `max_queued` requests wait per goods on a replica (the leader awaiting the
 * lock counts; goods that share a stripe of the queue share the bound; more: 503 unavailable
 * at once); a follower (any request but the leader) waits at most `wait_ms` for its answer,
 * in the queue or in a batch that has not begun its COMMIT (then 503 lock_timeout, nothing
 * sold: the batch it leaves is rolled back, batch.c says why), and at most one COMMIT's reply
 * bound more once its batch commits. The leader's own wait is the lock's wait bound plus the
 * database's reply bound per statement of its batch.
 */
#ifndef SERVICE_BATCH_H
#define SERVICE_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/sale/base.h"

typedef struct batch_options {
    int max_batch;   /* requests per transaction at most (BATCH_MAX) */
    int max_queued;  /* requests waiting per goods at most (BATCH_QUEUE_MAX) */
    int64_t wait_ms; /* how long a request may wait in the queue (BATCH_WAIT_MS) */
} batch_options;

typedef struct batch_queue batch_queue;

/* Creates an empty queue. Returns 0, or -1 for bad options (max_batch, max_queued or wait_ms
 * < 1: a wait of 0 would answer every follower 503 at once) or out of memory. */
int batch_queue_create(const batch_options *opts, batch_queue **out);

/* Frees the queue; no request may be in it (the HTTP server has stopped). NULL: no-op. */
void batch_queue_destroy(batch_queue *q);

/* What a request's answer is given to, from whichever thread answers it (the leader's, the
 * timer's, the caller's): exactly once per accepted request. res->body is the callee's to
 * free; NULL when out of memory building the answer. */
typedef void (*batch_done)(void *arg, deduct_result *res);

/* What runs a job on another thread: returns 0 when `job(arg)` will run, -1 when not (the
 * caller then runs it). */
typedef int (*batch_runner)(void *ctx, void (*job)(void *arg), void *arg);

/* Sets the runner the next batch's leader is handed to (NULL: the leader runs the next batch
 * itself). Safe while requests run. */
void batch_queue_set_runner(batch_queue *q, batch_runner run, void *ctx);

/*
 * Queues one deduction of `count` units of `goods_id` in mode m, as batch_execute, and
 * returns without waiting: done(arg, ...) is called with its answer, maybe before this
 * returns (refused; or it leads its batch and there is no runner, so the caller runs it).
 * With a runner, the caller never waits here for more than the queue's mutex. idempotency_key and
 * request_id are copied. Returns 0, or -1 when out of memory (done is then never called).
 */
int batch_submit(batch_queue *q, const deduct_env *env, const mode *m, int64_t goods_id,
                 int64_t count, const char *idempotency_key, const char *request_id,
                 batch_done done, void *arg);

/*
 * Runs one deduction of `count` units of `goods_id` in mode m (its guard is the lock the
 * batch is taken under, and its name is recorded with each order) as part of a batch, and
 * waits for its answer: the same contract as deduct_execute (service/sale/deduct.h) without the
 * hook; request_id (its first DEDUCT_REQUEST_ID_MAX characters) and idempotency_key are copied
 * before the call returns. Returns 0 with *out filled (free out->body), or -1 when out of memory.
 */
int batch_execute(batch_queue *q, const deduct_env *env, const mode *m, int64_t goods_id,
                  int64_t count, const char *idempotency_key, const char *request_id,
                  deduct_result *out);

#endif
