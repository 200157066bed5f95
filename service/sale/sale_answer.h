/*
 * sale_answer.h - how a sale answers its lines (internal to the sale; the answers the other
 * ways of selling share, sale_answer_503, sale_answer_db, sale_fail and sale_fail_db, are
 * declared in sale.h and defined in sale_answer.c).
 *
 * Answers only: nothing here begins, rolls back or commits (sale.c owns the transaction).
 */
#ifndef SERVICE_SALE_ANSWER_H
#define SERVICE_SALE_ANSWER_H

#include <stdbool.h>
#include <stdint.h>

#include "service/sale/sale.h"
#include "service/sale/sale_tally.h"

/* Sets each pending line's answer from the check in t: 404 for an unknown goods, else 200 or
 * 409. `offset` turns what the check left into the goods' whole stock (a segment's sale:
 * the other segments' and the row's). false when a body could not be built (out of memory). */
bool sale__answer_lines(sale *s, const sale_tally *t, bool unknown, int64_t offset);

#endif
