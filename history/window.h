/* window.h - the smallest window of a history that no order explains.
 *
 * A window is the operations invoked between two points of the history (a contiguous run of
 * them in invocation order), checked on their own from any state (model.h), or, when it
 * starts at the history's first operation, from the history's start. The rest of the
 * history is not simply dropped, which could turn a legal history into an illegal one: with T0
 * the window's first invocation and T1 its last required completion,
 *   - an operation completed before T0 took effect before every operation of the window: the
 *     state "any" at T0 stands for whatever it did;
 *   - an operation invoked after T1 took effect after every required one of the window: left
 *     out;
 *   - any other operation (it overlaps [T0, T1]) may have taken effect inside the window: it
 *     joins the check as optional (it may take effect once, or not), its answer forgotten.
 * So every order of the whole history gives an order of the window's check, and a window
 * with none proves the whole history has none.
 *
 * Which window: the search's failure point (search.h, fail_op) is where it got furthest; the
 * windows that contain it are tried by size, 1, 2, 3 ... operations, each size at every
 * position, and the first that no order explains is the smallest around that point. Past
 * HIST_WINDOW_EXHAUSTIVE operations, the window doubles in size around the point instead
 * until one is proven (at worst the whole history, which the search already found
 * unexplained), and is then shrunk while it stays unexplained: its start moved towards the
 * point by halving steps, then its end likewise. That one is minimal at both ends in the
 * sense of those steps, not necessarily the smallest of all. */
#ifndef HISTORY_WINDOW_H
#define HISTORY_WINDOW_H

#include <stddef.h>

#include "history/history.h"
#include "history/model.h"
#include "history/search.h"

#define HIST_WINDOW_EXHAUSTIVE 12

struct hist_window {
    size_t lo, hi;      /* the window: ops[lo..hi], inclusive */
    size_t overlapping; /* the operations that joined the check as optional */
    bool from_init;     /* checked from the model's initial state (lo == 0) */
    bool proven;        /* its own check said no (false only for the whole-history fallback) */
    size_t fail_op;     /* the search's failure point, as given */
};

/* Finds the window for ops[0..n), a group of nslots goods (search.h) that is not linearizable
 * from the history's start (with the search's failure point fail_op). Each check is bounded by
 * lim->max_states and lim->deadline; a check that meets a bound counts as not proven. Returns 0
 * with *w filled, -1 when out of memory. */
int hist_find_window(const struct hist_model *m, uint32_t nslots, const struct hist_op *ops,
                     size_t n, size_t fail_op, const struct hist_search_limits *lim,
                     struct hist_window *w);

/* The check of one window (above): sets *verdict; *overlapping to the optional operations
 * it added. Returns -1 when out of memory. */
int hist_check_window(const struct hist_model *m, uint32_t nslots, const struct hist_op *ops,
                      size_t n, size_t lo, size_t hi, const struct hist_search_limits *lim,
                      enum hist_verdict *verdict, size_t *overlapping);

#endif
