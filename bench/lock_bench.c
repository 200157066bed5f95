/*
 * lock_bench.c - what the Redis lock costs, in figures (a program that prints, not a test).
 *
 *   build/lock-bench --port 6399 [--host 127.0.0.1] [--seconds 3] [--threads 16] [--clients 3]
 *                    [--sync-replicas 0] [--fair on|off]
 *   bench/lock-bench.sh [same options but --port]   (starts a throwaway redis-server)
 *
 * 1. Uncontended, one thread: lock+unlock pairs per second on one key, next to the PING rate
 *    on the same connection (one thread always gets the same pooled connection back). A
 *    pair is two round trips and a PING one, so the ratio pairs/PING is at most about 0.5;
 *    how close it gets says what the scripts, the pool and the bookkeeping add to the
 *    round trips.
 * 2. Contended: N threads take turns on one key as fast as they can. Acquisitions per
 *    second, how many of them went to another thread (a hand-off through a release message
 *    rather than the releaser taking it again), and the gap from a holder's release (taken
 *    just before it calls unlock, so the unlock's round trip is inside the gap) to the next
 *    acquisition: median and 99th percentile. And each acquisition's wait, from the call
 *    to lock_try_lock to its return: median, 99th percentile and the longest, which is
 *    what fairness is about (a starved waiter shows in the maximum, not in the median).
 *    It runs twice: all threads on one lock_client (one process), then the same threads
 *    spread over --clients lock_clients (3 by default), each with its own process id and
 *    subscriber, as the service's replicas are: there waiters of different "processes"
 *    race for every release (--fair off) or stand in one line (--fair on, the default),
 *    and the mean wait of each client says whether one "process" starves while others do not.
 *
 * The lock is taken in watchdog mode, as the service takes it.
 */
#include "bench/clock.h"
#include "lock/lock.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#define BENCH_KEY_SOLO "bench:lock:solo"
#define BENCH_KEY_SHARED "bench:lock:shared"
#define MAX_THREADS 256

typedef struct bench_opts {
    lock_options lock; /* lock_options_init()'s defaults, then --host, --port, --sync-replicas
                          (LOCK_SYNC_REPLICAS) and --fair (LOCK_FAIR) */
    int seconds;
    int threads;
    int clients; /* lock_clients the contended threads are spread over, second run */
} bench_opts;

/* A growable array of durations in ns, owned by one thread. */
typedef struct samples {
    int64_t *v;
    size_t n, cap;
} samples;

typedef struct contended {
    lock_client *clients[MAX_THREADS];
    int nclients;
    int64_t until_ns;
    _Atomic int64_t last_release_ns;
    _Atomic int last_holder;
    _Atomic int errors;
} contended;

typedef struct worker {
    contended *shared;
    int id;
    uint64_t acquisitions;
    uint64_t handoffs; /* acquisitions right after another thread's release */
    samples gaps;      /* every release -> acquisition */
    samples handoff_gaps;
    samples waits; /* every try_lock call -> acquired */
    pthread_t thread;
} worker;

static int samples_add(samples *s, int64_t x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap == 0 ? 1024 : 2 * s->cap;
        int64_t *v = realloc(s->v, cap * sizeof(*v));

        if (v == NULL)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return 0;
}

/* Appends b's samples to a; returns 0 or -1 (no memory). */
static int samples_merge(samples *a, const samples *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (samples_add(a, b->v[i]) != 0)
            return -1;
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* The pct-th percentile in ms (sorts s; 100: the largest); 0 for no samples. */
static double percentile_ms(samples *s, int pct)
{
    size_t i;

    if (s->n == 0)
        return 0;
    qsort(s->v, s->n, sizeof(*s->v), cmp_i64);
    i = s->n * (size_t)pct / 100;
    return (double)s->v[i < s->n ? i : s->n - 1] / 1e6;
}

static int parse_args(int argc, char **argv, bench_opts *o)
{
    lock_options_init(&o->lock);
    o->lock.redis_port = 0; /* --port is required: never a developer's Redis by default */
    o->seconds = 3;
    o->threads = 16;
    o->clients = 3;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (v != NULL && strcmp(argv[i], "--host") == 0)
            o->lock.redis_host = v;
        else if (v != NULL && strcmp(argv[i], "--port") == 0)
            o->lock.redis_port = atoi(v);
        else if (v != NULL && strcmp(argv[i], "--seconds") == 0)
            o->seconds = atoi(v);
        else if (v != NULL && strcmp(argv[i], "--threads") == 0)
            o->threads = atoi(v);
        else if (v != NULL && strcmp(argv[i], "--clients") == 0)
            o->clients = atoi(v);
        else if (v != NULL && strcmp(argv[i], "--sync-replicas") == 0)
            o->lock.sync_replicas = atoi(v);
        else if (v != NULL && strcmp(argv[i], "--fair") == 0 &&
                 (strcmp(v, "on") == 0 || strcmp(v, "off") == 0))
            o->lock.fair = strcmp(v, "on") == 0;
        else
            return -1;
        i++;
    }
    if (o->lock.redis_port < 1 || o->lock.redis_port > 65535 || o->seconds < 1 || o->threads < 2 ||
        o->threads > MAX_THREADS || o->clients < 1 || o->clients > o->threads ||
        o->lock.sync_replicas < 0)
        return -1;
    return 0;
}

/* ---- 1. uncontended ---- */

/* A rate being measured: operations and the time they took. */
typedef struct rate {
    uint64_t n;
    int64_t ns;
} rate;

#define SLICE_NS INT64_C(250000000)

/* PINGs for one slice on c, added to *r; returns 0 or -1. */
static int ping_slice(lock_client *c, rate *r)
{
    int64_t start = bench_now_ns(), until = start + SLICE_NS;

    while (bench_now_ns() < until) {
        if (lock_ping(c) != LOCK_OK) {
            fprintf(stderr, "lock-bench: PING: %s\n", lock_last_error());
            return -1;
        }
        r->n++;
    }
    r->ns += bench_now_ns() - start;
    return 0;
}

/* lock+unlock pairs on one key for one slice, added to *r; returns 0 or -1. */
static int pair_slice(lock_client *c, rate *r)
{
    int64_t start = bench_now_ns(), until = start + SLICE_NS;

    while (bench_now_ns() < until) {
        int rc = lock_try_lock(c, BENCH_KEY_SOLO, 0, LOCK_LEASE_WATCHDOG, NULL);

        if (rc == LOCK_OK)
            rc = lock_unlock(c, BENCH_KEY_SOLO);
        if (rc != LOCK_OK) {
            fprintf(stderr, "lock-bench: lock/unlock: %s %s\n", lock_strerror(rc),
                    lock_last_error());
            return -1;
        }
        r->n++;
    }
    r->ns += bench_now_ns() - start;
    return 0;
}

/*
 * The two rates are measured in alternating quarter-second slices rather than one after
 * the other, so that a change in the machine's load (it is shared) weighs on both alike.
 */
static int run_uncontended(lock_client *c, const bench_opts *o)
{
    rate warm = {0}, pings = {0}, pairs = {0};
    double ping_s, pair_s;

    /* Warm up: connect, load the scripts. */
    if (ping_slice(c, &warm) != 0 || pair_slice(c, &warm) != 0)
        return -1;
    for (int i = 0; i < 4 * o->seconds; i++)
        if (ping_slice(c, &pings) != 0 || pair_slice(c, &pairs) != 0)
            return -1;
    ping_s = (double)pings.n * 1e9 / (double)pings.ns;
    pair_s = (double)pairs.n * 1e9 / (double)pairs.ns;
    printf("uncontended, 1 thread, one connection, %d s each (alternating slices):\n", o->seconds);
    printf("  PING                          %9.0f /s\n", ping_s);
    printf("  lock+unlock (watchdog mode)   %9.0f pairs/s\n", pair_s);
    printf("  ratio pairs/PING              %9.3f   (2 round trips a pair: 0.5 is the ceiling)\n",
           pair_s / ping_s);
    return 0;
}

/* ---- 2. contended ---- */

static void *worker_main(void *arg)
{
    worker *w = arg;
    contended *sh = w->shared;

    lock_client *c = sh->clients[w->id % sh->nclients];

    while (bench_now_ns() < sh->until_ns) {
        int64_t got, prev;
        int64_t called = bench_now_ns();
        int rc = lock_try_lock(c, BENCH_KEY_SHARED, 10000, LOCK_LEASE_WATCHDOG, NULL);

        if (rc != LOCK_OK) {
            atomic_fetch_add(&sh->errors, 1);
            continue;
        }
        got = bench_now_ns();
        w->acquisitions++;
        if (samples_add(&w->waits, got - called) != 0)
            atomic_fetch_add(&sh->errors, 1);
        prev = atomic_load(&sh->last_release_ns);
        if (prev != 0) {
            bool handoff = atomic_load(&sh->last_holder) != w->id;

            if (samples_add(&w->gaps, got - prev) != 0)
                atomic_fetch_add(&sh->errors, 1);
            if (handoff) {
                w->handoffs++;
                if (samples_add(&w->handoff_gaps, got - prev) != 0)
                    atomic_fetch_add(&sh->errors, 1);
            }
        }
        atomic_store(&sh->last_holder, w->id);
        atomic_store(&sh->last_release_ns, bench_now_ns());
        if (lock_unlock(c, BENCH_KEY_SHARED) != LOCK_OK)
            atomic_fetch_add(&sh->errors, 1);
    }
    return NULL;
}

/*
 * N threads on one key for o->seconds, the threads spread over clients[0..nclients)
 * (thread i uses client i % nclients); prints the figures. Returns 0, or -1 on errors.
 */
/* Fairness between processes: each client's mean wait (thread i of `started` uses client
 * i % nclients). */
static void print_client_waits(const worker *w, int started, int nclients)
{
    printf("  mean wait per client          ");
    for (int k = 0; k < nclients; k++) {
        int64_t sum = 0;
        size_t n = 0;

        for (int i = k; i < started; i += nclients) {
            for (size_t j = 0; j < w[i].waits.n; j++)
                sum += w[i].waits.v[j];
            n += w[i].waits.n;
        }
        printf("%s%.3f", k > 0 ? " / " : "", n > 0 ? (double)sum / (double)n / 1e6 : 0.0);
    }
    printf(" ms\n");
}

static int run_contended(lock_client **clients, int nclients, const bench_opts *o)
{
    static worker w[MAX_THREADS];
    static contended sh;
    samples gaps = {0}, handoff_gaps = {0}, waits = {0};
    uint64_t acquisitions = 0, handoffs = 0;
    int64_t start;
    double secs;
    int rc = -1;
    int started = 0;

    memset(&sh, 0, sizeof(sh));
    for (int i = 0; i < nclients; i++)
        sh.clients[i] = clients[i];
    sh.nclients = nclients;
    atomic_init(&sh.last_release_ns, 0);
    atomic_init(&sh.last_holder, -1);
    atomic_init(&sh.errors, 0);
    start = bench_now_ns();
    sh.until_ns = start + (int64_t)o->seconds * 1000000000;
    for (; started < o->threads; started++) {
        w[started] = (worker){.shared = &sh, .id = started};
        if (pthread_create(&w[started].thread, NULL, worker_main, &w[started]) != 0)
            break;
    }
    for (int i = 0; i < started; i++)
        pthread_join(w[i].thread, NULL);
    secs = (double)(bench_now_ns() - start) / 1e9;
    if (started < o->threads) {
        fprintf(stderr, "lock-bench: cannot start %d threads\n", o->threads);
        goto out;
    }
    for (int i = 0; i < started; i++) {
        acquisitions += w[i].acquisitions;
        handoffs += w[i].handoffs;
        if (samples_merge(&gaps, &w[i].gaps) != 0 ||
            samples_merge(&handoff_gaps, &w[i].handoff_gaps) != 0 ||
            samples_merge(&waits, &w[i].waits) != 0)
            goto out;
    }
    if (nclients == 1)
        printf("contended, %d threads, one client, one key, %d s:\n", o->threads, o->seconds);
    else
        printf("contended, %d threads over %d clients (as %d processes), one key, %d s:\n",
               o->threads, nclients, nclients, o->seconds);
    printf("  acquisitions                  %9.0f /s\n", (double)acquisitions / secs);
    printf("  hand-offs to another thread   %9.0f /s  (%.0f%% of acquisitions)\n",
           (double)handoffs / secs, 100.0 * (double)handoffs / (double)acquisitions);
    printf("  release -> next acquisition   median %.3f ms, p99 %.3f ms\n",
           percentile_ms(&gaps, 50), percentile_ms(&gaps, 99));
    printf("  release -> another thread     median %.3f ms, p99 %.3f ms\n",
           percentile_ms(&handoff_gaps, 50), percentile_ms(&handoff_gaps, 99));
    printf("  wait (try_lock -> acquired)   median %.3f ms, p99 %.3f ms, max %.3f ms\n",
           percentile_ms(&waits, 50), percentile_ms(&waits, 99), percentile_ms(&waits, 100));
    if (nclients > 1)
        print_client_waits(w, started, nclients);
    printf("  errors                        %d\n", atomic_load(&sh.errors));
    rc = atomic_load(&sh.errors) == 0 ? 0 : -1;
out:
    for (int i = 0; i < started; i++) {
        free(w[i].gaps.v);
        free(w[i].handoff_gaps.v);
        free(w[i].waits.v);
    }
    free(gaps.v);
    free(handoff_gaps.v);
    free(waits.v);
    return rc;
}

int main(int argc, char **argv)
{
    bench_opts o;
    lock_options lo;
    lock_client *c[MAX_THREADS] = {NULL};
    int created = 0;
    int rc = 1;

    if (parse_args(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: lock-bench --port PORT [--host HOST] [--seconds S (3)] "
                        "[--threads N (16)] [--clients K (3)] [--sync-replicas N (0)] "
                        "[--fair on|off (on)]\n");
        return 2;
    }
    /* hiredis writes with write(2): a closed connection must give EPIPE, not kill us. */
    signal(SIGPIPE, SIG_IGN);
    lo = o.lock;
    lo.pool_size = o.threads;
    for (; created < o.clients; created++) {
        if (lock_client_create(&lo, &c[created]) != LOCK_OK) {
            fprintf(stderr, "lock-bench: cannot create the lock clients\n");
            goto out;
        }
    }
    printf("lock-bench: redis %s:%d, sync replicas %d, fair %s\n", lo.redis_host, lo.redis_port,
           lo.sync_replicas, lo.fair ? "on" : "off");
    if (run_uncontended(c[0], &o) != 0 || run_contended(c, 1, &o) != 0)
        goto out;
    if (o.clients > 1 && run_contended(c, o.clients, &o) != 0)
        goto out;
    rc = 0;
out:
    for (int i = 0; i < created; i++)
        lock_client_destroy(c[i]);
    return rc;
}
