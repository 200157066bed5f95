/*
 * test_lab_routes.c - the lab's contract (docs/API.md, "The lab"), through a running stack.
 *
 * Two stacks, two sets of cases, chosen by LAB_FAULTS:
 *   unset   the integration stack (tests/integration.sh), whose replicas run without fault
 *           injection: every lab route and X-Fault: hold-at answer 400 bad_request, on each
 *           replica and through nginx, and nothing is sold;
 *   on      the lab's stack (scripts/lab.sh, started by tests/lab.sh on free ports), FAULTS=on
 *           with the ladder's short leases (LAB_LEASE_MS, 1500): a request held and stepped
 *           point by point, the list of held requests, the trace, the 400s and 404s of bad
 *           input, and the lease overrun by hand: setnx-ttl oversells one unit, redis keeps
 *           the books exact.
 * A held request blocks its caller until stepped: it is sent from a thread of its own (its
 * own libcurl handle; threads never assert, the main thread reads what they got).
 *
 * Run alone: STACK_PROGRAMS=lab_routes make test-integration (the first set); tests/lab.sh (both).
 */
#include "tests/stack/stack_support.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GOODS_LAB_OFF 4501LL
#define GOODS_LAB_STEP 4502LL
#define GOODS_LAB_BAD 4503LL
#define GOODS_LAB_OVERRUN 4504LL /* .. 4505: setnx-ttl, redis */
#define GOODS_LAB_TRACE 4506LL
#define GOODS_LAB_PROXY 4508LL

static long lease_ms(void)
{
    const char *v = getenv("LAB_LEASE_MS");
    return v != NULL && v[0] != '\0' ? atol(v) : 1500;
}

/* ---- a deduction sent from a thread of its own ---- */

typedef struct sender {
    pthread_t thread;
    char base[256];
    char body[160];
    char fault[128];  /* "X-Fault: ..." or "" */
    char id[64];      /* "X-Request-Id: ..." or "" */
    char extra[64];   /* one more header line, or "" */
    http_reply reply; /* filled by the thread */
    int rc;
} sender;

static void *sender_run(void *arg)
{
    sender *s = arg;
    CURL *h = curl_easy_init();
    http_request rq = {.method = "POST",
                       .base = s->base,
                       .path = "/api/deduct",
                       .body = s->body,
                       .headers = {s->fault[0] ? s->fault : NULL,
                                   s->fault[0] && s->id[0] ? s->id : NULL,
                                   s->fault[0] && s->id[0] && s->extra[0] ? s->extra : NULL},
                       .timeout_ms = 60000};
    memset(&s->reply, 0, sizeof(s->reply));
    s->rc = h != NULL ? http_do(h, &rq, &s->reply) : -1;
    if (h != NULL)
        curl_easy_cleanup(h);
    return NULL;
}

static void sender_free(void *p)
{
    sender *s = p;
    free(s->reply.body);
    free(s);
}

/* Sends a deduction of 1 unit of goods in `mode` to base from a thread; fault, id and extra
 * (one more header line, sent after the id's) may be NULL. Owned by the case (joined by
 * sender_wait). */
static sender *send_async_with(const char *base, long long goods, const char *mode,
                               const char *fault, const char *id, const char *extra)
{
    sender *s = calloc(1, sizeof(*s));
    if (s == NULL)
        fail_msg("out of memory");
    snprintf(s->base, sizeof(s->base), "%s", base);
    deduct_body(s->body, sizeof(s->body), goods, 1, mode);
    if (fault != NULL)
        snprintf(s->fault, sizeof(s->fault), "X-Fault: %s", fault);
    if (id != NULL)
        snprintf(s->id, sizeof(s->id), "X-Request-Id: %s", id);
    if (extra != NULL)
        snprintf(s->extra, sizeof(s->extra), "%s", extra);
    if (pthread_create(&s->thread, NULL, sender_run, s) != 0) {
        free(s);
        fail_msg("pthread_create failed");
    }
    return s;
}

static sender *send_async(const char *base, long long goods, const char *mode, const char *fault,
                          const char *id)
{
    return send_async_with(base, goods, mode, fault, id, NULL);
}

/* Joins the sender and hands back its answer (owned by the case with it). */
static http_reply *sender_wait(sender *s)
{
    pthread_join(s->thread, NULL);
    own(s, sender_free);
    if (s->rc != 0)
        fail_msg("the held request got no answer: %s", s->reply.error);
    return &s->reply;
}

/* ---- the lab's routes ---- */

static http_reply *lab_step(const char *base, const char *body)
{
    http_request rq = {.method = "POST", .base = base, .path = "/api/lab/step", .body = body};
    return call(&rq);
}

/* Waits (5 s at most) until request `id` is listed as held at `point` on base; returns its
 * entry of GET /api/lab/requests. */
static json_t *wait_held(const char *base, const char *id, const char *point)
{
    for (int i = 0; i < 100; i++) {
        json_t *j = expect_json(get(base, "/api/lab/requests"), 200, "GET /api/lab/requests");
        json_t *list = json_object_get(j, "requests"), *r;
        size_t k;
        if (!json_is_array(list))
            fail_msg("GET /api/lab/requests: no array 'requests'");
        json_array_foreach(list, k, r)
        {
            if (strcmp(field_str(r, "id", "a held request"), id) == 0 &&
                strcmp(field_str(r, "point", "a held request"), point) == 0)
                return r;
        }
        usleep(50 * 1000);
    }
    fail_msg("request %s was never listed as held at %s on %s", id, point, base);
    return NULL;
}

/* POST /api/lab/step {"id":id} answers 200 {"id":id,"point":want}. */
static void expect_step(const char *base, const char *id, const char *want)
{
    char body[96], what[128];
    snprintf(body, sizeof(body), "{\"id\":\"%s\"}", id);
    snprintf(what, sizeof(what), "step %s (to %s)", id, want);
    json_t *j = expect_json(lab_step(base, body), 200, what);
    expect_field_str(j, "id", id, what);
    expect_field_str(j, "point", want, what);
}

/* ---- without fault injection ---- */

static void test_lab_off(void **state)
{
    (void)state;
    begin_case("lab_off");
    reset_goods(GOODS_LAB_OFF, 10);
    stock_view before = stock_get(GOODS_LAB_OFF);
    const char *bases[MAX_REPLICAS + 1];
    size_t n = 0;
    bases[n++] = g_env.stock_url;
    for (size_t i = 0; i < g_env.n_replicas; i++)
        bases[n++] = g_env.replicas[i];
    for (size_t i = 0; i < n; i++) {
        char body[160];
        expect_error(get(bases[i], "/api/lab/requests"), 400, "bad_request", "lab requests, off");
        expect_error(get(bases[i], "/api/lab/trace/A"), 400, "bad_request", "lab trace, off");
        expect_error(get(bases[i], "/api/lab/lock/1?mode=setnx"), 400, "bad_request",
                     "lab lock, off");
        expect_error(lab_step(bases[i], "{\"id\":\"A\"}"), 400, "bad_request", "lab step, off");
        deduct_body(body, sizeof(body), GOODS_LAB_OFF, 1, "redis");
        http_request rq = {.method = "POST",
                           .base = bases[i],
                           .path = "/api/deduct",
                           .body = body,
                           .headers = {"X-Fault: hold-at=read", "X-Request-Id: A"}};
        expect_error(call(&rq), 400, "bad_request", "hold-at, off");
    }
    expect_unchanged(GOODS_LAB_OFF, &before, "the lab's routes without fault injection");
}

/* ---- with fault injection (the lab's stack) ---- */

/* A held at read and checked: listed, stepped point by point to its answer, traced. */
static void test_hold_and_step(void **state)
{
    (void)state;
    begin_case("hold_and_step");
    const char *svc1 = g_env.replicas[0];
    reset_goods(GOODS_LAB_STEP, 10);
    sender *a = send_async(svc1, GOODS_LAB_STEP, "setnx-ttl", "hold-at=read,checked", "A1");
    json_t *held = wait_held(svc1, "A1", "read");
    expect_field_str(held, "mode", "setnx-ttl", "the held request");
    expect_field_int(held, "goods_id", GOODS_LAB_STEP, "the held request");
    if (field_int(held, "held_ms", "the held request") < 0)
        fail_msg("held_ms is negative");
    /* Held at read, holding setnx-ttl's string lock: its value 1 (no owner), its lease running. */
    char path[96];
    snprintf(path, sizeof(path), "/api/lab/lock/%lld?mode=setnx-ttl", GOODS_LAB_STEP);
    json_t *lock = expect_json(get(svc1, path), 200, "the string lock held by A1");
    if (!field_bool(lock, "held", "the string lock"))
        fail_msg("the string lock is not held while A1 holds it");
    expect_field_str(lock, "value", "1", "the string lock");
    long long ttl = field_int(lock, "ttl_ms", "the string lock");
    if (ttl < 0 || ttl > lease_ms())
        fail_msg("the string lock's ttl_ms %lld is not within its lease %ld", ttl, lease_ms());
    snprintf(path, sizeof(path), "/api/lab/lock/%lld?mode=redis", GOODS_LAB_STEP);
    expect_error(get(svc1, path), 400, "bad_request", "the lab's lock view of a hash lock");
    /* Held at read: nothing written yet. */
    expect_stock(GOODS_LAB_STEP, 10, 10, 0, 0, "A1 held at read");
    expect_step(svc1, "A1", "checked");
    wait_held(svc1, "A1", "checked");
    expect_step(svc1, "A1", "done");
    expect_deducted(sender_wait(a), GOODS_LAB_STEP, 1, 9, "setnx-ttl", "A1's answer");
    /* No longer held: a step is a 404, and the list is without it. */
    expect_error(lab_step(svc1, "{\"id\":\"A1\"}"), 404, "not_found", "step of a finished request");
    json_t *t = expect_json(get(svc1, "/api/lab/trace/A1"), 200, "the trace of A1");
    expect_field_str(t, "id", "A1", "trace");
    expect_field_int(t, "status", 200, "trace");
    json_t *points = json_object_get(t, "points");
    const char *want[] = {"entered", "begun", "read", "written", "checked", "committed", "release"};
    if (!json_is_array(points) || json_array_size(points) != 7)
        fail_msg("trace of A1: 7 points expected");
    for (size_t i = 0; i < 7; i++)
        expect_field_str(json_array_get(points, i), "point", want[i], "trace point");
    expect_field_int(json_array_get(points, 2), "stock", 10, "the stock read");
    expect_field_int(json_array_get(points, 3), "stock", 9, "the stock written");
    expect_error(get(svc1, "/api/lab/trace/nobody"), 404, "not_found", "trace of an unknown id");
    expect_stock(GOODS_LAB_STEP, 10, 9, 1, 1, "after A1");
}

/* Bad input: 400 (or 404 for an id not held) and nothing sold. */
static void test_bad_input(void **state)
{
    (void)state;
    begin_case("bad_input");
    const char *svc1 = g_env.replicas[0];
    reset_goods(GOODS_LAB_BAD, 10);
    stock_view before = stock_get(GOODS_LAB_BAD);
    const struct {
        const char *fault, *id;
    } bad[] = {
        {"hold-at=read", NULL},
        {"hold-at=read", "X-Request-Id: A!"},
        {"hold-at=read", "X-Request-Id: 123456789012345678901234567890123"},
        {"hold-at=nowhere", "X-Request-Id: B1"},
        {"hold-at=", "X-Request-Id: B1"},
        {"hold-at=read,read", "X-Request-Id: B1"},
        {"hold-at=read,bogus", "X-Request-Id: B1"},
        {"hold-at=read, hold-at=checked", "X-Request-Id: B1"},
        {"hold-at=between-locks", "X-Request-Id: B1"}, /* a cart's point */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char body[160], fault[128], what[200];
        deduct_body(body, sizeof(body), GOODS_LAB_BAD, 1, "redis");
        snprintf(fault, sizeof(fault), "X-Fault: %s", bad[i].fault);
        snprintf(what, sizeof(what), "X-Fault: %s with %s", bad[i].fault,
                 bad[i].id != NULL ? bad[i].id : "no id");
        http_request rq = {.method = "POST",
                           .base = svc1,
                           .path = "/api/deduct",
                           .body = body,
                           .headers = {fault, bad[i].id}};
        expect_error(call(&rq), 400, "bad_request", what);
    }
    const char *steps[] = {"",
                           "{}",
                           "[]",
                           "{\"id\":\"A\",\"x\":1}",
                           "{\"id\":7}",
                           "{\"id\":\"\"}",
                           "{\"id\":\"a b\"}",
                           "{\"id\":\"A\",\"id\":\"B\"}",
                           "{\"id\":\"A\"} x"};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
        expect_error(lab_step(svc1, steps[i]), 400, "bad_request", steps[i]);
    expect_error(lab_step(svc1, "{\"id\":\"nobody\"}"), 404, "not_found", "step of an id not held");
    expect_error(get(svc1, "/api/lab/trace/a!b"), 400, "bad_request", "trace of a bad id");
    /* The same id twice in flight: the second is refused, the first goes on. */
    sender *a = send_async(svc1, GOODS_LAB_BAD, "redis", "hold-at=entered", "D1");
    wait_held(svc1, "D1", "entered");
    char body[160];
    deduct_body(body, sizeof(body), GOODS_LAB_BAD, 1, "redis");
    http_request dup = {.method = "POST",
                        .base = g_env.replicas[0],
                        .path = "/api/deduct",
                        .body = body,
                        .headers = {"X-Fault: hold-at=entered", "X-Request-Id: D1"}};
    expect_error(call(&dup), 400, "bad_request", "an id already in flight");
    expect_step(svc1, "D1", "done");
    expect_deducted(sender_wait(a), GOODS_LAB_BAD, 1, 9, "redis", "D1's answer");
    expect_stock(GOODS_LAB_BAD, before.initial, 9, 1, 1, "after D1");
}

/* The replica (of g_env.replicas) that lists request `id` as held at `point`, within 5 s. */
static const char *replica_holding(const char *id, const char *point)
{
    for (int i = 0; i < 100; i++) {
        for (size_t k = 0; k < g_env.n_replicas; k++) {
            json_t *j = expect_json(get(g_env.replicas[k], "/api/lab/requests"), 200,
                                    "GET /api/lab/requests");
            json_t *r;
            size_t n;
            json_array_foreach(json_object_get(j, "requests"), n, r)
            {
                if (strcmp(field_str(r, "id", "a held request"), id) == 0 &&
                    strcmp(field_str(r, "point", "a held request"), point) == 0)
                    return g_env.replicas[k];
            }
        }
        usleep(50 * 1000);
    }
    fail_msg("request %s was never listed as held at %s on any replica", id, point);
    return NULL;
}

/* Through nginx, a hold without the client's own X-Request-Id is refused as it is straight to
 * a replica: the id nginx makes (and marks with X-Request-Id-Origin: proxy) is one the client
 * never learns, so nobody could step the hold. A replica honours the mark from anyone; a
 * client's own mark is dropped by nginx, which passes the client's id as it came. */
static void test_hold_through_nginx(void **state)
{
    (void)state;
    begin_case("hold_through_nginx");
    char body[160];
    reset_goods(GOODS_LAB_PROXY, 10);
    stock_view before = stock_get(GOODS_LAB_PROXY);
    deduct_body(body, sizeof(body), GOODS_LAB_PROXY, 1, "redis");
    http_request rq = {.method = "POST",
                       .base = g_env.stock_url,
                       .path = "/api/deduct",
                       .body = body,
                       .headers = {"X-Fault: hold-at=read"},
                       .timeout_ms = 5000};
    json_t *j = expect_error(call(&rq), 400, "bad_request", "hold-at through nginx, no id");
    if (strstr(field_str(j, "detail", "the refusal"), "client's own X-Request-Id") == NULL)
        fail_msg("the refusal does not say the id must be the client's own: %s",
                 field_str(j, "detail", "the refusal"));
    http_request marked = {
        .method = "POST",
        .base = g_env.replicas[0],
        .path = "/api/deduct",
        .body = body,
        .headers = {"X-Fault: hold-at=read", "X-Request-Id: P1", "X-Request-Id-Origin: proxy"},
        .timeout_ms = 5000};
    expect_error(call(&marked), 400, "bad_request", "hold-at straight to a replica, id marked");
    for (size_t k = 0; k < g_env.n_replicas; k++) {
        json_t *l = expect_json(get(g_env.replicas[k], "/api/lab/requests"), 200, "lab requests");
        if (json_array_size(json_object_get(l, "requests")) != 0)
            fail_msg("%s holds a request after the refusals", g_env.replicas[k]);
    }
    expect_unchanged(GOODS_LAB_PROXY, &before, "the refused holds");
    sender *a = send_async_with(g_env.stock_url, GOODS_LAB_PROXY, "redis", "hold-at=read", "P2",
                                "X-Request-Id-Origin: proxy");
    expect_step(replica_holding("P2", "read"), "P2", "done");
    expect_deducted(sender_wait(a), GOODS_LAB_PROXY, 1, 9, "redis", "P2's answer through nginx");
}

/* The lease overrun by hand: A held at checked past its lease, B sells, A stepped on. */
static void overrun(long long goods, const char *mode, const char *a_id, bool flawed)
{
    const char *svc1 = g_env.replicas[0], *svc2 = g_env.replicas[1];
    reset_goods(goods, 100);
    sender *a = send_async(svc1, goods, mode, "hold-at=checked", a_id);
    wait_held(svc1, a_id, "checked");
    usleep((useconds_t)(lease_ms() + 400) * 1000);
    /* B: through svc-2, no fault. On setnx-ttl it takes the expired lock, reads the stock A
     * has not committed and waits for A's row; on redis it waits for the lock A still holds
     * (the watchdog renewed it) and gives up after the wait bound. */
    sender *b = send_async(svc2, goods, mode, NULL, NULL);
    usleep(flawed ? 300 * 1000 : (useconds_t)(g_env.lock_wait_ms + 300) * 1000);
    expect_step(svc1, a_id, "done");
    http_reply *ra = sender_wait(a), *rb = sender_wait(b);
    expect_deducted(ra, goods, 1, 99, mode, "A's answer");
    if (flawed) {
        expect_deducted(rb, goods, 1, 99, mode,
                        "B's answer (it read the stock A had not committed)");
        expect_stock(goods, 100, 99, 2, 2, "setnx-ttl overrun: two sales, one unit taken");
        stock_view v = stock_get(goods);
        if (v.oversold != 1)
            fail_msg("%s: oversold %lld, want 1", mode, v.oversold);
    } else {
        expect_error(rb, 503, "lock_timeout", "B's answer (A held the lock)");
        expect_stock(goods, 100, 99, 1, 1, "redis overrun: one sale");
    }
}

static void test_overrun_setnx_ttl(void **state)
{
    (void)state;
    begin_case("overrun_setnx_ttl");
    overrun(GOODS_LAB_OVERRUN, "setnx-ttl", "A2", true);
}

static void test_overrun_redis(void **state)
{
    (void)state;
    begin_case("overrun_redis");
    overrun(GOODS_LAB_OVERRUN + 1, "redis", "A3", false);
}

static long long wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

/* A request with X-Request-Id and `X-Trace: on`, and no X-Fault, is traced: every point it
 * passed, on the wall clock (within the caller's own send and answer), with the stock read
 * and written and the fence it held; its answer too. An id without `X-Trace: on` asks for
 * nothing (a load recorder's ids must not move requests off their fast paths): no trace. */
static void test_trace_without_fault(void **state)
{
    (void)state;
    begin_case("trace_without_fault");
    const char *svc1 = g_env.replicas[0];
    const char *want[] = {"entered", "begun", "read", "written", "checked", "committed", "release"};
    char body[160];
    reset_goods(GOODS_LAB_TRACE, 10);
    deduct_body(body, sizeof(body), GOODS_LAB_TRACE, 1, "redis");
    http_request rq = {.method = "POST",
                       .base = svc1,
                       .path = "/api/deduct",
                       .body = body,
                       .headers = {"X-Request-Id: T1", "X-Trace: on"}};
    long long sent = wall_us();
    expect_deducted(call(&rq), GOODS_LAB_TRACE, 1, 9, "redis", "T1's answer");
    long long answered = wall_us();
    json_t *t = expect_json(get(svc1, "/api/lab/trace/T1"), 200, "the trace of T1 (no X-Fault)");
    expect_field_str(t, "id", "T1", "trace");
    expect_field_str(t, "mode", "redis", "trace");
    expect_field_int(t, "goods_id", GOODS_LAB_TRACE, "trace");
    if (!field_bool(t, "done", "trace"))
        fail_msg("trace of T1: done is false after its answer");
    expect_field_int(t, "status", 200, "trace");
    expect_field_str(t, "outcome", "deducted", "trace");
    json_t *points = json_object_get(t, "points");
    if (!json_is_array(points) || json_array_size(points) != 7)
        fail_msg("trace of T1: 7 points expected, got %zu",
                 json_is_array(points) ? json_array_size(points) : 0);
    long long prev = field_int(t, "started_wall_us", "trace");
    if (prev < sent || prev > answered)
        fail_msg("trace of T1: started_wall_us %lld not within its send %lld and answer %lld", prev,
                 sent, answered);
    for (size_t i = 0; i < 7; i++) {
        json_t *p = json_array_get(points, i);
        expect_field_str(p, "point", want[i], "trace point");
        expect_field_int(p, "held_ms", 0, "trace point (held nowhere)");
        long long w = field_int(p, "wall_us", "trace point");
        if (w < prev || w > answered)
            fail_msg("trace of T1: %s at wall_us %lld, before the point ahead (%lld) or after the "
                     "answer (%lld)",
                     want[i], w, prev, answered);
        prev = w;
        /* redis is fenced: every point of the section saw the token it writes with (the
         * release's point is the guard's, past the section). */
        if (i < 6 && field_int(p, "fence", "trace point") < 1)
            fail_msg("trace of T1: %s saw no fencing token", want[i]);
    }
    expect_field_int(json_array_get(points, 2), "stock", 10, "the stock read");
    expect_field_int(json_array_get(points, 3), "stock", 9, "the stock written");
    long long done = field_int(t, "answered_wall_us", "trace");
    if (done < prev || done > answered)
        fail_msg("trace of T1: answered_wall_us %lld not between its last point %lld and the "
                 "answer the caller got %lld",
                 done, prev, answered);
    /* The id again: its newest trace is read. */
    expect_deducted(call(&rq), GOODS_LAB_TRACE, 1, 8, "redis", "T1's second answer");
    t = expect_json(get(svc1, "/api/lab/trace/T1"), 200, "the second trace of T1");
    expect_field_int(json_array_get(json_object_get(t, "points"), 2), "stock", 9,
                     "the second run's stock read");
    expect_stock(GOODS_LAB_TRACE, 10, 8, 2, 2, "after T1 twice");
    /* An id alone: sold, and no trace of it. */
    http_request untraced = {.method = "POST",
                             .base = svc1,
                             .path = "/api/deduct",
                             .body = body,
                             .headers = {"X-Request-Id: U1"}};
    expect_deducted(call(&untraced), GOODS_LAB_TRACE, 1, 7, "redis", "U1's answer");
    expect_error(get(svc1, "/api/lab/trace/U1"), 404, "not_found", "an id without X-Trace: on");
}

/* Usage: test_lab_routes [PATTERN | --list] (stack_main in tests/stack/env.c). */
int main(int argc, char **argv)
{
    const struct CMUnitTest off[] = {
        cmocka_unit_test_setup_teardown(test_lab_off, case_setup, case_teardown),
    };
    const struct CMUnitTest on[] = {
        cmocka_unit_test_setup_teardown(test_hold_and_step, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_bad_input, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_hold_through_nginx, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_overrun_setnx_ttl, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_overrun_redis, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_trace_without_fault, case_setup, case_teardown),
    };
    const char *faults = getenv("LAB_FAULTS");

    if (faults != NULL && strcmp(faults, "on") == 0)
        return stack_main("test_lab_routes", on, sizeof(on) / sizeof(on[0]), argc, argv);
    return stack_main("test_lab_routes", off, sizeof(off) / sizeof(off[0]), argc, argv);
}
