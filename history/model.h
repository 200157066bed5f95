/* model.h - the sequential specifications a history is checked against.
 *
 * A model is a state and a step: step(state, op) says whether op, taking effect at one
 * instant in that state, gives the answer the history recorded, and what the state is after.
 * Every model here keeps its whole state in one integer (the stock; the register's value),
 * so two states are equal when the integers are, and the search hashes them as they are.
 *
 * HIST_STATE_ANY stands for "any state" (every state at once): a window of a history is
 * checked from it (report.h), and the stock model starts there until a reset or a read says
 * what the stock is. A step from ANY is legal when it is legal from some state, and gives
 * the states it could give (or ANY again when they are several): the check from ANY can only
 * be more lenient than the check from any one state. */
#ifndef HISTORY_MODEL_H
#define HISTORY_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "history/history.h"

#define HIST_STATE_ANY INT64_MIN

struct hist_model {
    const char *name;
    int64_t init; /* the state before the first operation */
    /* true when op may take effect in state, with *next the state after. An op whose outcome
     * is HIST_UNKNOWN is stepped as if it took effect (the search decides whether it did). */
    bool (*step)(int64_t state, const struct hist_op *op, int64_t *next);
    /* For a model whose state only goes down except through the operations `raises` says
     * yes to (the stock: only a reset raises it): the one state op needs to be linearized in,
     * or HIST_STATE_ANY when op needs none. While no raising operation is left, an operation
     * that needs a state above the current one can never be linearized, and the search
     * abandons that branch at once. NULL for a model without that property. */
    int64_t (*need)(const struct hist_op *op);
    bool (*raises)(const struct hist_op *op);
};

/* The model of kind; a static object. */
const struct hist_model *hist_model(enum hist_model_kind kind);

#endif
