/*
 * stock.c - the stock of a sale (stock.h, internal.h): where it is read from and written back
 * to (sale.h's sale_source: the goods row in one of three ways, a PostgreSQL rung's own shape,
 * a fenced claim or a plain read; one segment's row; the goods row and every segment
 * gathered; all of them read as a hint), how the check shares it among the lines (the tally
 * of one run, the arrival-order allocation, the even split), and the fold of redis-sharded's
 * segments back into the goods row, a transaction of its own.
 *
 * Statements and arithmetic only, inside the sale's open transaction (the fold aside): sale.c
 * answers a failure and rolls back.
 */
#include "service/guards/outage.h"
#include "service/sale/internal.h"
#include "service/sale/stock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the tally: the pending lines and their shares -------------------------------------- */

bool sale__pending(const sale_line *l)
{
    return !l->answered && l->twin == NULL;
}

bool sale__tally_init(sale_tally *t, const sale *s)
{
    size_t n = 0;

    memset(t, 0, sizeof(*t));
    for (size_t i = 0; i < s->n; i++)
        n += sale__pending(&s->lines[i]);
    if (n <= 1) {
        t->line = &t->one_line;
        t->counts = &t->one[0];
        t->left = &t->one[1];
        t->sold_counts = &t->one[2];
        t->order_ids = &t->one[3];
        t->sold_ids = &t->one_id;
        t->sold = &t->one_sold;
    } else {
        char *p = malloc(n * (sizeof(size_t) + 4 * sizeof(int64_t) + sizeof(char *) + 1));
        if (p == NULL)
            return false;
        t->heap = p;
        t->line = (size_t *)(void *)p;
        p += n * sizeof(size_t);
        t->counts = (int64_t *)(void *)p;
        t->left = t->counts + n;
        t->sold_counts = t->left + n;
        t->order_ids = t->sold_counts + n;
        p += 4 * n * sizeof(int64_t);
        t->sold_ids = (const char **)(void *)p;
        p += n * sizeof(char *);
        t->sold = (bool *)(void *)p;
    }
    for (size_t i = 0; i < s->n; i++)
        if (sale__pending(&s->lines[i])) {
            t->line[t->pending] = i;
            t->counts[t->pending++] = s->lines[i].count;
            t->asked += s->lines[i].count;
        }
    return true;
}

void sale__tally_free(sale_tally *t)
{
    free(t->heap);
    t->heap = NULL;
}

int64_t sale_allocate(int64_t stock, const int64_t *counts, size_t n, bool *sold, int64_t *left)
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

void sale_split(int64_t total, int k, int64_t *shares)
{
    for (int i = 0; i < k; i++)
        shares[i] = total / k + (i < total % k ? 1 : 0);
}

/* ---- the sources ------------------------------------------------------------------------ */

void sale__fence_refused(sale *s, char *detail, size_t detail_len)
{
    const guard_hold *hold = &s->holds[0];
    int64_t stored = 0;

    if (s->mode->fence_refused != NULL &&
        db_fence_of(s->conn, s->goods_id, hold->fence_source, &stored) == DB_OK)
        s->mode->fence_refused(s->env->guards, hold, stored);
    snprintf(detail, detail_len, "fencing token %lld is older than the stored one",
             (long long)hold->fence);
}

static void segment_fenced(int seg, int64_t token, char *detail, size_t detail_len)
{
    snprintf(detail, detail_len,
             "fencing token %" PRId64 " of segment %d is older than the stored one", token, seg);
}

/* SALE_FROM_GOODS's read, in one of three ways. */
static int read_goods(sale *s, sale_tally *t, char *detail, size_t detail_len)
{
    const guard_hold *hold = &s->holds[0];
    int rc;

    /* A PostgreSQL rung reads in its own shape (a row lock, an advisory lock, a conditional
     * update, a versioned read). Otherwise, with a token, the read claims the row for it:
     * see db_stock_claim for why this closes the gap a token checked only at the write
     * leaves open. */
    if (s->mode->tx != NULL) {
        rc = s->mode->tx->read(s->conn, s->goods_id, t->asked, &t->seen);
        t->stock = t->seen.stock;
    } else if (hold->fenced && !s->mode->fence_at_write)
        rc = db_stock_claim(s->conn, s->goods_id, hold->fence_source, hold->fence, &t->stock);
    else
        rc = db_stock_read(s->conn, s->goods_id, &t->stock);
    if (rc == DB_ERR_FENCED)
        sale__fence_refused(s, detail, detail_len);
    return rc;
}

/* SALE_FROM_SEGMENTS's read: the goods row and every segment, locked (db_segments_gather),
 * each segment's fence checked as a claim checks it. */
static int read_gathered(sale *s, sale_tally *t, char *detail, size_t detail_len)
{
    int64_t goods_stock = 0, rest = 0, stocks[DB_SEGMENTS_MAX], fences[DB_SEGMENTS_MAX];
    int rc;

    rc = db_segments_gather(s->conn, s->goods_id, s->segment, &goods_stock, stocks, fences, &rest);
    if (rc != DB_OK)
        return rc;
    t->stock = goods_stock + rest;
    for (int i = 0; i < s->segment; i++) {
        /* A newer token on any segment: one of our locks was superseded; sell nothing. */
        if (fences[i] > s->holds[i].fence) {
            segment_fenced(i, s->holds[i].fence, detail, detail_len);
            return DB_ERR_FENCED;
        }
        t->stock += stocks[i];
    }
    return DB_OK;
}

int sale__read_stock(sale *s, sale_tally *t, char *detail, size_t detail_len)
{
    int64_t goods_stock = 0, hints[DB_SEGMENTS_MAX];
    int rc;

    switch (s->source) {
    case SALE_FROM_GOODS:
        return read_goods(s, t, detail, detail_len);
    case SALE_FROM_SEGMENT:
        rc = db_segment_claim(s->conn, s->goods_id, s->segment, s->holds[0].fence, &t->stock);
        if (rc == DB_ERR_FENCED)
            segment_fenced(s->segment, s->holds[0].fence, detail, detail_len);
        return rc;
    case SALE_FROM_SEGMENTS:
        return read_gathered(s, t, detail, detail_len);
    case SALE_FROM_HINT:
        return db_segments_read(s->conn, s->goods_id, s->segment, &goods_stock, hints, &t->stock);
    }
    return DB_ERR_INVALID;
}

int sale__write_stock(sale *s, const sale_tally *t, int64_t *total_left)
{
    int64_t shares[DB_SEGMENTS_MAX], tokens[DB_SEGMENTS_MAX];

    *total_left = t->after;
    switch (s->source) {
    case SALE_FROM_GOODS:
        if (s->mode->tx != NULL)
            return s->mode->tx->write(s->conn, s->goods_id, t->asked, &t->seen);
        if (s->mode->fence_at_write && s->holds[0].fenced)
            return db_stock_write_fenced(s->conn, s->goods_id, t->after, s->holds[0].fence_source,
                                         s->holds[0].fence);
        return db_stock_write(s->conn, s->goods_id, t->after);
    case SALE_FROM_SEGMENT:
        return db_segment_write(s->conn, s->goods_id, s->segment, t->after, total_left);
    case SALE_FROM_SEGMENTS:
        /* What is left, spread evenly: the goods row's stock and any segment beyond k join
         * the K segments; the next sales find every segment able to sell again. */
        sale_split(t->after, s->segment, shares);
        for (int i = 0; i < s->segment; i++)
            tokens[i] = s->holds[i].fence;
        return db_segments_spread(s->conn, s->goods_id, 0, s->segment, shares, tokens);
    case SALE_FROM_HINT:
        break;
    }
    return DB_ERR_INVALID;
}

static const char *const read_what[] = {"read stock", "claim segment", "gather segments",
                                        "read segments"};
static const char *const write_what[] = {"write stock", "write segment", "spread segments", "?"};

const char *sale__read_what(sale_source source)
{
    return read_what[source];
}

const char *sale__write_what(sale_source source)
{
    return write_what[source];
}

bool sale__segments_hold_stock(db_conn *conn, int64_t goods_id)
{
    int64_t goods_stock = 0, seg[1], total = 0;

    return db_segments_read(conn, goods_id, 1, &goods_stock, seg, &total) == DB_OK &&
           total > goods_stock;
}

int sale_fold(db_conn *conn, int64_t goods_id, int64_t *moved, char *detail, size_t detail_len)
{
    int64_t goods_stock = 0, seg[1], total = 0;
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
    outage_postgresql(rc, conn, "fold segments", detail, detail_len);
    (void)db_rollback(conn);
    *moved = 0;
    return rc == DB_ERR_NOT_FOUND ? DB_OK : rc;

out:
    if (rc == DB_ERR_NOT_FOUND)
        return DB_OK;
    if (rc != DB_OK) {
        *moved = 0;
        outage_postgresql(rc, conn, "fold segments", detail, detail_len);
    }
    return rc;
}
