/*
 * sale_store.h - the stored answers of a sale (internal to the sale; sale_replay, their
 * reading before any guard, is declared in sale.h and defined in sale_store.c).
 *
 * A keyed line's key is claimed before the stock is read and its answer stored with it
 * before COMMIT, in the sale's transaction: a concurrent twin request waits for that
 * transaction at the claim and then finds the answer instead of selling a second time.
 * Statements only: the caller (sale.c) answers a failure and rolls back.
 */
#ifndef SERVICE_SALE_STORE_H
#define SERVICE_SALE_STORE_H

#include "service/sale/sale.h"
#include "service/sale/sale_tally.h"

/*
 * Claims the key of every keyed line (the first of twins only; a later line with the same
 * key gets sale_line.twin). A key that a committed sale holds already is answered from the
 * store (under READ COMMITTED the fetch sees that commit; the claim inserted nothing and
 * the transaction goes on): that line is `answered`. DB_OK to go on; otherwise the failed
 * statement's DB_* code, with *what naming it.
 */
int sale__claim_keys(sale *s, const char **what);

/* Stores each pending keyed line's answer (set by then) under its key: DB_OK, or the failed
 * statement's DB_* code ("store idempotent answer"). */
int sale__store_answers(sale *s, const sale_tally *t);

/* Forgets what an earlier run of the transaction answered (replays, twins): it was rolled
 * back, and the next run claims the keys again. */
void sale__forget_answers(sale *s);

/* A line whose key an earlier line of the sale carries gets that one's answer, as a replay
 * would give it after the commit (or its 503 when the sale failed). */
void sale__answer_twins(sale *s);

#endif
