/*
 * sale_source.h - the sources of a sale's stock (sale.h's sale_source): how each is read
 * and written (internal to the sale; the fold of redis-sharded's segments back into the
 * goods row, sale_fold, is declared in sale.h and defined in sale_source.c).
 *
 * Statements only, inside the sale's open transaction: the caller (sale.c) answers a
 * failure and rolls back.
 */
#ifndef SERVICE_SALE_SOURCE_H
#define SERVICE_SALE_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/sale/sale.h"
#include "service/sale/sale_tally.h"

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
