/*
 * stock.h - the stock of a sale, the parts its callers use too: the arrival-order allocation
 * and the even split (pure arithmetic: the check and the segments share a stock with them),
 * and the fold of redis-sharded's segments back into the goods row (a cart folds before its
 * sale, as a sale does). Defined in stock.c.
 */
#ifndef SERVICE_SALE_STOCK_H
#define SERVICE_SALE_STOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db/db.h"

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
 * Folds goods_id's segments back into its row, on conn outside any transaction: one plain
 * read, and when segments hold stock, a transaction of its own (BEGIN, db_segments_fold,
 * COMMIT). *moved gets the units moved. DB_OK (an unknown goods moves nothing) or a DB_ERR_*
 * code, with detail filled for the 503 ("postgresql: fold segments: <the statement's
 * error>", kept across the rollback).
 */
int sale_fold(db_conn *conn, int64_t goods_id, int64_t *moved, char *detail, size_t detail_len);

#endif
