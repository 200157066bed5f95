/* window.c - the smallest unexplained window (window.h). */
#include "history/window.h"

#include <stdlib.h>

int hist_check_window(const struct hist_model *m, int64_t init, const struct hist_op *ops,
                      size_t n, size_t lo, size_t hi, const struct hist_search_limits *lim,
                      enum hist_verdict *verdict, size_t *overlapping)
{
    int64_t t0 = ops[lo].call, t1 = INT64_MIN;
    bool any_required = false;
    for (size_t i = lo; i <= hi; i++) {
        if (ops[i].outcome == HIST_UNKNOWN)
            continue;
        any_required = true;
        if (ops[i].ret > t1)
            t1 = ops[i].ret;
    }
    *overlapping = 0;
    if (!any_required) { /* optional operations alone: the empty order explains them */
        *verdict = HIST_YES;
        return 0;
    }
    struct hist_op *sub = malloc(n * sizeof *sub);
    if (!sub)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n && ops[i].call <= t1; i++) {
        if (i >= lo && i <= hi) {
            sub[k++] = ops[i];
            continue;
        }
        if (lo > 0 && ops[i].ret < t0)
            continue;
        /* It overlaps the window: it may have taken effect in it, or not. An operation that
         * changes nothing (a read, a sold_out) is left out: taking effect or not is the same. */
        if (ops[i].f == HIST_F_READ || ops[i].outcome == HIST_SOLD_OUT)
            continue;
        sub[k] = ops[i];
        sub[k].outcome = HIST_UNKNOWN;
        sub[k].ret = HIST_TIME_INF;
        k++;
        (*overlapping)++;
    }
    struct hist_search_result r;
    int rc = hist_search(m, lo == 0 ? init : HIST_STATE_ANY, sub, k, lim, &r);
    free(sub);
    if (rc == 0)
        *verdict = r.verdict;
    return rc;
}

static int try_window(const struct hist_model *m, int64_t init, const struct hist_op *ops,
                      size_t n, size_t lo, size_t hi, const struct hist_search_limits *lim,
                      struct hist_window *w, bool *found)
{
    enum hist_verdict v;
    size_t over;
    if (hist_check_window(m, init, ops, n, lo, hi, lim, &v, &over) != 0)
        return -1;
    if (v == HIST_NO) {
        *w = (struct hist_window){lo, hi, over, lo == 0, true};
        *found = true;
    }
    return 0;
}

int hist_find_window(const struct hist_model *m, int64_t init, const struct hist_op *ops,
                     size_t n, size_t fail_op, const struct hist_search_limits *lim,
                     struct hist_window *w)
{
    bool found = false;
    size_t f = fail_op < n ? fail_op : n - 1;
    for (size_t s = 1; s <= HIST_WINDOW_EXHAUSTIVE && s <= n && !found; s++) {
        /* Every window of s operations that holds f, the one ending at f first. */
        for (size_t off = 0; off < s && !found; off++) {
            if (f < s - 1 - off)
                continue;
            size_t lo = f - (s - 1 - off), hi = lo + s - 1;
            if (hi >= n)
                continue;
            if (try_window(m, init, ops, n, lo, hi, lim, w, &found) != 0)
                return -1;
            if (lim && lim->deadline > 0 && hist_now() > lim->deadline)
                goto whole;
        }
    }
    for (size_t half = HIST_WINDOW_EXHAUSTIVE; !found; half *= 2) {
        size_t lo = f > half ? f - half : 0, hi = f + half < n ? f + half : n - 1;
        if (lo == 0 && hi == n - 1)
            break;
        if (try_window(m, init, ops, n, lo, hi, lim, w, &found) != 0)
            return -1;
        if (lim && lim->deadline > 0 && hist_now() > lim->deadline)
            break;
    }
whole:
    if (!found)
        *w = (struct hist_window){0, n - 1, 0, true, false};
    return 0;
}
