/* model.c - the stock counter and the read/write/compare-and-set register (model.h).
 *
 * Stock, per goods, a slot [lo, hi]: the stocks that every answer linearized so far allows.
 * The history's start is [0, +infinity): the stock before the first operation is one number
 * nobody has said yet (HISTORY: a history without a reset begins at its first read). Once
 * a read, an ok sale or a reset says it, the slot is pinned (lo == hi), and from then on every
 * step is the exact counter's. Before that, a step keeps every stock still possible, so that
 * the answers must agree with one start: a sold_out of 1 (the stock was 0) and then a sale
 * told 5 (it was 6) have none, where a start of "any stock at each step" would let each
 * answer pick its own.
 *   - deduct ok, `remaining` r: needs r + count in [lo, hi]; leaves [r, r];
 *   - deduct fail sold_out: needs a stock below count, lo < count; leaves [lo, min(hi, count - 1)];
 *   - deduct whose answer is lost, taken: needs count at least, hi >= max(lo, count); leaves
 *     the interval count lower (the service sells only when the stock covers it);
 *   - read ok s: needs s in [lo, hi]; leaves [s, s]. reset s: leaves [s, s];
 *   - order: every item as the deduct of its goods would be, all or none: ok and lost alike;
 *     a sold_out needs the named item's goods below its count and changes nothing.
 * Every interval stays within [0, +infinity): a stock is never negative in the model either.
 *
 * Units, the stock counter for a service whose 200 does not promise the exact rest (one whose
 * sales commit side by side, each seeing only its own part of the stock): an ok deduct needs
 * the stock at count at least and leaves it count lower, whatever `remaining` it told; the
 * rest is the stock's. Every unit sold is still accounted for, a sold_out still needs the
 * stock below count at one instant, and a read still needs the exact stock.
 *
 * Register, from Knossos's cas-register: a write sets the value, an ok read needs it, an ok
 * cas [e, n] needs e and leaves n. Failed operations never reach a model (history.h). */
#include "history/model.h"

#include <stddef.h>

static void stock_start(int64_t *s, bool any)
{
    (void)any; /* one unknown stock, either way (model.h) */
    s[0] = 0;
    s[1] = HIST_STOCK_UNBOUNDED;
}

/* May the stock [lo, hi] of s tell an ok sale of count (known: with `remaining` r; not
 * known: in the units model, or an answer lost)? */
static bool sale_allowed(const int64_t *s, int64_t count, int64_t remaining, bool known)
{
    if (known)
        return s[0] <= remaining + count && remaining + count <= s[1];
    return count <= s[1];
}

static void sale_apply(int64_t *s, int64_t count, int64_t remaining, bool known)
{
    if (known) {
        s[0] = s[1] = remaining;
        return;
    }
    s[0] = (s[0] > count ? s[0] : count) - count;
    if (s[1] != HIST_STOCK_UNBOUNDED)
        s[1] -= count;
}

/* A sold_out of count: the stock was below it, and stays. */
static bool refusal_step(int64_t *s, int64_t count)
{
    if (s[0] >= count)
        return false;
    if (s[1] >= count)
        s[1] = count - 1;
    return true;
}

/* An order: all items or none. */
static bool order_step(int64_t *st, const struct hist_op *op, bool known)
{
    if (op->outcome == HIST_SOLD_OUT) {
        const struct hist_item *named = &op->items[op->a];
        return refusal_step(st + 2 * (size_t)named->slot, named->count);
    }
    known = known && op->outcome == HIST_OK;
    for (uint32_t k = 0; k < op->nitems; k++) {
        const struct hist_item *it = &op->items[k];
        if (!sale_allowed(st + 2 * (size_t)it->slot, it->count, it->remaining, known))
            return false;
    }
    for (uint32_t k = 0; k < op->nitems; k++) {
        const struct hist_item *it = &op->items[k];
        sale_apply(st + 2 * (size_t)it->slot, it->count, it->remaining, known);
    }
    return true;
}

/* known: false in the units model, whose ok sales' `remaining` is not judged. */
static bool counter_step(int64_t *st, const struct hist_op *op, bool known)
{
    if (op->f == HIST_F_ORDER)
        return order_step(st, op, known);
    int64_t *s = st + 2 * (size_t)op->slot;
    switch (op->f) {
    case HIST_F_DEDUCT:
        if (op->outcome == HIST_SOLD_OUT)
            return refusal_step(s, op->a);
        known = known && op->outcome == HIST_OK;
        if (!sale_allowed(s, op->a, op->b, known))
            return false;
        sale_apply(s, op->a, op->b, known);
        return true;
    case HIST_F_READ:
        if (!(s[0] <= op->a && op->a <= s[1]))
            return false;
        s[0] = s[1] = op->a;
        return true;
    case HIST_F_RESET:
        s[0] = s[1] = op->a;
        return true;
    default:
        return false;
    }
}

static bool stock_step(int64_t *st, const struct hist_op *op)
{
    return counter_step(st, op, true);
}

static bool units_step(int64_t *st, const struct hist_op *op)
{
    return counter_step(st, op, false);
}

static int64_t stock_need(const struct hist_op *op, uint32_t k)
{
    if (op->outcome != HIST_OK)
        return HIST_STATE_ANY;
    if (op->f == HIST_F_DEDUCT)
        return op->b + op->a;
    if (op->f == HIST_F_ORDER)
        return op->items[k].remaining + op->items[k].count;
    if (op->f == HIST_F_READ)
        return op->a;
    return HIST_STATE_ANY;
}

static int64_t units_need(const struct hist_op *op, uint32_t k)
{
    return op->f == HIST_F_READ ? stock_need(op, k) : HIST_STATE_ANY;
}

static int64_t stock_ceiling(const int64_t *s)
{
    return s[1];
}

static bool stock_raises(const struct hist_op *op)
{
    return op->f == HIST_F_RESET;
}

static void register_start(int64_t *s, bool any)
{
    s[0] = any ? HIST_STATE_ANY : 0;
}

static bool register_step(int64_t *s, const struct hist_op *op)
{
    switch (op->f) {
    case HIST_F_READ:
        if (s[0] != HIST_STATE_ANY && s[0] != op->a)
            return false;
        s[0] = op->a;
        return true;
    case HIST_F_WRITE:
        s[0] = op->a;
        return true;
    case HIST_F_CAS:
        if (s[0] != HIST_STATE_ANY && s[0] != op->a)
            return false;
        s[0] = op->b;
        return true;
    default:
        return false;
    }
}

static const struct hist_model stock_model = {
    "stock", 2, stock_start, stock_step, stock_need, stock_ceiling, stock_raises};
static const struct hist_model units_model = {
    "units", 2, stock_start, units_step, units_need, stock_ceiling, stock_raises};
static const struct hist_model register_model = {
    "register", 1, register_start, register_step, NULL, NULL, NULL};

const struct hist_model *hist_model(enum hist_model_kind kind)
{
    return kind == HIST_MODEL_STOCK   ? &stock_model
           : kind == HIST_MODEL_UNITS ? &units_model
                                      : &register_model;
}
