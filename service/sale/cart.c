/*
 * cart.c - the lock order of a cart and its canonical text (cart.h says why each exists).
 * A cart has at most 16 items: an insertion sort is all it needs.
 */
#include "service/sale/cart.h"

#include <inttypes.h>
#include <stdio.h>

/* Whether item a's lock comes before item b's. */
static bool before(const cart_item *a, const cart_item *b, cart_lock_of_fn lock_of)
{
    if (lock_of != NULL) {
        int64_t la = lock_of(a->goods_id), lb = lock_of(b->goods_id);
        if (la != lb)
            return la < lb;
    }
    return a->goods_id < b->goods_id;
}

void cart_lock_order(const cart_item *items, size_t n, bool as_listed, cart_lock_of_fn lock_of,
                     size_t *order)
{
    for (size_t i = 0; i < n; i++) {
        size_t k = i;
        if (!as_listed)
            while (k > 0 && before(&items[i], &items[order[k - 1]], lock_of)) {
                order[k] = order[k - 1];
                k--;
            }
        order[k] = i;
    }
}

int cart_text(const cart_item *items, size_t n, char *buf, size_t len)
{
    size_t order[CART_MAX_ITEMS], used = 0;

    if (n > CART_MAX_ITEMS || len == 0)
        return -1;
    buf[0] = '\0';
    cart_lock_order(items, n, false, NULL, order);
    for (size_t k = 0; k < n; k++) {
        const cart_item *it = &items[order[k]];
        int w = snprintf(buf + used, len - used, "%s%" PRId64 "x%" PRId64, k > 0 ? "," : "",
                         it->goods_id, it->count);
        if (w < 0 || (size_t)w >= len - used)
            return -1;
        used += (size_t)w;
    }
    return 0;
}
