/*
 * test_lab.c - the lab's pure parts (service/lab/lab.c, and the step body of
 * service/http/request.c): the hold-at parser, the request id's shape, and the table of held
 * requests with real threads: a request held at its points and stepped, its hold budget, a
 * duplicate id, a full table, the ring of traces. The routes act on a real stack
 * (tests/stack/test_lab_routes.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "service/lab/lab.h"
#include "service/http/request.h"

#define BIT(p) (1u << (p))

static void test_split_hold_at(void **state)
{
    unsigned points;
    char rest[128], d[256];

    (void)state;
    assert_int_equal(lab_split_fault("hold-at=read", &points, rest, sizeof(rest), d, sizeof(d)), 0);
    assert_int_equal(points, BIT(LAB_AT_READ));
    assert_string_equal(rest, "");
    assert_int_equal(lab_split_fault(" hold-at=entered , checked,release ", &points, rest,
                                     sizeof(rest), d, sizeof(d)),
                     0);
    assert_int_equal(points, BIT(LAB_AT_ENTERED) | BIT(LAB_AT_CHECKED) | BIT(LAB_AT_RELEASE));
    /* The faults after the points are the rest, in order; the points end at the first. */
    assert_int_equal(lab_split_fault("hold-at=read,checked,crash-in-section,pause-in-section=20",
                                     &points, rest, sizeof(rest), d, sizeof(d)),
                     0);
    assert_int_equal(points, BIT(LAB_AT_READ) | BIT(LAB_AT_CHECKED));
    assert_string_equal(rest, "crash-in-section,pause-in-section=20");
    assert_int_equal(
        lab_split_fault("nested,hold-at=written", &points, rest, sizeof(rest), d, sizeof(d)), 0);
    assert_int_equal(points, BIT(LAB_AT_WRITTEN));
    assert_string_equal(rest, "nested");
    /* No hold-at: everything is the rest, for faults_parse. */
    assert_int_equal(lab_split_fault("nested", &points, rest, sizeof(rest), d, sizeof(d)), 0);
    assert_int_equal(points, 0);
    assert_string_equal(rest, "nested");
    /* A cart's point, with the one fault a cart takes after it (POST /api/order). */
    assert_int_equal(lab_split_fault("hold-at=between-locks,pause-between-locks=300", &points, rest,
                                     sizeof(rest), d, sizeof(d)),
                     0);
    assert_int_equal(points, BIT(LAB_AT_BETWEEN_LOCKS));
    assert_int_equal(points & ~LAB_CART_POINTS, 0);
    assert_string_equal(rest, "pause-between-locks=300");
    /* Every point has its name. */
    for (int p = 0; p < LAB_POINTS_; p++) {
        char value[64];
        snprintf(value, sizeof(value), "hold-at=%s", lab_point_name((lab_point)p));
        assert_int_equal(lab_split_fault(value, &points, rest, sizeof(rest), d, sizeof(d)), 0);
        assert_int_equal(points, BIT(p));
    }
}

static void expect_refused(const char *value, const char *reason_part)
{
    unsigned points = 99;
    char rest[128], d[256] = "";

    assert_int_equal(lab_split_fault(value, &points, rest, sizeof(rest), d, sizeof(d)), -1);
    if (strstr(d, reason_part) == NULL)
        fail_msg("'%s': reason '%s' lacks '%s'", value, d, reason_part);
}

static void test_split_refusals(void **state)
{
    (void)state;
    expect_refused("hold-at=", "needs one or more points");
    expect_refused("hold-at=nested", "needs one or more points");
    expect_refused("hold-at=bogus", "unknown point 'bogus'");
    expect_refused("hold-at=read,bogus", "unknown point 'bogus'");
    expect_refused("hold-at=read,,checked", "unknown point ''");
    expect_refused("hold-at=read,read", "names 'read' twice");
    expect_refused("hold-at=read,hold-at=checked", "given twice");
    expect_refused("hold-at=READ", "unknown point");
    /* The reason lists every point, the cart's too, from the one table of names. */
    expect_refused("hold-at=bogus", "known: entered, begun, read, written, checked, committed, "
                                    "release, between-locks");
    expect_refused("hold-at=between", "unknown point 'between'");
}

static void test_request_id(void **state)
{
    (void)state;
    assert_true(lab_request_id_valid("A"));
    assert_true(lab_request_id_valid("A-1_b"));
    assert_true(lab_request_id_valid("01234567890123456789012345678901"));   /* 32 */
    assert_false(lab_request_id_valid("012345678901234567890123456789012")); /* 33 */
    assert_false(lab_request_id_valid(""));
    assert_false(lab_request_id_valid(NULL));
    assert_false(lab_request_id_valid("a b"));
    assert_false(lab_request_id_valid("a.b"));
    assert_false(lab_request_id_valid("\xc3\xa9"));
}

static void test_step_body(void **state)
{
    char id[LAB_ID_MAX + 1], d[256];
    const char *bad[] = {"",
                         "{}",
                         "[]",
                         "\"A\"",
                         "{\"id\":\"A\",\"x\":1}",
                         "{\"id\":7}",
                         "{\"id\":\"\"}",
                         "{\"id\":\"a b\"}",
                         "{\"id\":\"A\",\"id\":\"B\"}",
                         "{\"id\":\"A\"} x",
                         "{\"id\":\"A\\u0000\"}",
                         "{\"id\":\"012345678901234567890123456789012\"}"};

    (void)state;
    assert_int_equal(request_parse_lab_step("{\"id\":\"A-1\"}", 12, id, sizeof(id), d, sizeof(d)),
                     0);
    assert_string_equal(id, "A-1");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (request_parse_lab_step(bad[i], strlen(bad[i]), id, sizeof(id), d, sizeof(d)) != -1)
            fail_msg("step body '%s' accepted", bad[i]);
        assert_string_equal(id, "");
    }
}

/* ---- the table, with threads ---- */

typedef struct runner {
    lab_table *t;
    lab_run run;
    unsigned points;
    char id[16];
    int reached; /* points passed */
} runner;

/* A request: passes every point in order (recording stock 10 at read), then answers 200. */
static void *runner_main(void *arg)
{
    runner *r = arg;
    for (int p = 0; p < LAB_POINTS_; p++) {
        lab_seen seen = {.has_stock = p == LAB_AT_READ, .stock = 10};
        lab_reach(&r->run, (lab_point)p, &seen);
        r->reached++;
    }
    lab_finish(&r->run, 200, "deducted");
    return NULL;
}

static int64_t ms_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until `id` is listed as held (2 s at most); returns the list's JSON (free it). */
static char *wait_listed(lab_table *t, const char *id, const char *point)
{
    char want[96];
    snprintf(want, sizeof(want), "\"id\":\"%s\",", id);
    for (int i = 0; i < 200; i++) {
        char *json = lab_requests_json(t);
        assert_non_null(json);
        if (strstr(json, want) != NULL && strstr(json, point) != NULL)
            return json;
        free(json);
        usleep(10 * 1000);
    }
    fail_msg("%s never listed at %s", id, point);
    return NULL;
}

/* A table (hold budget 10 s, step wait 2 s) with request "A" on goods 7 in mode `mode_name`,
 * holding at `points`, run by `body` on thread *th. */
static lab_table *start_a(runner *r, pthread_t *th, const char *mode_name, unsigned points,
                          void *(*body)(void *))
{
    r->t = lab_table_create(10000, 2000);
    assert_non_null(r->t);
    assert_int_equal(lab_start(r->t, "A", mode_name, 7, points, &r->run), 0);
    assert_int_equal(pthread_create(th, NULL, body, r), 0);
    return r->t;
}

static void test_hold_and_step(void **state)
{
    runner r = {0};
    pthread_t th;
    lab_table *t =
        start_a(&r, &th, "setnx-ttl", BIT(LAB_AT_READ) | BIT(LAB_AT_CHECKED), runner_main);
    char point[16], *json;
    bool found;

    (void)state;
    json = wait_listed(t, "A", "\"point\":\"read\"");
    assert_non_null(strstr(json,
                           "{\"requests\":[{\"id\":\"A\",\"mode\":\"setnx-ttl\",\"goods_id\":7,"
                           "\"point\":\"read\",\"held_ms\":"));
    free(json);
    assert_int_equal(r.reached, LAB_AT_READ); /* held at read: entered and begun passed */
    /* Another id is not held: -1 (the route's 404). */
    assert_int_equal(lab_step(t, "B", point, sizeof(point)), -1);
    assert_int_equal(lab_step(t, "A", point, sizeof(point)), 0);
    assert_string_equal(point, "checked");
    assert_int_equal(lab_step(t, "A", point, sizeof(point)), 0);
    assert_string_equal(point, "done");
    pthread_join(th, NULL);
    assert_int_equal(r.reached, LAB_POINTS_);
    assert_int_equal(lab_step(t, "A", point, sizeof(point)), -1);
    json = lab_requests_json(t);
    assert_string_equal(json, "{\"requests\":[]}");
    free(json);
    json = lab_trace_json(t, "A", &found);
    assert_true(found);
    assert_non_null(strstr(json, "\"points\":[{\"point\":\"entered\",\"ms\":"));
    assert_non_null(strstr(json, "{\"point\":\"read\",\"ms\":"));
    assert_non_null(strstr(json, "\"stock\":10"));
    assert_non_null(strstr(json, "\"done\":true,\"status\":200,\"outcome\":\"deducted\""));
    /* Every point, the start and the answer placed on the wall clock too. */
    assert_non_null(strstr(json, "\"started_wall_us\":"));
    assert_non_null(strstr(json, ",\"wall_us\":"));
    assert_non_null(strstr(json, "\"answered_wall_us\":"));
    free(json);
    assert_null(lab_trace_json(t, "nobody", &found));
    assert_false(found);
    lab_table_destroy(t);
}

/* A cart that gives up on its second lock: reaches between-locks on its way in and again,
 * still holding its first, on its way out (order.c), through the order_faults hook. */
static void *cart_main(void *arg)
{
    runner *r = arg;
    lab_at_between_locks(&r->run);
    r->reached++;
    lab_at_between_locks(&r->run);
    r->reached++;
    lab_finish(&r->run, 503, "lock_timeout");
    return NULL;
}

static void test_cart_holds_between_locks(void **state)
{
    runner r = {0};
    pthread_t th;
    lab_table *t = start_a(&r, &th, "multi-naive", LAB_CART_POINTS, cart_main);
    char point[16], *json;
    bool found;

    (void)state;
    json = wait_listed(t, "A", "\"point\":\"between-locks\"");
    free(json);
    assert_int_equal(r.reached, 0);
    assert_int_equal(lab_step(t, "A", point, sizeof(point)), 0);
    assert_string_equal(point, "between-locks"); /* held again: it gave up */
    assert_int_equal(r.reached, 1);
    assert_int_equal(lab_step(t, "A", point, sizeof(point)), 0);
    assert_string_equal(point, "done");
    pthread_join(th, NULL);
    json = lab_trace_json(t, "A", &found);
    assert_true(found);
    assert_non_null(strstr(json, "\"points\":[{\"point\":\"between-locks\",\"ms\":"));
    assert_non_null(strstr(json, "\"status\":503,\"outcome\":\"lock_timeout\""));
    free(json);
    lab_table_destroy(t);
}

/* A request never stepped goes on by itself once its hold budget is spent, and holds no more. */
static void test_hold_budget(void **state)
{
    lab_table *t = lab_table_create(300, 2000);
    runner r = {.t = t};
    pthread_t th;
    int64_t start = ms_now(), took;

    (void)state;
    assert_int_equal(
        lab_start(t, "A", "redis", 1, BIT(LAB_AT_ENTERED) | BIT(LAB_AT_CHECKED), &r.run), 0);
    assert_int_equal(pthread_create(&th, NULL, runner_main, &r), 0);
    pthread_join(th, NULL);
    took = ms_now() - start;
    if (took < 250 || took > 2000)
        fail_msg("the budget of 300 ms let the request go after %lld ms", (long long)took);
    lab_table_destroy(t);
}

/* Closing the table lets every held request go (the replica is stopping). */
static void test_close(void **state)
{
    lab_table *t = lab_table_create(60000, 2000);
    runner r = {.t = t};
    pthread_t th;

    (void)state;
    assert_int_equal(lab_start(t, "A", "redis", 1, BIT(LAB_AT_ENTERED), &r.run), 0);
    assert_int_equal(pthread_create(&th, NULL, runner_main, &r), 0);
    free(wait_listed(t, "A", "entered"));
    lab_table_close(t);
    pthread_join(th, NULL);
    assert_int_equal(r.reached, LAB_POINTS_);
    lab_table_destroy(t);
}

/* An id in flight twice is refused; LAB_SLOTS in flight fill the table; a finished request's
 * place goes to the next, the oldest trace first, and the newest trace of an id is read. */
static void test_duplicate_full_and_ring(void **state)
{
    lab_table *t = lab_table_create(60000, 2000);
    lab_run runs[LAB_SLOTS], extra;
    char id[16], *json;
    bool found;

    (void)state;
    for (int i = 0; i < LAB_SLOTS; i++) {
        snprintf(id, sizeof(id), "R%d", i);
        assert_int_equal(lab_start(t, id, "redis", 1, 0, &runs[i]), 0);
    }
    assert_int_equal(lab_start(t, "R3", "redis", 1, 0, &extra), LAB_ERR_DUPLICATE);
    assert_int_equal(lab_start(t, "X", "redis", 1, 0, &extra), LAB_ERR_FULL);
    /* R5 then R2 finish: the next request takes R2's place (the older request's trace). */
    lab_finish(&runs[5], 409, "insufficient_stock");
    lab_finish(&runs[2], 200, "deducted");
    assert_int_equal(lab_start(t, "X", "redis", 1, 0, &extra), 0);
    assert_int_equal(extra.slot, runs[2].slot);
    assert_null(lab_trace_json(t, "R2", &found));
    assert_false(found);
    json = lab_trace_json(t, "R5", &found);
    assert_true(found);
    assert_non_null(strstr(json, "\"status\":409"));
    free(json);
    /* R5's id again, while its trace is kept: the new run's trace is the one read. */
    lab_finish(&extra, 200, "deducted");
    assert_int_equal(lab_start(t, "R5", "pg-for-update", 1, 0, &extra), 0);
    json = lab_trace_json(t, "R5", &found);
    assert_non_null(strstr(json, "\"mode\":\"pg-for-update\""));
    assert_non_null(strstr(json, "\"done\":false"));
    free(json);
    lab_finish(&extra, 200, "deducted");
    for (int i = 0; i < LAB_SLOTS; i++) {
        if (i != 5 && i != 2)
            lab_finish(&runs[i], 200, "deducted");
    }
    lab_table_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_hold_at),
        cmocka_unit_test(test_split_refusals),
        cmocka_unit_test(test_request_id),
        cmocka_unit_test(test_step_body),
        cmocka_unit_test(test_hold_and_step),
        cmocka_unit_test(test_cart_holds_between_locks),
        cmocka_unit_test(test_hold_budget),
        cmocka_unit_test(test_close),
        cmocka_unit_test(test_duplicate_full_and_ring),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
