/*
 * order.c - a cart, sold all or nothing (order.h gives the steps and the reasons).
 *
 * The lesson is the order of the locks. The guards are taken one goods at a time, in the
 * cart's lock order (cart_lock_order), and a goods whose lock is already held by this cart
 * (local's stripes: mode.lock_of) is not taken twice. If any guard is not had, the ones
 * taken are left, in reverse order, and nothing was begun. In a PostgreSQL rung the guards
 * are no-ops and the rows' own locks, taken by the reads in the same order, play their part.
 *
 * A goods row whose stock sits in redis-sharded's segments is folded back before the cart
 * answers 409, as a single sale does (deduct.h): no mode refuses a sale the stock covers.
 */
#include "service/sale/order.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "service/sale/cart.h"
#include "service/clock.h"
#include "service/guards/outage.h"
#include "service/sale/sale.h"
#include "service/sale/stock.h"

/* One run of a cart, shared by the steps below. */
typedef struct cart_run {
    const deduct_env *env;
    const mode *mode;
    const cart_item *items;
    size_t n_items;
    const char *key;              /* Idempotency-Key or NULL */
    const char *request_id;       /* X-Request-Id, kept with the orders, or NULL */
    char text[CART_TEXT_MAX];     /* the cart's canonical text: the key's scope */
    const order_faults *faults;   /* NULL: none */
    size_t order[CART_MAX_ITEMS]; /* the items' indices in lock order */
    guard_hold holds[CART_MAX_ITEMS];
    size_t n_holds;
    size_t hold_of[CART_MAX_ITEMS];                        /* item i's holding: holds[hold_of[i]] */
    int64_t goods[CART_MAX_ITEMS], counts[CART_MAX_ITEMS]; /* in the request's order */
    int64_t stock[CART_MAX_ITEMS]; /* as read; after the sale, what each keeps */
    bool folded;                   /* a goods' segments were folded back already */
    db_conn *conn;
    deduct_result *out;
} cart_run;

/* Run again: the goods' stock is in segments (fold them back first). */
#define FOLD 1

static int answer_503(cart_run *c, deduct_outcome error, const char *detail)
{
    return sale_answer_503(c->env, c->out, error, detail);
}

/* A failed statement (rc) inside the transaction: lock_timeout when a row lock was not had
 * within lock_timeout, conflict when PostgreSQL chose this transaction as a deadlock's
 * victim, unavailable otherwise. */
static int answer_db_failure(cart_run *c, const char *what, int rc)
{
    char detail[160];

    if (rc == DB_ERR_LOCK_TIMEOUT) {
        snprintf(detail, sizeof(detail),
                 "postgresql: %s: no lock within lock_timeout (%" PRId64 " ms)", what,
                 c->env->lock_wait_ms);
        return answer_503(c, DEDUCT_LOCK_TIMEOUT, detail);
    }
    outage_postgresql(rc, c->conn, what, detail, sizeof(detail));
    if (rc == DB_ERR_DEADLOCK)
        return answer_503(c, DEDUCT_CONFLICT, detail);
    return answer_503(c, rc == DB_ERR_COMMIT_UNKNOWN ? DEDUCT_COMMIT_UNKNOWN : DEDUCT_UNAVAILABLE,
                      detail);
}

static int answer_replay(cart_run *c, int status, char *body)
{
    c->out->status = status;
    c->out->body = body;
    c->out->outcome = DEDUCT_REPLAYED;
    return 0;
}

/* ---- the guards --------------------------------------------------------------------- */

/* The cart's fault point (order_faults): its pause, then its hold, if asked for. */
static void between_locks(cart_run *c)
{
    if (c->faults == NULL)
        return;
    if (c->faults->pause_between_locks_ms > 0)
        clock_sleep_ms(c->faults->pause_between_locks_ms);
    if (c->faults->between_locks != NULL)
        c->faults->between_locks(c->faults->arg);
}

/* Leaves every guard taken, the last taken first. */
static void leave_all(cart_run *c)
{
    while (c->n_holds > 0) {
        c->n_holds--;
        c->mode->leave(c->env->guards, &c->holds[c->n_holds]);
    }
}

/* Takes every goods' guard in lock order. GUARD_OK, or the first failure, with the 503 set
 * and every guard taken so far left. */
static int enter_all(cart_run *c)
{
    const cart_item *items = c->items;
    int64_t last_lock = 0;

    for (size_t k = 0; k < c->n_items; k++) {
        size_t i = c->order[k];
        int64_t goods = items[i].goods_id;
        int64_t lock = c->mode->lock_of != NULL ? c->mode->lock_of(goods) : goods;
        char detail[256] = "";
        int rc;

        if (k > 0 && c->mode->lock_of != NULL && lock == last_lock) {
            c->hold_of[i] = c->n_holds - 1; /* the same lock: held already */
            continue;
        }
        /* The fault point of the deadlock lesson: the first lock held, the second not yet. */
        if (c->n_holds == 1 && c->mode->tx == NULL)
            between_locks(c);
        rc = c->mode->enter(c->env->guards, goods, &c->holds[c->n_holds], detail, sizeof(detail));
        if (c->holds[c->n_holds].waited) {
            c->out->waited = true;
            c->out->wait_seconds += c->holds[c->n_holds].wait_seconds;
        }
        if (rc != GUARD_OK) {
            /* The same fault point on the way out: a cart that gave up holds what it has for
             * the pause (or until stepped on) again before letting go. Two deadlocked carts'
             * waits end a moment apart (they started a moment apart); without this, the one
             * whose wait ends later could take the lock the other just let go of, and the
             * bounded wait would turn the deadlock into a race that one of them wins. */
            if (c->n_holds > 0 && c->mode->tx == NULL)
                between_locks(c);
            leave_all(c);
            return answer_503(c, guard_outcome(rc), detail) == 0 ? rc : DB_ERR_NOMEM;
        }
        c->hold_of[i] = c->n_holds++;
        last_lock = lock;
    }
    return GUARD_OK;
}

/* ---- inside the transaction ---------------------------------------------------------- */

/* Whether the goods' segments hold stock its row does not (redis-sharded left it there). */
static bool segments_hold_stock(cart_run *c, int64_t goods_id)
{
    int64_t goods_stock = 0, seg[1], total = 0;

    if (db_segments_read(c->conn, goods_id, 1, &goods_stock, seg, &total) != DB_OK)
        return false;
    return total > goods_stock;
}

/* Item i is short of stock (the first in the request's order): 409, or FOLD. */
static int sold_out(cart_run *c, size_t i)
{
    if (!c->folded && segments_hold_stock(c, c->goods[i])) {
        c->folded = true;
        return FOLD;
    }
    c->out->status = 409;
    c->out->outcome = DEDUCT_INSUFFICIENT_STOCK;
    c->out->body = c->env->bodies->sold_out(c->goods[i], c->stock[i]);
    return c->out->body != NULL ? DB_OK : DB_ERR_NOMEM;
}

static int unknown_goods(cart_run *c, size_t i)
{
    c->out->status = 404;
    c->out->outcome = DEDUCT_UNKNOWN_GOODS;
    c->out->body = c->env->bodies->unknown_goods(c->goods[i]);
    return c->out->body != NULL ? DB_OK : DB_ERR_NOMEM;
}

/* A statement failed: the 503 is set; hands rc back so that the caller rolls back. */
static int failed(cart_run *c, const char *what, int rc)
{
    return answer_db_failure(c, what, rc) == 0 ? rc : DB_ERR_NOMEM;
}

/* Reads (claims) every row in lock order, then checks in the request's order. DB_OK with
 * the rows read and enough stock for every item (no answer yet); DB_OK with a 404 or 409
 * answer set (c->out->status); FOLD; or a failure with its 503 set. */
static int read_all(cart_run *c)
{
    bool missing[CART_MAX_ITEMS] = {false};
    size_t n = c->n_items;
    int rc;

    for (size_t k = 0; k < n; k++) {
        size_t i = c->order[k];
        const guard_hold *h = &c->holds[c->hold_of[i]];

        if (k == 1 && c->mode->tx != NULL)
            between_locks(c); /* between the first row lock and the second */
        if (c->mode->tx != NULL) {
            tx_seen seen = {0, 0};
            rc = c->mode->tx->read(c->conn, c->goods[i], c->counts[i], &seen);
            c->stock[i] = seen.stock;
        } else if (h->fenced) {
            /* Each goods row claimed with its own lock's token (db_stock_claim says why). */
            rc = db_stock_claim(c->conn, c->goods[i], h->fence_source, h->fence, &c->stock[i]);
        } else {
            rc = db_stock_read(c->conn, c->goods[i], &c->stock[i]);
        }
        if (rc == DB_ERR_NOT_FOUND) {
            missing[i] = true;
            continue;
        }
        if (rc == DB_ERR_FENCED) {
            char detail[128];
            int64_t stored = 0;

            /* As a single sale does (sale.c): move the lock's counter past what the
             * database has seen, so that the next holding's token passes. */
            if (c->mode->fence_refused != NULL &&
                db_fence_of(c->conn, c->goods[i], h->fence_source, &stored) == DB_OK)
                c->mode->fence_refused(c->env->guards, h, stored);
            snprintf(detail, sizeof(detail),
                     "goods %" PRId64 ": fencing token %" PRId64 " is older than the stored one",
                     c->goods[i], h->fence);
            return answer_503(c, DEDUCT_LOCK_LOST, detail) == 0 ? rc : DB_ERR_NOMEM;
        }
        if (rc != DB_OK)
            return failed(c, "read stock", rc);
    }
    for (size_t i = 0; i < n; i++)
        if (missing[i])
            return unknown_goods(c, i);
    for (size_t i = 0; i < n; i++)
        if (c->stock[i] < c->counts[i])
            return sold_out(c, i);
    return DB_OK;
}

/* Writes every row in lock order; c->stock[i] becomes what each keeps. */
static int write_all(cart_run *c)
{
    for (size_t k = 0; k < c->n_items; k++) {
        size_t i = c->order[k];
        tx_seen seen = {c->stock[i], 0};
        int rc = c->mode->tx != NULL
                     ? c->mode->tx->write(c->conn, c->goods[i], c->counts[i], &seen)
                     : db_stock_write(c->conn, c->goods[i], c->stock[i] - c->counts[i]);
        if (rc != DB_OK)
            return failed(c, "write stock", rc);
        c->stock[i] -= c->counts[i];
    }
    return DB_OK;
}

/* The cart's sale inside the open transaction: sets the answer (200, 404 or 409) and
 * returns DB_OK to commit it; FOLD; or a failure (503 set, or DB_ERR_NOMEM) to roll back. */
static int sell(cart_run *c)
{
    const mode_tx *tx = c->mode->tx;
    size_t n = c->n_items;
    int64_t fences[CART_MAX_ITEMS], cart_id = 0;
    bool fenced[CART_MAX_ITEMS];
    const char *fence_source = NULL;
    int rc;

    if (tx != NULL && tx->take_cart != NULL) {
        size_t first = 0;
        rc = tx->take_cart(c->conn, c->goods, c->counts, n, c->stock, &first);
        if (rc == DB_ERR_NOT_FOUND)
            return unknown_goods(c, first);
        if (rc == DB_ERR_INSUFFICIENT)
            return sold_out(c, first);
        if (rc != DB_OK)
            return failed(c, "sell the cart", rc);
    } else {
        rc = read_all(c);
        if (rc != DB_OK || c->out->status != 0)
            return rc;
        if (c->env->business_delay_ms > 0)
            clock_sleep_ms(c->env->business_delay_ms); /* the race window, widened */
        rc = write_all(c);
        if (rc != DB_OK)
            return rc;
    }

    for (size_t i = 0; i < n; i++) {
        const guard_hold *h = &c->holds[c->hold_of[i]];
        fenced[i] = h->fenced;
        fences[i] = h->fence;
        if (h->fenced)
            fence_source = h->fence_source; /* one guard, one counter, for every item */
    }
    rc = db_orders_insert_cart(c->conn, c->goods, c->counts, fences, fenced, fence_source, n,
                               c->mode->name, c->env->instance, c->request_id, &cart_id);
    if (rc != DB_OK)
        return failed(c, "record the orders", rc);
    c->out->status = 200;
    c->out->outcome = DEDUCT_DEDUCTED;
    c->out->body = c->env->bodies->ordered(cart_id, c->goods, c->counts, c->stock, n, c->mode->name,
                                           c->env->instance);
    return c->out->body != NULL ? DB_OK : DB_ERR_NOMEM;
}

/* Drops an answer that will not be given (the transaction rolls back after all). */
static void drop_answer(cart_run *c)
{
    free(c->out->body);
    c->out->body = NULL;
    c->out->status = 0;
}

/* One run of the transaction on c->conn, every guard held. Sets the answer and returns 0,
 * -1 when out of memory, or FOLD (rolled back, no answer). */
static int run_attempt(cart_run *c)
{
    size_t n = c->n_items;
    int rc;

    rc = db_begin(c->conn);
    if (rc != DB_OK)
        return answer_db_failure(c, "begin", rc);
    if (c->mode->tx != NULL && c->env->lock_wait_ms > 0) {
        rc = db_set_lock_timeout(c->conn, c->env->lock_wait_ms);
        if (rc != DB_OK) {
            db_rollback(c->conn);
            return answer_db_failure(c, "set lock_timeout", rc);
        }
    }
    if (c->key != NULL) {
        /* As a single sale's claim: a twin in flight waits here, then finds our answer. */
        rc = db_order_idempotency_claim(c->conn, c->text, c->goods, n, c->key);
        if (rc == DB_ERR_CONFLICT) {
            char *body = NULL;
            int status = 0;
            db_rollback(c->conn);
            rc = db_order_idempotency_fetch(c->conn, c->text, c->key, &status, &body);
            if (rc != DB_OK)
                return answer_db_failure(c, "fetch idempotent answer", rc);
            return answer_replay(c, status, body);
        }
        if (rc != DB_OK) {
            db_rollback(c->conn);
            return answer_db_failure(c, "claim idempotency key", rc);
        }
    }

    rc = sell(c);
    if (rc == DB_OK && c->key != NULL) {
        rc = db_order_idempotency_store(c->conn, c->text, c->key, c->out->status, c->out->body);
        if (rc != DB_OK) {
            drop_answer(c);
            rc = failed(c, "store idempotent answer", rc);
        }
    }
    if (rc != DB_OK) {
        db_rollback(c->conn);
        if (rc == DB_ERR_NOMEM) {
            drop_answer(c);
            return -1;
        }
        return rc == FOLD ? FOLD : 0; /* a failure's answer is set */
    }

    /* Every lock must still be ours at the commit, or another holder may have read. */
    for (size_t h = 0; h < c->n_holds; h++) {
        if (c->mode->still_held(c->env->guards, &c->holds[h]) != GUARD_OK) {
            db_rollback(c->conn);
            drop_answer(c);
            return answer_503(c, DEDUCT_LOCK_LOST, "a lock's lease was lost before the commit");
        }
    }
    rc = db_commit(c->conn);
    if (rc != DB_OK) {
        drop_answer(c);
        return answer_db_failure(c, "commit", rc);
    }
    return 0;
}

/* Looks for a stored answer before any guard is taken, so that a retry does not queue for
 * the locks. 1 when answered, 0 when not, -1 when out of memory. */
static int try_replay(cart_run *c, int64_t *budget)
{
    db_conn *conn = NULL;
    char *body = NULL;
    int status = 0, rc;

    if (sale_borrow(c->env, *budget, &conn) != DB_OK)
        return 0; /* the main path meets the same failure and answers it */
    rc = db_order_idempotency_fetch(conn, c->text, c->key, &status, &body);
    sale_give_back(c->env, budget, conn);
    if (rc != DB_OK)
        return 0;
    return answer_replay(c, status, body) == 0 ? 1 : -1;
}

int order_execute(const deduct_env *env, const mode *m, const cart_item *items, size_t n_items,
                  const char *idempotency_key, const char *request_id, const order_faults *faults,
                  deduct_result *out)
{
    cart_run *c = calloc(1, sizeof(*c));
    int64_t budget = env->db_deadline_ms; /* the cart's time against PostgreSQL (base.h) */
    int rc, result = -1;

    memset(out, 0, sizeof(*out));
    if (c == NULL)
        return -1;
    *c = (cart_run){.env = env,
                    .mode = m,
                    .items = items,
                    .n_items = n_items,
                    .key = idempotency_key,
                    .request_id = request_id,
                    .faults = faults,
                    .out = out};
    for (size_t i = 0; i < n_items; i++) {
        c->goods[i] = items[i].goods_id;
        c->counts[i] = items[i].count;
    }
    cart_lock_order(items, n_items, m->cart == MODE_CART_AS_LISTED, m->lock_of, c->order);
    if (cart_text(items, n_items, c->text, sizeof(c->text)) != 0)
        goto out; /* cannot happen: CART_TEXT_MAX holds any cart */

    if (idempotency_key != NULL) {
        rc = try_replay(c, &budget);
        if (rc != 0) {
            result = rc > 0 ? 0 : -1;
            goto out;
        }
    }

    rc = enter_all(c);
    if (rc != GUARD_OK) {
        result = rc == DB_ERR_NOMEM ? -1 : 0;
        goto out;
    }
    /* The connection after the guards, as for a single sale: no idle connection held while
     * waiting for a lock. */
    rc = sale_borrow(env, budget, &c->conn);
    if (rc != DB_OK) {
        result = answer_db_failure(c, "connect", rc);
    } else {
        result = run_attempt(c);
        if (result == FOLD) {
            /* The short goods' stock sits in segments: fold them back (a transaction of its
             * own, every guard still held) and run the cart once more. */
            int64_t moved = 0;
            char failed[256] = "";
            for (size_t i = 0; i < n_items && rc == DB_OK; i++)
                rc = sale_fold(c->conn, c->goods[i], &moved, failed, sizeof(failed));
            result = rc != DB_OK ? answer_503(c, DEDUCT_UNAVAILABLE, failed) : run_attempt(c);
            if (result == FOLD)
                result = -1; /* cannot happen: c->folded stops a second fold */
        }
        sale_give_back(env, &budget, c->conn);
    }
    leave_all(c);
out:
    free(c);
    return result;
}
