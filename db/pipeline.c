/*
 * pipeline.c - the fenced sale in two round trips (libpq's pipeline mode).
 *
 * A holder's sale, statement by statement, waits on five round trips to PostgreSQL while
 * every other holder waits on its lock: BEGIN, the claim, the write, the order, COMMIT. In
 * pipeline mode libpq sends several statements before reading any answer, and the server
 * runs them in order, skipping the rest of the batch after an error (up to the Sync). So
 * BEGIN and the claim travel together (db_claim_begin), and, once the service has checked
 * the stock in C, the write, the order and COMMIT together (db_sale_commit): two round
 * trips. The check stays in the service between them; only the waiting is shortened.
 *
 * Each batch is one round trip and is bounded as one: its answers must all come within the
 * pool's reply_timeout_ms, or the connection is marked broken (as db__await_result does).
 * Statements are prepared before the pipeline starts (a prepare is a round trip of its
 * own, once per session).
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "db/internal.h"

#define PIPE_MAX 3 /* statements in one batch at most */

static void broken(db_conn *c, const char *why)
{
    if (why != NULL)
        db__set_error(c, "%s", why);
    else
        db__set_error(c, "%s", PQerrorMessage(c->pg));
    c->broken = true;
}

/* c broken after a failed wait (ready: db__wait_socket's answer): no answer by the deadline
 * (the pool's reply bound: db_conn_no_answer_ms says so), or poll itself failed. */
static void wait_failed(db_conn *c, int ready, const char *why)
{
    broken(c, ready == 0 ? why : "poll failed");
    if (ready == 0 && c->pool != NULL)
        c->no_answer_ms = c->pool->reply_timeout_ms;
}

/* Flushes what is queued, before deadline. DB_OK, or DB_ERR_UNAVAILABLE (c broken). */
static int flush_by(db_conn *c, int64_t deadline, const char *why)
{
    int flushed, ready;

    while ((flushed = PQflush(c->pg)) == 1) {
        ready = db__wait_socket(c->pg, POLLOUT, deadline);
        if (ready <= 0) {
            wait_failed(c, ready, why);
            return DB_ERR_UNAVAILABLE;
        }
    }
    if (flushed < 0) {
        broken(c, NULL);
        return DB_ERR_UNAVAILABLE;
    }
    return DB_OK;
}

/* The next result of the pipeline, read before deadline; NULL between statements' results.
 * *lost set (and c broken) when the connection failed or the deadline passed. */
static PGresult *next_by(db_conn *c, int64_t deadline, const char *why, bool *lost)
{
    int ready;

    while (PQisBusy(c->pg)) {
        ready = db__wait_socket(c->pg, POLLIN, deadline);
        if (ready <= 0) {
            wait_failed(c, ready, why);
            *lost = true;
            return NULL;
        }
        if (!PQconsumeInput(c->pg)) {
            broken(c, NULL);
            *lost = true;
            return NULL;
        }
    }
    return PQgetResult(c->pg);
}

/* What became of a batch, beyond its code. */
typedef struct pipe_out {
    bool sent;    /* some of it may have reached the server */
    bool refused; /* a statement's error came back: the ones after it were skipped */
    int failed;   /* the statement refused, or the first whose answer did not come */
} pipe_out;

/* Prepares ids[0..n-1] where needed, enters pipeline mode and sends them (params[i] each)
 * and a Sync, flushed by *deadline: reply_timeout_ms from entering the mode, which the
 * caller keeps for the answers (why: the text of its expiry). DB_OK, or the code of what
 * failed (c broken when the exchange itself did). */
static int send_batch(db_conn *c, const enum db__stmt_id *ids, const char *const *const *params,
                      int n, int64_t *deadline, char *why, size_t why_len, pipe_out *out)
{
    int timeout_ms = c->pool != NULL ? c->pool->reply_timeout_ms : 0;
    int rc, i;

    for (i = 0; i < n; i++) {
        rc = db__prepare(c, ids[i]);
        if (rc != DB_OK)
            return rc;
    }
    if (!PQenterPipelineMode(c->pg)) {
        broken(c, NULL);
        return DB_ERR_UNAVAILABLE;
    }
    snprintf(why, why_len, "no answer from PostgreSQL within %d ms", timeout_ms);
    *deadline = db__reply_deadline(c);
    out->sent = true;
    for (i = 0; i < n; i++)
        if (!db__send_prepared(c, ids[i], params[i])) {
            broken(c, NULL);
            return DB_ERR_UNAVAILABLE;
        }
    if (!PQpipelineSync(c->pg)) {
        broken(c, NULL);
        return DB_ERR_UNAVAILABLE;
    }
    return flush_by(c, *deadline, why);
}

/* Reads the n statements' results by deadline: one per statement (then a NULL), an ABORTED
 * one for each statement skipped after an error. res[i] as run_pipeline's. Returns DB_OK or
 * the first refusal's code (out->refused, out->failed); *lost set when the connection was
 * lost on the way (out->failed: the first statement whose answer did not come). */
static int read_answers(db_conn *c, const enum db__stmt_id *ids, int n, int64_t deadline,
                        const char *why, PGresult **res, pipe_out *out, bool *lost)
{
    int rc = DB_OK;

    for (int i = 0; i < n; i++) {
        PGresult *r = next_by(c, deadline, why, lost), *extra;
        if (*lost) {
            if (rc == DB_OK)
                out->failed = i;
            return rc;
        }
        if (r != NULL && PQresultStatus(r) == PGRES_PIPELINE_ABORTED) {
            PQclear(r);
        } else if (rc == DB_OK) {
            int crc = db__check(c, r, db__want(ids[i]));
            if (crc == DB_OK)
                res[i] = r;
            else {
                rc = crc;
                out->failed = i;
                if (c->broken) {
                    *lost = true;
                    return rc;
                }
                out->refused = true;
            }
        } else {
            PQclear(r);
        }
        /* The NULL that ends statement i's results. */
        while ((extra = next_by(c, deadline, why, lost)) != NULL)
            PQclear(extra);
        if (*lost) {
            if (rc == DB_OK)
                out->failed = i + 1 < n ? i + 1 : i;
            return rc;
        }
    }
    return rc;
}

/*
 * Sends statements ids[0..n-1] (params[i] each) in one pipeline ending with a Sync, and
 * reads every answer within one reply_timeout_ms. res[i] gets statement i's result when it
 * succeeded with its expected status, NULL otherwise. Returns DB_OK when all succeeded;
 * else the first refusal's code (db__check's mapping, c->err its text), or
 * DB_ERR_UNAVAILABLE (c broken) when the exchange itself failed; *out says where. The
 * session leaves pipeline mode before returning, unless it is broken.
 */
static int run_batch(db_conn *c, const enum db__stmt_id *ids, const char *const *const *params,
                     int n, const db_on_sent *on_sent, PGresult **res, pipe_out *out)
{
    int64_t deadline = 0;
    char why[96];
    bool lost = false;
    PGresult *sync;
    int rc, i;

    out->sent = out->refused = false;
    out->failed = 0;
    for (i = 0; i < n; i++)
        res[i] = NULL;
    if (!c->pg || c->broken) {
        db__set_error(c, "the connection is closed");
        return DB_ERR_UNAVAILABLE;
    }
    rc = send_batch(c, ids, params, n, &deadline, why, sizeof(why), out);
    if (rc != DB_OK)
        return rc;
    if (on_sent != NULL && on_sent->fn != NULL) {
        /* Everything is on the wire: the caller's work in the meantime (db.h), then the
         * answers, within a bound of their own from now. */
        on_sent->fn(on_sent->arg);
        deadline = db__reply_deadline(c);
    }
    rc = read_answers(c, ids, n, deadline, why, res, out, &lost);
    if (lost)
        goto lost;
    /* The Sync's result. */
    sync = next_by(c, deadline, why, &lost);
    if (lost)
        goto lost;
    if (sync == NULL || PQresultStatus(sync) != PGRES_PIPELINE_SYNC) {
        PQclear(sync);
        broken(c, "pipeline: no Sync where one was due");
        return DB_ERR_UNAVAILABLE;
    }
    PQclear(sync);
    if (!PQexitPipelineMode(c->pg)) {
        broken(c, NULL);
        return DB_ERR_UNAVAILABLE;
    }
    if (rc != DB_OK)
        for (i = 0; i < n; i++) {
            PQclear(res[i]);
            res[i] = NULL;
        }
    return rc;

lost:
    for (i = 0; i < n; i++) {
        PQclear(res[i]);
        res[i] = NULL;
    }
    return DB_ERR_UNAVAILABLE;
}

/* run_batch, its time taken off c's budget (db_conn_set_budget). */
static int run_pipeline(db_conn *c, const enum db__stmt_id *ids, const char *const *const *params,
                        int n, const db_on_sent *on_sent, PGresult **res, pipe_out *out)
{
    int64_t since = db__now_ms();
    int rc = run_batch(c, ids, params, n, on_sent, res, out);

    db__spend(c, since);
    return rc;
}

int db_claim_begin(db_conn *conn, int64_t goods_id, const char *source, int64_t token,
                   int64_t lock_timeout_ms, int64_t *stock)
{
    db__claim_params claim;
    char ms_buf[DB__I64_LEN];
    const char *bound[1] = {db__i64(ms_buf, lock_timeout_ms)};
    /* With a bound, SET LOCAL lock_timeout between BEGIN and the claim, in the same trip. */
    const bool bounded = lock_timeout_ms > 0;
    const enum db__stmt_id ids[3] = {DB__BEGIN, bounded ? DB__SET_LOCK_TIMEOUT : DB__STOCK_CLAIM,
                                     DB__STOCK_CLAIM};
    const char *const *params[3] = {NULL, bounded ? bound : claim.v, claim.v};
    const int n = bounded ? 3 : 2;
    PGresult *res[3];
    pipe_out out;
    int rc;

    if (!conn || !source || !stock || lock_timeout_ms < 0)
        return DB_ERR_INVALID;
    db__claim_params_make(&claim, goods_id, token, source);
    rc = run_pipeline(conn, ids, params, n, NULL, res, &out);
    if (rc != DB_OK)
        return rc;
    for (int i = 0; i < n - 1; i++)
        PQclear(res[i]);
    if (PQntuples(res[n - 1]) == 0)
        rc = db__why_not_claimed(conn, claim.id);
    else
        rc = db__get_i64(conn, res[n - 1], 0, 0, stock);
    PQclear(res[n - 1]);
    return rc;
}

int db_begin_lock_timeout(db_conn *conn, db_isolation isolation, int64_t ms)
{
    char ms_buf[DB__I64_LEN];
    const char *bound[1];
    int begin = db__begin_statement(isolation);
    enum db__stmt_id ids[2] = {DB__BEGIN, DB__SET_LOCK_TIMEOUT};
    const char *const *params[2] = {NULL, bound};
    PGresult *res[2];
    pipe_out out;
    int rc;

    if (!conn || ms < 1 || begin < 0)
        return DB_ERR_INVALID; /* 0 would mean "no bound" to PostgreSQL */
    ids[0] = (enum db__stmt_id)begin;
    bound[0] = db__i64(ms_buf, ms);
    rc = run_pipeline(conn, ids, params, 2, NULL, res, &out);
    if (rc != DB_OK)
        return rc;
    PQclear(res[0]);
    PQclear(res[1]);
    return DB_OK;
}

/*
 * The second batch of a sale, shared by the single sale and the batched one: the write of
 * new_stock to goods id_text, the order statement order_id with its parameters, and COMMIT.
 * On DB_OK, *order_res is the order statement's result (the caller clears it). Otherwise
 * as db_sale_commit says, c->err naming the step.
 */
static int write_order_commit(db_conn *conn, const char *id_text, int64_t new_stock,
                              enum db__stmt_id order_id, const char *const *order_params,
                              const db_on_sent *on_sent, PGresult **order_res)
{
    char stock_buf[DB__I64_LEN];
    const char *write[2];
    const enum db__stmt_id ids[3] = {DB__STOCK_WRITE, order_id, DB__COMMIT};
    const char *const *params[3] = {write, order_params, NULL};
    PGresult *res[3];
    pipe_out out;
    int rc;

    *order_res = NULL;
    write[0] = id_text;
    write[1] = db__i64(stock_buf, new_stock);
    rc = run_pipeline(conn, ids, params, 3, on_sent, res, &out);
    /* The batch was sent, nothing in it was refused, and COMMIT's answer did not come
     * (whichever answer was the first to be lost, COMMIT was sent behind it): the server
     * may have committed. */
    if (rc == DB_ERR_UNAVAILABLE && out.sent && !out.refused)
        return DB_ERR_COMMIT_UNKNOWN;
    if (rc == DB_ERR_UNAVAILABLE)
        return rc;
    if (rc != DB_OK) {
        /* A statement was refused: the rest of the batch was skipped, COMMIT with it, and
         * the transaction is left failed. End it here, so that nothing of it remains. */
        char keep[DB__ERR_LEN];
        snprintf(keep, sizeof(keep), "%s", conn->err);
        if (!conn->broken)
            (void)db_rollback(conn);
        db__set_error(conn, "%s: %s",
                      out.failed == 0   ? "write stock"
                      : out.failed == 1 ? "record order"
                                        : "commit",
                      keep);
        return rc;
    }
    /* After the claim the row is the caller's: the write cannot miss it. Should it have,
     * COMMIT still ran and recorded an order without its write: say so loudly, and not as a
     * sale that did not happen (the order is in the table). */
    if (strcmp(PQcmdStatus(res[2]), "COMMIT") != 0) {
        db__set_error(conn, "COMMIT rolled back: the transaction had failed");
        rc = DB_ERR_QUERY;
    } else if (strcmp(PQcmdTuples(res[0]), "1") != 0) {
        db__set_error(conn, "committed, but the write found no row of goods %s (was it claimed?)",
                      id_text);
        rc = DB_ERR_COMMIT_UNKNOWN;
    } else {
        *order_res = res[1];
        res[1] = NULL;
    }
    for (int i = 0; i < 3; i++)
        PQclear(res[i]);
    return rc;
}

int db_sale_commit(db_conn *conn, int64_t goods_id, int64_t new_stock, int64_t count,
                   const char *mode, const char *instance, int64_t fence, const char *fence_source,
                   const char *request_id, const db_on_sent *on_sent, int64_t *order_id)
{
    char id_buf[DB__I64_LEN], count_buf[DB__I64_LEN], fence_buf[DB__I64_LEN];
    const char *order[7];
    PGresult *res = NULL;
    int rc;

    if (!conn || !mode || !instance || !fence_source || !order_id)
        return DB_ERR_INVALID;
    order[0] = db__i64(id_buf, goods_id);
    order[1] = db__i64(count_buf, count);
    order[2] = mode;
    order[3] = instance;
    order[4] = db__i64(fence_buf, fence);
    order[5] = fence_source;
    order[6] = request_id;
    rc = write_order_commit(conn, id_buf, new_stock, DB__ORDER_INSERT, order, on_sent, &res);
    if (rc != DB_OK)
        return rc;
    rc = db__get_i64(conn, res, 0, 0, order_id);
    PQclear(res);
    /* Committed: an answer we cannot read is a sale whose order id we cannot tell, not one
     * that did not happen. */
    return rc == DB_OK ? DB_OK : DB_ERR_COMMIT_UNKNOWN;
}

int db_batch_commit(db_conn *conn, int64_t goods_id, int64_t new_stock, const int64_t *counts,
                    size_t n, const char *mode, const char *instance, int64_t fence,
                    const char *fence_source, const char *const *request_ids,
                    const db_on_sent *on_sent, int64_t *order_ids)
{
    db__orders_params op;
    PGresult *res = NULL;
    int rc;

    if (!conn || !fence_source || !order_ids)
        return DB_ERR_INVALID;
    rc = db__orders_params_make(&op, goods_id, counts, n, mode, instance, &fence, fence_source,
                                request_ids);
    if (rc != DB_OK)
        return rc;
    rc = write_order_commit(conn, op.id, new_stock, DB__ORDERS_INSERT_MANY, op.v, on_sent, &res);
    int done = db__orders_done(conn, rc, &op, res, counts, n, order_ids);
    /* Committed: a mismatch of the ids is a fault of ours, reported, not a sale undone; the
     * callers cannot tell whose order is whose, so every one of them is told unknown. */
    return rc == DB_OK && done != DB_OK ? DB_ERR_COMMIT_UNKNOWN : done;
}
