/* main.c - check-history: is a recorded history linearizable (docs/history.md).
 *
 *   check-history [--model stock|register|units] [--max-states N] [--max-seconds S] FILE...
 *
 * Loads the files as one history, splits it into groups of goods (group.h: each goods alone,
 * the stock of one never constraining another's, except goods tied by orders, which are
 * checked together), runs the search on each, and for a group that no order explains prints
 * its goods and the smallest window that shows it. The last line of standard
 * output is the verdict; the exit status says it too: 0 yes, 1 no, 2 malformed (or a usage
 * error), 3 unknown (a bound met: the line before says which). */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "history/group.h"
#include "history/history.h"
#include "history/model.h"
#include "history/search.h"
#include "history/window.h"

#define DEFAULT_MAX_STATES 10000000ull
#define DEFAULT_MAX_SECONDS 300.0
/* The window's checks get their own time, so that a search that used most of its own still
 * leaves the counterexample time to be found. */
#define WINDOW_SECONDS 20.0

static void usage(FILE *fp)
{
    fprintf(
        fp,
        "usage: check-history [--model stock|register|units] [--max-states N] [--max-seconds S] "
        "FILE...\n"
        "  FILE        a history in JSON Lines (- is standard input); several make one history\n"
        "  --model     stock (default): a stock counter per goods; register: one\n"
        "              read/write/cas register starting at 0 (Knossos's cas-register);\n"
        "              units: the stock counter, its deductions' `remaining` not judged\n"
        "  --max-states N   memoized (set, state) pairs per goods before giving up (default %llu)\n"
        "  --max-seconds S  seconds of search in all before giving up (default %.0f)\n"
        "  --each      check each FILE as a history of its own: a line \"FILE: verdict\" each\n"
        "Last line: linearizable: yes|no|unknown; exit 0 yes, 1 no, 2 malformed, 3 unknown.\n",
        DEFAULT_MAX_STATES, DEFAULT_MAX_SECONDS);
}

/* A group's name in the report: "goods 3", or "goods 1, 2, 5" for goods tied by orders (the
 * first HIST_NAMED of them, and how many more). */
#define HIST_NAMED 32

static void group_name(const struct hist_group *g, enum hist_model_kind model, char *buf,
                       size_t len)
{
    size_t at = 0;
    if (model == HIST_MODEL_REGISTER) {
        snprintf(buf, len, "register");
        return;
    }
    at = (size_t)snprintf(buf, len, "goods ");
    for (uint32_t k = 0; k < g->nslots && k < HIST_NAMED && at < len; k++) {
        int w = snprintf(buf + at, len - at, "%s%" PRId64, k ? ", " : "", g->goods[k]);
        at += w > 0 ? (size_t)w : 0;
    }
    if (g->nslots > HIST_NAMED && at < len)
        snprintf(buf + at, len - at, " and %u more", g->nslots - HIST_NAMED);
}

static void print_window(const char *what, const struct hist_op *ops, const struct hist_window *w,
                         const char *const *files, size_t nfiles, enum hist_model_kind model)
{
    size_t k = w->hi - w->lo + 1;
    if (w->proven)
        printf("%s: no order explains these %zu operations (checked from %s, with %zu "
               "overlapping operations free to take effect or not):\n",
               what, k,
               w->from_init && model == HIST_MODEL_REGISTER ? "the initial value 0" : "any state",
               w->overlapping);
    else {
        /* The whole history is the proven window; it is too long to read, so the operations
         * around the point where the search failed are shown instead, said as such. */
        size_t f = w->fail_op, lo = f > 40 ? f - 40 : 0, hi = f + 10 < w->hi ? f + 10 : w->hi;
        printf("%s: no smaller window than the whole history (%zu operations) was proven within "
               "the bounds; the operations invoked around the point where the search failed "
               "(the operation of line %ld):\n",
               what, k, ops[f].line_call);
        if (k <= 60)
            lo = w->lo, hi = w->hi;
        for (size_t i = lo; i <= hi; i++) {
            char line[1024];
            hist_op_describe(&ops[i], line, sizeof line);
            printf("  %s\n", line);
        }
        return;
    }
    for (size_t i = w->lo; i <= w->hi; i++) {
        char line[1024];
        hist_op_describe(&ops[i], line, sizeof line);
        if (nfiles > 1)
            printf("  %s  [%s]\n", line, files[ops[i].file]);
        else
            printf("  %s\n", line);
    }
}

/* What check_ops reports with and about. */
struct report {
    const char *const *files;
    size_t nfiles;
    enum hist_model_kind model;
    unsigned long long max_states;
    const struct hist_search_limits *lim;
};

/* Checks ops[0..n), a group of nslots goods named what: prints its line (none for a yes when
 * quiet) and, when no order explains it, the window. Returns 0 yes, 1 no, 3 unknown. */
static int check_ops(const struct hist_model *m, uint32_t nslots, const struct hist_op *ops,
                     size_t n, const char *what, bool quiet, const struct report *rp)
{
    struct hist_search_result r;
    double t = hist_now();
    if (hist_search(m, false, nslots, ops, n, rp->lim, &r) != 0) {
        printf("%s: out of memory\n", what);
        r.verdict = HIST_BOUND_STATES;
    }
    t = hist_now() - t;
    switch (r.verdict) {
    case HIST_YES:
        if (!quiet)
            printf("%s: %zu operations, linearizable (%.3f s, %" PRIu64 " states)\n", what, n, t,
                   r.states);
        return 0;
    case HIST_NO: {
        printf("%s: %zu operations, NOT linearizable (%.3f s, %" PRIu64 " states)\n", what, n, t,
               r.states);
        struct hist_search_limits wl = {rp->max_states < 100000 ? rp->max_states : 100000,
                                        hist_now() + WINDOW_SECONDS};
        struct hist_window w;
        if (hist_find_window(m, nslots, ops, n, r.fail_op, &wl, &w) != 0)
            printf("%s: out of memory while looking for the window\n", what);
        else
            print_window(what, ops, &w, rp->files, rp->nfiles, rp->model);
        return 1;
    }
    case HIST_BOUND_STATES:
    case HIST_BOUND_TIME:
        break;
    }
    printf("%s: %zu operations, unknown: the search met its bound of %s (%.3f s, %" PRIu64
           " states)\n",
           what, n,
           r.verdict == HIST_BOUND_STATES ? "states (--max-states)" : "time (--max-seconds)", t,
           r.states);
    return 3;
}

/* Checks one group, ops its operations. Goods tied by orders are first checked one by one,
 * each on its projection (group.h): a goods that no order explains even alone is found at
 * the cost of one goods, where the joint search would have to try every interleaving of the
 * other goods' operations before it gives up. Then the group is checked as a whole, which
 * finds what no goods alone shows (a cart sold half). Returns 0 yes, 1 no, 3 unknown. */
static int check_group(const struct hist_model *m, const struct hist_group *g,
                       const struct hist_op *ops, const struct report *rp)
{
    size_t n = g->hi - g->lo;
    char what[HIST_NAMED * 24 + 96];
    group_name(g, rp->model, what, sizeof what);
    for (uint32_t s = 0; g->nslots > 1 && s < g->nslots; s++) {
        struct hist_op *proj;
        struct hist_item *items;
        long k = hist_project(ops, n, s, &proj, &items);
        if (k < 0) {
            printf("%s: out of memory\n", what);
            return 3;
        }
        size_t at = strlen(what);
        snprintf(what + at, sizeof what - at,
                 " (goods %" PRId64 " alone, orders by their item of it)", g->goods[s]);
        int st = check_ops(m, g->nslots, proj, (size_t)k, what, true, rp);
        what[at] = '\0';
        free(proj);
        free(items);
        if (st == 1)
            return 1;
    }
    return check_ops(m, g->nslots, ops, n, what, false, rp);
}

/* Checks files[0..nfiles) as one history: prints a line per goods (and the window of a goods
 * that no order explains). Returns 0 yes, 1 no, 2 malformed, 3 unknown; prints no verdict
 * line (the caller does). */
static int check(const char *const *files, size_t nfiles, enum hist_model_kind model,
                 unsigned long long max_states, double max_seconds)
{
    struct history h;
    struct hist_error err;
    if (history_load(files, nfiles, model, &h, &err) != 0) {
        if (err.line > 0) {
            fprintf(stderr, "check-history: %s:%ld: %s\n", err.file, err.line, err.why);
            printf("malformed: %s line %ld: %s\n", err.file, err.line, err.why);
        } else {
            fprintf(stderr, "check-history: %s: %s\n", err.file ? err.file : "", err.why);
            printf("malformed: %s: %s\n", err.file ? err.file : "", err.why);
        }
        return 2;
    }

    const struct hist_model *m = hist_model(model);
    struct hist_groups gs;
    if (hist_group(&h, &gs) != 0) {
        printf("out of memory\n");
        history_free(&h);
        return 3;
    }
    double start = hist_now();
    struct hist_search_limits lim = {max_states, start + max_seconds};
    int status = 0; /* 0 yes, 1 no, 3 unknown: the worst over the groups */
    struct report rp = {files, nfiles, model, max_states, &lim};
    for (size_t k = 0; k < gs.n; k++) {
        int st = check_group(m, &gs.g[k], h.ops + gs.g[k].lo, &rp);
        if (st == 1 || (st == 3 && status == 0))
            status = st;
    }
    size_t parts = gs.n;
    hist_groups_free(&gs);
    if (parts == 0)
        printf("no operations\n");
    history_free(&h);
    return status;
}

int main(int argc, char **argv)
{
    enum hist_model_kind model = HIST_MODEL_STOCK;
    unsigned long long max_states = DEFAULT_MAX_STATES;
    double max_seconds = DEFAULT_MAX_SECONDS;
    const char **files = calloc((size_t)argc, sizeof *files);
    size_t nfiles = 0;
    bool each = false;
    if (!files)
        return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *end;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            free(files);
            return 0;
        } else if (strcmp(a, "--model") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "stock") == 0)
                model = HIST_MODEL_STOCK;
            else if (strcmp(v, "register") == 0)
                model = HIST_MODEL_REGISTER;
            else if (strcmp(v, "units") == 0)
                model = HIST_MODEL_UNITS;
            else
                goto bad_usage;
        } else if (strcmp(a, "--max-states") == 0 && i + 1 < argc) {
            errno = 0;
            max_states = strtoull(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || max_states == 0)
                goto bad_usage;
        } else if (strcmp(a, "--max-seconds") == 0 && i + 1 < argc) {
            errno = 0;
            max_seconds = strtod(argv[++i], &end);
            if (errno || *end || end == argv[i] || !(max_seconds > 0))
                goto bad_usage;
        } else if (strcmp(a, "--each") == 0) {
            each = true;
        } else if (strcmp(a, "--") == 0) {
            while (++i < argc)
                files[nfiles++] = argv[i];
        } else if (a[0] == '-' && a[1] != '\0') {
            goto bad_usage;
        } else {
            files[nfiles++] = a;
        }
    }
    if (nfiles == 0)
        goto bad_usage;

    int status;
    if (!each) {
        status = check(files, nfiles, model, max_states, max_seconds);
        if (status != 2)
            printf("linearizable: %s\n", status == 0 ? "yes" : status == 1 ? "no" : "unknown");
    } else {
        /* Each file its own history: a verdict line per file, and the worst last. */
        status = 0;
        for (size_t i = 0; i < nfiles; i++) {
            int st = check(&files[i], 1, model, max_states, max_seconds);
            printf("%s: %s\n", files[i],
                   st == 0   ? "linearizable: yes"
                   : st == 1 ? "linearizable: no"
                   : st == 2 ? "malformed"
                             : "linearizable: unknown");
            if (st == 2 || (st == 1 && status != 2) || (st == 3 && status == 0))
                status = st;
        }
    }
    free(files);
    return status;

bad_usage:
    usage(stderr);
    free(files);
    return 2;
}
