/*
 * internal.h - what the two files of the sale share, and the rest of the project must not use
 * (sale.h is the sale's interface, stock.h its pure parts and the fold):
 *
 *   sale.c    the transaction: its steps in sale.h's order (begin, the keys' claims, read,
 *             check, write, record, store, the last look at the guards, commit), the hook's
 *             points, the retries; the answers of its lines, and the answers stored with the
 *             keys
 *   stock.c   the stock: where it is read from and written back to (sale_source), how the
 *             check shares it among the pending lines (the tally), the fold of the segments
 * Calls run one way: sale.c -> stock.c.
 *
 * A line is pending when the run must still answer it: not replayed from the store
 * (sale_line.answered) and not the twin of an earlier line with the same key.
 *
 * Names here are sale__something: internal but not static, so that each file stays small.
 */
#ifndef SERVICE_SALE_INTERNAL_H
#define SERVICE_SALE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/sale/base.h"

/* ---- stock.c: the tally of one run ---- */

/* Arrays of `pending` entries, in one allocation; a sale of one line (most) uses the room
 * inside. */
typedef struct sale_tally {
    int64_t stock; /* as read: the row's, the segment's, or the goods' whole stock */
    tx_seen seen;  /* a PostgreSQL rung's read, for its write */
    int64_t asked; /* the pending lines' counts together */
    int64_t after; /* what is left once the sold lines took theirs */
    size_t pending, n_sold;
    size_t *line;           /* pending line j is s->lines[line[j]] */
    int64_t *counts, *left; /* per pending line */
    bool *sold;
    int64_t *sold_counts, *order_ids; /* per sold line, in order */
    const char **sold_ids;
    void *heap;
    size_t one_line;
    int64_t one[5];
    const char *one_id;
    bool one_sold;
} sale_tally;

/* Whether line l is pending (see the top). */
bool sale__pending(const sale_line *l);

/* Fills *t with s's pending lines in arrival order (t->line, t->counts, t->asked); the rest
 * zero. false when out of memory. sale__tally_free() frees it either way. */
bool sale__tally_init(sale_tally *t, const sale *s);
void sale__tally_free(sale_tally *t);

/* ---- stock.c: the sources (statements only, inside the open transaction) ---- */

/*
 * Reads the stock s sells from into t->stock (and t->seen for a PostgreSQL rung), from
 * s->source: SALE_FROM_GOODS in the rung's own shape, by a claim with the holding's token
 * when it is fenced, else by a plain read; SALE_FROM_SEGMENT by the segment's fenced claim;
 * SALE_FROM_SEGMENTS by the gathered, locked read, each segment's fence checked against its
 * holding; SALE_FROM_HINT by a plain read of all. A DB_* code: DB_ERR_FENCED with detail
 * filled (and the lock's counter moved past the stored token, sale__fence_refused),
 * DB_ERR_INSUFFICIENT for a rung's read that checked in SQL.
 */
int sale__read_stock(sale *s, sale_tally *t, char *detail, size_t detail_len);

/* Writes what is left (t->after) back where it was read from (SALE_FROM_SEGMENTS: spread
 * evenly over the segments, sale_split). *total_left gets the goods' whole stock after the
 * write. A DB_* code (DB_ERR_RETRY: an optimistic rung lost its race). */
int sale__write_stock(sale *s, const sale_tally *t, int64_t *total_left);

/* The failed step's name for a 503 of a read or a write from `source` ("read stock",
 * "claim segment", ...). */
const char *sale__read_what(sale_source source);
const char *sale__write_what(sale_source source);

/* A fenced claim of the goods row was refused: moves the lock's counter past what the
 * database has seen (mode.fence_refused: the counter may be behind the database after a
 * failover, and would refuse every next holding too), and says why into detail. */
void sale__fence_refused(sale *s, char *detail, size_t detail_len);

/* Whether segments of goods_id hold stock (left there by redis-sharded): one plain read.
 * false on a failure too (the fold would meet the same failure: answer what was read). */
bool sale__segments_hold_stock(db_conn *conn, int64_t goods_id);

#endif
