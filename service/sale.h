/*
 * sale.h - the steps of a sale that every way of selling shares: the single path
 * (deduct.c), the batch (batch.c), the segments (sharded.c) and the cart (order.c).
 *
 * One 503 answer and one database-failure answer, one refusal of a stale fencing token, one
 * look at whether redis-sharded's segments hold stock, and one fold of them back into the
 * goods row, in a transaction the service opens and commits (db_segments_fold runs inside
 * it): each was written once per path before.
 */
#ifndef SERVICE_SALE_H
#define SERVICE_SALE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db/db.h"
#include "service/deduct.h"
#include "service/modes.h"

/*
 * Sets out to a 503: `error` is both the body's error and the metrics outcome; `detail` goes
 * to out->detail (the log), and to the body for "unavailable" only (API.md). Frees a body
 * set before. Returns 0, or -1 when out of memory (out->body NULL).
 */
int sale_answer_503(deduct_result *out, const char *error, const char *detail);

/* A failed statement `what` (rc, a DB_ERR_* code, described from conn, which may be NULL):
 * 503 "postgresql: <what>: <why>", commit_unknown for DB_ERR_COMMIT_UNKNOWN, unavailable
 * otherwise. Returns as sale_answer_503. */
int sale_answer_db(deduct_result *out, const db_conn *conn, const char *what, int rc);

/*
 * A fenced read of goods_id was refused (DB_ERR_FENCED) for `hold`'s token: moves the lock's
 * counter past what the database has seen (mode.fence_refused, when the mode has one; one
 * round trip on conn, inside the caller's transaction), and writes the 503 lock_lost detail
 * ("fencing token N is older than the stored one") into detail.
 */
void sale_fence_refused(guard_env *env, const mode *m, db_conn *conn, int64_t goods_id,
                        const guard_hold *hold, char *detail, size_t detail_len);

/* Whether segments of goods_id hold stock (left there by redis-sharded): one plain read.
 * false on a failure too (the fold would meet the same failure: answer what was read). */
bool sale_segments_hold_stock(db_conn *conn, int64_t goods_id);

/*
 * Folds goods_id's segments back into its row, on conn outside any transaction: one plain
 * read, and when segments hold stock, a transaction of its own (BEGIN, db_segments_fold,
 * COMMIT). *moved gets the units moved. DB_OK (an unknown goods moves nothing) or a DB_ERR_*
 * code, with detail filled for the 503 ("postgresql: fold segments: <the statement's
 * error>", kept across the rollback).
 */
int sale_fold(db_conn *conn, int64_t goods_id, int64_t *moved, char *detail, size_t detail_len);

#endif
