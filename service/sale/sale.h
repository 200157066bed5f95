/*
 * sale.h - the read-check-write every mode runs, in one place: the single request
 * (deduct.c) runs it once, the batch (batch.c) once per batch, the segments (sharded.c)
 * once per segment or once over all of them. A sale is one transaction:
 *
 *   BEGIN -> claim each line's idempotency key (a stored answer is replayed)
 *   -> read the stock (a fenced claim, a plain read, or a PostgreSQL rung's own shape)
 *   -> check each line in arrival order against what is left (sale_allocate)
 *   -> write the stock computed here -> record the orders -> store the answers with the keys
 *   -> every guard still held? -> COMMIT
 *
 * The new stock is computed in C from the value read, not by "stock = stock - n" in SQL:
 * that read-modify-write across two statements is exactly the race the guards exist to
 * close. What differs between the ways of selling is only where the stock is read from
 * and written to (sale_source) and how many requests share the transaction (the lines).
 * The guard is the caller's: entered before the sale, left after it (tx-inside aside).
 *
 * It also holds the steps around it that every way of selling shares: one 503 answer and one
 * database-failure answer, and the fold of redis-sharded's segments back into the goods row
 * (a transaction of its own, which the service opens and commits around db_segments_fold).
 *
 * This header is the whole sale's interface; its code is cut by job: the transaction and
 * its steps (sale.c), the check's working state and arithmetic (sale_tally.c: sale_allocate,
 * sale_split), the answers (sale_answer.c: sale_answer_503, sale_answer_db, sale_fail,
 * sale_fail_db), the sources of the stock (sale_source.c: sale_fold), the stored answers
 * (sale_store.c: sale_replay). Their own headers are internal to the sale.
 */
#ifndef SERVICE_SALE_H
#define SERVICE_SALE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db/db.h"
#include "service/sale/base.h"
#include "service/guards/modes.h"

/* One request of a sale: what it asks for, and where its answer goes. */
typedef struct sale_line {
    int64_t count;
    const char *key;        /* Idempotency-Key or NULL */
    const char *request_id; /* the client's X-Request-Id, written with its order, or NULL */
    deduct_result *out;     /* its answer: status, body (malloc'd), outcome, detail */
    /* the sale's own, while it runs */
    bool answered;                /* the answer is final already (replayed from the store) */
    const struct sale_line *twin; /* NULL, or an earlier line of the sale with the same key,
                                     whose answer this one gets, as a replay would give it
                                     after the commit */
} sale_line;

/* Where a sale reads its stock from and writes it to. */
typedef enum sale_source {
    SALE_FROM_GOODS,    /* the goods row: every mode but redis-sharded's own sales. A line
                           it refuses while segments hold stock makes the sale fold them back
                           into the row (sale_fold) and run once more */
    SALE_FROM_SEGMENT,  /* one segment's row (redis-sharded's fast path), fenced with the
                           segment's token; a segment that does not cover is SALE_SHORT */
    SALE_FROM_SEGMENTS, /* the goods row and every segment, gathered, sold from in total and
                           spread evenly again (redis-sharded's slow path), under every
                           segment's lock */
    SALE_FROM_HINT,     /* the goods row and every segment read without a lock: only ever a
                           refusal (404, 409) stored with the key; stock that covers the line
                           is SALE_SHORT (go to the segments) */
} sale_source;

typedef struct sale {
    const deduct_env *env;
    const mode *mode; /* its still_held asks the holdings; its name goes with each order */
    int64_t goods_id;
    sale_line *lines; /* in arrival order: the first to come is the first served */
    size_t n;         /* 1..DB_ORDERS_MAX; more than one with SALE_FROM_GOODS only */
    sale_source source;
    int segment; /* SALE_FROM_SEGMENT: which; SEGMENTS and HINT: how many (1..DB_SEGMENTS_MAX) */
    guard_hold *holds; /* what the sale runs under, each asked still_held before COMMIT: one;
                          SALE_FROM_SEGMENTS: segment i's in holds[i]; HINT: none */
    size_t n_holds;
    db_conn *conn;           /* borrowed by the caller, after the guard */
    const deduct_hook *hook; /* or NULL; called with holds[0] at each deduct_point (one line) */
    /* Asked after the last look at the guards, just before COMMIT (the batch seals its
     * followers there); false: the sale rolls back and every line answers 503 lock_timeout
     * with commit_refused as the detail. NULL: always true. */
    bool (*may_commit)(void *arg);
    void *may_commit_arg;
    const char *commit_refused;
    /* The caller's choice: a sale in two round trips keeps the guard until COMMIT's answer
     * instead of giving it back once COMMIT is sent (sale.c, leave_once_sent). */
    bool leave_after_commit;
    /* set by the sale */
    int64_t stage_ns[DEDUCT_STAGES_]; /* where its time went: CLAIM, COMMIT, and RELEASE
                                         when it left the guard as COMMIT was sent (deduct.h) */
    int64_t lap_ns;                   /* the clock at the last stage boundary */
    bool left; /* the guard of holds[0] was left before the transaction ended: inside it
                  (tx-inside), or once its COMMIT was sent (a sale in two round trips); the
                  caller must not leave it again */
} sale;

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
 * The answer stored earlier under (goods_id, key), looked up on conn outside any
 * transaction before any guard is taken, so that a retry does not queue for the lock: true
 * with out set (status, body, outcome "replayed"); false when there is none or it could not
 * be read (the sale will meet the same failure and answer it).
 */
bool sale_replay(db_conn *conn, int64_t goods_id, const char *key, deduct_result *out);

/*
 * The arrival-order allocation, pure: `stock` units are left; request i asks counts[i].
 * Each request in turn is sold when what is left covers it, and then takes it; a request
 * that is not covered is refused and takes nothing (a later, smaller one may still be sold).
 * Sets sold[i] and left[i] (what is left after request i's turn: for a refused one, the
 * stock it was refused against). Returns the stock left after all n.
 */
int64_t sale_allocate(int64_t stock, const int64_t *counts, size_t n, bool *sold, int64_t *left);

/* Cuts `total` (>= 0) units into k (>= 1) shares as even as can be: the first total % k
 * shares get one unit more than the rest. (SALE_FROM_SEGMENTS spreads what is left so.) */
void sale_split(int64_t total, int k, int64_t *shares);

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

/*
 * Folds goods_id's segments back into its row, on conn outside any transaction: one plain
 * read, and when segments hold stock, a transaction of its own (BEGIN, db_segments_fold,
 * COMMIT). *moved gets the units moved. DB_OK (an unknown goods moves nothing) or a DB_ERR_*
 * code, with detail filled for the 503 ("postgresql: fold segments: <the statement's
 * error>", kept across the rollback).
 */
int sale_fold(db_conn *conn, int64_t goods_id, int64_t *moved, char *detail, size_t detail_len);

#endif
