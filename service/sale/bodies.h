/*
 * bodies.h - how the bodies of a sale's answers are written: one function per shape of
 * API.md, handed to every sale by its caller (deduct_env.bodies), so that the sale stores
 * the very body it answers with an Idempotency-Key without knowing HTTP or JSON. The
 * replica's are http/response.h's (response_sale_bodies).
 */
#ifndef SERVICE_SALE_BODIES_H
#define SERVICE_SALE_BODIES_H

#include <stddef.h>
#include <stdint.h>

/* Each returns a malloc'd NUL-terminated string the caller frees, or NULL when out of
 * memory. */
typedef struct sale_bodies {
    /* 200 of one goods */
    char *(*deducted)(int64_t goods_id, int64_t count, int64_t remaining, int64_t order_id,
                      const char *mode, const char *instance);
    /* 409 of one goods */
    char *(*insufficient)(int64_t goods_id, int64_t remaining);
    /* 404 */
    char *(*unknown_goods)(int64_t goods_id);
    /* a 503 for `error` (lock_timeout, lock_lost, unavailable, conflict, commit_unknown) */
    char *(*refused)(const char *error, const char *detail);
    /* 200 of a cart: the items (n, parallel arrays) in the request's order */
    char *(*ordered)(int64_t order_id, const int64_t *goods_ids, const int64_t *counts,
                     const int64_t *remaining, size_t n, const char *mode, const char *instance);
    /* 409 of a cart: the first item short of stock */
    char *(*sold_out)(int64_t goods_id, int64_t remaining);
} sale_bodies;

#endif
