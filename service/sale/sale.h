/*
 * sale.h - the read-check-write every mode runs, in one place, and the order of its steps,
 * told here once (every other file points here). Every way of selling takes them in this
 * order: one request (deduct.c) once, a batch (batch.c) once for all its requests, a goods
 * in segments (sharded.c) once per segment or once over all of them, a cart (order.c) once
 * over all its goods:
 *
 *    1. an Idempotency-Key's stored answer is looked up, before anything is locked
 *       (sale_replay): a retry does not queue for the lock;
 *    2. the mode's guard is entered (mode.enter), before the transaction begins;
 *    3. a pooled connection is taken, after the guard: a request waiting for the lock holds
 *       none of the pool's few connections idle;
 *    4. BEGIN, and each line's key claimed (a stored answer is replayed);
 *    5. the stock read: a claim of the row for the guard's fencing token, a plain read, or a
 *       PostgreSQL rung's own shape;
 *    6. each line checked in arrival order against what is left (sale_allocate): short, 409;
 *    7. the stock computed here written back, the orders recorded, the answers stored with
 *       the keys;
 *    8. every guard asked whether it still holds, then COMMIT;
 *    9. the guard left, after the commit.
 *
 * sale_run is steps 4 to 8; the caller does the others. The new stock is computed in C from
 * the value read, not by "stock = stock - n" in SQL: that read-modify-write across two
 * statements is exactly the race the guards exist to close. The guard is left only after
 * the commit (9): leaving it before would let the next holder read the stock this
 * transaction has not yet committed, which tx-inside shows on purpose; a sale in two round
 * trips leaves it while COMMIT travels, which its claim's row lock makes safe (sale.c,
 * leave_once_sent). What differs between the ways of selling is only where the stock is read
 * from and written to (sale_source) and how many requests share the transaction (the lines).
 *
 * This header is sale.c's: the transaction, the answers of its lines (one 503 and one
 * database-failure answer that every way of selling shares) and the answers stored with the
 * keys. The stock's part that callers use too (the allocation, the split, the fold of the
 * segments) is stock.h's; what the two files share is internal.h's.
 */
#ifndef SERVICE_SALE_H
#define SERVICE_SALE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db/db.h"
#include "service/sale/base.h"
#include "service/guards/mode.h"

/* sale_run's answers besides -1. */
enum {
    SALE_DONE = 0,  /* every line answered (200, 404, 409, 503 or a replay) */
    SALE_SHORT = 1, /* SEGMENT, HINT: see sale_source; rolled back, no answer set */
};

/*
 * Runs the sale on s->conn with the guards held (transaction included: the sale begins and
 * commits it). A transaction that lost an optimistic race (mode_tx.write: DB_ERR_RETRY), or
 * that PostgreSQL refused under a stricter isolation (DB_ERR_SERIALIZATION, at any statement
 * or the COMMIT), is rolled back and run again, from BEGIN and the key's claim, up to
 * env->optimistic_retries times after a short random pause (then 503 conflict); one whose goods row
 * falls short while segments hold stock is run once more after sale_fold. Every failure after BEGIN
 * rolls back, so a line that does not answer 200 sold nothing; when the transaction fails,
 * every line not replayed gets the same 503. Each line's out->retries counts its reruns.
 * Returns SALE_DONE, SALE_SHORT, or -1 when an answer could not be built (out of memory:
 * that line's out->body is NULL).
 */
int sale_run(sale *s);

/* Answers every line of s that has no final answer 503 `error` (sale_answer_503), or a
 * failed step `what` (sale_answer_db), when the sale cannot start (no guard, no connection).
 * s->conn may be NULL. */
void sale_fail(sale *s, deduct_outcome error, const char *detail);
void sale_fail_db(sale *s, const char *what, int rc);

/*
 * A connection for a sale that borrows more than one (a key's replay, then the sale's own),
 * with what is left of the sale's time against PostgreSQL (deduct_env.db_deadline_ms; start
 * *budget at it): sale_borrow is db_pool_acquire with that budget set on the connection
 * (db_conn_set_budget), sale_give_back keeps what is left in *budget and releases it. So a
 * PostgreSQL that stops answering costs a sale one reply bound, not one per borrow. Without
 * a db_deadline_ms they are db_pool_acquire and db_pool_release.
 */
int sale_borrow(const deduct_env *env, int64_t budget, db_conn **out);
void sale_give_back(const deduct_env *env, int64_t *budget, db_conn *conn);

/*
 * The answer stored earlier under (goods_id, key), looked up on conn outside any
 * transaction before any guard is taken, so that a retry does not queue for the lock: true
 * with out set (status, body, outcome "replayed"); false when there is none or it could not
 * be read (the sale will meet the same failure and answer it).
 */
bool sale_replay(db_conn *conn, int64_t goods_id, const char *key, deduct_result *out);

/*
 * Sets out to a 503: `error` (its name) is both the body's error and the metrics outcome; `detail`
 * goes to out->detail (the log), and to the body for "unavailable" only (API.md). Frees a body set
 * before. Returns 0, or -1 when out of memory (out->body NULL).
 */
int sale_answer_503(const deduct_env *env, deduct_result *out, deduct_outcome error,
                    const char *detail);

/* A failed statement `what` (rc, a DB_ERR_* code, described from conn, which may be NULL):
 * 503 "postgresql: <what>: <why>", commit_unknown for DB_ERR_COMMIT_UNKNOWN, unavailable
 * otherwise. Returns as sale_answer_503. */
int sale_answer_db(const deduct_env *env, deduct_result *out, const db_conn *conn, const char *what,
                   int rc);

#endif
