/* window.c - the smallest unexplained window (window.h). */
#include "history/window.h"

#include <stdlib.h>

int hist_check_window(const struct hist_model *m, uint32_t nslots, const struct hist_op *ops,
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
    size_t k = 0, cap = 2 * (hi - lo + 1) + 64;
    struct hist_op *sub = malloc(cap * sizeof *sub);
    if (!sub)
        return -1;
    for (size_t i = 0; i < n && ops[i].call <= t1; i++) {
        if (k == cap) {
            struct hist_op *bigger = realloc(sub, 2 * cap * sizeof *sub);
            if (!bigger) {
                free(sub);
                return -1;
            }
            sub = bigger;
            cap *= 2;
        }
        if (i >= lo && i <= hi) {
            sub[k++] = ops[i];
            continue;
        }
        if (lo > 0 && ops[i].ret < t0)
            continue;
        /* It overlaps the window: it may have taken effect in it, or not. An operation that
         * changes nothing (a read, a sold_out) is left out: taking effect or not is the same.
         * An order's answer is forgotten by its outcome alone: an optional order's step
         * never reads its items' `remaining`. */
        if (ops[i].f == HIST_F_READ || ops[i].outcome == HIST_SOLD_OUT)
            continue;
        sub[k] = ops[i];
        sub[k].outcome = HIST_UNKNOWN;
        sub[k].ret = HIST_TIME_INF;
        if (sub[k].f == HIST_F_DEDUCT)
            sub[k].b = 0; /* its answer forgotten: it joins the other deducts of its count as
                           * one interchangeable class (search.h) */
        k++;
        (*overlapping)++;
    }
    struct hist_search_result r;
    int rc = hist_search(m, lo > 0, nslots, sub, k, lim, &r);
    free(sub);
    if (rc == 0)
        *verdict = r.verdict;
    return rc;
}

/* 1: [lo, hi] is proven unexplained, 0: not (explained, or a bound met), -1: out of memory. */
static int unexplained(const struct hist_model *m, uint32_t nslots, const struct hist_op *ops,
                       size_t n, size_t lo, size_t hi, const struct hist_search_limits *lim,
                       size_t *over)
{
    enum hist_verdict v;
    if (hist_check_window(m, nslots, ops, n, lo, hi, lim, &v, over) != 0)
        return -1;
    return v == HIST_NO;
}

static bool out_of_time(const struct hist_search_limits *lim)
{
    return lim && lim->deadline > 0 && hist_now() > lim->deadline;
}

int hist_find_window(const struct hist_model *m, uint32_t nslots, const struct hist_op *ops,
                     size_t n, size_t fail_op, const struct hist_search_limits *lim,
                     struct hist_window *w)
{
    size_t f = fail_op < n ? fail_op : n - 1, over = 0, lo = 0, hi = n - 1;
    int rc;
    bool found = false;
    *w = (struct hist_window){0, n - 1, 0, true, false, f};
    /* 1. Small windows, every one that holds f, by size. */
    for (size_t s = 1; s <= HIST_WINDOW_EXHAUSTIVE && s <= n && !found && !out_of_time(lim); s++) {
        for (size_t off = 0; off < s && !found; off++) {
            if (f < s - 1 - off)
                continue;
            lo = f - (s - 1 - off);
            hi = lo + s - 1;
            if (hi >= n)
                continue;
            if ((rc = unexplained(m, nslots, ops, n, lo, hi, lim, &over)) < 0)
                return -1;
            found = rc == 1;
        }
    }
    if (found) {
        *w = (struct hist_window){lo, hi, over, lo == 0, true, f};
        return 0;
    }
    /* 2. Doubling around f until a window is proven (at worst the whole history, already
     *    known to be unexplained). */
    for (size_t half = HIST_WINDOW_EXHAUSTIVE; !out_of_time(lim); half *= 2) {
        lo = f > half ? f - half : 0;
        hi = f + half < n ? f + half : n - 1;
        if (lo == 0 && hi == n - 1)
            return 0;
        if ((rc = unexplained(m, nslots, ops, n, lo, hi, lim, &over)) < 0)
            return -1;
        if (rc == 1)
            break;
    }
    if (out_of_time(lim))
        return 0;
    *w = (struct hist_window){lo, hi, over, lo == 0, true, f};
    /* 3. Shrink it while it stays unexplained: the start moved right by halving steps, then
     *    the end moved left, then one operation at a time at either end. */
    for (size_t step = (f - w->lo + 1) / 2; step > 0 && !out_of_time(lim); step /= 2)
        while (w->lo + step <= f) {
            if ((rc = unexplained(m, nslots, ops, n, w->lo + step, w->hi, lim, &over)) < 0)
                return -1;
            if (rc == 0)
                break;
            w->lo += step;
            w->overlapping = over;
        }
    for (size_t step = (w->hi - f + 1) / 2; step > 0 && !out_of_time(lim); step /= 2)
        while (w->hi >= f + step) {
            if ((rc = unexplained(m, nslots, ops, n, w->lo, w->hi - step, lim, &over)) < 0)
                return -1;
            if (rc == 0)
                break;
            w->hi -= step;
            w->overlapping = over;
        }
    w->from_init = w->lo == 0;
    return 0;
}
