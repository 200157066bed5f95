/*
 * metrics.h - the service's counters and the lock-wait histogram, rendered in Prometheus
 * text format for GET /metrics. Updates are lock-free (atomics) where they are hot.
 */
#ifndef SERVICE_METRICS_H
#define SERVICE_METRICS_H

#include <stddef.h>
#include <stdint.h>

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
    ROUTE_OTHER,
    ROUTE_COUNT_
} metrics_route;

const char *metrics_route_name(metrics_route route);

/* mode_names: the mode table's names (copied); outcomes are a fixed set:
 * "deducted", "insufficient_stock", "unknown_goods", "lock_timeout", "lock_lost",
 * "unavailable", "replayed" (an idempotent retry answered from the store). */
metrics *metrics_create(const char *const *mode_names, size_t n_modes);
void metrics_destroy(metrics *m);

void metrics_count_request(metrics *m, metrics_route route, int status);
/* Unknown mode or outcome names are ignored. */
void metrics_count_deduction(metrics *m, const char *mode, const char *outcome);
void metrics_observe_lock_wait(metrics *m, double seconds);
void metrics_count_lock_timeout(metrics *m);

/* Figures owned by other modules, passed in when rendering. */
typedef struct metrics_external {
    uint64_t lock_renewals;
    uint64_t lock_lost;
    int db_pool_size, db_pool_open, db_pool_in_use;
    int redis_pool_size, redis_pool_in_use;
    int http_connections; /* connections open now */
} metrics_external;

/* The whole exposition as a malloc'd string (caller frees), or NULL when out of memory. */
char *metrics_render(metrics *m, const metrics_external *ext);

#endif
