/*
 * test_redlock.c - Redlock (lock/redlock.c) against five real redis-servers that the program
 * starts itself (tests/support/redis_server.c), on free loopback ports, stopped by PID:
 *     build/san/tests/test_redlock
 * Each case starts with all five up and empty (FLUSHALL) and a fresh redlock over them.
 *
 *   basics            the key with our value and the lease on all five; gone after unlock
 *   mutual exclusion  8 threads x 50 sections: never two inside at once, no increment lost
 *   contention        held elsewhere: a timeout within [wait, wait + one attempt]
 *   minority held     2 nodes held by another value: still had (3 grants); 3 held: timeout,
 *                     and what we were granted on the other 2 is released at once
 *   minority down     2 of 5 servers stopped: had, exclusive, released
 *   majority down     3 of 5 stopped: LOCK_ERR_REDIS within the bound, nothing held
 *                     anywhere; all back: had again
 *   validity          is_held until the validity ends, lost after it; an expired holding's
 *                     unlock does not delete the next holder's keys
 *   split vote        five clients, each asking the nodes from its own first, their first
 *                     attempt held in step: nobody holds after it (each won one node), and
 *                     the random retry delay lets one of them hold later within the wait
 */
#include "lock/redlock.h"
#include "tests/support/redis_server.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <setjmp.h> /* cmocka.h needs these three first */
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#define NODES 5
#define NODE_TIMEOUT_MS 100

typedef struct test_state {
    redis_server *srv[NODES];
    redlock_node nodes[NODES];
    redlock *rl;
} test_state;

static test_state g;

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* One command on node i, on a connection of the test's own; NULL when it is down. */
static redisReply *node_cmd(int i, const char *fmt, ...)
{
    struct timeval tv = {1, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", g.nodes[i].port, tv);
    redisReply *r = NULL;
    va_list ap;

    if (ctx == NULL || ctx->err) {
        if (ctx != NULL)
            redisFree(ctx);
        return NULL;
    }
    va_start(ap, fmt);
    r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    redisFree(ctx);
    return r;
}

/* The value of key on node i ("" when missing). */
static void node_get(int i, const char *key, char *out, size_t len)
{
    redisReply *r = node_cmd(i, "GET %s", key);

    out[0] = '\0';
    if (r != NULL && r->type == REDIS_REPLY_STRING)
        snprintf(out, len, "%s", r->str);
    if (r != NULL)
        freeReplyObject(r);
}

static long long node_pttl(int i, const char *key)
{
    redisReply *r = node_cmd(i, "PTTL %s", key);
    long long v = -3;

    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

static void node_set(int i, const char *key, const char *value, int64_t px)
{
    redisReply *r = node_cmd(i, "SET %s %s PX %lld", key, value, (long long)px);

    assert_non_null(r);
    freeReplyObject(r);
}

static int count_nodes_with(const char *key, const char *value)
{
    char v[64];
    int n = 0;

    for (int i = 0; i < NODES; i++) {
        node_get(i, key, v, sizeof(v));
        if (strcmp(v, value) == 0)
            n++;
    }
    return n;
}

static redlock *new_redlock(void)
{
    redlock_options o;
    redlock *r = NULL;

    redlock_options_init(&o);
    o.nodes = g.nodes;
    o.n_nodes = NODES;
    o.node_timeout_ms = NODE_TIMEOUT_MS;
    assert_int_equal(redlock_create(&o, &r), LOCK_OK);
    return r;
}

static int group_setup(void **state)
{
    (void)state;
    for (int i = 0; i < NODES; i++) {
        if (redis_server_start(&g.srv[i]) != 0)
            return -1;
        snprintf(g.nodes[i].host, sizeof(g.nodes[i].host), "127.0.0.1");
        g.nodes[i].port = redis_server_port(g.srv[i]);
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < NODES; i++)
        redis_server_destroy(g.srv[i]);
    return 0;
}

/* Every node up and empty, a fresh redlock. */
static int case_setup(void **state)
{
    (void)state;
    for (int i = 0; i < NODES; i++) {
        redisReply *r;
        if (redis_server_pid(g.srv[i]) < 0 && redis_server_restart(g.srv[i]) != 0)
            return -1;
        r = node_cmd(i, "FLUSHALL");
        if (r == NULL)
            return -1;
        freeReplyObject(r);
    }
    g.rl = new_redlock();
    return 0;
}

static int case_teardown(void **state)
{
    (void)state;
    redlock_destroy(g.rl);
    g.rl = NULL;
    return 0;
}

/* ---- cases ---- */

static void test_basics(void **state)
{
    redlock_holding h;

    (void)state;
    assert_int_equal(redlock_nodes(g.rl), NODES);
    assert_int_equal(redlock_lock(g.rl, "rl:basics", 0, 10000, &h), LOCK_OK);
    assert_int_equal(h.granted, NODES);
    assert_int_equal(strlen(h.value), 32);
    assert_true(h.validity_ms > 10000 - redlock_drift_ms(10000) - 1000);
    assert_true(h.validity_ms <= 10000 - redlock_drift_ms(10000));
    assert_int_equal(redlock_is_held(&h), LOCK_OK);
    assert_int_equal(count_nodes_with("rl:basics", h.value), NODES);
    for (int i = 0; i < NODES; i++) {
        long long ttl = node_pttl(i, "rl:basics");
        assert_true(ttl > 8000 && ttl <= 10000);
    }
    assert_int_equal(redlock_unlock(g.rl, &h), NODES);
    assert_int_equal(count_nodes_with("rl:basics", ""), NODES);

    assert_int_equal(redlock_lock(g.rl, "", 0, 10000, &h), LOCK_ERR_INVALID);
    assert_int_equal(redlock_lock(g.rl, "rl:x", -1, 10000, &h), LOCK_ERR_INVALID);
    assert_int_equal(redlock_lock(g.rl, "rl:x", 0, 4, &h), LOCK_ERR_INVALID); /* < 2 x drift */
}

/* ---- mutual exclusion ---- */

#define MX_THREADS 8
#define MX_ROUNDS 50

static atomic_int mx_inside;
static atomic_int mx_overlaps;
static atomic_int mx_failures;
static long mx_counter; /* plain, on purpose: only the lock keeps it right */

static void *mx_worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < MX_ROUNDS; i++) {
        redlock_holding h;
        int rc = redlock_lock(g.rl, "rl:mx", 20000, 10000, &h);
        if (rc != LOCK_OK) {
            atomic_fetch_add(&mx_failures, 1);
            continue;
        }
        if (atomic_fetch_add(&mx_inside, 1) != 0)
            atomic_fetch_add(&mx_overlaps, 1);
        long v = mx_counter;
        sleep_ms(1);
        mx_counter = v + 1;
        atomic_fetch_sub(&mx_inside, 1);
        redlock_unlock(g.rl, &h);
    }
    return NULL;
}

static void test_mutual_exclusion(void **state)
{
    pthread_t t[MX_THREADS];

    (void)state;
    atomic_store(&mx_inside, 0);
    atomic_store(&mx_overlaps, 0);
    atomic_store(&mx_failures, 0);
    mx_counter = 0;
    for (int i = 0; i < MX_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, mx_worker, NULL), 0);
    for (int i = 0; i < MX_THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&mx_failures), 0);
    assert_int_equal(atomic_load(&mx_overlaps), 0);
    assert_int_equal(mx_counter, MX_THREADS * MX_ROUNDS);
    assert_int_equal(count_nodes_with("rl:mx", ""), NODES); /* all released */
}

static void test_contention_times_out_within_bound(void **state)
{
    redlock_holding a, b;
    int64_t start, took;

    (void)state;
    assert_int_equal(redlock_lock(g.rl, "rl:busy", 0, 10000, &a), LOCK_OK);
    start = now_ms();
    assert_int_equal(redlock_lock(g.rl, "rl:busy", 300, 10000, &b), LOCK_ERR_TIMEOUT);
    took = now_ms() - start;
    /* It gives up when the next retry would start past the wait: up to one retry delay
     * (<= 2 x 20 ms) early; at most one attempt (5 nodes x 2 timeouts) late. */
    assert_true(took >= 300 - 40);
    assert_true(took <= 300 + NODES * 2 * NODE_TIMEOUT_MS);
    assert_string_equal(b.value, "");
    assert_int_equal(redlock_is_held(&b), LOCK_ERR_NOT_HELD);
    /* The loser's attempts left nothing behind, and took nothing of the holder's. */
    assert_int_equal(count_nodes_with("rl:busy", a.value), NODES);
    assert_int_equal(redlock_unlock(g.rl, &a), NODES);
}

static void test_minority_held_elsewhere(void **state)
{
    redlock_holding h;

    (void)state;
    /* Two nodes hold the key for someone else: a majority of three is still ours. */
    node_set(0, "rl:m", "someone-else", 10000);
    node_set(1, "rl:m", "someone-else", 10000);
    assert_int_equal(redlock_lock(g.rl, "rl:m", 0, 10000, &h), LOCK_OK);
    assert_int_equal(h.granted, 3);
    assert_int_equal(count_nodes_with("rl:m", h.value), 3);
    assert_int_equal(redlock_unlock(g.rl, &h), 3);
    /* Their keys are not ours: the release left them alone. */
    assert_int_equal(count_nodes_with("rl:m", "someone-else"), 2);

    /* Three held elsewhere: no majority. The two grants we did get are given back at once,
     * not left to block others for a lease. */
    node_set(2, "rl:m", "someone-else", 10000);
    assert_int_equal(redlock_lock(g.rl, "rl:m", 100, 10000, &h), LOCK_ERR_TIMEOUT);
    assert_int_equal(count_nodes_with("rl:m", "someone-else"), 3);
    assert_int_equal(count_nodes_with("rl:m", ""), 2);
}

static void test_minority_down_still_works(void **state)
{
    redlock_holding h, other;
    int64_t start;

    (void)state;
    assert_int_equal(redis_server_stop(g.srv[1]), 0);
    assert_int_equal(redis_server_stop(g.srv[3]), 0);
    start = now_ms();
    assert_int_equal(redlock_lock(g.rl, "rl:down2", 1000, 10000, &h), LOCK_OK);
    assert_true(now_ms() - start < 1000);
    assert_int_equal(h.granted, 3);
    /* Still exclusive with three. */
    assert_int_equal(redlock_lock(g.rl, "rl:down2", 100, 10000, &other), LOCK_ERR_TIMEOUT);
    assert_int_equal(redlock_unlock(g.rl, &h), 3);
    assert_int_equal(redlock_lock(g.rl, "rl:down2", 0, 10000, &other), LOCK_OK);
    redlock_unlock(g.rl, &other);
}

static void test_majority_down_fails_within_bound(void **state)
{
    redlock_holding h;
    int64_t start, took;

    (void)state;
    for (int i = 0; i < 3; i++)
        assert_int_equal(redis_server_stop(g.srv[i]), 0);
    start = now_ms();
    assert_int_equal(redlock_lock(g.rl, "rl:down3", 500, 10000, &h), LOCK_ERR_REDIS);
    took = now_ms() - start;
    assert_true(took <= 500 + NODES * 2 * NODE_TIMEOUT_MS);
    /* At most the two live nodes answered (on a busy machine one of them can miss its
     * 100 ms too, and then "1 of 5" is as true): never the quorum. */
    int answered = -1;
    print_message("redlock, 3 of 5 nodes down: %s\n", lock_last_error());
    assert_int_equal(sscanf(lock_last_error(), "%d of 5 nodes answered, 3 needed", &answered), 1);
    assert_in_range(answered, 0, 2);
    /* The two that answered hold nothing: each failed attempt released them. */
    assert_int_equal(count_nodes_with("rl:down3", ""), NODES);
    for (int i = 0; i < 3; i++)
        assert_int_equal(redis_server_restart(g.srv[i]), 0);
    assert_int_equal(redlock_lock(g.rl, "rl:down3", 1000, 10000, &h), LOCK_OK);
    assert_int_equal(h.granted, NODES);
    redlock_unlock(g.rl, &h);
}

static void test_validity_ends_and_late_unlock_is_harmless(void **state)
{
    redlock_holding a, b;

    (void)state;
    /* A lease of 500 ms: short enough to wait out, long enough that taking five nodes
     * under ThreadSanitizer on a busy machine still leaves a validity above zero. */
    assert_int_equal(redlock_lock(g.rl, "rl:v", 0, 500, &a), LOCK_OK);
    assert_true(a.validity_ms <= 500 - redlock_drift_ms(500));
    assert_int_equal(redlock_is_held(&a), LOCK_OK);
    sleep_ms(560); /* past the lease on every node */
    assert_int_equal(redlock_is_held(&a), LOCK_ERR_LOST);
    assert_int_equal(redlock_lock(g.rl, "rl:v", 0, 10000, &b), LOCK_OK);
    /* a's late release finds b's value everywhere and deletes nothing. */
    assert_int_equal(redlock_unlock(g.rl, &a), 0);
    assert_int_equal(count_nodes_with("rl:v", b.value), NODES);
    assert_int_equal(redlock_unlock(g.rl, &b), NODES);
}

/* ---- the split vote ---- */

static pthread_barrier_t g_step;

/* before_set: the five clients' SETs of their first attempt, one node at a time. */
static void split_in_step(void *arg, int attempt, int node)
{
    (void)arg;
    (void)node;
    if (attempt == 1)
        pthread_barrier_wait(&g_step);
}

typedef struct voter {
    redlock *rl;
    int rc;
    redlock_holding h;
} voter;

static void *vote(void *arg)
{
    voter *v = arg;

    v->rc = redlock_lock(v->rl, "rl:split", 1000, 2000, &v->h);
    if (v->rc == LOCK_OK)
        redlock_unlock(v->rl, &v->h); /* the next one may have it */
    return NULL;
}

static void test_split_vote(void **state)
{
    voter v[NODES];
    pthread_t th[NODES];
    int held = 0;

    (void)state;
    assert_int_equal(pthread_barrier_init(&g_step, NULL, NODES), 0);
    for (int i = 0; i < NODES; i++) {
        redlock_node order[NODES];
        redlock_options o;

        for (int k = 0; k < NODES; k++)
            order[k] = g.nodes[(i + k) % NODES];
        redlock_options_init(&o);
        o.nodes = order;
        o.n_nodes = NODES;
        o.node_timeout_ms = NODE_TIMEOUT_MS;
        o.before_set = split_in_step;
        v[i].rl = NULL;
        assert_int_equal(redlock_create(&o, &v[i].rl), LOCK_OK);
    }
    for (int i = 0; i < NODES; i++)
        assert_int_equal(pthread_create(&th[i], NULL, vote, &v[i]), 0);
    for (int i = 0; i < NODES; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < NODES; i++) {
        print_message("split vote: client %d: %s after %d attempt%s\n", i + 1,
                      v[i].rc == LOCK_OK ? "held" : lock_strerror(v[i].rc), v[i].h.attempts,
                      v[i].h.attempts == 1 ? "" : "s");
        if (v[i].rc == LOCK_OK) {
            held++;
            assert_true(v[i].h.attempts >= 2); /* nobody held after the first round */
        } else {
            assert_int_equal(v[i].rc, LOCK_ERR_TIMEOUT);
        }
        redlock_destroy(v[i].rl);
    }
    pthread_barrier_destroy(&g_step);
    assert_true(held >= 1);
}

int main(void)
{
#define CASE(f) cmocka_unit_test_setup_teardown(f, case_setup, case_teardown)
    const struct CMUnitTest tests[] = {
        CASE(test_basics),
        CASE(test_mutual_exclusion),
        CASE(test_contention_times_out_within_bound),
        CASE(test_minority_held_elsewhere),
        CASE(test_minority_down_still_works),
        CASE(test_majority_down_fails_within_bound),
        CASE(test_validity_ends_and_late_unlock_is_harmless),
        CASE(test_split_vote),
    };
#undef CASE
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
