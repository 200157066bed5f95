/* search.h - is a history linearizable: the Wing-Gong-Lowe search with memoization.
 *
 * The operations' invocations and completions form one list in time order. The search walks
 * it from the head: an invocation whose operation the model accepts in the current state is
 * linearized (taken out of the list, pushed on a stack, the state stepped) and the walk starts
 * again at the head; a completion reached means its operation was never linearized in time,
 * so the last choice is undone (popped, put back) and the walk goes on after it. The history
 * is linearizable when every required operation is linearized, and not when a completion is
 * reached with nothing left to undo. Memoization (Lowe's refinement, as Porcupine and
 * Knossos do): a pair (set of linearized operations, state) seen once is never explored
 * again, since what can follow depends on nothing else.
 *
 * Optional operations (outcome HIST_UNKNOWN) have no completion in the list: they may be
 * linearized or not, and the search ends without them. Of two optional operations with the
 * same effect, the later-invoked is only tried once the earlier is linearized (either could
 * stand for the other: both are open until the end).
 *
 * One search checks one group: a goods alone, or goods tied by orders, whose state is the
 * vector of their stocks (model.h), one slot per goods. */
#ifndef HISTORY_SEARCH_H
#define HISTORY_SEARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "history/history.h"
#include "history/model.h"

enum hist_verdict {
    HIST_YES,
    HIST_NO,
    HIST_BOUND_STATES, /* unknown: the search met max_states */
    HIST_BOUND_TIME    /* unknown: the search met the deadline */
};

struct hist_search_limits {
    uint64_t max_states; /* (set, state) pairs memoized, at most; 0: no bound */
    double deadline;     /* CLOCK_MONOTONIC seconds (hist_now()) to stop at; 0: none */
};

struct hist_search_result {
    enum hist_verdict verdict;
    uint64_t states;  /* pairs memoized */
    size_t fail_op;   /* HIST_NO: the operation whose completion came with it unlinearized,
                       * at the furthest depth the search reached (index into ops) */
    size_t max_depth; /* the most operations linearized at once */
};

/* Checks ops[0..n), sorted by invocation time (as history_load leaves them), against model m,
 * in a state of nslots slots (every slot an operation names is below nslots), starting from
 * the history's start or, with any, from any state (model.h). Returns 0 with *res filled,
 * -1 when out of memory. */
int hist_search(const struct hist_model *m, bool any, uint32_t nslots, const struct hist_op *ops,
                size_t n, const struct hist_search_limits *lim, struct hist_search_result *res);

/* CLOCK_MONOTONIC, in seconds. */
double hist_now(void);

#endif
