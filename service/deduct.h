/*
 * deduct.h - the read-check-write every mode runs, under the mode's guard:
 *
 *   guard.enter -> BEGIN -> [claim the idempotency key] -> SELECT stock -> if short, 409
 *   -> UPDATE goods SET stock = <new value computed here> -> INSERT the order
 *   -> [store the answer with the key] -> guard.still_held? -> COMMIT -> guard.leave
 *
 * The new stock is computed in C from the value read, not by "stock = stock - n" in SQL:
 * that read-modify-write across two statements is exactly the race the guards exist to
 * close. The guard is left only after the commit; leaving it before would let the next
 * holder read the stock this transaction has not yet committed.
 *
 * No HTTP here: the result is an HTTP status and a JSON body, so the same code serves the
 * service and the ceiling benchmark.
 */
#ifndef SERVICE_DEDUCT_H
#define SERVICE_DEDUCT_H

#include <stdbool.h>
#include <stdint.h>

#include "db/db.h"
#include "service/modes.h"

typedef struct deduct_env {
    db_pool *db;               /* not owned */
    int64_t db_wait_ms;        /* bound on waiting for a pooled connection */
    guard_env *guards;         /* not owned */
    const char *instance;      /* this replica's name, written with each order */
    int64_t business_delay_ms; /* sleep between the read and the write (teaching) */
} deduct_env;

typedef struct deduct_result {
    int status;          /* HTTP status: 200, 404, 409 or 503 */
    char *body;          /* JSON body, malloc'd: the caller frees it */
    const char *outcome; /* metrics outcome: "deducted", "insufficient_stock", ... */
    bool waited;         /* the guard measured a wait */
    double wait_seconds; /* how long the guard took to enter */
    char detail[256];    /* why, for a 503 ("" otherwise): logged by the caller */
} deduct_result;

/*
 * Runs one deduction of `count` units of `goods_id` in mode `m`. idempotency_key may be
 * NULL; when given, an earlier stored answer for (goods_id, key) is returned unchanged and
 * nothing is deducted; otherwise the 200/404/409 answer is stored in the same transaction.
 * Returns 0 with *out filled (free out->body), or -1 when out of memory.
 */
int deduct_execute(const deduct_env *env, const mode *m, int64_t goods_id, int64_t count,
                   const char *idempotency_key, deduct_result *out);

#endif
