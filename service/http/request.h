/*
 * request.h - strict parsing and validation of what clients send. Pure code: no I/O.
 *
 * Bodies are parsed with jansson, rejecting duplicate keys; only the documented fields are
 * accepted, integers must be written as integers (not 1.0 nor 1e0) and within range.
 * On rejection the functions write a one-line explanation into `detail` (the "detail" of the
 * 400 answer), e.g. "count must be an integer from 1 to 10000".
 */
#ifndef SERVICE_REQUEST_H
#define SERVICE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/sale/cart.h"

#define REQUEST_MAX_BODY 16384 /* bytes; a larger body is a 413 */
#define REQUEST_MAX_COUNT 10000
#define REQUEST_MAX_STOCK 1000000000
#define REQUEST_MODE_MAX 32  /* longest accepted mode name, terminator included */
#define REQUEST_SHOWN_MAX 80 /* a client's text quoted in a detail (request_quote), with its NUL   \
                              */

typedef struct deduct_request {
    int64_t goods_id;                   /* 1 .. 2^63-1 */
    int64_t count;                      /* 1 .. 10000 */
    bool has_mode;                      /* the body named a mode */
    char mode[REQUEST_MODE_MAX];        /* that mode, when has_mode (not checked against the table);
                                           "" when no mode's name could be it (too long, a NUL) */
    char mode_shown[REQUEST_SHOWN_MAX]; /* that mode as received, request_quote'd */
} deduct_request;

/* An order of several goods (POST /api/order): its items in the request's order, each a
 * cart's item (service/sale/cart.h). */
#define REQUEST_MAX_ITEMS CART_MAX_ITEMS

typedef struct order_request {
    cart_item items[REQUEST_MAX_ITEMS];
    size_t n_items;                     /* 1 .. REQUEST_MAX_ITEMS */
    bool has_mode;                      /* as deduct_request's */
    char mode[REQUEST_MODE_MAX];        /* as deduct_request's */
    char mode_shown[REQUEST_SHOWN_MAX]; /* as deduct_request's */
} order_request;

typedef struct reset_request {
    int64_t goods_id; /* 1 .. 2^63-1 */
    int64_t stock;    /* 0 .. 1000000000 */
} reset_request;

/*
 * Parses a deduct body: {"goods_id": int, "count": int, "mode"?: string}. Returns 0, or -1
 * with detail filled. A mode that is a string too long to be any mode's name is kept as an
 * empty has_mode=true name so that the caller answers unknown_mode.
 */
int request_parse_deduct(const char *body, size_t len, deduct_request *out, char *detail,
                         size_t detail_len);

/*
 * Parses an order body: {"items": [{"goods_id": int, "count": int}, ...], "mode"?: string},
 * with the same strictness as a deduct body (the same parser, the same field rules), and:
 * items is an array of 1 to REQUEST_MAX_ITEMS objects, each with exactly those two fields;
 * no goods_id twice. Returns 0, or -1 with detail filled (an item's fault names its index:
 * "items[1]: count must be an integer from 1 to 10000"). The mode as request_parse_deduct's.
 */
int request_parse_order(const char *body, size_t len, order_request *out, char *detail,
                        size_t detail_len);

/* Parses a reset body: {"goods_id": int, "stock": int}. Returns 0 or -1 with detail. */
int request_parse_reset(const char *body, size_t len, reset_request *out, char *detail,
                        size_t detail_len);

/* Parses a POST /api/lab/step body: {"id": "A"}, the id 1 to id_len-1 characters of
 * [A-Za-z0-9_-] (id_len 33 for the lab's 32). Returns 0 with id filled, or -1 with detail. */
int request_parse_lab_step(const char *body, size_t len, char *id, size_t id_len, char *detail,
                           size_t detail_len);

/* Parses the {goods_id} path segment: decimal digits only, 1 .. 2^63-1. Returns 0 or -1. */
int request_parse_goods_id(const char *text, int64_t *out);

/*
 * A client's text (text[0..text_len), which may hold NULs) as a detail shows it: in double
 * quotes, '"' and '\\' escaped with a backslash, a control character as \uXXXX (a NUL as
 * \u0000), a byte that starts no UTF-8 character as \xXX, the rest as it is; cut with "..."
 * before the closing quote when it does not fit in len bytes (at least 8; less gives "").
 * Returns buf.
 */
const char *request_quote(char *buf, size_t len, const char *text, size_t text_len);

/* Whether an Idempotency-Key value has the documented shape: 1..128 of [A-Za-z0-9_.:-]. */
bool request_idempotency_key_valid(const char *key);

/* Whether a Content-Type header value is acceptable for a JSON body: "application/json",
 * case-insensitive, optionally followed by parameters ("; charset=utf-8"). */
bool request_content_type_is_json(const char *value);

/* Whether a "Bearer <token>" Authorization value carries `token` (compared in constant
 * time). */
bool request_bearer_matches(const char *authorization, const char *token);

#endif
