/* model.c - the stock counter and the read/write/compare-and-set register (model.h).
 *
 * Stock, per goods: an ok deduct with `remaining` r needs the stock at r + count (and so at
 * least count) and leaves r; a sold_out fail needs the stock below count and changes nothing;
 * an ok read needs the stock it read; a reset sets it. An info deduct, when the search lets it
 * take effect, needs the stock at count at least, as the service sells only then.
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

static bool stock_step(int64_t s, const struct hist_op *op, int64_t *next)
{
    *next = s;
    switch (op->f) {
    case HIST_F_DEDUCT:
        if (op->outcome == HIST_SOLD_OUT)
            return s == HIST_STATE_ANY || s < op->a; /* from ANY: the stock below count, still unknown */
        if (op->outcome == HIST_UNKNOWN)
            return s == HIST_STATE_ANY || s >= op->a ? (*next = s == HIST_STATE_ANY ? s : s - op->a, true)
                                                    : false;
        if (s != HIST_STATE_ANY && s != op->b + op->a)
            return false;
        *next = op->b;
        return true;
    case HIST_F_READ:
        if (s != HIST_STATE_ANY && s != op->a)
            return false;
        *next = op->a;
        return true;
    case HIST_F_RESET:
        *next = op->a;
        return true;
    default:
        return false;
    }
}

static bool units_step(int64_t s, const struct hist_op *op, int64_t *next)
{
    if (op->f == HIST_F_DEDUCT && op->outcome == HIST_OK) {
        /* As an info deduct that took effect: the count is known, the rest is not told. */
        struct hist_op taken = *op;
        taken.outcome = HIST_UNKNOWN;
        return stock_step(s, &taken, next);
    }
    return stock_step(s, op, next);
}

static bool register_step(int64_t s, const struct hist_op *op, int64_t *next)
{
    *next = s;
    switch (op->f) {
    case HIST_F_READ:
        if (s != HIST_STATE_ANY && s != op->a)
            return false;
        *next = op->a;
        return true;
    case HIST_F_WRITE:
        *next = op->a;
        return true;
    case HIST_F_CAS:
        if (s != HIST_STATE_ANY && s != op->a)
            return false;
        *next = op->b;
        return true;
    default:
        return false;
    }
}

static int64_t stock_need(const struct hist_op *op)
{
    if (op->outcome != HIST_OK)
        return HIST_STATE_ANY;
    if (op->f == HIST_F_DEDUCT)
        return op->b + op->a;
    if (op->f == HIST_F_READ)
        return op->a;
    return HIST_STATE_ANY;
}

static int64_t units_need(const struct hist_op *op)
{
    return op->f == HIST_F_DEDUCT ? HIST_STATE_ANY : stock_need(op);
}

static bool stock_raises(const struct hist_op *op)
{
    return op->f == HIST_F_RESET;
}

static const struct hist_model stock_model = {"stock", HIST_STATE_ANY, stock_step, stock_need,
                                              stock_raises};
static const struct hist_model units_model = {"units", HIST_STATE_ANY, units_step, units_need,
                                              stock_raises};
static const struct hist_model register_model = {"register", 0, register_step, NULL, NULL};

const struct hist_model *hist_model(enum hist_model_kind kind)
{
    return kind == HIST_MODEL_STOCK ? &stock_model
           : kind == HIST_MODEL_UNITS ? &units_model
                                      : &register_model;
}
