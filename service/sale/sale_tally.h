/*
 * sale_tally.h - the check's working state of one run of a sale (internal to the sale:
 * sale.c and its modules sale_answer.c, sale_source.c, sale_store.c): the stock read, and
 * each pending line's share of it.
 *
 * A line is pending when the run must still answer it: not replayed from the store
 * (sale_line.answered) and not the twin of an earlier line with the same key. The pure
 * allocation the check runs over the pending lines is sale_allocate (sale.h, defined in
 * sale_tally.c with sale_split).
 */
#ifndef SERVICE_SALE_TALLY_H
#define SERVICE_SALE_TALLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/sale/sale.h"

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

#endif
