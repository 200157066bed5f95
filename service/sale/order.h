/*
 * order.h - an order of several goods (a cart, POST /api/order), sold all or nothing:
 *
 *   [replay a stored answer] -> take every goods' guard, in the cart's lock order
 *   -> BEGIN -> [claim the key] -> read (claim) every row, in the same order
 *   -> if a goods is unknown, 404; if one is short, 409 (the first in the request's order)
 *   -> write every row -> INSERT the cart's orders (one statement)
 *   -> [store the answer] -> every guard still held? -> COMMIT -> leave every guard
 *
 * It is deduct.h's read-check-write over several goods, in one transaction: any failure
 * rolls the whole cart back, so no order is half sold. A mode takes carts when its row says
 * how (mode.cart): MODE_CART_SORTED takes the guards, and reads the rows, in ascending goods
 * id, one global order, so that two carts cannot wait for each other in a cycle (cart.h);
 * MODE_CART_AS_LISTED takes them as the cart lists them (multi-naive, pg-multi-naive: the
 * deadlock). Each goods row is claimed with its own guard's fencing token, as a single sale
 * claims it. A PostgreSQL rung reads each row in its own shape (mode_tx.read: FOR UPDATE), or
 * sells the whole cart in one statement (mode_tx.take_cart: pg-atomic).
 *
 * Every guard taken is left on every path, the failed ones included (after taking some).
 */
#ifndef SERVICE_ORDER_H
#define SERVICE_ORDER_H

#include <stddef.h>
#include <stdint.h>

#include "service/sale/base.h"
#include "service/sale/cart.h"

/*
 * A cart's fault point (X-Fault, only with FAULTS=on): after its first guard is taken (for a
 * PostgreSQL rung: after its first row is read, its row lock taken) and before its second;
 * and, for a guarded rung, again when a later guard is not had, before the ones taken are
 * left (order.c says why). pg-atomic, one statement for the whole cart, never reaches it.
 * There the cart sleeps pause_between_locks_ms (0: not), then calls between_locks (NULL:
 * not; the lab's hold, lab_at_between_locks) with arg.
 */
typedef struct order_faults {
    int64_t pause_between_locks_ms;   /* X-Fault: pause-between-locks=MS */
    void (*between_locks)(void *arg); /* X-Fault: hold-at=between-locks (lab.h) */
    void *arg;
} order_faults;

/*
 * Sells the cart items[0..n_items) (1 <= n_items <= CART_MAX_ITEMS, no goods twice) in mode
 * m (m->cart != MODE_CART_NONE). idempotency_key may be NULL; when given, its scope is the key
 * with the whole cart (cart_text: the same items listed in another order are the same cart):
 * an answer stored earlier for both is returned unchanged and nothing is sold; otherwise the
 * 200/404/409 answer is stored with the sale.
 * request_id (the client's X-Request-Id, or NULL) is recorded with each of the cart's orders,
 * as a single sale's is (sale.h), so that a recorder settles a cart whose answer was lost.
 * faults (NULL: none) is what the cart does at its fault point (order_faults).
 * Fills *out as deduct_execute does: status 200 (sale_bodies.ordered), 404 unknown_goods (the
 * first unknown goods in the request's order), 409 sold_out (the first item short of stock),
 * or 503 (lock_timeout, lock_lost, unavailable, conflict, commit_unknown), 503 conflict also
 * for a transaction PostgreSQL chose as a deadlock's victim. A guard's wait is the sum of
 * the guards' waits. Returns 0 with *out filled (free out->body), or -1 when out of memory.
 */
int order_execute(const deduct_env *env, const mode *m, const cart_item *items, size_t n_items,
                  const char *idempotency_key, const char *request_id, const order_faults *faults,
                  deduct_result *out);

#endif
