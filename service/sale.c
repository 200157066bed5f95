/*
 * sale.c - the steps every way of selling shares (sale.h).
 */
#include "service/sale.h"

#include <stdio.h>
#include <stdlib.h>

#include "service/response.h"

int sale_answer_503(deduct_result *out, const char *error, const char *detail)
{
    free(out->body);
    out->status = 503;
    out->outcome = error;
    snprintf(out->detail, sizeof(out->detail), "%s", detail);
    out->body = response_deduct_503(error, detail);
    return out->body != NULL ? 0 : -1;
}

int sale_answer_db(deduct_result *out, const db_conn *conn, const char *what, int rc)
{
    char why[200], detail[256];

    snprintf(detail, sizeof(detail), "postgresql: %s: %s", what,
             db_describe_error(rc, conn, why, sizeof(why)));
    return sale_answer_503(out, rc == DB_ERR_COMMIT_UNKNOWN ? "commit_unknown" : "unavailable",
                           detail);
}

void sale_fence_refused(guard_env *env, const mode *m, db_conn *conn, int64_t goods_id,
                        const guard_hold *hold, char *detail, size_t detail_len)
{
    int64_t stored = 0;

    /* The counter may be behind the database (a failover): move it past what the database
     * has seen, so the next holding's token passes. */
    if (m->fence_refused != NULL &&
        db_fence_of(conn, goods_id, hold->fence_source, &stored) == DB_OK)
        m->fence_refused(env, hold, stored);
    snprintf(detail, detail_len, "fencing token %lld is older than the stored one",
             (long long)hold->fence);
}

bool sale_segments_hold_stock(db_conn *conn, int64_t goods_id)
{
    int64_t goods_stock = 0, seg[1], total = 0;

    return db_segments_read(conn, goods_id, 1, &goods_stock, seg, &total) == DB_OK &&
           total > goods_stock;
}

int sale_fold(db_conn *conn, int64_t goods_id, int64_t *moved, char *detail, size_t detail_len)
{
    int64_t goods_stock = 0, seg[1], total = 0;
    char why[200];
    int rc;

    *moved = 0;
    detail[0] = '\0';
    /* Most goods have no segment stock: one plain read says so, with no transaction. */
    rc = db_segments_read(conn, goods_id, 1, &goods_stock, seg, &total);
    if (rc != DB_OK || total == goods_stock)
        goto out;
    rc = db_begin(conn);
    if (rc != DB_OK)
        goto out;
    rc = db_segments_fold(conn, goods_id, moved);
    if (rc == DB_OK) {
        rc = db_commit(conn);
        goto out;
    }
    /* The statement's error, before the rollback replaces it. */
    snprintf(detail, detail_len, "postgresql: fold segments: %s",
             db_describe_error(rc, conn, why, sizeof(why)));
    (void)db_rollback(conn);
    *moved = 0;
    return rc == DB_ERR_NOT_FOUND ? DB_OK : rc;

out:
    if (rc == DB_ERR_NOT_FOUND)
        return DB_OK;
    if (rc != DB_OK) {
        *moved = 0;
        snprintf(detail, detail_len, "postgresql: fold segments: %s",
                 db_describe_error(rc, conn, why, sizeof(why)));
    }
    return rc;
}
