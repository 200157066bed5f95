/*
 * metrics.h - the service's counters and the lock-wait histogram, rendered in Prometheus
 * text format for GET /metrics. Updates are lock-free (atomics) where they are hot.
 */
#ifndef SERVICE_METRICS_H
#define SERVICE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "service/sale/base.h"

struct json_t; /* jansson's */

typedef struct metrics metrics;

/* Routes are a fixed set, so the label space stays bounded whatever clients send. */
typedef enum metrics_route {
    ROUTE_DEDUCT,
    ROUTE_STOCK,
    ROUTE_RESET,
    ROUTE_MODES,
    ROUTE_HEALTHZ,
    ROUTE_READYZ,
    ROUTE_METRICS,
    ROUTE_REPLICA,
    ROUTE_LOCK,
    ROUTE_ORDER,
    ROUTE_OTHER,
    ROUTE_COUNT_
} metrics_route;

/* The route's label value: "/api/deduct", "/api/stock/{goods_id}", "/api/admin/reset",
 * "/api/modes", "/healthz", "/readyz", "/metrics", "/api/replica", "/api/lock/{goods_id}" or
 * "other". A static string. */
const char *metrics_route_name(metrics_route route);

/* mode_names: the mode table's names (copied); outcomes are deduct_outcome's (base.h),
 * labelled with deduct_outcome_name.
 * Returns the metrics (free with metrics_destroy()), or NULL when out of memory. */
metrics *metrics_create(const char *const *mode_names, size_t n_modes);
/* Frees m; no other call may be running on it. NULL is a no-op. */
void metrics_destroy(metrics *m);

/* The recording calls below may run from any number of threads at once (one relaxed atomic
 * add each, no lock); a NULL m is ignored. */

/* status: the HTTP status answered; one outside the fixed set 200 400 401 404 405 409 413
 * 415 500 503 is counted as status="other". */
void metrics_count_request(metrics *m, metrics_route route, int status);
/* An unknown mode name, and DEDUCT_NO_OUTCOME, are ignored. */
void metrics_count_deduction(metrics *m, const char *mode, deduct_outcome outcome);
/* seconds waited for a lock, whether it was taken or not; negative or NaN counts as 0.
 * Buckets: 0.0005 0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 +Inf. */
void metrics_observe_lock_wait(metrics *m, double seconds);
/* One hand-off of a lock to the head of its line: the time from the release to the new
 * holder's take (lock_last_handoff_us), in seconds: stock_lock_handoff_seconds. */
void metrics_observe_lock_handoff(metrics *m, double seconds);
/* One batch of the redis-batch mode: the requests that one holding of the lock answered in
 * one transaction (1 or more; less counts as 1): stock_batch_requests.
 * Buckets: 1 2 4 8 16 32 64 128 256 512 1024 +Inf. */
void metrics_observe_batch(metrics *m, int requests);
/* A lock wait that ended without the lock (the 503 lock_timeout). */
void metrics_count_lock_timeout(metrics *m);
/* Transactions a deduction ran again after lost optimistic races (deduct_result.retries);
 * 0 or less is ignored. */
void metrics_count_optimistic_retries(metrics *m, int retries);

/*
 * One sale that sold on the single path (deduct_result.timed): where its time went, stage by
 * stage (stage_ns, deduct.h's DEDUCT_STAGES_ of them), and json_ns, the handler's own time
 * around the deduction (the body parsed, the mode chosen, the answer built). Summed per mode:
 * stock_sale_stage_seconds_total{mode,stage}, and counted: stock_sale_timed_total{mode}.
 */
void metrics_observe_sale(metrics *m, const char *mode, const int64_t *stage_ns, int64_t json_ns);
/*
 * One request answered, from the replica's clock: queue_ns waiting for a worker (0 for a
 * handler run on its event loop), handler_ns in its handler, around_ns the rest of the time
 * from its headers in to its answer queued (its body read, the hand-overs between loop and
 * worker, the answer queued). Summed per route: stock_http_seconds_total{route,part}; their
 * count is the route's stock_http_requests_total, counted at the same moment.
 */
void metrics_observe_http(metrics *m, metrics_route route, int64_t queue_ns, int64_t handler_ns,
                          int64_t around_ns);

/* Figures owned by other modules, passed in when rendering. */
typedef struct metrics_external {
    uint64_t lock_renewals;
    uint64_t lock_lost;
    int db_pool_size, db_pool_open, db_pool_in_use;
    int redis_pool_size, redis_pool_in_use;
    int http_connections; /* connections open now */
    /* The process's context switches so far, every thread's, ended ones too (getrusage):
     * a thread giving up its core to wait (voluntary), or taken off it (involuntary). */
    uint64_t switches_voluntary, switches_involuntary;
} metrics_external;

/* The whole exposition as a malloc'd string (caller frees), or NULL when out of memory
 * (or m is NULL). ext NULL renders the external figures as zeros. Safe to call while other
 * threads record. */
char *metrics_render(metrics *m, const metrics_external *ext);

/*
 * The same figures for the live page, as a new jansson object (the caller owns it; NULL when
 * out of memory):
 *   {"deduct_answers":{"200":n,...},                       POST /api/deduct by status
 *    "deductions":{"<mode>":{"<outcome>":n,...},...},
 *    "lock_wait":{"le":[0.0005,...],"cumulative":[n,...],"count":n,"sum_seconds":s}}
 * "cumulative" has one entry per bound in "le" (observations at or below it); "count" is all
 * of them (the +Inf bucket). Safe while other threads record.
 */
struct json_t *metrics_to_json(metrics *m);

#endif
