/*
 * cart.h - the pure parts of an order of several goods: the order in which its locks are
 * taken, and the one way of writing a cart that its Idempotency-Key is scoped by. No I/O.
 *
 * Why an order of locks at all: two carts that take the same two locks in opposite orders
 * (A: 1 then 7; B: 7 then 1) can each hold its first and wait for the other's, for ever, or,
 * with bounded waits, until both give up (a deadlock). Taking every cart's locks in one
 * global order (ascending goods id) makes such a cycle impossible: whoever holds the lowest
 * lock two carts share goes first. The multi-naive rung takes them as the cart lists them,
 * to show the deadlock.
 */
#ifndef SERVICE_CART_H
#define SERVICE_CART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most goods one cart may hold (POST /api/order's items). */
#define CART_MAX_ITEMS 16

/* One goods of a cart and how many of it. */
typedef struct cart_item {
    int64_t goods_id; /* 1 .. 2^63-1, each goods at most once per cart */
    int64_t count;    /* 1 .. 10000 */
} cart_item;

/* Which lock a goods takes, when several goods share one (the local guard's stripes): the
 * cart sorts by it and takes a shared lock once. NULL: each goods has a lock of its own. */
typedef int64_t (*cart_lock_of_fn)(int64_t goods_id);

/*
 * Fills order[0..n) with the indices of items in the order their locks are to be taken:
 * as listed (as_listed: 0, 1, ..., n-1), else ascending by (lock_of(goods_id), goods_id)
 * (lock_of NULL: by goods id alone). n <= CART_MAX_ITEMS.
 */
void cart_lock_order(const cart_item *items, size_t n, bool as_listed, cart_lock_of_fn lock_of,
                     size_t *order);

/*
 * Writes the cart's canonical text into buf: its items in ascending goods id, as
 * "GOODSxCOUNT" joined by commas ("1x2,7x1"), whatever order the request listed them in.
 * Returns 0, or -1 when it does not fit in len bytes (CART_TEXT_MAX always fits).
 */
#define CART_TEXT_MAX (CART_MAX_ITEMS * 27 + 1)
int cart_text(const cart_item *items, size_t n, char *buf, size_t len);

#endif
