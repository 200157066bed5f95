/* load.c - reads JSON Lines events into operations (history.h), validating every line.
 *
 * One pass over the lines: an invocation opens an operation on its process, a completion
 * closes the process' open one; a map from process to its open operation finds it. Every
 * rule of the format is checked where its line is at hand, so that the error names that
 * line. What a completion leaves unknown is settled here (history.h), and the operations are
 * sorted by invocation time at the end, the order the search and the reports use. */
#include "history/history.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An operation while loading: the public one plus what only the loader needs. */
struct pending {
    struct hist_op op;
    size_t item0;   /* an order: its first item in the loader's pool (op.items is set last) */
    bool drop;      /* constrains nothing: left out of the history */
    bool completed; /* its completion was read */
};

/* process -> index of its open operation (-1: none open). Open addressing, never shrinks. */
struct proc_map {
    int64_t *keys;
    long *vals;
    bool *used;
    size_t cap, n;
};

struct loader {
    enum hist_model_kind model;
    struct pending *ops;
    size_t n, cap;
    struct hist_item *items; /* every order's items, in the order of their invocations */
    size_t nitems, items_cap;
    struct proc_map procs;
    struct hist_error *err;
    const char *file;
    int file_index;
    long line;
};

static int fail_at(struct loader *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail_at(struct loader *l, const char *fmt, ...)
{
    va_list ap;
    l->err->file = l->file;
    l->err->line = l->line;
    va_start(ap, fmt);
    vsnprintf(l->err->why, sizeof l->err->why, fmt, ap);
    va_end(ap);
    return -1;
}

static size_t proc_slot(const struct proc_map *m, int64_t key)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h >> 17) & (m->cap - 1);
    while (m->used[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static int proc_grow(struct proc_map *m)
{
    struct proc_map bigger = {0};
    bigger.cap = m->cap ? m->cap * 2 : 64;
    bigger.keys = calloc(bigger.cap, sizeof *bigger.keys);
    bigger.vals = calloc(bigger.cap, sizeof *bigger.vals);
    bigger.used = calloc(bigger.cap, sizeof *bigger.used);
    if (!bigger.keys || !bigger.vals || !bigger.used) {
        free(bigger.keys);
        free(bigger.vals);
        free(bigger.used);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->used[i])
            continue;
        size_t j = proc_slot(&bigger, m->keys[i]);
        bigger.used[j] = true;
        bigger.keys[j] = m->keys[i];
        bigger.vals[j] = m->vals[i];
        bigger.n++;
    }
    free(m->keys);
    free(m->vals);
    free(m->used);
    *m = bigger;
    return 0;
}

/* Returns the slot of key, inserting it (value -1) when absent; NULL when out of memory. */
static long *proc_get(struct proc_map *m, int64_t key)
{
    if ((m->n + 1) * 2 > m->cap && proc_grow(m) != 0)
        return NULL;
    size_t i = proc_slot(m, key);
    if (!m->used[i]) {
        m->used[i] = true;
        m->keys[i] = key;
        m->vals[i] = -1;
        m->n++;
    }
    return &m->vals[i];
}

static void proc_free(struct proc_map *m)
{
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof *m);
}

/* The array buf of *cap elements of size bytes, made to hold need at least (doubling, from
 * 1024): buf itself or its reallocation, or NULL when out of memory (buf still valid). */
static void *grow(void *buf, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return buf;
    size_t n = *cap ? *cap : 1024;
    while (n < need)
        n *= 2;
    void *bigger = realloc(buf, n * size);
    if (bigger)
        *cap = n;
    return bigger;
}

/* Reads an integer field: 1 found, 0 absent (or null when null_ok), -1 present but not an
 * integer (the error is set). */
static int get_int(struct loader *l, json_t *obj, const char *key, int64_t *v, bool null_ok)
{
    json_t *x = json_object_get(obj, key);
    if (!x || (null_ok && json_is_null(x)))
        return 0;
    if (!json_is_integer(x))
        return fail_at(l, "\"%s\" must be an integer", key);
    *v = (int64_t)json_integer_value(x);
    return 1;
}

static int need_int(struct loader *l, json_t *obj, const char *key, int64_t *v, int64_t min)
{
    int rc = get_int(l, obj, key, v, false);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return fail_at(l, "missing \"%s\"", key);
    if (*v < min)
        return fail_at(l, "\"%s\" must be at least %" PRId64 ", not %" PRId64, key, min, *v);
    return 0;
}

static int parse_f(struct loader *l, json_t *ev, enum hist_f *f)
{
    json_t *x = json_object_get(ev, "f");
    if (!x)
        return fail_at(l, "missing \"f\"");
    const char *s = json_string_value(x);
    if (!s)
        return fail_at(l, "\"f\" must be a string");
    if (l->model != HIST_MODEL_REGISTER) {
        if (strcmp(s, "deduct") == 0)
            *f = HIST_F_DEDUCT;
        else if (strcmp(s, "read") == 0)
            *f = HIST_F_READ;
        else if (strcmp(s, "reset") == 0)
            *f = HIST_F_RESET;
        else if (strcmp(s, "order") == 0)
            *f = HIST_F_ORDER;
        else
            return fail_at(
                l, "unknown \"f\" \"%.40s\" (the stock model has deduct, read, reset, order)", s);
    } else {
        if (strcmp(s, "read") == 0)
            *f = HIST_F_READ;
        else if (strcmp(s, "write") == 0)
            *f = HIST_F_WRITE;
        else if (strcmp(s, "cas") == 0)
            *f = HIST_F_CAS;
        else
            return fail_at(l, "unknown \"f\" \"%.40s\" (the register model has read, write, cas)",
                           s);
    }
    return 0;
}

static const char *f_name(enum hist_f f)
{
    switch (f) {
    case HIST_F_DEDUCT:
        return "deduct";
    case HIST_F_READ:
        return "read";
    case HIST_F_RESET:
        return "reset";
    case HIST_F_WRITE:
        return "write";
    case HIST_F_CAS:
        return "cas";
    case HIST_F_ORDER:
        return "order";
    }
    return "?";
}

/* An order's invocation: its items, 1 to HIST_ITEMS_MAX, each goods once, into the pool. */
static int parse_order_items(struct loader *l, json_t *ev, struct pending *p)
{
    json_t *items = json_object_get(ev, "items");
    if (json_object_get(ev, "goods_id"))
        return fail_at(l, "an order names its goods in \"items\", not in \"goods_id\"");
    if (!json_is_array(items))
        return fail_at(l, "an order needs \"items\": [{\"goods_id\":g,\"count\":c},...]");
    size_t k = json_array_size(items);
    if (k < 1 || k > HIST_ITEMS_MAX)
        return fail_at(l, "an order has 1 to %d items, not %zu", HIST_ITEMS_MAX, k);
    struct hist_item *pool = grow(l->items, &l->items_cap, l->nitems + k, sizeof *l->items);
    if (!pool)
        return fail_at(l, "out of memory");
    l->items = pool;
    struct hist_item *it = l->items + l->nitems;
    for (size_t i = 0; i < k; i++) {
        json_t *x = json_array_get(items, i);
        if (!json_is_object(x))
            return fail_at(l, "item %zu of the order is not an object", i + 1);
        memset(&it[i], 0, sizeof it[i]);
        if (need_int(l, x, "goods_id", &it[i].goods, 1) != 0 ||
            need_int(l, x, "count", &it[i].count, 1) != 0)
            return -1;
        for (size_t j = 0; j < i; j++)
            if (it[j].goods == it[i].goods)
                return fail_at(l, "goods %" PRId64 " is twice in the order's items", it[i].goods);
    }
    p->item0 = l->nitems;
    p->op.nitems = (uint32_t)k;
    l->nitems += k;
    return 0;
}

/* The index of goods among p's items, or -1. */
static int order_item(const struct loader *l, const struct pending *p, int64_t goods)
{
    for (uint32_t k = 0; k < p->op.nitems; k++)
        if (l->items[p->item0 + k].goods == goods)
            return (int)k;
    return -1;
}

/* A sale's ok (a deduct's, an order's) carries the order id its 200 gave: HISTORY.md asks for
 * it, and the ledger matches each ok to its order row by it. Any integer. */
static int need_order_id(struct loader *l, json_t *ev)
{
    int64_t id;
    return need_int(l, ev, "order_id", &id, INT64_MIN);
}

/* The errors HISTORY.md names as an `info`'s: after them the sale may have happened, so a
 * `fail` (certainly no effect) that says one contradicts itself, and would be dropped from
 * the check as if nothing had been sold. */
static bool error_may_have_sold(const char *error)
{
    static const char *const unknown[] = {"commit_unknown", "timeout", "upstream_timeout",
                                          "upstream_failed"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        if (strcmp(error, unknown[i]) == 0)
            return true;
    return false;
}

/* An order's ok: `items` names every goods of the invocation once, each with `remaining`. */
static int on_ok_order(struct loader *l, json_t *ev, struct pending *p)
{
    json_t *items = json_object_get(ev, "items");
    bool seen[HIST_ITEMS_MAX] = {false};
    if (!json_is_array(items))
        return fail_at(l, "an ok order needs \"items\", each goods with its \"remaining\"");
    if (json_array_size(items) != p->op.nitems)
        return fail_at(l, "the ok names %zu items, its invocation (line %ld) %u",
                       json_array_size(items), p->op.line_call, p->op.nitems);
    if (need_order_id(l, ev) != 0)
        return -1;
    for (size_t i = 0; i < p->op.nitems; i++) {
        json_t *x = json_array_get(items, i);
        int64_t goods, remaining, count = 0;
        if (!json_is_object(x))
            return fail_at(l, "item %zu of the ok is not an object", i + 1);
        if (need_int(l, x, "goods_id", &goods, 1) != 0 ||
            need_int(l, x, "remaining", &remaining, 0) != 0)
            return -1;
        int k = order_item(l, p, goods);
        if (k < 0 || seen[k])
            return fail_at(l, "goods %" PRId64 " of the ok is %s", goods,
                           k < 0 ? "not in its invocation's items" : "named twice");
        seen[k] = true;
        struct hist_item *it = &l->items[p->item0 + (size_t)k];
        int rc = get_int(l, x, "count", &count, false);
        if (rc < 0 || (rc == 1 && count != it->count))
            return rc < 0 ? -1
                          : fail_at(l, "goods %" PRId64 "'s count differs from its invocation's",
                                    goods);
        if (remaining > INT64_MAX - it->count)
            return fail_at(l, "\"remaining\" + count overflows a 64-bit integer");
        it->remaining = remaining;
    }
    snprintf(p->op.answer, sizeof p->op.answer, "ok");
    return 0;
}

/* An order's fail: a sold_out names the goods the 409 named, one of the order's. */
static int on_fail_order(struct loader *l, json_t *ev, struct pending *p, const char *error)
{
    int64_t goods;
    if (strcmp(error, "sold_out") != 0)
        return 1; /* took no effect */
    if (need_int(l, ev, "goods_id", &goods, 1) != 0)
        return -1;
    int k = order_item(l, p, goods);
    if (k < 0)
        return fail_at(l,
                       "the sold_out names goods %" PRId64 ", which the order of line %ld has not",
                       goods, p->op.line_call);
    p->op.outcome = HIST_SOLD_OUT;
    p->op.a = k;
    snprintf(p->op.answer, sizeof p->op.answer, "fail sold_out goods=%" PRId64, goods);
    return 0;
}

/* The invocation's arguments, by f. */
static int parse_invoke_args(struct loader *l, json_t *ev, struct pending *p)
{
    struct hist_op *op = &p->op;
    switch (op->f) {
    case HIST_F_ORDER:
        return parse_order_items(l, ev, p);
    case HIST_F_DEDUCT:
        return need_int(l, ev, "count", &op->a, 1);
    case HIST_F_RESET:
        return need_int(l, ev, "stock", &op->a, 0);
    case HIST_F_READ:
        return 0;
    case HIST_F_WRITE:
        if (get_int(l, ev, "value", &op->a, false) != 1)
            return l->err->why[0] ? -1 : fail_at(l, "missing \"value\" (an integer) on a write");
        if (op->a == INT64_MIN) /* the models' "any state" (model.h) */
            return fail_at(l, "\"value\" out of range");
        return 0;
    case HIST_F_CAS: {
        json_t *v = json_object_get(ev, "value");
        if (!json_is_array(v) || json_array_size(v) != 2 ||
            !json_is_integer(json_array_get(v, 0)) || !json_is_integer(json_array_get(v, 1)))
            return fail_at(l, "a cas needs \"value\": [expected, new], two integers");
        op->a = (int64_t)json_integer_value(json_array_get(v, 0));
        op->b = (int64_t)json_integer_value(json_array_get(v, 1));
        if (op->a == INT64_MIN || op->b == INT64_MIN)
            return fail_at(l, "\"value\" out of range");
        return 0;
    }
    }
    return 0;
}

static int on_invoke(struct loader *l, json_t *ev, int64_t process, int64_t goods, int64_t time,
                     enum hist_f f)
{
    long *open = proc_get(&l->procs, process);
    if (!open)
        return fail_at(l, "out of memory");
    if (*open >= 0)
        return fail_at(l, "process %" PRId64 " invokes while its operation of line %ld is open",
                       process, l->ops[*open].op.line_call);
    struct pending *all = grow(l->ops, &l->cap, l->n + 1, sizeof *l->ops);
    if (!all)
        return fail_at(l, "out of memory");
    l->ops = all;
    struct pending *p = &l->ops[l->n];
    memset(p, 0, sizeof *p);
    p->op.process = process;
    p->op.goods = goods;
    p->op.call = time;
    p->op.ret = HIST_TIME_INF;
    p->op.done = HIST_TIME_INF;
    p->op.f = f;
    p->op.outcome = HIST_UNKNOWN;
    p->op.file = l->file_index;
    p->op.line_call = l->line;
    snprintf(p->op.answer, sizeof p->op.answer, "no completion");
    if (parse_invoke_args(l, ev, p) != 0)
        return -1;
    *open = (long)l->n++;
    return 0;
}

static int on_ok(struct loader *l, json_t *ev, struct pending *p)
{
    struct hist_op *op = &p->op;
    op->outcome = HIST_OK;
    switch (op->f) {
    case HIST_F_ORDER:
        return on_ok_order(l, ev, p);
    case HIST_F_DEDUCT:
        if (need_int(l, ev, "remaining", &op->b, 0) != 0 || need_order_id(l, ev) != 0)
            return -1;
        if (op->b > INT64_MAX - op->a)
            return fail_at(l, "\"remaining\" + count overflows a 64-bit integer");
        snprintf(op->answer, sizeof op->answer, "ok remaining=%" PRId64, op->b);
        return 0;
    case HIST_F_READ:
        if (l->model != HIST_MODEL_REGISTER) {
            if (need_int(l, ev, "stock", &op->a, 0) != 0)
                return -1;
            snprintf(op->answer, sizeof op->answer, "ok stock=%" PRId64, op->a);
            return 0;
        }
        {
            int rc = get_int(l, ev, "value", &op->a, true);
            if (rc < 0)
                return -1;
            if (rc == 0) /* an unrecorded answer: constrains nothing */
                p->drop = true;
            else if (op->a == INT64_MIN)
                return fail_at(l, "\"value\" out of range");
            snprintf(op->answer, sizeof op->answer, "ok value=%" PRId64, op->a);
        }
        return 0;
    default:
        snprintf(op->answer, sizeof op->answer, "ok");
        return 0;
    }
}

static int on_fail(struct loader *l, json_t *ev, struct pending *p)
{
    struct hist_op *op = &p->op;
    if (op->f == HIST_F_DEDUCT || op->f == HIST_F_ORDER) {
        json_t *e = json_object_get(ev, "error");
        const char *s = json_string_value(e);
        if (!s)
            return e ? fail_at(l, "\"error\" must be a string")
                     : fail_at(l, "a %s fail needs \"error\"", f_name(op->f));
        if (error_may_have_sold(s))
            return fail_at(l, "a fail says nothing was sold, \"%s\" that it may have been: an info",
                           s);
        snprintf(op->answer, sizeof op->answer, "fail %.40s", s);
        if (op->f == HIST_F_ORDER) {
            int rc = on_fail_order(l, ev, p, s);
            if (rc <= 0)
                return rc;
        } else if (strcmp(s, "sold_out") == 0) {
            op->outcome = HIST_SOLD_OUT;
            return 0;
        }
    } else {
        snprintf(op->answer, sizeof op->answer, "fail");
    }
    /* Certainly took no effect, and answered nothing about the state. */
    p->drop = true;
    return 0;
}

static int on_info(struct loader *l, json_t *ev, struct pending *p)
{
    struct hist_op *op = &p->op;
    json_t *e = json_object_get(ev, "error");
    const char *s = json_string_value(e);
    /* A sale's info says why its outcome is unknown (HISTORY.md); a read's needs nothing. */
    if (!s && (op->f == HIST_F_DEDUCT || op->f == HIST_F_ORDER))
        return e ? fail_at(l, "\"error\" must be a string")
                 : fail_at(l, "an info needs \"error\" (why the %s's outcome is unknown)",
                           f_name(op->f));
    snprintf(op->answer, sizeof op->answer, "info %.40s", s ? s : "");
    op->outcome = HIST_UNKNOWN;
    op->ret = HIST_TIME_INF;
    /* A read that may or may not have happened changes nothing either way. */
    if (op->f == HIST_F_READ)
        p->drop = true;
    return 0;
}

/* A completion of type on process: closes its open operation. */
static int on_completion(struct loader *l, json_t *ev, const char *type, int64_t process,
                         int64_t goods, int64_t time, enum hist_f f)
{
    long *open = proc_get(&l->procs, process);
    if (!open)
        return fail_at(l, "out of memory");
    if (*open < 0)
        return fail_at(l, "a completion (%s) on process %" PRId64 ", which has no operation open",
                       type, process);
    struct pending *p = &l->ops[*open];
    if (p->op.f != f || (f != HIST_F_ORDER && p->op.goods != goods))
        return fail_at(
            l, "the completion does not match the invocation of line %ld (f %s, goods %" PRId64 ")",
            p->op.line_call, f_name(p->op.f), p->op.goods);
    if (time < p->op.call)
        return fail_at(
            l, "completion at time %" PRId64 ", before its invocation at %" PRId64 " (line %ld)",
            time, p->op.call, p->op.line_call);
    p->op.ret = time;
    p->op.done = time;
    p->op.line_ret = l->line;
    p->completed = true;
    *open = -1;
    if (strcmp(type, "ok") == 0)
        return on_ok(l, ev, p);
    if (strcmp(type, "fail") == 0)
        return on_fail(l, ev, p);
    return on_info(l, ev, p);
}

static int on_event(struct loader *l, json_t *ev)
{
    int64_t process, time, goods = 0;
    if (need_int(l, ev, "process", &process, 0) != 0 ||
        need_int(l, ev, "time", &time, INT64_MIN) != 0)
        return -1;
    json_t *t = json_object_get(ev, "type");
    const char *type = json_string_value(t);
    if (!t)
        return fail_at(l, "missing \"type\"");
    if (!type || (strcmp(type, "invoke") && strcmp(type, "ok") && strcmp(type, "fail") &&
                  strcmp(type, "info")))
        return fail_at(l, "\"type\" must be one of \"invoke\", \"ok\", \"fail\", \"info\"");
    enum hist_f f = HIST_F_READ;
    if (parse_f(l, ev, &f) != 0)
        return -1;
    /* An order names its goods in items (and its sold_out the one the 409 named). */
    if (l->model != HIST_MODEL_REGISTER && f != HIST_F_ORDER &&
        need_int(l, ev, "goods_id", &goods, 1) != 0)
        return -1;
    if (strcmp(type, "invoke") == 0)
        return on_invoke(l, ev, process, goods, time, f);
    return on_completion(l, ev, type, process, goods, time, f);
}

static int on_line(struct loader *l, const char *text, size_t len)
{
    json_error_t jerr;
    json_t *ev = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!ev)
        return fail_at(l, "not JSON: %s", jerr.text);
    int rc = json_is_object(ev) ? on_event(l, ev) : fail_at(l, "an event must be a JSON object");
    json_decref(ev);
    return rc;
}

static int load_text(struct loader *l, const char *text, size_t len)
{
    size_t start = 0;
    l->line = 0;
    while (start < len) {
        size_t end = start;
        while (end < len && text[end] != '\n')
            end++;
        l->line++;
        size_t i = start;
        while (i < end && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r'))
            i++;
        if (i < end && on_line(l, text + start, end - start) != 0)
            return -1;
        start = end + 1;
    }
    return 0;
}

static char *read_all(FILE *fp, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    for (;;) {
        if (n == cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, fp);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(fp)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static int cmp_ops(const void *pa, const void *pb)
{
    const struct hist_op *a = pa, *b = pb;
    if (a->call != b->call)
        return a->call < b->call ? -1 : 1;
    if (a->file != b->file)
        return a->file < b->file ? -1 : 1;
    return (a->line_call > b->line_call) - (a->line_call < b->line_call);
}

/* The goods met so far, each with its first operation and whether it has a start. Goods are
 * few next to operations: a linear search keeps it simple. */
struct starts {
    struct {
        int64_t goods;
        size_t first;
        bool start;
    } * g;
    size_t n, cap;
};

static int starts_note(struct starts *st, int64_t goods, size_t op, bool start)
{
    size_t k = 0;
    while (k < st->n && st->g[k].goods != goods)
        k++;
    if (k == st->n) {
        if (st->n == st->cap) {
            size_t cap = st->cap ? st->cap * 2 : 16;
            void *bigger = realloc(st->g, cap * sizeof *st->g);
            if (!bigger)
                return -1;
            st->g = bigger;
            st->cap = cap;
        }
        st->g[k].goods = goods;
        st->g[k].first = op;
        st->g[k].start = false;
        st->n++;
    }
    st->g[k].start = st->g[k].start || start;
    return 0;
}

/* The stock model's rule that each goods' history has a starting point: a reset that took
 * effect (ok: a failed or unknown one pins nothing), or else an ok read. Fails on the first
 * line of a goods that has neither. */
static int check_starts(struct loader *l, const char *const *files)
{
    struct starts st = {0};
    int rc = 0;
    for (size_t i = 0; i < l->n && rc == 0; i++) {
        const struct pending *p = &l->ops[i];
        bool start = p->completed && !p->drop && p->op.outcome == HIST_OK &&
                     (p->op.f == HIST_F_RESET || p->op.f == HIST_F_READ);
        if (p->op.f != HIST_F_ORDER)
            rc = starts_note(&st, p->op.goods, i, start);
        for (uint32_t k = 0; k < p->op.nitems && rc == 0; k++)
            rc = starts_note(&st, l->items[p->item0 + k].goods, i, false);
    }
    if (rc != 0) {
        free(st.g);
        return fail_at(l, "out of memory");
    }
    for (size_t k = 0; k < st.n && rc == 0; k++) {
        if (st.g[k].start)
            continue;
        const struct hist_op *op = &l->ops[st.g[k].first].op;
        l->file = files[op->file];
        l->line = op->line_call;
        rc = fail_at(l, "goods %" PRId64 " has neither an ok reset nor an ok read to start from",
                     st.g[k].goods);
    }
    free(st.g);
    return rc;
}

static int load(const char *const *files, const char *const *texts, size_t nfiles,
                enum hist_model_kind model, struct history *out, struct hist_error *err)
{
    struct loader l = {.model = model, .err = err};
    int rc = -1;
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    for (size_t i = 0; i < nfiles; i++) {
        l.file = files[i];
        l.file_index = (int)i;
        l.line = 0;
        size_t len;
        char *text;
        if (texts) {
            len = strlen(texts[i]);
            if (load_text(&l, texts[i], len) != 0)
                goto done;
            continue;
        }
        FILE *fp = strcmp(files[i], "-") == 0 ? stdin : fopen(files[i], "rb");
        if (!fp) {
            fail_at(&l, "cannot open: %s", strerror(errno));
            goto done;
        }
        text = read_all(fp, &len);
        if (fp != stdin)
            fclose(fp);
        if (!text) {
            fail_at(&l, "cannot read (or out of memory)");
            goto done;
        }
        int lrc = load_text(&l, text, len);
        free(text);
        if (lrc != 0)
            goto done;
    }
    if (model != HIST_MODEL_REGISTER && check_starts(&l, files) != 0)
        goto done;
    out->model = model;
    out->ops = malloc((l.n ? l.n : 1) * sizeof *out->ops);
    if (!out->ops) {
        l.line = 0;
        fail_at(&l, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < l.n; i++)
        if (!l.ops[i].drop) {
            struct hist_op *op = &out->ops[out->n++];
            *op = l.ops[i].op;
            if (op->f == HIST_F_ORDER)
                op->items = l.items + l.ops[i].item0;
        }
    out->items = l.items;
    out->nitems = l.nitems;
    l.items = NULL;
    qsort(out->ops, out->n, sizeof *out->ops, cmp_ops);
    rc = 0;
done:
    free(l.ops);
    free(l.items);
    proc_free(&l.procs);
    if (rc != 0)
        history_free(out);
    return rc;
}

int history_load(const char *const *files, size_t nfiles, enum hist_model_kind model,
                 struct history *out, struct hist_error *err)
{
    return load(files, NULL, nfiles, model, out, err);
}

int history_load_string(const char *text, const char *name, enum hist_model_kind model,
                        struct history *out, struct hist_error *err)
{
    return load(&name, &text, 1, model, out, err);
}

void history_free(struct history *h)
{
    free(h->ops);
    free(h->items);
    h->ops = NULL;
    h->items = NULL;
    h->n = h->nitems = 0;
}

/* An order's items as a report shows them, "1x2, 7x1" (goods x count), or with ok the
 * remaining each told, "ok remaining 98, 0". */
static void describe_items(const struct hist_op *op, bool ok, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    if (ok)
        at = (size_t)snprintf(buf, len, "ok remaining ");
    for (uint32_t k = 0; k < op->nitems && at < len; k++) {
        const struct hist_item *it = &op->items[k];
        int w = ok ? snprintf(buf + at, len - at, "%s%" PRId64, k ? ", " : "", it->remaining)
                   : snprintf(buf + at, len - at, "%s%" PRId64 "x%" PRId64, k ? ", " : "",
                              it->goods, it->count);
        at += w > 0 ? (size_t)w : 0;
    }
}

void hist_op_describe(const struct hist_op *op, char *buf, size_t len)
{
    char what[400], answer[400], ret[32];
    snprintf(answer, sizeof answer, "%s", op->answer);
    switch (op->f) {
    case HIST_F_DEDUCT:
        snprintf(what, sizeof what, "deduct count=%" PRId64, op->a);
        break;
    case HIST_F_READ:
        snprintf(what, sizeof what, "read");
        break;
    case HIST_F_RESET:
        snprintf(what, sizeof what, "reset stock=%" PRId64, op->a);
        break;
    case HIST_F_WRITE:
        snprintf(what, sizeof what, "write %" PRId64, op->a);
        break;
    case HIST_F_CAS:
        snprintf(what, sizeof what, "cas [%" PRId64 ", %" PRId64 "]", op->a, op->b);
        break;
    case HIST_F_ORDER: {
        char items[360];
        describe_items(op, false, items, sizeof items);
        snprintf(what, sizeof what, "order [%s]", items);
        if (op->outcome == HIST_OK)
            describe_items(op, true, answer, sizeof answer);
        break;
    }
    }
    if (op->done != HIST_TIME_INF)
        snprintf(ret, sizeof ret, "%" PRId64, op->done);
    else
        snprintf(ret, sizeof ret, "never");
    if (op->line_ret)
        snprintf(buf, len,
                 "process %" PRId64 "  invoked %" PRId64
                 "  completed %s  %s -> %s  (lines %ld, %ld)",
                 op->process, op->call, ret, what, answer, op->line_call, op->line_ret);
    else
        snprintf(buf, len,
                 "process %" PRId64 "  invoked %" PRId64 "  completed %s  %s -> %s  (line %ld)",
                 op->process, op->call, ret, what, answer, op->line_call);
}
