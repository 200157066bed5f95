/*
 * sale_answer.c - the answers of a sale (sale_answer.h), and those every way of selling
 * shares (sale.h): one 503, one answer for a failed statement.
 */
#include "service/sale/sale_answer.h"

#include <stdio.h>
#include <stdlib.h>

int sale_answer_503(const deduct_env *env, deduct_result *out, deduct_outcome error,
                    const char *detail)
{
    free(out->body);
    out->status = 503;
    out->outcome = error;
    snprintf(out->detail, sizeof(out->detail), "%s", detail);
    out->body = env->bodies->refused(deduct_outcome_name(error), detail);
    return out->body != NULL ? 0 : -1;
}

int sale_answer_db(const deduct_env *env, deduct_result *out, const db_conn *conn, const char *what,
                   int rc)
{
    char why[200], detail[256];

    snprintf(detail, sizeof(detail), "postgresql: %s: %s", what,
             db_describe_error(rc, conn, why, sizeof(why)));
    return sale_answer_503(
        env, out, rc == DB_ERR_COMMIT_UNKNOWN ? DEDUCT_COMMIT_UNKNOWN : DEDUCT_UNAVAILABLE, detail);
}

void sale_fail(sale *s, deduct_outcome error, const char *detail)
{
    for (size_t i = 0; i < s->n; i++)
        if (sale__pending(&s->lines[i]))
            (void)sale_answer_503(s->env, s->lines[i].out, error, detail);
}

/*
 * A failed statement `what`: 503 lock_timeout when it waited for a lock inside PostgreSQL
 * past the bound (lock_timeout, deduct_env.lock_wait_ms), as a guard's wait would;
 * commit_unknown when COMMIT was sent and its answer lost (the sale may have happened: a
 * retry with the same Idempotency-Key waits for that transaction and replays its answer);
 * unavailable otherwise. Called before any rollback, which would replace the error's text.
 */
void sale_fail_db(sale *s, const char *what, int rc)
{
    char why[200], detail[256];

    if (rc == DB_ERR_LOCK_TIMEOUT) {
        snprintf(detail, sizeof(detail), "postgresql: %s: no lock within lock_timeout (%lld ms)",
                 what, (long long)s->env->lock_wait_ms);
        sale_fail(s, DEDUCT_LOCK_TIMEOUT, detail);
        return;
    }
    snprintf(detail, sizeof(detail), "postgresql: %s: %s", what,
             db_describe_error(rc, s->conn, why, sizeof(why)));
    sale_fail(s, rc == DB_ERR_COMMIT_UNKNOWN ? DEDUCT_COMMIT_UNKNOWN : DEDUCT_UNAVAILABLE, detail);
}

bool sale__answer_lines(sale *s, const sale_tally *t, bool unknown, int64_t offset)
{
    bool ok = true;

    for (size_t j = 0, sold = 0; j < t->pending; j++) {
        deduct_result *out = s->lines[t->line[j]].out;
        free(out->body);
        if (unknown) {
            out->status = 404;
            out->outcome = DEDUCT_UNKNOWN_GOODS;
            out->body = s->env->bodies->unknown_goods(s->goods_id);
        } else if (!t->sold[j]) {
            out->status = 409;
            out->outcome = DEDUCT_INSUFFICIENT_STOCK;
            out->body = s->env->bodies->insufficient(s->goods_id, t->left[j]);
        } else {
            out->status = 200;
            out->outcome = DEDUCT_DEDUCTED;
            out->body =
                s->env->bodies->deducted(s->goods_id, t->counts[j], t->left[j] + offset,
                                         t->order_ids[sold++], s->mode->name, s->env->instance);
        }
        ok = ok && out->body != NULL;
    }
    return ok;
}
