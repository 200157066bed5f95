/* model.h - the sequential specifications a history is checked against.
 *
 * A model is a state and a step: step(state, op) says whether op, taking effect at one
 * instant in that state, gives the answer the history recorded, and changes the state as op
 * would. The state of a group of goods checked together is a vector with one slot per goods
 * (history.h), `words` integers per slot; an operation reads and writes the slots of its own
 * goods and no other, so the search saves and restores just those.
 *
 * The stock: a slot holds the interval [lo, hi] of the stocks the goods may hold, given what
 * the operations linearized so far answered. A history begins with every stock unknown but
 * one number each (model.c): [0, +infinity) until a read, an ok sale or a reset pins it to
 * one value; a sold_out only lowers hi, a sale whose answer is lost only shifts the interval.
 * A window of a history (window.h) starts the same way, so "any state" is that interval too.
 *
 * The register: one word, the value, or HIST_STATE_ANY, every value at once (a window's
 * start): a step from ANY is legal when it is legal from some value, and then sets the value,
 * as every register operation that is checked does. */
#ifndef HISTORY_MODEL_H
#define HISTORY_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "history/history.h"

#define HIST_STATE_ANY INT64_MIN
/* An unbounded stock, as the upper end of a stock's interval. */
#define HIST_STOCK_UNBOUNDED INT64_MAX

struct hist_model {
    const char *name;
    unsigned words; /* state words per slot */
    /* Writes one slot's state before the first operation: the history's start, or any state
     * (any: the start of a window, from which every order of the whole history can go on). */
    void (*start)(int64_t *slot, bool any);
    /* true when op may take effect in the state st (the group's, `words` per slot, op's goods
     * at hist_op_slot), which is then updated in place; false leaves st as it was. An op
     * whose outcome is HIST_UNKNOWN is stepped as if it took effect (the search decides
     * whether it did). */
    bool (*step)(int64_t *st, const struct hist_op *op);
    /* For a model whose state only goes down except through the operations `raises` says
     * yes to (the stock: only a reset raises it): the stock op's k-th goods needs to be
     * linearized at, or HIST_STATE_ANY when it needs none, and `ceiling` the highest stock a
     * slot's state allows. While no raising operation of a goods is left, an operation that
     * needs a stock above the slot's ceiling can never be linearized, and the search abandons
     * that branch at once. NULL for a model without that property. */
    int64_t (*need)(const struct hist_op *op, uint32_t k);
    int64_t (*ceiling)(const int64_t *slot);
    bool (*raises)(const struct hist_op *op);
};

/* The model of kind; a static object. */
const struct hist_model *hist_model(enum hist_model_kind kind);

#endif
