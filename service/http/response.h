/*
 * response.h - the JSON bodies the service answers with, one builder per shape of
 * API.md. Pure code: each returns a malloc'd NUL-terminated compact JSON string that the
 * caller frees with free(), or NULL when out of memory. Fields come in the order API.md
 * shows. String arguments may be NULL (written as "") and need not be valid UTF-8 (a
 * string that is not has its non-ASCII bytes written as '?').
 */
#ifndef SERVICE_RESPONSE_H
#define SERVICE_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/sale/bodies.h"

struct json_t; /* jansson's */

/* {"ok":false,"error":<error>} plus "detail" when detail is not NULL. */
char *response_error(const char *error, const char *detail);

/* A deduction's 503 body for `error` (lock_timeout, lock_lost, unavailable, conflict,
 * commit_unknown), by API.md's rule: "unavailable" and "conflict" say why (`detail`),
 * "commit_unknown" says how to find out, lock_timeout and lock_lost carry no detail.
 * Every sale answers with it (response_sale_bodies.refused). malloc'd or NULL. */
char *response_deduct_503(const char *error, const char *detail);

/* {"ok":true,"goods_id":..,"count":..,"remaining":..,"order_id":..,"mode":..,"instance":..} */
char *response_deducted(int64_t goods_id, int64_t count, int64_t remaining, int64_t order_id,
                        const char *mode, const char *instance);

/* The dry run's 200 (POST /api/deduct/dry): {"ok":true,"dry_run":true,"goods_id":..,
 * "count":..,"mode":..,"instance":..}: nothing was sold. */
char *response_dry_deduct(int64_t goods_id, int64_t count, const char *mode, const char *instance);

/* 409: {"ok":false,"error":"insufficient_stock","goods_id":..,"remaining":..} */
char *response_insufficient(int64_t goods_id, int64_t remaining);

/* A cart sold (POST /api/order): {"ok":true,"order_id":..,"items":[{"goods_id":..,"count":..,
 * "remaining":..},...],"mode":..,"instance":..}, the items (n, parallel arrays) in the
 * request's order. */
char *response_ordered(int64_t order_id, const int64_t *goods_ids, const int64_t *counts,
                       const int64_t *remaining, size_t n, const char *mode, const char *instance);

/* A cart's 409: {"ok":false,"error":"sold_out","goods_id":..,"remaining":..}: the first item
 * short of stock, and the stock its goods has. */
char *response_sold_out(int64_t goods_id, int64_t remaining);

/* 404: {"ok":false,"error":"unknown_goods","goods_id":..} */
char *response_unknown_goods(int64_t goods_id);

/* sold - (initial - stock): units sold that the stock never gave up (saturated at the
 * int64 limits instead of overflowing). */
int64_t response_oversold(int64_t initial, int64_t stock, int64_t sold);

/* {"goods_id":..,"stock":..,"source":"cache"|"db"}: the cached read's answer. */
char *response_cached_stock(int64_t goods_id, int64_t stock, bool from_cache);

/* {"goods_id":..,"initial":..,"stock":..,"sold":..,"orders":..,"oversold":..} where
 * oversold = response_oversold(initial, stock, sold). */
char *response_stock(int64_t goods_id, int64_t initial, int64_t stock, int64_t sold,
                     int64_t orders);

/* The same, plus "audit":{"ledger_sold":..,"ledger_orders":..,"agrees":..}: the sums over
 * the orders themselves, and whether sold and orders (the counters) equal them. */
char *response_stock_audit(int64_t goods_id, int64_t initial, int64_t stock, int64_t sold,
                           int64_t orders, int64_t ledger_sold, int64_t ledger_orders);

/* {"ok":true,"goods_id":..,"initial":..,"stock":..} */
char *response_reset(int64_t goods_id, int64_t stock);

typedef struct response_mode {
    const char *name;
    bool safe;
    const char *summary;
} response_mode;

/* {"default":..,"cache_default":..,"modes":[{"name":..,"safe":..,"summary":..},...]}:
 * cache_default is the rung a cached read of a mode that keeps no cache follows (cache.h). */
char *response_modes(const char *default_mode, const char *cache_default,
                     const response_mode *modes, size_t n);

/* {"ok":true,"status":<status>,"instance":..} plus "detail" when not NULL, for the health
 * endpoints ({"ok":false,...} when ok is false). */
char *response_health(bool ok, const char *status, const char *instance, const char *detail);

/* GET /api/replica: {"instance":..,"process_id":..,"default_mode":..,"pg_replication":..,
 * "metrics":{...}}. Takes metrics_json (a jansson object from metrics_to_json; NULL fails). */
char *response_replica(const char *instance, const char *process_id, const char *default_mode,
                       const char *pg_replication, struct json_t *metrics_json);

/* GET /api/cache/{goods_id}: {"goods_id":1,"key":"cache:goods:1","cached":true,"stock":99};
 * stock null when nothing is cached. */
char *response_cache_peek(int64_t goods_id, const char *key, bool cached, int64_t stock);

/* GET /api/lock/{goods_id}: {"goods_id":1,"lock":"lock:goods:1","held":true,
 * "owner":"<process id>:<thread>","process_id":"<process id>","count":1,"ttl_ms":29950,
 * "fence":123}; owner and process_id are null when the lock is free. */
char *response_lock(int64_t goods_id, const char *lock_name, bool held, const char *owner,
                    int64_t count, int64_t ttl_ms, int64_t fence);

/* The bodies of a sale's answers (service/sale/bodies.h), as this file writes them: the replica
 * hands them to every sale (core_create), which stores the very body it answers with. */
extern const sale_bodies response_sale_bodies;

#endif
