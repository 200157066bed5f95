/*
 * lab.h - the lab: a learner holds real requests at named points of the deduction and steps
 * them on by hand, and reads back what each one saw (only on a replica with FAULTS=on).
 *
 * A deduction (or a cart, at its one point) that carries `X-Fault: hold-at=POINT[,POINT...]`
 * and `X-Request-Id: ID` stops at each named point and waits there, holding whatever it holds
 * (a lock, an open transaction, a row lock), until someone steps it (POST /api/lab/step) or
 * until its hold budget (LAB_HOLD_MS, counted from its start) is spent; after that it holds
 * nowhere and runs to its answer by itself, so a forgotten request cannot stay behind for
 * ever. Nothing else of the process stops: the lock's watchdog keeps renewing (that is why
 * `redis` survives a long hold) and a fixed lease keeps running out (that is setnx-ttl's
 * flaw).
 *
 * The table (lab_table) has LAB_SLOTS places. A request with an id takes one for its whole
 * run (a request held or not, "in flight"), and leaves its trace there when it answers: the
 * points it passed, when (on the monotonic clock, and mapped to the wall clock so that the
 * traces of several replicas and a driver's own events line up), and what it saw. The traces
 * of finished requests are the ring: a new request takes the place of the oldest one. For a
 * request with an X-Fault, a table whose every place is in flight refuses it (503) and an id
 * already in flight is refused (400); a request with an id and no X-Fault only asks to be
 * traced, so it is then served untraced (the caller of lab_start decides).
 *
 * The points, in the order a sale reaches them: the deduction's own (deduct.h: entered,
 * begun, read, written, checked, committed) and the release's one, "release": just before
 * the command that deletes the lock (owner-get-del: between its GET and its DEL; tx-inside
 * reaches it before "checked", since it gives its lock back inside the transaction). A cart
 * (POST /api/order, order.h) has one point of its own, "between-locks": its first lock (for
 * a PostgreSQL rung, its first row lock) held, its second not yet asked for; a cart that
 * gives up on a later lock reaches it again, still holding what it has, before letting go.
 * Two carts held there in opposite orders each hold the lock the other will ask for: the
 * deadlock of multi-naive, at a moment the learner (or the ladder) chooses, not a race.
 */
#ifndef SERVICE_LAB_H
#define SERVICE_LAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/sale/base.h"
#include "service/lab/faults.h"

#define LAB_SLOTS 64      /* requests in flight, and traces kept, per replica */
#define LAB_ID_MAX 32     /* X-Request-Id: 1..32 of [A-Za-z0-9_-] */
#define LAB_EVENTS_MAX 12 /* points recorded per request (a retried transaction repeats some) */

typedef enum lab_point {
    LAB_AT_ENTERED, /* the same order and meaning as deduct_point's ... */
    LAB_AT_BEGUN,
    LAB_AT_READ,
    LAB_AT_WRITTEN,
    LAB_AT_CHECKED,
    LAB_AT_COMMITTED,
    LAB_AT_RELEASE,         /* ... and the release's point */
    LAB_AT_BETWEEN_LOCKS,   /* a cart's: between its first lock and its second */
    LAB_AT_CACHE_MISS_READ, /* a cached read's (service/guards/cache.h): the miss has read the
                               database and not yet written the cache */
    LAB_POINTS_
} lab_point;

/* The points a cart reaches (a bit per lab_point): POST /api/order refuses any other. */
#define LAB_CART_POINTS (1u << LAB_AT_BETWEEN_LOCKS)

/* The points a cached read reaches (GET /api/stock/{id}?cached=1): it refuses any other, and a
 * deduction or a cart refuses these. */
#define LAB_CACHE_POINTS (1u << LAB_AT_CACHE_MISS_READ)

/* The point's name ("entered" ... "release", "between-locks", "cache-miss-read"). */
const char *lab_point_name(lab_point p);

/* The lab point of a deduction's point. */
lab_point lab_point_of(deduct_point p);

/* Whether id is 1..LAB_ID_MAX characters of [A-Za-z0-9_-]. */
bool lab_request_id_valid(const char *id);

/*
 * Splits an X-Fault value into its hold-at part and the rest. "hold-at=read,checked" names
 * points; the items after it that are point names belong to it (the faults' own names are
 * never point names, so "hold-at=read,checked,nested" is read, checked and the fault nested).
 * On success returns 0, sets *points (a bit per lab_point; 0 when there is no hold-at) and
 * writes the other items, comma-separated, into rest ("" when none; rest_len > 0). Returns -1
 * with a reason in detail for an unknown point, a point named twice, an empty hold-at or
 * hold-at given twice; rest too short for the value is refused the same way.
 */
int lab_split_fault(const char *value, unsigned *points, char *rest, size_t rest_len, char *detail,
                    size_t detail_len);

typedef struct lab_table lab_table;

/* A table with hold budget hold_ms per request and step wait step_ms (both > 0). NULL when
 * out of memory. lab_table_destroy frees it; no request may be in flight then. */
lab_table *lab_table_create(int64_t hold_ms, int64_t step_ms);
void lab_table_destroy(lab_table *t);

/* Lets every held request go on and makes every later point pass without holding (the
 * replica is stopping: its requests must answer before it drains). */
void lab_table_close(lab_table *t);

/* One request's place in the table, from lab_start to lab_finish. */
typedef struct lab_run {
    lab_table *table;
    int slot;
    uint64_t seq;
    fault_run *faults; /* the X-Fault plan's run, carried out after each hold; NULL: none */
    int64_t stock;     /* deduct_hook.seen_stock points here: the stock read, then written */
} lab_run;

#define LAB_ERR_DUPLICATE (-2) /* the id is in flight already */
#define LAB_ERR_FULL (-3)      /* every place is in flight */

/* Takes a place for request `id` (valid) in mode `mode` on goods_id, holding at `points` (0:
 * traced only). 0 with *run filled; LAB_ERR_DUPLICATE or LAB_ERR_FULL, the table unchanged. */
int lab_start(lab_table *t, const char *id, const char *mode_name, int64_t goods_id,
              unsigned points, lab_run *run);

/* What a request saw at a point, for its trace (each field optional: has_*). */
typedef struct lab_seen {
    bool has_stock;
    int64_t stock; /* read: the stock read; written: the stock written */
    bool has_fence;
    int64_t fence;  /* the lock's fencing token */
    char token[80]; /* the lock's owner token, "" when it has none */
} lab_seen;

/* The request reached point p: records it with what it saw and, when p is one of its points
 * and its hold budget is not spent, waits there until stepped. */
void lab_reach(const lab_run *run, lab_point p, const lab_seen *seen);

/* The request answered `status` (outcome: deduct_result.outcome). Its place becomes a trace. */
void lab_finish(const lab_run *run, int status, const char *outcome);

/* The deduct_hook `at` of a lab_run (arg): holds and records at each point, then carries out
 * the X-Fault plan (faults_at) when there is one. Give the hook seen_stock = &run->stock. */
int lab_at(void *arg, deduct_point point, guard_hold *hold, char *why, size_t why_len);

/* The order_faults hook `between_locks` of a lab_run (arg, order.h): records the cart's point
 * and holds there when it is one of the request's points (lab_reach). */
void lab_at_between_locks(void *arg);

/* Steps the held request `id`: lets it go on, and waits (at most the table's step wait) until
 * it holds again or has answered. 0 with `point` set to the point where it holds now, "done",
 * or "running" (neither within the wait); -1 when no request `id` is held here. */
int lab_step(lab_table *t, const char *id, char *point, size_t point_len);

/* {"requests":[{"id":..,"mode":..,"goods_id":..,"point":..,"held_ms":..},...]}: the requests
 * held now, oldest first. malloc'd, NULL when out of memory. */
char *lab_requests_json(lab_table *t);

/* The newest trace of `id` as JSON (docs/API.md shows it), malloc'd; *found false (and NULL)
 * when the table has none. NULL with *found true when out of memory. */
char *lab_trace_json(lab_table *t, const char *id, bool *found);

#endif
