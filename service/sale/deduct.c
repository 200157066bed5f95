/*
 * deduct.c - one deduction: the request's guard around the read-check-write, in sale.h's
 * order of steps: deduct_execute_as() takes steps 1 to 3 and 9 itself, and sale_run the
 * rest. A batched mode and a sharded one run the same sale from their own engines (batch.c,
 * sharded.c), once per batch and once per segment.
 */
#include "service/sale/deduct.h"

#include <stdio.h>
#include <string.h>

#include "service/sale/batch.h"
#include "service/clock.h"
#include "service/sale/sale.h"
#include "service/sale/sharded.h"

/* The sale's stages into out (deduct.h's deduct_stage); REST is what the others leave of
 * the whole, from `began`. A hook's pauses are not a sale's cost: such a sale is not timed. */
static void keep_stages(deduct_result *out, const sale *s, int64_t began)
{
    int64_t rest = clock_now_ns() - began;

    out->timed = s->hook == NULL;
    out->stage_ns[DEDUCT_STAGE_CLAIM] = s->stage_ns[DEDUCT_STAGE_CLAIM];
    out->stage_ns[DEDUCT_STAGE_COMMIT] = s->stage_ns[DEDUCT_STAGE_COMMIT];
    out->stage_ns[DEDUCT_STAGE_RELEASE] += s->stage_ns[DEDUCT_STAGE_RELEASE];
    for (int i = 0; i < DEDUCT_STAGE_REST; i++)
        rest -= out->stage_ns[i];
    out->stage_ns[DEDUCT_STAGE_REST] = rest;
}

/* Looks for a stored answer on a connection of its own, before any guard is taken, so that
 * a retry does not queue for the lock. 1 when answered: replayed, or 503 when PostgreSQL
 * took the sale's whole time against it (*budget, base.h's db_deadline_ms) without
 * answering, so that the sale neither takes its guard nor borrows again; 0 to go on; -1 when
 * the answer could not be built (out of memory). */
static int try_replay(const deduct_env *env, int64_t goods_id, const char *key, deduct_result *out,
                      int64_t *budget)
{
    db_conn *conn = NULL;
    int answered;

    if (sale_borrow(env, *budget, &conn) != DB_OK)
        return 0; /* the main path will meet the same failure and answer it */
    answered = sale_replay(conn, goods_id, key, out) ? 1 : 0;
    if (answered == 0 && env->db_deadline_ms > 0 && db_conn_budget_left(conn) <= 0)
        answered = sale_answer_db(env, out, conn, "replay", DB_ERR_UNAVAILABLE) == 0 ? 1 : -1;
    sale_give_back(env, budget, conn);
    return answered;
}

int deduct_execute(const deduct_env *env, const mode *m, int64_t goods_id, int64_t count,
                   const char *idempotency_key, const deduct_hook *hook, deduct_result *out)
{
    return deduct_execute_as(env, m, goods_id, count, idempotency_key, NULL, hook, out);
}

bool deduct_batches(const deduct_env *env, const mode *m)
{
    return m->batched && env->batch != NULL;
}

int deduct_execute_as(const deduct_env *env, const mode *m, int64_t goods_id, int64_t count,
                      const char *idempotency_key, const char *request_id, const deduct_hook *hook,
                      deduct_result *out)
{
    sale_line line = {.count = count, .key = idempotency_key, .request_id = request_id, .out = out};
    guard_hold hold;
    sale s = {.env = env,
              .mode = m,
              .goods_id = goods_id,
              .lines = &line,
              .n = 1,
              .source = SALE_FROM_GOODS,
              .holds = &hold,
              .n_holds = 1,
              .hook = hook,
              /* A cache rung deletes the cached stock when it leaves (service/guards/cache.h): only
               * once COMMIT has answered, or a miss between the two reads the old row and
               * caches it for good. */
              .leave_after_commit = m->cache != MODE_CACHE_NONE};
    char detail[256] = "";
    int64_t began = clock_now_ns(), at;
    int64_t budget = env->db_deadline_ms; /* the sale's time against PostgreSQL (base.h) */
    int rc, result;

    memset(out, 0, sizeof(*out));

    if (hook == NULL && deduct_batches(env, m))
        return batch_execute(env->batch, env, m, goods_id, count, idempotency_key, request_id, out);
    if (m->parts != NULL && hook == NULL)
        return sharded_execute(env, m, goods_id, count, idempotency_key, request_id, out);

    rc = idempotency_key != NULL ? try_replay(env, goods_id, idempotency_key, out, &budget) : 0;
    if (rc != 0)
        return rc > 0 ? 0 : -1;

    at = clock_now_ns();
    rc = m->enter(env->guards, goods_id, &hold, detail, sizeof(detail));
    out->stage_ns[DEDUCT_STAGE_ACQUIRE] = clock_now_ns() - at;
    out->waited = hold.waited;
    out->wait_seconds = hold.wait_seconds;
    out->handed_off = hold.handed_off;
    out->handoff_seconds = hold.handoff_seconds;
    if (rc != GUARD_OK)
        return sale_answer_503(env, out, guard_outcome(rc), detail);

    /* The hook stops a deduction at "entered" as its guard would have failed. */
    rc = hook != NULL && hook->at != NULL
             ? hook->at(hook->arg, DEDUCT_AT_ENTERED, &hold, detail, sizeof(detail))
             : GUARD_OK;
    if (rc != GUARD_OK) {
        result = sale_answer_503(env, out, guard_outcome(rc), detail);
        m->leave(env->guards, &hold);
        return result;
    }

    /* The connection after the guard (sale.h, step 3). */
    rc = sale_borrow(env, budget, &s.conn);
    if (rc != DB_OK) {
        result = sale_answer_db(env, out, NULL, "connect", rc);
    } else {
        /* Steps 4 to 8 (sale.h), once. */
        result = sale_run(&s) < 0 ? -1 : 0;
        sale_give_back(env, &budget, s.conn);
    }

    if (!s.left) {
        at = clock_now_ns();
        m->leave(env->guards, &hold);
        out->stage_ns[DEDUCT_STAGE_RELEASE] = clock_now_ns() - at;
    }
    keep_stages(out, &s, began);
    return result;
}
