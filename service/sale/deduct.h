/*
 * deduct.h - one deduction: one request's sale (sale.h tells its steps, in order) under its
 * mode's guard; a batched or sharded mode's request is handed to its engine (batch.h,
 * sharded.h).
 *
 * A guard that hands out fencing tokens (redis) makes the read a claim of the goods row
 * for its token (db_stock_claim): then a holder whose lock was lost mid-section can no
 * longer oversell, whatever the interleaving: the next holder either reads what it
 * committed, or one of the two is refused and sells nothing (db/db.h states the invariant).
 *
 * No HTTP here: the result is a status and a body written by deduct_env.bodies, so the same
 * code serves the service and the ceiling benchmark.
 */
#ifndef SERVICE_DEDUCT_H
#define SERVICE_DEDUCT_H

#include <stdbool.h>
#include <stdint.h>

#include "service/sale/base.h"

/*
 * A transaction shape may ask for its transaction to be run again (mode_tx.write returning
 * DB_ERR_RETRY: pg-optimistic lost its race; PostgreSQL refusing pg-serializable's with
 * DB_ERR_SERIALIZATION). The transaction is then rolled back, the
 * idempotency claim with it, and run again from BEGIN, claim included: a twin request that
 * committed in the meantime is found there and its answer replayed, so a retry never sells
 * twice. The hook sees "begun" and "read" once per run of the transaction.
 *
 * Runs one deduction of `count` units of `goods_id` in mode `m`. idempotency_key may be
 * NULL; when given, an earlier stored answer for (goods_id, key) is returned unchanged and
 * nothing is deducted; otherwise the 200/404/409 answer is stored in the same transaction.
 * hook may be NULL; when given, hook->at is called at each deduct_point reached.
 * A batched mode (mode.batched) without a hook joins its replica's batch (batch_execute),
 * and a sharded one (mode.parts) sells over its segments (sharded_execute): the hook's
 * points belong to one request's own transaction, so a request with a hook (fault
 * injection) runs the single path, under the same lock and fence.
 * When the single path would answer 409 and segments of the goods hold stock (left by
 * redis-sharded), they are folded back into the goods row first (sale_fold: a transaction
 * of its own, which the service opens and commits around db_segments_fold) and the
 * transaction is run once more: no mode refuses a sale while the goods' stock covers it.
 * Returns 0 with *out filled (free out->body), or -1 when out of memory.
 */
int deduct_execute(const deduct_env *env, const mode *m, int64_t goods_id, int64_t count,
                   const char *idempotency_key, const deduct_hook *hook, deduct_result *out);

/* Whether a deduction in mode m without a hook joins the replica's batch (mode.batched, and
 * a queue): its caller may then submit it and be answered later (batch_submit). */
bool deduct_batches(const deduct_env *env, const mode *m);

/*
 * deduct_execute, with the client's request id (NULL: none; else at most
 * DEDUCT_REQUEST_ID_MAX characters, which the caller has checked) written into the sale's
 * order row, in the INSERT the sale runs anyway: afterwards, "did request R sell?" is a
 * question the orders table answers, for a client that never got its answer (a recorded
 * load settles its unknown outcomes so; it costs the sale nothing the key's claim and store
 * would). A 409 or a 503 leaves no trace of the id.
 */
int deduct_execute_as(const deduct_env *env, const mode *m, int64_t goods_id, int64_t count,
                      const char *idempotency_key, const char *request_id, const deduct_hook *hook,
                      deduct_result *out);

#endif
