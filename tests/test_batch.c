/*
 * test_batch.c - the redis-batch mode's pure parts, without servers: the arrival-order
 * allocation, and the queue (leader, hand-off, bounds) driven through a mode whose guard
 * is a stub that counts and delays its entries and then fails, so that no database is
 * reached and every answer is the guard's 503; and requests parked without a thread
 * (batch_submit), answered by a job the runner runs, or by the queue's timer.
 *
 * The mode itself, against real Redis, PostgreSQL and nginx, is tested by tests/stack/
 * (test_oversell's load_redis_batch_three, test_idempotency's batch_idempotency).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "service/sale/batch.h"
#include "service/http/response.h"
#include "service/sale/sale.h"
#include "service/sale/stock.h"

/* ---- sale_allocate ------------------------------------------------------------------ */

static void test_allocate_in_arrival_order(void **state)
{
    const int64_t counts[] = {3, 2, 4, 1, 1};
    bool sold[5];
    int64_t left[5];

    (void)state;
    /* 7 units: 3 sold (4 left), 2 sold (2 left), 4 refused, 1 sold, 1 sold. */
    assert_int_equal(sale_allocate(7, counts, 5, sold, left), 0);
    assert_true(sold[0]);
    assert_int_equal(left[0], 4);
    assert_true(sold[1]);
    assert_int_equal(left[1], 2);
    assert_false(sold[2]); /* refused against the 2 that were left */
    assert_int_equal(left[2], 2);
    assert_true(sold[3]);
    assert_int_equal(left[3], 1);
    assert_true(sold[4]);
    assert_int_equal(left[4], 0);
}

static void test_allocate_first_come_first_served(void **state)
{
    const int64_t counts[] = {1, 1, 1, 1};
    bool sold[4];
    int64_t left[4];

    (void)state;
    /* 2 units for 4 requests of 1: the first two, not any two. */
    assert_int_equal(sale_allocate(2, counts, 4, sold, left), 0);
    assert_true(sold[0] && sold[1]);
    assert_false(sold[2] || sold[3]);
    assert_int_equal(left[2], 0);
    assert_int_equal(left[3], 0);
}

static void test_allocate_exact_and_empty(void **state)
{
    const int64_t counts[] = {5, 1};
    bool sold[2];
    int64_t left[2];

    (void)state;
    assert_int_equal(sale_allocate(5, counts, 2, sold, left), 0); /* exactly the stock */
    assert_true(sold[0]);
    assert_false(sold[1]);
    assert_int_equal(sale_allocate(0, counts, 2, sold, left), 0); /* sold out: all refused */
    assert_false(sold[0] || sold[1]);
    assert_int_equal(left[0], 0);
    assert_int_equal(sale_allocate(9, counts, 0, sold, left), 9); /* nobody: nothing taken */
}

static void test_allocate_never_goes_negative(void **state)
{
    int64_t counts[64], left[64], stock = 100, total = 0;
    bool sold[64];
    unsigned seed = 11;

    (void)state;
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 64; i++)
            counts[i] = 1 + (int64_t)(rand_r(&seed) % 7);
        stock = rand_r(&seed) % 120;
        int64_t end = sale_allocate(stock, counts, 64, sold, left), taken = 0, prev = stock;
        for (int i = 0; i < 64; i++) {
            assert_true(left[i] >= 0);
            if (sold[i]) {
                assert_int_equal(left[i], prev - counts[i]);
                taken += counts[i];
            } else {
                assert_true(counts[i] > prev); /* refused only when not covered */
                assert_int_equal(left[i], prev);
            }
            prev = left[i];
        }
        assert_int_equal(end, stock - taken);
        total += taken;
    }
    assert_true(total > 0);
}

/* ---- the queue, with a stub guard ---------------------------------------------------- */

static atomic_int g_entries; /* how many times the stub guard was entered: one per batch */
static int g_enter_delay_ms; /* how long each entry takes */

static int stub_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                      size_t detail_len)
{
    (void)env;
    (void)goods_id;
    memset(hold, 0, sizeof(*hold));
    hold->waited = true; /* as the redis guard's: its wait is measured */
    atomic_fetch_add(&g_entries, 1);
    usleep((useconds_t)g_enter_delay_ms * 1000);
    snprintf(detail, detail_len, "stub guard: no lock service here");
    return GUARD_ERR_UNAVAILABLE;
}

static int stub_still_held(guard_env *env, const guard_hold *hold)
{
    (void)env;
    (void)hold;
    return GUARD_OK;
}

static void stub_leave(guard_env *env, guard_hold *hold)
{
    (void)env;
    (void)hold;
}

static const mode stub_mode = {.name = "stub-batch",
                               .safe = true,
                               .summary = "a batched mode whose guard always fails",
                               .enter = stub_enter,
                               .still_held = stub_still_held,
                               .leave = stub_leave,
                               .batched = true};

typedef struct shot {
    pthread_t thread;
    batch_queue *q;
    int64_t goods_id;
    int rc;
    deduct_result res;
} shot;

static const deduct_env g_env = {.instance = "test", .bodies = &response_sale_bodies};

static void *shot_thread(void *arg)
{
    shot *s = arg;
    s->rc = batch_execute(s->q, &g_env, &stub_mode, s->goods_id, 1, NULL, NULL, &s->res);
    return NULL;
}

static void test_options_are_checked(void **state)
{
    batch_queue *q = (batch_queue *)1;

    (void)state;
    assert_int_equal(batch_queue_create(&(batch_options){0, 10, 10}, &q), -1);
    assert_null(q);
    assert_int_equal(batch_queue_create(&(batch_options){10, 0, 10}, &q), -1);
    assert_int_equal(batch_queue_create(&(batch_options){10, 10, -1}, &q), -1);
    /* A wait of 0 would answer every request but the leader 503 at once. */
    assert_int_equal(batch_queue_create(&(batch_options){1, 1, 0}, &q), -1);
    assert_int_equal(batch_queue_create(&(batch_options){1, 1, 1}, &q), 0);
    batch_queue_destroy(q);
    batch_queue_destroy(NULL);
}

/* A failed guard fails its whole batch with the guard's 503, and the batch answers every
 * request; the requests that came while the first batch held the guard were coalesced:
 * fewer entries than requests. */
static void test_concurrent_requests_share_batches(void **state)
{
    enum { N = 24 };
    shot shots[N];
    batch_queue *q = NULL;

    (void)state;
    assert_int_equal(batch_queue_create(&(batch_options){64, 1024, 5000}, &q), 0);
    atomic_store(&g_entries, 0);
    g_enter_delay_ms = 50;
    for (int i = 0; i < N; i++) {
        shots[i] = (shot){.q = q, .goods_id = 7};
        assert_int_equal(pthread_create(&shots[i].thread, NULL, shot_thread, &shots[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(shots[i].thread, NULL);
        assert_int_equal(shots[i].rc, 0);
        assert_int_equal(shots[i].res.status, 503);
        assert_string_equal(deduct_outcome_name(shots[i].res.outcome), "unavailable");
        assert_non_null(strstr(shots[i].res.body, "stub guard"));
        assert_true(shots[i].res.waited);
        free(shots[i].res.body);
    }
    printf("    %d concurrent requests, %d batches\n", N, atomic_load(&g_entries));
    assert_true(atomic_load(&g_entries) < N);
    batch_queue_destroy(q);
}

/* BATCH_MAX bounds a batch: with max 1 every request is a batch of its own. */
static void test_batch_size_is_bounded(void **state)
{
    enum { N = 6 };
    shot shots[N];
    batch_queue *q = NULL;

    (void)state;
    assert_int_equal(batch_queue_create(&(batch_options){1, 1024, 5000}, &q), 0);
    atomic_store(&g_entries, 0);
    g_enter_delay_ms = 5;
    for (int i = 0; i < N; i++) {
        shots[i] = (shot){.q = q, .goods_id = 7};
        assert_int_equal(pthread_create(&shots[i].thread, NULL, shot_thread, &shots[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(shots[i].thread, NULL);
        assert_int_equal(shots[i].res.status, 503);
        free(shots[i].res.body);
    }
    assert_int_equal(atomic_load(&g_entries), N);
    batch_queue_destroy(q);
}

/* A request is not kept past BATCH_WAIT_MS in the queue (503 lock_timeout), and one past
 * BATCH_QUEUE_MAX is refused at once (503 unavailable). */
static void test_queue_wait_and_size_are_bounded(void **state)
{
    shot leader = {0}, waiting = {0}, extra = {0};
    batch_queue *q = NULL;
    struct timespec t0, t1;

    (void)state;
    /* Room for two: the leader (queued until it has the lock) and one more. */
    assert_int_equal(batch_queue_create(&(batch_options){64, 2, 100}, &q), 0);
    g_enter_delay_ms = 600; /* the leader holds the guard this long */
    leader = (shot){.q = q, .goods_id = 9};
    assert_int_equal(pthread_create(&leader.thread, NULL, shot_thread, &leader), 0);
    usleep(100 * 1000); /* the leader is inside the guard now */

    waiting = (shot){.q = q, .goods_id = 9};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(pthread_create(&waiting.thread, NULL, shot_thread, &waiting), 0);
    usleep(30 * 1000); /* queued behind the leader: the queue (max 2) is full */
    extra = (shot){.q = q, .goods_id = 9};
    shot_thread(&extra);
    assert_int_equal(extra.res.status, 503);
    assert_string_equal(deduct_outcome_name(extra.res.outcome), "unavailable");
    assert_non_null(strstr(extra.res.body, "queued"));

    pthread_join(waiting.thread, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    assert_int_equal(waiting.res.status, 503);
    assert_string_equal(deduct_outcome_name(waiting.res.outcome), "lock_timeout");
    assert_true(waited < 0.45); /* 100 ms bound, far before the leader's 600 ms */

    pthread_join(leader.thread, NULL);
    assert_int_equal(leader.res.status, 503);
    assert_string_equal(deduct_outcome_name(leader.res.outcome), "unavailable");
    free(leader.res.body);
    free(waiting.res.body);
    free(extra.res.body);
    batch_queue_destroy(q);
}

/* ---- parked requests: no thread per waiting request --------------------------------- */

/* What a parked request got, and when (batch_submit's done). */
typedef struct parked {
    _Atomic bool answered;
    int status;
    char outcome[32];
    int64_t took_ms;
    struct timespec t0;
    pthread_t answered_on;
} parked;

static int64_t ms_since(const struct timespec *t0)
{
    struct timespec t1;

    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (int64_t)(t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

static void parked_done(void *arg, deduct_result *res)
{
    parked *p = arg;

    p->status = res->status;
    snprintf(p->outcome, sizeof(p->outcome), "%s", deduct_outcome_name(res->outcome));
    p->took_ms = ms_since(&p->t0);
    p->answered_on = pthread_self();
    free(res->body);
    atomic_store(&p->answered, true);
}

static parked *submit_parked(batch_queue *q, parked *p, int64_t goods_id)
{
    clock_gettime(CLOCK_MONOTONIC, &p->t0);
    assert_int_equal(
        batch_submit(q, &g_env, &stub_mode, goods_id, 1, "key-1", "req-1", parked_done, p), 0);
    return p;
}

static void wait_answered(parked *p, int n)
{
    for (int i = 0; i < n; i++)
        while (!atomic_load(&p[i].answered))
            usleep(1000);
}

/* A runner that runs each job on a thread of its own, and counts them (the service's runs
 * them on its HTTP workers). */
static atomic_int g_jobs;

typedef struct job_arg {
    void (*job)(void *);
    void *arg;
} job_arg;

static void *job_thread(void *arg)
{
    job_arg j = *(job_arg *)arg;

    free(arg);
    j.job(j.arg);
    return NULL;
}

static int thread_runner(void *ctx, void (*job)(void *), void *arg)
{
    job_arg *j = malloc(sizeof(*j));
    pthread_t t;

    (void)ctx;
    assert_non_null(j);
    *j = (job_arg){job, arg};
    atomic_fetch_add(&g_jobs, 1);
    assert_int_equal(pthread_create(&t, NULL, job_thread, j), 0);
    pthread_detach(t);
    return 0;
}

/* With a runner, no request waits in batch_submit, not even the one that leads: its batch
 * runs as the runner's job. The leader takes what fits its batch (8) once it has the guard,
 * and hands the queue on: each next batch's leader runs as a job too, never on a thread of
 * the requests. */
static void test_parked_requests_are_answered_by_jobs(void **state)
{
    enum { N = 17 };
    parked p[N];
    batch_queue *q = NULL;
    struct timespec t0;

    (void)state;
    memset(p, 0, sizeof(p));
    assert_int_equal(batch_queue_create(&(batch_options){8, 1024, 5000}, &q), 0);
    batch_queue_set_runner(q, thread_runner, NULL);
    atomic_store(&g_entries, 0);
    atomic_store(&g_jobs, 0);
    g_enter_delay_ms = 200;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < N; i++)
        submit_parked(q, &p[i], 11);
    assert_true(ms_since(&t0) < 100); /* nobody waited in batch_submit */
    for (int i = 0; i < N; i++)
        assert_false(atomic_load(&p[i].answered));
    wait_answered(p, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(p[i].status, 503);
        assert_string_equal(p[i].outcome, "unavailable");
        assert_false(pthread_equal(p[i].answered_on, pthread_self()));
        /* a batch's requests are answered together, on its leader's job */
        if (i % 8 != 0)
            assert_true(pthread_equal(p[i].answered_on, p[i - i % 8].answered_on));
    }
    printf("    %d parked requests: %d batches, %d jobs\n", N, atomic_load(&g_entries),
           atomic_load(&g_jobs));
    assert_int_equal(atomic_load(&g_entries), 3); /* 8, 8 and 1 */
    assert_int_equal(atomic_load(&g_jobs), 3);
    batch_queue_set_runner(q, NULL, NULL);
    batch_queue_destroy(q);
}

/* A parked request's wait bound holds with no thread waiting for it: the queue's timer
 * answers it 503 lock_timeout at BATCH_WAIT_MS, long before the leader's guard lets go;
 * one past BATCH_QUEUE_MAX is answered 503 at once, inside batch_submit. */
static void test_parked_request_times_out(void **state)
{
    shot leader;
    parked waiting = {0}, extra = {0};
    batch_queue *q = NULL;

    (void)state;
    assert_int_equal(batch_queue_create(&(batch_options){64, 2, 100}, &q), 0);
    g_enter_delay_ms = 600;
    leader = (shot){.q = q, .goods_id = 13};
    assert_int_equal(pthread_create(&leader.thread, NULL, shot_thread, &leader), 0);
    usleep(100 * 1000);
    submit_parked(q, &waiting, 13);
    submit_parked(q, &extra, 13);
    assert_true(atomic_load(&extra.answered));
    assert_int_equal(extra.status, 503);
    assert_string_equal(extra.outcome, "unavailable");
    wait_answered(&waiting, 1);
    printf("    parked request answered after %lld ms\n", (long long)waiting.took_ms);
    assert_int_equal(waiting.status, 503);
    assert_string_equal(waiting.outcome, "lock_timeout");
    assert_true(waiting.took_ms >= 95 && waiting.took_ms < 350);
    pthread_join(leader.thread, NULL);
    free(leader.res.body);
    batch_queue_destroy(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allocate_in_arrival_order),
        cmocka_unit_test(test_allocate_first_come_first_served),
        cmocka_unit_test(test_allocate_exact_and_empty),
        cmocka_unit_test(test_allocate_never_goes_negative),
        cmocka_unit_test(test_options_are_checked),
        cmocka_unit_test(test_concurrent_requests_share_batches),
        cmocka_unit_test(test_batch_size_is_bounded),
        cmocka_unit_test(test_queue_wait_and_size_are_bounded),
        cmocka_unit_test(test_parked_requests_are_answered_by_jobs),
        cmocka_unit_test(test_parked_request_times_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
