/*
 * metrics.c - counters, the lock-wait histogram, and their Prometheus text exposition.
 *
 * Design: every figure is a fixed-size array of C11 atomics, allocated once at start-up,
 * so recording a request is an array index and one relaxed atomic add: no mutex, no
 * allocation, no lookup of a label set. That works because every label is from a small
 * closed set:
 *   route   the metrics_route enum (clients cannot invent routes: unknown paths are "other");
 *   status  a fixed table of the statuses the service answers, plus "other";
 *   mode    the mode table's names, copied at creation;
 *   outcome a fixed list (metrics_outcomes below).
 * Relaxed ordering is enough: each counter is independent, and a scrape that sees one
 * counter a moment later than another is normal for Prometheus.
 *
 * The histogram stores a count per bucket (not cumulative) and the sum in nanoseconds as an
 * integer, so both are plain atomic adds; rendering adds the buckets up into Prometheus'
 * cumulative le buckets, and _count is the +Inf bucket, so the two always agree within one
 * scrape. _sum is read separately and may be one observation ahead or behind.
 *
 * Request counters are only written out for the (route, status) pairs seen at least once,
 * to keep /metrics short; deduction counters are all written, zeros included, since their
 * set (modes x outcomes) is small and a rate() over a series needs it to exist from the
 * start.
 */
#include "service/metrics.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/sale/deduct.h"

static const int status_codes[] = {200, 400, 401, 404, 405, 409, 413, 415, 500, 503};
#define METRICS__N_STATUS (sizeof(status_codes) / sizeof(status_codes[0]) + 1)
#define METRICS__STATUS_OTHER (METRICS__N_STATUS - 1)

/* The outcomes counted: every deduct_outcome but DEDUCT_NO_OUTCOME, in the enum's order
 * (index o is outcome o + 1), named by deduct_outcome_name. */
#define METRICS__N_OUTCOMES ((size_t)DEDUCT_OUTCOMES_ - 1)
#define METRICS__OUTCOME_NAME(o) deduct_outcome_name((deduct_outcome)((o) + 1))

/* Upper bounds of the lock-wait buckets, in seconds: from an uncontended Redis round trip
 * (well under a millisecond on loopback) to beyond the default 2 s wait bound. */
static const double wait_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                      0.1,    0.25,  0.5,    1,     2.5,  5};
#define METRICS__N_BUCKETS (sizeof(wait_buckets) / sizeof(wait_buckets[0]))

/* The hand-off's buckets: from a Redis round trip (tens of microseconds on loopback) to a
 * lapsed waiter's liveness (1.5 s by default). */
static const double handoff_buckets[] = {0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                         0.0025,  0.005,  0.01,    0.025,  0.05,
                                         0.1,     0.25,   0.5,     1,      2.5};
#define METRICS__N_HANDOFF (sizeof(handoff_buckets) / sizeof(handoff_buckets[0]))

/* A batch's size, in requests: powers of two up to BATCH_MAX's largest allowed value. */
static const double batch_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
#define METRICS__N_BATCH (sizeof(batch_buckets) / sizeof(batch_buckets[0]))

/* A timed sale's stages (deduct.h's, in their order), then the handler's own time around it. */
#define METRICS__N_STAGES (DEDUCT_STAGES_ + 1)
#define METRICS__STAGE_JSON DEDUCT_STAGES_

/* The parts of a request's time in the replica (metrics_observe_http). */
static const char *const http_parts[] = {"queue", "handler", "around"};
#define METRICS__N_HTTP_PARTS (sizeof(http_parts) / sizeof(http_parts[0]))

static const char *const route_names[ROUTE_COUNT_] = {
    [ROUTE_DEDUCT] = "/api/deduct",
    [ROUTE_STOCK] = "/api/stock/{goods_id}",
    [ROUTE_RESET] = "/api/admin/reset",
    [ROUTE_MODES] = "/api/modes",
    [ROUTE_HEALTHZ] = "/healthz",
    [ROUTE_READYZ] = "/readyz",
    [ROUTE_METRICS] = "/metrics",
    [ROUTE_REPLICA] = "/api/replica",
    [ROUTE_LOCK] = "/api/lock/{goods_id}",
    [ROUTE_ORDER] = "/api/order",
    [ROUTE_OTHER] = "other",
};

struct metrics {
    _Atomic uint64_t requests[ROUTE_COUNT_][METRICS__N_STATUS];
    size_t n_modes;
    char **mode_names;                                  /* n_modes copies */
    _Atomic uint64_t *deductions;                       /* [n_modes][METRICS__N_OUTCOMES] */
    _Atomic uint64_t lock_wait[METRICS__N_BUCKETS + 1]; /* the last one is +Inf */
    _Atomic uint64_t lock_wait_sum_ns;
    _Atomic uint64_t handoff[METRICS__N_HANDOFF + 1]; /* the last one is +Inf */
    _Atomic uint64_t handoff_sum_ns;
    _Atomic uint64_t batch[METRICS__N_BATCH + 1]; /* the last one is +Inf */
    _Atomic uint64_t batch_sum;                   /* in units of 10^-9 requests (observe) */
    _Atomic uint64_t lock_timeouts;
    _Atomic uint64_t optimistic_retries;
    _Atomic uint64_t *stage_ns; /* [n_modes][METRICS__N_STAGES] */
    _Atomic uint64_t *timed;    /* [n_modes] */
    _Atomic uint64_t http_ns[ROUTE_COUNT_][METRICS__N_HTTP_PARTS];
};

const char *metrics_route_name(metrics_route route)
{
    if ((int)route < 0 || route >= ROUTE_COUNT_)
        return route_names[ROUTE_OTHER];
    return route_names[route];
}

metrics *metrics_create(const char *const *mode_names, size_t n_modes)
{
    metrics *m = calloc(1, sizeof(*m));

    if (m == NULL)
        goto fail;
    /* calloc'd memory is a valid zero for atomic integers on every platform we build on;
     * atomic_init would say so formally but is a no-op here. */
    m->mode_names = calloc(n_modes > 0 ? n_modes : 1, sizeof(*m->mode_names));
    m->deductions = calloc(n_modes > 0 ? n_modes * METRICS__N_OUTCOMES : 1, sizeof(*m->deductions));
    m->stage_ns = calloc(n_modes > 0 ? n_modes * METRICS__N_STAGES : 1, sizeof(*m->stage_ns));
    m->timed = calloc(n_modes > 0 ? n_modes : 1, sizeof(*m->timed));
    if (m->mode_names == NULL || m->deductions == NULL || m->stage_ns == NULL || m->timed == NULL)
        goto fail;
    for (size_t i = 0; i < n_modes; i++) {
        m->mode_names[i] = strdup(mode_names[i]);
        if (m->mode_names[i] == NULL)
            goto fail;
        m->n_modes = i + 1;
    }
    return m;
fail:
    metrics_destroy(m);
    return NULL;
}

void metrics_destroy(metrics *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n_modes; i++)
        free(m->mode_names[i]);
    free(m->mode_names);
    free(m->deductions);
    free(m->stage_ns);
    free(m->timed);
    free(m);
}

static size_t status_index(int status)
{
    for (size_t i = 0; i < METRICS__STATUS_OTHER; i++) {
        if (status_codes[i] == status)
            return i;
    }
    return METRICS__STATUS_OTHER;
}

void metrics_count_request(metrics *m, metrics_route route, int status)
{
    if (m == NULL)
        return;
    if ((int)route < 0 || route >= ROUTE_COUNT_)
        route = ROUTE_OTHER;
    atomic_fetch_add_explicit(&m->requests[route][status_index(status)], 1, memory_order_relaxed);
}

/* The mode's index in the table, or n_modes when it is not there. */
static size_t mode_index(const metrics *m, const char *name)
{
    size_t mi;

    for (mi = 0; mi < m->n_modes && strcmp(m->mode_names[mi], name) != 0; mi++)
        ;
    return mi;
}

void metrics_count_deduction(metrics *m, const char *mode_name, deduct_outcome outcome)
{
    size_t mi, oi;

    if (m == NULL || mode_name == NULL || outcome <= DEDUCT_NO_OUTCOME ||
        outcome >= DEDUCT_OUTCOMES_)
        return;
    mi = mode_index(m, mode_name);
    oi = (size_t)outcome - 1;
    if (mi == m->n_modes)
        return;
    atomic_fetch_add_explicit(&m->deductions[mi * METRICS__N_OUTCOMES + oi], 1,
                              memory_order_relaxed);
}

/* Adds ns (a clock's difference: never negative, but a sum must not wrap) to a sum. */
static void add_ns(_Atomic uint64_t *sum, int64_t ns)
{
    if (ns > 0)
        atomic_fetch_add_explicit(sum, (uint64_t)ns, memory_order_relaxed);
}

void metrics_observe_sale(metrics *m, const char *mode_name, const int64_t *stage_ns,
                          int64_t json_ns)
{
    size_t mi;

    if (m == NULL || mode_name == NULL || stage_ns == NULL ||
        (mi = mode_index(m, mode_name)) == m->n_modes)
        return;
    for (size_t i = 0; i < DEDUCT_STAGES_; i++)
        add_ns(&m->stage_ns[mi * METRICS__N_STAGES + i], stage_ns[i]);
    add_ns(&m->stage_ns[mi * METRICS__N_STAGES + METRICS__STAGE_JSON], json_ns);
    atomic_fetch_add_explicit(&m->timed[mi], 1, memory_order_relaxed);
}

void metrics_observe_http(metrics *m, metrics_route route, int64_t queue_ns, int64_t handler_ns,
                          int64_t around_ns)
{
    if (m == NULL)
        return;
    if ((int)route < 0 || route >= ROUTE_COUNT_)
        route = ROUTE_OTHER;
    add_ns(&m->http_ns[route][0], queue_ns);
    add_ns(&m->http_ns[route][1], handler_ns);
    add_ns(&m->http_ns[route][2], around_ns);
}

/* Adds one observation to a histogram of n buckets (counts[n] is +Inf) and its sum. */
static void observe(_Atomic uint64_t *counts, _Atomic uint64_t *sum_ns, const double *le, size_t n,
                    double seconds)
{
    size_t b = 0;

    if (!(seconds > 0)) /* negative or NaN: a clock step; count it as no wait */
        seconds = 0;
    if (seconds > 1e9)
        seconds = 1e9; /* keeps the conversion to nanoseconds defined */
    while (b < n && seconds > le[b])
        b++;
    atomic_fetch_add_explicit(&counts[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(sum_ns, (uint64_t)llround(seconds * 1e9), memory_order_relaxed);
}

void metrics_observe_lock_wait(metrics *m, double seconds)
{
    if (m != NULL)
        observe(m->lock_wait, &m->lock_wait_sum_ns, wait_buckets, METRICS__N_BUCKETS, seconds);
}

void metrics_observe_lock_handoff(metrics *m, double seconds)
{
    if (m != NULL)
        observe(m->handoff, &m->handoff_sum_ns, handoff_buckets, METRICS__N_HANDOFF, seconds);
}

void metrics_observe_batch(metrics *m, int requests)
{
    /* A count through the seconds' histogram: a sum in 10^-9 units prints as requests. */
    if (m != NULL)
        observe(m->batch, &m->batch_sum, batch_buckets, METRICS__N_BATCH,
                requests < 1 ? 1.0 : (double)requests);
}

void metrics_count_lock_timeout(metrics *m)
{
    if (m != NULL)
        atomic_fetch_add_explicit(&m->lock_timeouts, 1, memory_order_relaxed);
}

void metrics_count_optimistic_retries(metrics *m, int retries)
{
    if (m != NULL && retries > 0)
        atomic_fetch_add_explicit(&m->optimistic_retries, (uint64_t)retries, memory_order_relaxed);
}

/* A growing output buffer; after a failed allocation every append is a no-op and
 * buf_take() returns NULL. */
typedef struct text_buf {
    char *data;
    size_t len, cap;
    bool failed;
} text_buf;

__attribute__((format(printf, 2, 3))) static void buf_printf(text_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (b->failed)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 > b->len + (size_t)n + 1 ? b->cap * 2 : b->len + (size_t)n + 1;
        char *data = realloc(b->data, cap);
        if (data == NULL) {
            b->failed = true;
            return;
        }
        b->data = data;
        b->cap = cap;
    }
}

/* A label value with '\\', '"' and newlines escaped, as the text format requires. Mode names
 * come from our own table, but the format should not depend on that. */
static const char *escape_label(char *buf, size_t len, const char *value)
{
    size_t o = 0;

    for (const char *p = value; *p != '\0' && o + 3 < len; p++) {
        if (*p == '\\' || *p == '"' || *p == '\n') {
            buf[o++] = '\\';
            buf[o++] = *p == '\n' ? 'n' : *p;
        } else {
            buf[o++] = *p;
        }
    }
    buf[o] = '\0';
    return buf;
}

static void header(text_buf *b, const char *name, const char *type, const char *help)
{
    buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_requests(metrics *m, text_buf *b)
{
    header(b, "stock_http_requests_total", "counter",
           "HTTP requests answered, by route and status.");
    for (int r = 0; r < ROUTE_COUNT_; r++) {
        for (size_t s = 0; s < METRICS__N_STATUS; s++) {
            uint64_t v = atomic_load_explicit(&m->requests[r][s], memory_order_relaxed);
            if (v == 0)
                continue;
            char status[16];
            if (s == METRICS__STATUS_OTHER)
                snprintf(status, sizeof(status), "other");
            else
                snprintf(status, sizeof(status), "%d", status_codes[s]);
            buf_printf(b, "stock_http_requests_total{route=\"%s\",status=\"%s\"} %llu\n",
                       route_names[r], status, (unsigned long long)v);
        }
    }
}

/* Nanoseconds as seconds, exactly. */
static void buf_seconds(text_buf *b, uint64_t ns)
{
    buf_printf(b, "%llu.%09llu\n", (unsigned long long)(ns / 1000000000u),
               (unsigned long long)(ns % 1000000000u));
}

/* The stages of the sales timed (only the modes with one at least, to keep it short) and the
 * parts of each route's requests (only the routes answered at least once). */
static void render_times(metrics *m, text_buf *b)
{
    char label[128];

    header(b, "stock_sale_stage_seconds_total", "counter",
           "Time of the sales that sold on the single path, by stage, in order: acquire (the "
           "lock), claim (BEGIN, the stock read, the check), commit (the write, the order, "
           "COMMIT and its flush), release (the lock given back, even while COMMIT travels), "
           "rest (the pool, the answer), json (the handler around the deduction).");
    for (size_t i = 0; i < m->n_modes; i++) {
        if (atomic_load_explicit(&m->timed[i], memory_order_relaxed) == 0)
            continue;
        escape_label(label, sizeof(label), m->mode_names[i]);
        for (size_t st = 0; st < METRICS__N_STAGES; st++) {
            buf_printf(b, "stock_sale_stage_seconds_total{mode=\"%s\",stage=\"%s\"} ", label,
                       st == METRICS__STAGE_JSON ? "json" : deduct_stage_name((deduct_stage)st));
            buf_seconds(b, atomic_load_explicit(&m->stage_ns[i * METRICS__N_STAGES + st],
                                                memory_order_relaxed));
        }
    }
    header(b, "stock_sale_timed_total", "counter",
           "Sales timed stage by stage: the divisor of stock_sale_stage_seconds_total.");
    for (size_t i = 0; i < m->n_modes; i++) {
        uint64_t v = atomic_load_explicit(&m->timed[i], memory_order_relaxed);
        if (v > 0)
            buf_printf(b, "stock_sale_timed_total{mode=\"%s\"} %llu\n",
                       escape_label(label, sizeof(label), m->mode_names[i]), (unsigned long long)v);
    }
    header(b, "stock_http_seconds_total", "counter",
           "The replica's time for a route's requests, from the headers in to the answer "
           "queued: waiting for a worker (queue), in the handler, and the rest (around: the "
           "body read, the hand-overs, the answer queued). Divide by the route's "
           "stock_http_requests_total.");
    for (int r = 0; r < ROUTE_COUNT_; r++) {
        uint64_t v[METRICS__N_HTTP_PARTS];
        bool any = false;
        for (size_t p = 0; p < METRICS__N_HTTP_PARTS; p++) {
            v[p] = atomic_load_explicit(&m->http_ns[r][p], memory_order_relaxed);
            any |= v[p] > 0;
        }
        for (size_t p = 0; any && p < METRICS__N_HTTP_PARTS; p++) {
            buf_printf(b, "stock_http_seconds_total{route=\"%s\",part=\"%s\"} ", route_names[r],
                       http_parts[p]);
            buf_seconds(b, v[p]);
        }
    }
}

static void render_deductions(metrics *m, text_buf *b)
{
    char label[128];

    header(b, "stock_deductions_total", "counter",
           "Deduction requests that reached a mode, by mode and outcome.");
    for (size_t i = 0; i < m->n_modes; i++) {
        escape_label(label, sizeof(label), m->mode_names[i]);
        for (size_t o = 0; o < METRICS__N_OUTCOMES; o++) {
            uint64_t v = atomic_load_explicit(&m->deductions[i * METRICS__N_OUTCOMES + o],
                                              memory_order_relaxed);
            buf_printf(b, "stock_deductions_total{mode=\"%s\",outcome=\"%s\"} %llu\n", label,
                       METRICS__OUTCOME_NAME(o), (unsigned long long)v);
        }
    }
}

/* A histogram's lines: buckets (cumulative), sum and count. */
static void render_histogram(text_buf *b, const char *name, const char *help,
                             _Atomic uint64_t *counts, _Atomic uint64_t *sum, const double *le,
                             size_t n)
{
    uint64_t cumulative = 0;

    header(b, name, "histogram", help);
    for (size_t i = 0; i <= n; i++) {
        cumulative += atomic_load_explicit(&counts[i], memory_order_relaxed);
        if (i < n)
            buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, le[i],
                       (unsigned long long)cumulative);
        else
            buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cumulative);
    }
    uint64_t sum_ns = atomic_load_explicit(sum, memory_order_relaxed);
    buf_printf(b, "%s_sum ", name);
    buf_seconds(b, sum_ns);
    buf_printf(b, "%s_count %llu\n", name, (unsigned long long)cumulative);
}

static void render_lock_wait(metrics *m, text_buf *b)
{
    render_histogram(b, "stock_lock_wait_seconds",
                     "Time spent waiting to take a lock, taken or not.", m->lock_wait,
                     &m->lock_wait_sum_ns, wait_buckets, METRICS__N_BUCKETS);
    render_histogram(b, "stock_lock_handoff_seconds",
                     "From a lock's release (Redis' clock) to the take by the head of its line "
                     "(this host's clock): time the lock served nobody.",
                     m->handoff, &m->handoff_sum_ns, handoff_buckets, METRICS__N_HANDOFF);
    render_histogram(b, "stock_batch_requests",
                     "Requests answered by one batch of redis-batch: one holding of the lock, "
                     "one transaction.",
                     m->batch, &m->batch_sum, batch_buckets, METRICS__N_BATCH);
}

static void write_counter(text_buf *b, const char *name, const char *help, uint64_t v)
{
    header(b, name, "counter", help);
    buf_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

static void render_external(const metrics_external *ext, text_buf *b)
{
    write_counter(b, "stock_lock_renewals_total", "Lease renewals made by the lock watchdog.",
                  ext->lock_renewals);
    write_counter(b, "stock_lock_lost_total",
                  "Locks the watchdog found gone or taken by another owner while held.",
                  ext->lock_lost);

    header(b, "stock_db_pool_connections", "gauge",
           "PostgreSQL pool: size (bound), open connections, connections in use.");
    buf_printf(b,
               "stock_db_pool_connections{state=\"size\"} %d\n"
               "stock_db_pool_connections{state=\"open\"} %d\n"
               "stock_db_pool_connections{state=\"in_use\"} %d\n",
               ext->db_pool_size, ext->db_pool_open, ext->db_pool_in_use);
    header(b, "stock_redis_pool_connections", "gauge",
           "Redis command connections: size (bound), connections in use.");
    buf_printf(b,
               "stock_redis_pool_connections{state=\"size\"} %d\n"
               "stock_redis_pool_connections{state=\"in_use\"} %d\n",
               ext->redis_pool_size, ext->redis_pool_in_use);
    header(b, "stock_http_connections", "gauge", "HTTP client connections open now.");
    buf_printf(b, "stock_http_connections %d\n", ext->http_connections);
    header(b, "stock_process_context_switches_total", "counter",
           "Context switches of every thread of the process, ended threads too: voluntary (it "
           "waited) and involuntary (it was taken off its core).");
    buf_printf(b,
               "stock_process_context_switches_total{kind=\"voluntary\"} %llu\n"
               "stock_process_context_switches_total{kind=\"involuntary\"} %llu\n",
               (unsigned long long)ext->switches_voluntary,
               (unsigned long long)ext->switches_involuntary);
}

char *metrics_render(metrics *m, const metrics_external *ext)
{
    static const metrics_external none; /* all zeros, when the caller has no figures */
    text_buf b = {NULL, 0, 0, false};

    if (m == NULL)
        return NULL;
    b.cap = 4096;
    b.data = malloc(b.cap);
    if (b.data == NULL)
        return NULL;
    b.data[0] = '\0';

    render_requests(m, &b);
    render_deductions(m, &b);
    render_times(m, &b);
    render_lock_wait(m, &b);
    write_counter(&b, "stock_lock_timeouts_total",
                  "Lock waits that ended without the lock (503 lock_timeout).",
                  atomic_load_explicit(&m->lock_timeouts, memory_order_relaxed));
    write_counter(&b, "stock_optimistic_retries_total",
                  "Transactions run again because an optimistic write lost its race "
                  "(pg-optimistic) or PostgreSQL refused it with 40001 (pg-serializable); "
                  "divide by their deducted outcomes for retries per sale.",
                  atomic_load_explicit(&m->optimistic_retries, memory_order_relaxed));
    render_external(ext != NULL ? ext : &none, &b);

    if (b.failed) {
        free(b.data);
        return NULL;
    }
    return b.data;
}

json_t *metrics_to_json(metrics *m)
{
    json_t *o = json_object(), *answers = json_object(), *deductions = json_object();
    json_t *wait = json_object(), *le = json_array(), *cumulative = json_array();
    uint64_t total = 0;
    int failed = o == NULL || answers == NULL || deductions == NULL || wait == NULL || le == NULL ||
                 cumulative == NULL;

    for (size_t st = 0; !failed && st < METRICS__N_STATUS; st++) {
        uint64_t v = atomic_load_explicit(&m->requests[ROUTE_DEDUCT][st], memory_order_relaxed);
        char status[16];
        if (v == 0)
            continue;
        if (st == METRICS__STATUS_OTHER)
            snprintf(status, sizeof(status), "other");
        else
            snprintf(status, sizeof(status), "%d", status_codes[st]);
        failed |= json_object_set_new(answers, status, json_integer((json_int_t)v));
    }
    for (size_t mi = 0; !failed && mi < m->n_modes; mi++) {
        json_t *by = json_object();
        failed |= by == NULL;
        for (size_t oi = 0; !failed && oi < METRICS__N_OUTCOMES; oi++) {
            uint64_t v = atomic_load_explicit(&m->deductions[mi * METRICS__N_OUTCOMES + oi],
                                              memory_order_relaxed);
            failed |=
                json_object_set_new(by, METRICS__OUTCOME_NAME(oi), json_integer((json_int_t)v));
        }
        failed |= json_object_set_new(deductions, m->mode_names[mi], by);
    }
    for (size_t b = 0; !failed && b <= METRICS__N_BUCKETS; b++) {
        total += atomic_load_explicit(&m->lock_wait[b], memory_order_relaxed);
        if (b == METRICS__N_BUCKETS)
            break;
        failed |= json_array_append_new(le, json_real(wait_buckets[b]));
        failed |= json_array_append_new(cumulative, json_integer((json_int_t)total));
    }
    if (!failed) {
        double sum = (double)atomic_load_explicit(&m->lock_wait_sum_ns, memory_order_relaxed) / 1e9;
        failed |= json_object_set_new(wait, "le", le);
        failed |= json_object_set_new(wait, "cumulative", cumulative);
        le = cumulative = NULL;
        failed |= json_object_set_new(wait, "count", json_integer((json_int_t)total));
        failed |= json_object_set_new(wait, "sum_seconds", json_real(sum));
        failed |= json_object_set_new(o, "deduct_answers", answers);
        failed |= json_object_set_new(o, "deductions", deductions);
        failed |= json_object_set_new(o, "lock_wait", wait);
        answers = deductions = wait = NULL;
    }
    json_decref(le);
    json_decref(cumulative);
    json_decref(answers);
    json_decref(deductions);
    json_decref(wait);
    if (failed) {
        json_decref(o);
        return NULL;
    }
    return o;
}
