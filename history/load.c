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
        else
            return fail_at(l, "unknown \"f\" \"%.40s\" (the stock model has deduct, read, reset)", s);
    } else {
        if (strcmp(s, "read") == 0)
            *f = HIST_F_READ;
        else if (strcmp(s, "write") == 0)
            *f = HIST_F_WRITE;
        else if (strcmp(s, "cas") == 0)
            *f = HIST_F_CAS;
        else
            return fail_at(l, "unknown \"f\" \"%.40s\" (the register model has read, write, cas)", s);
    }
    return 0;
}

static const char *f_name(enum hist_f f)
{
    switch (f) {
    case HIST_F_DEDUCT: return "deduct";
    case HIST_F_READ: return "read";
    case HIST_F_RESET: return "reset";
    case HIST_F_WRITE: return "write";
    case HIST_F_CAS: return "cas";
    }
    return "?";
}

/* The invocation's arguments, by f. */
static int parse_invoke_args(struct loader *l, json_t *ev, struct hist_op *op)
{
    switch (op->f) {
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
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 1024;
        struct pending *p = realloc(l->ops, cap * sizeof *p);
        if (!p)
            return fail_at(l, "out of memory");
        l->ops = p;
        l->cap = cap;
    }
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
    if (parse_invoke_args(l, ev, &p->op) != 0)
        return -1;
    *open = (long)l->n++;
    return 0;
}

static int on_ok(struct loader *l, json_t *ev, struct pending *p)
{
    struct hist_op *op = &p->op;
    op->outcome = HIST_OK;
    switch (op->f) {
    case HIST_F_DEDUCT:
        if (need_int(l, ev, "remaining", &op->b, 0) != 0)
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
    if (op->f == HIST_F_DEDUCT) {
        json_t *e = json_object_get(ev, "error");
        const char *s = json_string_value(e);
        if (!s)
            return fail_at(l, e ? "\"error\" must be a string" : "a deduct fail needs \"error\"");
        snprintf(op->answer, sizeof op->answer, "fail %.40s", s);
        if (strcmp(s, "sold_out") == 0) {
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
    (void)l;
    struct hist_op *op = &p->op;
    const char *s = json_string_value(json_object_get(ev, "error"));
    snprintf(op->answer, sizeof op->answer, "info %.40s", s ? s : "");
    op->outcome = HIST_UNKNOWN;
    op->ret = HIST_TIME_INF;
    /* A read that may or may not have happened changes nothing either way. */
    if (op->f == HIST_F_READ)
        p->drop = true;
    return 0;
}

static int on_line(struct loader *l, const char *text, size_t len)
{
    json_error_t jerr;
    json_t *ev = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    int rc = -1;
    if (!ev)
        return fail_at(l, "not JSON: %s", jerr.text);
    if (!json_is_object(ev)) {
        fail_at(l, "an event must be a JSON object");
        goto out;
    }
    int64_t process, time, goods = 0;
    if (need_int(l, ev, "process", &process, 0) != 0 || need_int(l, ev, "time", &time, INT64_MIN) != 0)
        goto out;
    if (l->model != HIST_MODEL_REGISTER && need_int(l, ev, "goods_id", &goods, 1) != 0)
        goto out;
    json_t *t = json_object_get(ev, "type");
    const char *type = json_string_value(t);
    if (!t) {
        fail_at(l, "missing \"type\"");
        goto out;
    }
    if (!type || (strcmp(type, "invoke") && strcmp(type, "ok") && strcmp(type, "fail") &&
                  strcmp(type, "info"))) {
        fail_at(l, "\"type\" must be one of \"invoke\", \"ok\", \"fail\", \"info\"");
        goto out;
    }
    enum hist_f f = HIST_F_READ;
    if (parse_f(l, ev, &f) != 0)
        goto out;
    if (strcmp(type, "invoke") == 0) {
        rc = on_invoke(l, ev, process, goods, time, f);
        goto out;
    }
    long *open = proc_get(&l->procs, process);
    if (!open) {
        fail_at(l, "out of memory");
        goto out;
    }
    if (*open < 0) {
        fail_at(l, "a completion (%s) on process %" PRId64 ", which has no operation open", type,
                process);
        goto out;
    }
    struct pending *p = &l->ops[*open];
    if (p->op.f != f || p->op.goods != goods) {
        fail_at(l, "the completion does not match the invocation of line %ld (f %s, goods %" PRId64 ")",
                p->op.line_call, f_name(p->op.f), p->op.goods);
        goto out;
    }
    if (time < p->op.call) {
        fail_at(l, "completion at time %" PRId64 ", before its invocation at %" PRId64 " (line %ld)",
                time, p->op.call, p->op.line_call);
        goto out;
    }
    p->op.ret = time;
    p->op.done = time;
    p->op.line_ret = l->line;
    p->completed = true;
    *open = -1;
    if (strcmp(type, "ok") == 0)
        rc = on_ok(l, ev, p);
    else if (strcmp(type, "fail") == 0)
        rc = on_fail(l, ev, p);
    else
        rc = on_info(l, ev, p);
out:
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

/* The stock model's rule that each goods' history has a starting point: a reset, or else an
 * ok read. Fails on the first line of a goods that has neither. */
static int check_starts(struct loader *l, const char *const *files)
{
    /* Goods are few next to operations: a sort of (goods, index) pairs keeps it simple. */
    size_t n = l->n;
    if (n == 0)
        return 0;
    struct { int64_t goods; size_t first; bool start; } *g = NULL;
    size_t ng = 0, cap = 0;
    for (size_t i = 0; i < n; i++) {
        const struct pending *p = &l->ops[i];
        size_t k = 0;
        while (k < ng && g[k].goods != p->op.goods)
            k++;
        if (k == ng) {
            if (ng == cap) {
                cap = cap ? cap * 2 : 16;
                void *bigger = realloc(g, cap * sizeof *g);
                if (!bigger) {
                    free(g);
                    return fail_at(l, "out of memory");
                }
                g = bigger;
            }
            g[ng].goods = p->op.goods;
            g[ng].first = i;
            g[ng].start = false;
            ng++;
        }
        if (p->op.f == HIST_F_RESET || (p->op.f == HIST_F_READ && p->completed && !p->drop))
            g[k].start = true;
    }
    int rc = 0;
    for (size_t k = 0; k < ng && rc == 0; k++) {
        if (g[k].start)
            continue;
        const struct hist_op *op = &l->ops[g[k].first].op;
        l->file = files[op->file];
        l->line = op->line_call;
        rc = fail_at(l, "goods %" PRId64 " has neither a reset nor an ok read to start from",
                     op->goods);
    }
    free(g);
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
        if (!l.ops[i].drop)
            out->ops[out->n++] = l.ops[i].op;
    qsort(out->ops, out->n, sizeof *out->ops, cmp_ops);
    rc = 0;
done:
    free(l.ops);
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
    h->ops = NULL;
    h->n = 0;
}

void hist_op_describe(const struct hist_op *op, char *buf, size_t len)
{
    char what[64], ret[32];
    switch (op->f) {
    case HIST_F_DEDUCT: snprintf(what, sizeof what, "deduct count=%" PRId64, op->a); break;
    case HIST_F_READ: snprintf(what, sizeof what, "read"); break;
    case HIST_F_RESET: snprintf(what, sizeof what, "reset stock=%" PRId64, op->a); break;
    case HIST_F_WRITE: snprintf(what, sizeof what, "write %" PRId64, op->a); break;
    case HIST_F_CAS: snprintf(what, sizeof what, "cas [%" PRId64 ", %" PRId64 "]", op->a, op->b); break;
    }
    if (op->done != HIST_TIME_INF)
        snprintf(ret, sizeof ret, "%" PRId64, op->done);
    else
        snprintf(ret, sizeof ret, "never");
    if (op->line_ret)
        snprintf(buf, len, "process %" PRId64 "  invoked %" PRId64 "  completed %s  %s -> %s  (lines %ld, %ld)",
                 op->process, op->call, ret, what, op->answer, op->line_call, op->line_ret);
    else
        snprintf(buf, len, "process %" PRId64 "  invoked %" PRId64 "  completed %s  %s -> %s  (line %ld)",
                 op->process, op->call, ret, what, op->answer, op->line_call);
}
